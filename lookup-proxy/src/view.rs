//! The proxy's view of the routing table: read at start, re-read on every
//! change, acknowledged once served, and closed while the metadata session
//! is in doubt.
//!
//! The barrier of a topic move ([`TopicRoutes::wait_acknowledged`]) trusts
//! an acknowledgement to mean "no answer from an older table can still
//! leave this proxy". So a new table is first made the one every new lookup
//! reads, then the proxy waits for the lookups already holding an older one
//! to have written their answers ([`RouteView::serving`] hands out a guard
//! for that), and only then acknowledges. A proxy that lost its connection
//! to the metadata store cannot know whether a newer table exists: it stops
//! answering (a retryable `ServiceNotReady`, clients look up again) until
//! it has read the table again. Its acknowledgement is an ephemeral node:
//! a proxy whose session expired no longer holds a barrier up, and answers
//! nothing until it has re-read the table in its new session.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use bkswitch_metadata_store::{MetadataStore, Notification, SessionEvent};
use bkswitch_topic_routes::{RouteIndex, RoutingTable, TopicRoutes};
use futures::StreamExt;
use tokio::sync::{watch, OwnedRwLockReadGuard, RwLock};

use crate::error::{ProxyError, Result};
use crate::metrics::ProxyMetrics;

/// How often the table is read again even without a notification (a
/// safety net; notifications carry every change).
const RESYNC: Duration = Duration::from_secs(10);
/// Pause between attempts when the table cannot be read.
const RETRY: Duration = Duration::from_millis(200);

/// What lookups read: the table and whether the proxy may answer from it.
#[derive(Debug, Clone)]
pub struct Snapshot {
    /// The routing table.
    pub table: Arc<RoutingTable>,
    /// Its lookup index (resolves in constant time in the number of routes).
    pub index: Arc<RouteIndex>,
    /// `None` while the proxy answers; otherwise why it does not (it lost
    /// its metadata session, or cannot read the table).
    pub closed: Option<String>,
}

/// A lookup's hold on the current table: while any guard of an older table
/// lives, the proxy does not acknowledge a newer one.
#[derive(Debug)]
pub struct Serving {
    /// The table the lookup answers from.
    pub snapshot: Arc<Snapshot>,
    _guard: OwnedRwLockReadGuard<()>,
}

#[derive(Debug)]
struct Inner {
    routes: TopicRoutes,
    proxy_id: String,
    current: ArcSwap<Snapshot>,
    gate: Arc<RwLock<()>>,
    acked: watch::Sender<u64>,
    metrics: ProxyMetrics,
}

/// The routing table as this proxy serves it (cheap to clone).
#[derive(Debug, Clone)]
pub struct RouteView {
    inner: Arc<Inner>,
}

impl RouteView {
    /// Reads the table, acknowledges it as `proxy_id` and follows it from
    /// then on (a background task, ended with `stop`).
    ///
    /// # Errors
    /// [`ProxyError::Routes`] when the table cannot be read or the
    /// acknowledgement written (a bad proxy id included).
    pub async fn start(
        store: Arc<dyn MetadataStore>,
        routes: TopicRoutes,
        proxy_id: &str,
        metrics: ProxyMetrics,
        stop: watch::Receiver<bool>,
    ) -> Result<RouteView> {
        bkswitch_topic_routes::validate_proxy_id(proxy_id)?;
        // Watch first, so that no change made after the read is missed.
        let watch = store
            .watch(&routes.table_path())
            .await
            .map_err(|e| ProxyError::Routes(e.into()))?;
        let table = routes.table().await?;
        let version = table.version;
        let view = RouteView {
            inner: Arc::new(Inner {
                routes,
                proxy_id: proxy_id.to_owned(),
                current: ArcSwap::from_pointee(Snapshot {
                    index: Arc::new(RouteIndex::new(&table)),
                    table: Arc::new(table),
                    closed: None,
                }),
                gate: Arc::new(RwLock::new(())),
                acked: watch::channel(0).0,
                metrics,
            }),
        };
        view.inner.metrics.set_table_version(version);
        view.inner.metrics.set_serving(true);
        view.inner.routes.ack(proxy_id, version).await?;
        view.inner.acked.send_replace(version);
        let follower = view.clone();
        tokio::spawn(async move { follower.follow(watch, stop).await });
        Ok(view)
    }

    /// The current table, with a guard that holds back the acknowledgement
    /// of a newer one until the answer computed from it has been written.
    pub async fn serving(&self) -> Serving {
        let guard = Arc::clone(&self.inner.gate).read_owned().await;
        Serving {
            snapshot: self.inner.current.load_full(),
            _guard: guard,
        }
    }

    /// The current table, without a guard (for answers that do not need the
    /// barrier: listings, status pages).
    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.inner.current.load_full()
    }

    /// The version last acknowledged in the metadata store.
    pub fn acknowledged(&self) -> u64 {
        *self.inner.acked.borrow()
    }

    /// A watch of [`acknowledged`](Self::acknowledged).
    pub fn acknowledged_watch(&self) -> watch::Receiver<u64> {
        self.inner.acked.subscribe()
    }

    fn close(&self, reason: String) {
        let current = self.inner.current.load();
        let (table, index) = (Arc::clone(&current.table), Arc::clone(&current.index));
        tracing::warn!(proxy = %self.inner.proxy_id, %reason, "lookups refused until the routing table is read again");
        self.inner.current.store(Arc::new(Snapshot {
            table,
            index,
            closed: Some(reason),
        }));
        self.inner.metrics.set_serving(false);
    }

    async fn follow(
        &self,
        mut watch: bkswitch_metadata_store::WatchStream,
        mut stop: watch::Receiver<bool>,
    ) {
        loop {
            let event = tokio::select! {
                () = crate::stopped(&mut stop) => return,
                n = tokio::time::timeout(RESYNC, watch.next()) => n,
            };
            match event {
                Ok(None) => {
                    self.close("the metadata store was closed".to_owned());
                    return;
                }
                Ok(Some(Notification::Session(
                    SessionEvent::ConnectionLost | SessionEvent::SessionExpired,
                ))) => {
                    self.close(
                        "the proxy lost its metadata session: a newer routing table may exist"
                            .to_owned(),
                    );
                    continue;
                }
                // Everything else (a change, a reconnection, a new session,
                // the periodic resync) reads the table again.
                Ok(Some(_)) | Err(_) => {}
            }
            self.refresh(&mut stop).await;
        }
    }

    /// Reads the table until it succeeds, serves it, waits for the lookups
    /// still answering from an older one, and acknowledges it.
    async fn refresh(&self, stop: &mut watch::Receiver<bool>) {
        loop {
            if *stop.borrow() {
                return;
            }
            match self.inner.routes.table().await {
                Ok(table) => {
                    let version = table.version;
                    let current = self.inner.current.load();
                    let unchanged = current.closed.is_none() && current.table.version == version;
                    if !unchanged {
                        // The index is built before the swap, off the
                        // lookups' path.
                        let index = Arc::new(RouteIndex::new(&table));
                        self.inner.current.store(Arc::new(Snapshot {
                            table: Arc::new(table),
                            index,
                            closed: None,
                        }));
                        self.inner.metrics.set_table_version(version);
                        self.inner.metrics.set_serving(true);
                        // Every lookup that took an older table has written
                        // its answer once this write lock is granted.
                        drop(self.inner.gate.write().await);
                    }
                    // Acknowledge even an unchanged version: after a new
                    // session the ephemeral acknowledgement is gone.
                    match self.inner.routes.ack(&self.inner.proxy_id, version).await {
                        Ok(()) => {
                            self.inner.acked.send_replace(version);
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(proxy = %self.inner.proxy_id, error = %e, "cannot acknowledge the routing table; retrying");
                        }
                    }
                }
                Err(e) => {
                    self.close(format!("the routing table cannot be read: {e}"));
                }
            }
            tokio::select! {
                () = crate::stopped(stop) => return,
                () = tokio::time::sleep(RETRY) => {}
            }
        }
    }
}
