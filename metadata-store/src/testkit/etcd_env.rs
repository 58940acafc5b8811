//! [`EtcdTestEnv`]: the conformance environment of [`EtcdStore`] on a running
//! etcd (the `etcd` feature).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::env::{MetadataStoreTestEnv, TestNamespace};
use crate::error::Result;
use crate::etcd::{EtcdStore, EtcdStoreOptions};
use crate::store::MetadataStore;

/// [`MetadataStoreTestEnv`] of [`EtcdStore`] on a running etcd: each namespace
/// is a fresh key prefix, each session a new client with its own lease.
#[derive(Debug, Clone)]
pub struct EtcdTestEnv {
    hosts: String,
    options: EtcdStoreOptions,
}

impl EtcdTestEnv {
    /// Namespaces on the etcd at `hosts` (`host:port[,host:port…]`), with
    /// test-friendly options (5 s lease, 10 s operation timeout).
    pub fn new(hosts: impl Into<String>) -> Self {
        Self::with_options(
            hosts,
            EtcdStoreOptions {
                session_timeout: Duration::from_secs(5),
                operation_timeout: Duration::from_secs(10),
                connect_timeout: Duration::from_secs(20),
                ..EtcdStoreOptions::default()
            },
        )
    }

    /// Namespaces on the etcd at `hosts` with the given options.
    pub fn with_options(hosts: impl Into<String>, options: EtcdStoreOptions) -> Self {
        EtcdTestEnv {
            hosts: hosts.into(),
            options,
        }
    }
}

struct EtcdNamespace {
    url: String,
    options: EtcdStoreOptions,
}

#[async_trait]
impl MetadataStoreTestEnv for EtcdTestEnv {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let url = format!(
            "etcd://{}/conformance/{}-{n}-{nonce:x}",
            self.hosts,
            std::process::id()
        );
        Ok(Box::new(EtcdNamespace {
            url,
            options: self.options.clone(),
        }))
    }
}

#[async_trait]
impl TestNamespace for EtcdNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(
            EtcdStore::connect(&self.url, self.options.clone()).await?,
        ))
    }
}
