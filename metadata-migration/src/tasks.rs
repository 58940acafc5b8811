//! The background tasks of a [`MigratingStore`](crate::MigratingStore): the
//! loop that follows the migration record, and the watches forwarded from
//! the store in use and re-armed on the target after a swap.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use bkswitch_metadata_store::{ErrorKind, Notification, SessionEvent, WatchStream};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::participant::{Inner, MigratingStore};

pub(crate) async fn forward_watch(
    weak: Weak<Inner>,
    path: String,
    mut stream: WatchStream,
    mut gen_rx: watch::Receiver<u64>,
    tx: mpsc::UnboundedSender<Notification>,
) {
    // The last session event forwarded that the old store did not take back
    // (a lost connection or an expired session): the consumer still believes
    // it, so the re-armed stream ends it (N24).
    let mut unsettled: Option<SessionEvent> = None;
    loop {
        tokio::select! {
            n = stream.next() => match n {
                Some(n) => {
                    if let Notification::Session(e) = &n {
                        unsettled = match e {
                            SessionEvent::ConnectionLost | SessionEvent::SessionExpired => Some(*e),
                            _ => None,
                        };
                    }
                    if tx.send(n).is_err() {
                        return;
                    }
                }
                None => {
                    // The old store closed: wait for the swap (or the end).
                    tokio::select! {
                        r = gen_rx.changed() => if r.is_err() { return },
                        _ = tx.closed() => return,
                    }
                    if !rearm(&weak, &path, &mut stream, &tx, unsettled.take()).await {
                        return;
                    }
                }
            },
            r = gen_rx.changed() => {
                if r.is_err() || !rearm(&weak, &path, &mut stream, &tx, unsettled.take()).await {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}

/// Re-arms a forwarded watch on the store in use and reports a re-read of
/// the node, so that nothing changed during the swap is missed. When the
/// consumer last heard that the old store's connection was lost (or its
/// session expired), it first hears that the store it now follows answers
/// (`Reconnected`, or `SessionReestablished`): without it a node that lost its
/// connection just before the flip kept its managed ledgers paused — no
/// rollover, no trim — until its next session event (N24).
async fn rearm(
    weak: &Weak<Inner>,
    path: &str,
    stream: &mut WatchStream,
    tx: &mpsc::UnboundedSender<Notification>,
    unsettled: Option<SessionEvent>,
) -> bool {
    let Some(inner) = weak.upgrade() else {
        return false;
    };
    if inner.closed.load(Ordering::Acquire) {
        return false;
    }
    let store = inner.current.load().store.clone();
    drop(inner);
    let mut delay = Duration::from_millis(10);
    loop {
        match store.watch(path).await {
            Ok(s) => {
                *stream = s;
                break;
            }
            Err(e) if e.kind() == ErrorKind::Closed => return false,
            Err(_) => {
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(1));
            }
        }
    }
    let back = match unsettled {
        Some(SessionEvent::SessionExpired) => Some(SessionEvent::SessionReestablished),
        Some(_) => Some(SessionEvent::Reconnected),
        None => None,
    };
    if let Some(e) = back {
        if tx.send(Notification::Session(e)).is_err() {
            return false;
        }
    }
    let exists = matches!(store.exists(path).await, Ok(Some(_)));
    let first = if exists {
        Notification::Modified {
            path: path.to_owned(),
        }
    } else {
        Notification::Deleted {
            path: path.to_owned(),
        }
    };
    tx.send(first).is_ok()
        && tx
            .send(Notification::ChildrenChanged {
                path: path.to_owned(),
            })
            .is_ok()
}

pub(crate) async fn control_loop(weak: Weak<Inner>) {
    let mut watched: Option<(String, WatchStream, WatchStream)> = None;
    loop {
        let Some(inner) = weak.upgrade() else { return };
        if inner.closed.load(Ordering::Acquire) {
            return;
        }
        let this = MigratingStore { inner };
        let poll = this.inner.options.poll_interval;
        let url = this.url();
        if watched.as_ref().map(|w| &w.0) != Some(&url) {
            let store = this.current();
            let a = store.watch(crate::record::CURRENT_PATH).await;
            let b = store.watch(crate::record::MIGRATION_ROOT).await;
            watched = match (a, b) {
                (Ok(a), Ok(b)) => Some((url.clone(), a, b)),
                _ => None,
            };
        }
        if let Err(e) = this.reconcile().await {
            tracing::warn!("participant {}: following the migration: {e}", this.name());
        }
        drop(this);
        let ended = match watched.as_mut() {
            Some((_, a, b)) => {
                tokio::select! {
                    n = a.next() => n.is_none(),
                    n = b.next() => n.is_none(),
                    _ = tokio::time::sleep(poll) => false,
                }
            }
            None => {
                tokio::time::sleep(poll).await;
                false
            }
        };
        if ended {
            // The store ended the streams (closed after a swap): arm again
            // on the store in use, without spinning.
            watched = None;
            tokio::time::sleep(poll).await;
        }
    }
}
