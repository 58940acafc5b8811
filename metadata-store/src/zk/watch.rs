//! Watch streams on ZooKeeper: one task per stream that re-arms ZooKeeper's
//! one-shot watches and reports state differences.

use std::sync::{Arc, Weak};
use std::time::Duration;

use tokio::sync::{broadcast, mpsc};
use tokio::time::Instant;
use zookeeper_async::ZkError;

use super::{Inner, Signal};
use crate::error::{Operation, Result};
use crate::path::{validate_path, PathUse};
use crate::types::{Notification, SessionEvent, WatchStream};

/// Which ZooKeeper watch fired.
#[derive(Debug, Clone, Copy)]
enum Fired {
    /// The `exists` watch: creation, deletion or data change of the node.
    Node,
    /// The `getChildren` watch: a child created or deleted, or the node deleted.
    Children,
}

/// What the task last reported about the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Snapshot {
    czxid: i64,
    version: i32,
    cversion: i32,
}

impl From<&zookeeper_async::Stat> for Snapshot {
    fn from(s: &zookeeper_async::Stat) -> Self {
        Snapshot {
            czxid: s.czxid,
            version: s.version,
            cversion: s.cversion,
        }
    }
}

struct WatchTask {
    store: Weak<Inner>,
    path: String,
    full: String,
    tx: mpsc::UnboundedSender<Notification>,
    fired_tx: mpsc::UnboundedSender<Fired>,
    fired_rx: mpsc::UnboundedReceiver<Fired>,
    signals: broadcast::Receiver<Signal>,
    last: Option<Snapshot>,
    node_armed: bool,
    children_armed: bool,
}

/// Why the task woke up.
enum Wake {
    StreamDropped,
    StoreClosed,
    Session(SessionEvent),
    Lagged,
    Fired(Fired),
    Retry,
}

/// Arms the watch (the baseline read), then hands it to a task.
pub(super) async fn start(inner: &Arc<Inner>, path: &str) -> Result<WatchStream> {
    let op = Operation::Watch;
    validate_path(op, path, PathUse::Read)?;
    let (tx, rx) = mpsc::unbounded_channel();
    let (fired_tx, fired_rx) = mpsc::unbounded_channel();
    let mut task = WatchTask {
        store: Arc::downgrade(inner),
        path: path.to_owned(),
        full: inner.full(path),
        tx,
        fired_tx,
        fired_rx,
        // Subscribed before arming, so that no session event is missed.
        signals: inner.signals.subscribe(),
        last: None,
        node_armed: false,
        children_armed: false,
    };
    inner.run(op, path, task.arm(inner, false)).await?;
    inner.runtime.spawn(task.run());
    Ok(WatchStream::new(path.to_owned(), rx, None))
}

impl WatchTask {
    fn emit(&self, notification: Notification) {
        let _ = self.tx.send(notification);
    }

    fn mark(&mut self, fired: Fired) {
        match fired {
            Fired::Node => self.node_armed = false,
            Fired::Children => self.children_armed = false,
        }
    }

    /// Re-arms what is not armed, re-reads the node and (when `report`) reports
    /// the difference with the last snapshot.
    async fn arm(&mut self, inner: &Inner, report: bool) -> Result<()> {
        let op = Operation::Watch;
        let path = self.path.clone();
        let mut attempts = 0;
        loop {
            attempts += 1;
            let conn = inner.conn(op, &path).await?;
            // The children watch first: the `exists` read that follows then
            // sees every children change the watch could have missed.
            if !self.children_armed {
                let fired = self.fired_tx.clone();
                match conn
                    .zk
                    .get_children_w(&self.full, move |_| {
                        let _ = fired.send(Fired::Children);
                    })
                    .await
                {
                    Ok(_) => self.children_armed = true,
                    Err(ZkError::NoNode) => {}
                    Err(e) => return Err(inner.map_err(e, op, &path, -1)),
                }
            }
            let stat = if self.node_armed {
                conn.zk.exists(&self.full, false).await
            } else {
                let fired = self.fired_tx.clone();
                let stat = conn
                    .zk
                    .exists_w(&self.full, move |_| {
                        let _ = fired.send(Fired::Node);
                    })
                    .await;
                if stat.is_ok() {
                    self.node_armed = true;
                }
                stat
            }
            .map_err(|e| inner.map_err(e, op, &path, -1))?;
            if stat.is_some() && !self.children_armed && attempts < 5 {
                // Created between the two requests: arm the children watch too.
                continue;
            }
            let now = stat.as_ref().map(Snapshot::from);
            if report {
                self.report(self.last, now);
            }
            self.last = now;
            return Ok(());
        }
    }

    fn report(&self, before: Option<Snapshot>, now: Option<Snapshot>) {
        let path = || self.path.clone();
        match (before, now) {
            (None, None) => {}
            (Some(_), None) => self.emit(Notification::Deleted { path: path() }),
            (None, Some(n)) => {
                self.emit(Notification::Created { path: path() });
                if n.cversion != 0 {
                    self.emit(Notification::ChildrenChanged { path: path() });
                }
            }
            (Some(b), Some(n)) if b.czxid != n.czxid => {
                self.emit(Notification::Deleted { path: path() });
                self.emit(Notification::Created { path: path() });
                if n.cversion != 0 {
                    self.emit(Notification::ChildrenChanged { path: path() });
                }
            }
            (Some(b), Some(n)) => {
                if b.version != n.version {
                    self.emit(Notification::Modified { path: path() });
                }
                if b.cversion != n.cversion {
                    self.emit(Notification::ChildrenChanged { path: path() });
                }
            }
        }
    }

    async fn wake(&mut self, retry_at: Option<Instant>) -> Wake {
        tokio::select! {
            _ = self.tx.closed() => Wake::StreamDropped,
            signal = self.signals.recv() => match signal {
                Ok(Signal::Session(event)) => Wake::Session(event),
                Ok(Signal::Closed) | Err(broadcast::error::RecvError::Closed) => Wake::StoreClosed,
                Err(broadcast::error::RecvError::Lagged(_)) => Wake::Lagged,
            },
            fired = self.fired_rx.recv() => match fired {
                Some(fired) => Wake::Fired(fired),
                None => Wake::StoreClosed,
            },
            _ = sleep_until(retry_at) => Wake::Retry,
        }
    }

    async fn run(mut self) {
        let mut retry_at: Option<Instant> = None;
        let mut backoff = Duration::from_millis(100);
        loop {
            let rearm = match self.wake(retry_at).await {
                Wake::StreamDropped | Wake::StoreClosed => return,
                Wake::Session(event) => {
                    // The server forgets a connection's watches: re-arm all.
                    self.node_armed = false;
                    self.children_armed = false;
                    self.emit(Notification::Session(event));
                    match event {
                        SessionEvent::Reconnected | SessionEvent::SessionReestablished => true,
                        // Wait for the connection or the new session.
                        _ => {
                            retry_at = None;
                            false
                        }
                    }
                }
                Wake::Lagged => {
                    self.node_armed = false;
                    self.children_armed = false;
                    true
                }
                Wake::Fired(fired) => {
                    self.mark(fired);
                    while let Ok(more) = self.fired_rx.try_recv() {
                        self.mark(more);
                    }
                    true
                }
                Wake::Retry => true,
            };
            if !rearm {
                continue;
            }
            let Some(inner) = self.store.upgrade() else {
                return;
            };
            let path = self.path.clone();
            let outcome = inner
                .run(Operation::Watch, &path, self.arm(&inner, true))
                .await;
            let closed = inner.is_closed();
            drop(inner);
            match outcome {
                Ok(()) => {
                    retry_at = None;
                    backoff = Duration::from_millis(100);
                }
                Err(_) if closed => return,
                Err(e) => {
                    tracing::debug!(path = %self.path, error = %e, "re-arming a watch failed; retrying");
                    retry_at = Some(Instant::now() + backoff);
                    backoff = (backoff * 2).min(Duration::from_secs(2));
                }
            }
        }
    }
}

async fn sleep_until(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
