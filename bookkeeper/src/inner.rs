//! What every handle of a client shares ([`ClientInner`]): the cluster's
//! metadata, its bookies, the connections to them, and the placement of new
//! ensembles. Below both the client API and the ledger handles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{BkError, BkErrorKind};
use parking_lot::Mutex;
use tokio::runtime::Handle;

use crate::bookies::Bookies;
use crate::config::ClientConfig;
use crate::meta::{zk_error, ClusterMeta};
use crate::uri::MetadataServiceUri;
use crate::wire::conn::{BookieConn, ConnSettings, Resolver};

/// The largest ensemble this client handles (acknowledgements are tracked in a
/// 64-bit mask).
pub const MAX_ENSEMBLE_SIZE: u32 = 64;

/// What every handle of a client shares.
pub(crate) struct ClientInner {
    pub(crate) name: String,
    pub(crate) uri: MetadataServiceUri,
    pub(crate) config: ClientConfig,
    pub(crate) meta: ClusterMeta,
    pub(crate) bookies: Arc<Bookies>,
    pub(crate) runtime: Handle,
    conns: Mutex<HashMap<String, Arc<BookieConn>>>,
    quarantine: Mutex<HashMap<String, std::time::Instant>>,
    closed: AtomicBool,
    owns_store: bool,
}

impl ClientInner {
    pub(crate) fn new(
        name: String,
        uri: MetadataServiceUri,
        config: ClientConfig,
        meta: ClusterMeta,
        bookies: Arc<Bookies>,
        runtime: Handle,
        owns_store: bool,
    ) -> ClientInner {
        ClientInner {
            name,
            uri,
            config,
            meta,
            bookies,
            runtime,
            conns: Mutex::new(HashMap::new()),
            quarantine: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            owns_store,
        }
    }

    /// Closes every connection, stops following the bookies and, when the
    /// client opened it, ends the ZooKeeper session. Idempotent.
    pub(crate) async fn close(&self) -> Result<(), BkError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let conns: Vec<_> = self.conns.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.shutdown();
        }
        self.bookies.stop();
        if self.owns_store {
            self.meta
                .store()
                .close()
                .await
                .map_err(|e| zk_error(&self.name, "closing the ZooKeeper session", e))?;
        }
        Ok(())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn check_open(&self) -> Result<(), BkError> {
        if self.is_closed() {
            Err(
                BkError::new(BkErrorKind::ClientClosed, "the client was closed")
                    .with_cluster(&self.name),
            )
        } else {
            Ok(())
        }
    }

    /// The connection to `bookie` (created on first use).
    pub(crate) fn conn(&self, bookie: &str) -> Arc<BookieConn> {
        let mut conns = self.conns.lock();
        if let Some(c) = conns.get(bookie) {
            return c.clone();
        }
        let bookies = Arc::downgrade(&self.bookies);
        let resolver: Resolver = Arc::new(move |id: String| {
            let bookies = bookies.clone();
            Box::pin(async move {
                match bookies.upgrade() {
                    Some(b) => b.resolve(&id).await,
                    None => Err("client closed".to_owned()),
                }
            })
        });
        let conn = BookieConn::new(
            bookie.to_owned(),
            ConnSettings {
                connect_timeout: self.config.connect_timeout,
                sweep_interval: sweep_interval(&self.config),
            },
            resolver,
            self.runtime.clone(),
        );
        conns.insert(bookie.to_owned(), conn.clone());
        conn
    }

    /// Remembers that `bookie` could not be reached: new ensembles avoid it for
    /// a while (its registration outlives a crash by the bookie's ZooKeeper
    /// session timeout).
    pub(crate) fn quarantine(&self, bookie: &str) {
        let until = std::time::Instant::now() + self.config.bookie_quarantine;
        self.quarantine.lock().insert(bookie.to_owned(), until);
    }

    /// `count` writable bookies, none of `exclude`, in random order; bookies in
    /// quarantine come last.
    pub(crate) fn place(&self, count: usize, exclude: &[String]) -> Result<Vec<String>, BkError> {
        let set = self.bookies.current();
        let mut candidates: Vec<&String> = set
            .writable
            .iter()
            .filter(|b| !exclude.contains(b))
            .collect();
        fastrand::shuffle(&mut candidates);
        let quarantined = {
            let now = std::time::Instant::now();
            let mut q = self.quarantine.lock();
            q.retain(|_, until| *until > now);
            q.keys().cloned().collect::<std::collections::HashSet<_>>()
        };
        candidates.sort_by_key(|b| quarantined.contains(*b));
        if candidates.len() < count {
            return Err(BkError::new(
                BkErrorKind::NotEnoughBookies,
                format!(
                    "{count} writable bookies are needed but the cluster has {} available{} \
                     (writable: {:?}, read-only: {:?})",
                    candidates.len(),
                    if exclude.is_empty() {
                        String::new()
                    } else {
                        format!(" outside {exclude:?}")
                    },
                    set.writable,
                    set.readonly
                ),
            )
            .with_cluster(&self.name));
        }
        Ok(candidates.into_iter().take(count).cloned().collect())
    }
}

fn sweep_interval(config: &ClientConfig) -> Duration {
    (config.add_timeout.min(config.read_timeout) / 10)
        .clamp(Duration::from_millis(10), Duration::from_millis(250))
}
