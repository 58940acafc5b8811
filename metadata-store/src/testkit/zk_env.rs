//! [`ZkTestEnv`]: the conformance environment of [`ZkStore`] on a running
//! ZooKeeper (the `zk` feature).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::env::{MetadataStoreTestEnv, TestNamespace};
use crate::error::Result;
use crate::store::MetadataStore;
use crate::zk::{ZkStore, ZkStoreOptions};

/// [`MetadataStoreTestEnv`] of [`ZkStore`] on a running ZooKeeper: each
/// namespace is a fresh chroot, each session a new connection.
#[derive(Debug, Clone)]
pub struct ZkTestEnv {
    hosts: String,
    options: ZkStoreOptions,
}

impl ZkTestEnv {
    /// Namespaces on the ZooKeeper at `hosts` (`host:port[,host:port…]`), with
    /// test-friendly options (5 s session and operation timeouts).
    pub fn new(hosts: impl Into<String>) -> Self {
        Self::with_options(
            hosts,
            ZkStoreOptions {
                session_timeout: Duration::from_secs(5),
                operation_timeout: Duration::from_secs(5),
                connect_timeout: Duration::from_secs(20),
                ..ZkStoreOptions::default()
            },
        )
    }

    /// Namespaces on the ZooKeeper at `hosts` with the given options.
    pub fn with_options(hosts: impl Into<String>, options: ZkStoreOptions) -> Self {
        ZkTestEnv {
            hosts: hosts.into(),
            options,
        }
    }
}

struct ZkNamespace {
    url: String,
    options: ZkStoreOptions,
}

#[async_trait]
impl MetadataStoreTestEnv for ZkTestEnv {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let url = format!(
            "zk://{}/conformance/{}-{n}-{nonce:x}",
            self.hosts,
            std::process::id()
        );
        Ok(Box::new(ZkNamespace {
            url,
            options: self.options.clone(),
        }))
    }
}

#[async_trait]
impl TestNamespace for ZkNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(
            ZkStore::connect(&self.url, self.options.clone()).await?,
        ))
    }
}
