//! [`StoreOpener`]: how participants and the coordinator open a store by URL.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use bkswitch_metadata_store::{
    open_store, open_store_with, MetadataError, MetadataStore, Operation, Result, StoreSecurity,
    StoreTimeouts,
};

/// Opens a store from the URL recorded in a migration.
#[async_trait]
pub trait StoreOpener: Send + Sync + Debug {
    /// A new session on the store at `url`.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` for a URL the opener does not know; errors of
    /// connecting.
    async fn open(&self, url: &str) -> Result<Arc<dyn MetadataStore>>;
}

/// Opens `zk://…` and `etcd://…` URLs with
/// [`open_store`](bkswitch_metadata_store::open_store) (the backends built in).
#[derive(Debug, Clone, Copy, Default)]
pub struct UrlOpener {
    /// Timeouts of the stores opened.
    pub timeouts: StoreTimeouts,
}

#[async_trait]
impl StoreOpener for UrlOpener {
    async fn open(&self, url: &str) -> Result<Arc<dyn MetadataStore>> {
        if url == "memory" {
            return Err(MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: url.to_owned(),
                reason: "`memory` opens a new empty store each time and cannot be the source \
                         or target of a migration; use NamedMemoryStores, or a zk:// or \
                         etcd:// URL"
                    .to_owned(),
            });
        }
        open_store(url, self.timeouts).await
    }
}

/// [`UrlOpener`] with credentials and TLS: opens `zk://…` and `etcd://…`
/// with [`open_store_with`](bkswitch_metadata_store::open_store_with), so that
/// a migration reaches a source or target that needs them. `Debug` shows no
/// secret.
#[derive(Debug, Clone, Default)]
pub struct SecureUrlOpener {
    /// Timeouts of the stores opened.
    pub timeouts: StoreTimeouts,
    /// Credentials and TLS, per backend.
    pub security: StoreSecurity,
}

#[async_trait]
impl StoreOpener for SecureUrlOpener {
    async fn open(&self, url: &str) -> Result<Arc<dyn MetadataStore>> {
        if url == "memory" {
            return UrlOpener {
                timeouts: self.timeouts,
            }
            .open(url)
            .await;
        }
        open_store_with(url, self.timeouts, &self.security).await
    }
}

/// In-memory stores by name (`memory://<name>`), each open a new session on
/// the same tree: memory-to-memory migrations in tests and benches.
#[derive(Debug, Default, Clone)]
pub struct NamedMemoryStores {
    stores: Arc<Mutex<HashMap<String, bkswitch_metadata_store::MemoryStore>>>,
}

impl NamedMemoryStores {
    /// No stores yet.
    pub fn new() -> Self {
        Self::default()
    }

    /// The store `memory://<name>` (created empty on first use), as a new
    /// session.
    pub fn session(&self, name: &str) -> bkswitch_metadata_store::MemoryStore {
        let mut stores = self.stores.lock();
        stores.entry(name.to_owned()).or_default().new_session()
    }
}

#[async_trait]
impl StoreOpener for NamedMemoryStores {
    async fn open(&self, url: &str) -> Result<Arc<dyn MetadataStore>> {
        match url.strip_prefix("memory://") {
            Some(name) if !name.is_empty() => Ok(Arc::new(self.session(name))),
            _ => Err(MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: url.to_owned(),
                reason: "expected `memory://<name>`".to_owned(),
            }),
        }
    }
}
