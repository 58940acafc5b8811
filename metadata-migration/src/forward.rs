//! Watches through a [`MigratingStore`](crate::MigratingStore): forwarded
//! from the store in use and re-armed on the target after a swap.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use bkswitch_metadata_store::{ErrorKind, Notification, WatchStream};
use futures::StreamExt;
use tokio::sync::{mpsc, watch};

use crate::participant::Inner;

pub(crate) async fn forward_watch(
    weak: Weak<Inner>,
    path: String,
    mut stream: WatchStream,
    mut gen_rx: watch::Receiver<u64>,
    tx: mpsc::UnboundedSender<Notification>,
) {
    loop {
        tokio::select! {
            n = stream.next() => match n {
                Some(n) => {
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
                    if !rearm(&weak, &path, &mut stream, &tx).await {
                        return;
                    }
                }
            },
            r = gen_rx.changed() => {
                if r.is_err() || !rearm(&weak, &path, &mut stream, &tx).await {
                    return;
                }
            }
            _ = tx.closed() => return,
        }
    }
}

/// Re-arms a forwarded watch on the store in use and reports a re-read of
/// the node, so that nothing changed during the swap is missed.
async fn rearm(
    weak: &Weak<Inner>,
    path: &str,
    stream: &mut WatchStream,
    tx: &mpsc::UnboundedSender<Notification>,
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
