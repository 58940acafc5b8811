//! Which bookies a cluster has, kept current by watching their registrations
//! (BookKeeper's `ZKRegistrationClient`), and how to reach each one
//! (`DefaultBookieAddressResolver`).
//!
//! - Writable bookies are the children of `<root>/available` other than
//!   `readonly`; read-only bookies are the children of
//!   `<root>/available/readonly`. Only writable bookies are placed in new
//!   ensembles; every bookie can be read from.
//! - A bookie's registration znode holds a `BookieServiceInfoFormat` whose
//!   `bookie-rpc` endpoint is the address to connect to. An empty znode, or a
//!   bookie that is not registered (it may be down), falls back to reading its id
//!   as `host:port`, as BookKeeper does.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::{Arc, Weak};

use bkswitch_bk_client::BkError;
use bkswitch_metadata_store::MetadataStore;
use futures::StreamExt;
use parking_lot::RwLock;
use prost::Message;
use tokio::task::JoinHandle;
use tracing::{debug, info};

use crate::errors::zk_error;
use crate::proto::BookieServiceInfoFormat;

/// The bookies of a cluster as last seen in ZooKeeper.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BookieSet {
    /// Writable bookies (placed in new ensembles).
    pub writable: BTreeSet<String>,
    /// Read-only bookies.
    pub readonly: BTreeSet<String>,
}

pub(crate) struct Bookies {
    store: Arc<dyn MetadataStore>,
    root: String,
    cluster: String,
    current: RwLock<Arc<BookieSet>>,
    watcher: parking_lot::Mutex<Option<JoinHandle<()>>>,
}

impl std::fmt::Debug for Bookies {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Bookies")
            .field("root", &self.root)
            .field("current", &*self.current.read())
            .finish()
    }
}

impl Bookies {
    /// Lists the bookies and starts following their registrations.
    pub(crate) async fn start(
        store: Arc<dyn MetadataStore>,
        root: &str,
        cluster: &str,
    ) -> Result<Arc<Bookies>, BkError> {
        let available = format!("{root}/available");
        let readonly = format!("{available}/readonly");
        // Arm the watches first so that no change between the listing and the
        // watch is missed.
        let mut w1 = store
            .watch(&available)
            .await
            .map_err(|e| zk_error(cluster, "watching the bookie registrations", e))?;
        let mut w2 = store
            .watch(&readonly)
            .await
            .map_err(|e| zk_error(cluster, "watching the read-only bookies", e))?;
        let bookies = Arc::new(Bookies {
            store,
            root: root.to_owned(),
            cluster: cluster.to_owned(),
            current: RwLock::new(Arc::new(BookieSet::default())),
            watcher: parking_lot::Mutex::new(None),
        });
        bookies.refresh().await?;
        let weak: Weak<Bookies> = Arc::downgrade(&bookies);
        let task = tokio::spawn(async move {
            loop {
                let more = tokio::select! {
                    n = w1.next() => n.is_some(),
                    n = w2.next() => n.is_some(),
                };
                let Some(bookies) = weak.upgrade() else {
                    return;
                };
                if !more {
                    return;
                }
                if let Err(e) = bookies.refresh().await {
                    debug!(error = %e, "could not refresh the bookie list");
                }
            }
        });
        *bookies.watcher.lock() = Some(task);
        Ok(bookies)
    }

    /// Re-reads the registrations.
    pub(crate) async fn refresh(&self) -> Result<Arc<BookieSet>, BkError> {
        let available = format!("{}/available", self.root);
        let writable: BTreeSet<String> = self
            .store
            .children(&available)
            .await
            .map_err(|e| zk_error(&self.cluster, "listing the bookies", e))?
            .into_iter()
            .filter(|c| c != "readonly")
            .collect();
        let readonly: BTreeSet<String> = self
            .store
            .children(&format!("{available}/readonly"))
            .await
            .map_err(|e| zk_error(&self.cluster, "listing the read-only bookies", e))?
            .into_iter()
            .collect();
        let writable = writable.difference(&readonly).cloned().collect();
        let set = Arc::new(BookieSet { writable, readonly });
        let previous = std::mem::replace(&mut *self.current.write(), set.clone());
        if *previous != *set {
            info!(
                cluster = %self.cluster,
                writable = ?set.writable,
                readonly = ?set.readonly,
                "bookies changed"
            );
        }
        Ok(set)
    }

    /// The bookies as last seen.
    pub(crate) fn current(&self) -> Arc<BookieSet> {
        self.current.read().clone()
    }

    /// The address of `bookie`.
    pub(crate) async fn resolve(&self, bookie: &str) -> Result<SocketAddr, String> {
        let available = format!("{}/available", self.root);
        let mut endpoint = None;
        for path in [
            format!("{available}/{bookie}"),
            format!("{available}/readonly/{bookie}"),
        ] {
            match self.store.get(&path).await {
                Ok(Some(found)) if !found.value.is_empty() => {
                    let info = BookieServiceInfoFormat::decode(found.value.as_slice())
                        .map_err(|e| format!("bookie {bookie}: bad registration: {e}"))?;
                    endpoint = info
                        .endpoints
                        .into_iter()
                        .find(|e| e.protocol == "bookie-rpc")
                        .map(|e| format!("{}:{}", e.host, e.port));
                    break;
                }
                Ok(Some(_)) => break,
                Ok(None) => {}
                Err(e) => return Err(format!("bookie {bookie}: reading its registration: {e}")),
            }
        }
        let target = endpoint.unwrap_or_else(|| bookie.to_owned());
        let mut addrs = tokio::net::lookup_host(target.as_str())
            .await
            .map_err(|e| format!("bookie {bookie}: cannot resolve `{target}`: {e}"))?;
        addrs
            .next()
            .ok_or_else(|| format!("bookie {bookie}: `{target}` resolves to no address"))
    }

    pub(crate) fn stop(&self) {
        if let Some(task) = self.watcher.lock().take() {
            task.abort();
        }
    }
}

impl Drop for Bookies {
    fn drop(&mut self) {
        self.stop();
    }
}
