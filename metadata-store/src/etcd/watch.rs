//! Watch streams: each is a task that watches the side-key range of its node
//! from a known revision, resumes from the last revision seen after a lost
//! connection, and re-reads the node and reports what differs when etcd
//! compacted that revision away.

use std::sync::Weak;
use std::time::Duration;

use etcd_client::{EventType, GetOptions, Txn, TxnOp, WatchOptions};
use tokio::sync::{broadcast, mpsc};
use tracing::debug;

use super::reads::{first_kv, nth_get};
use super::{Inner, Signal};
use crate::error::Result;
use crate::types::Notification;

/// What a watch reported last, to report differences after a resync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    exists: bool,
    children: i64,
    modified_rev: i64,
}

/// Reads the watched node's side keys; the state and the revision read at.
async fn snapshot(inner: &Inner, path: &str) -> std::result::Result<(Seen, i64), String> {
    let resp = inner
        .kv()
        .txn(Txn::new().and_then(vec![
            TxnOp::get(inner.key(path), Some(GetOptions::new().with_count_only())),
            TxnOp::get(inner.side(path, "m"), None),
            inner.child_count_read(path),
        ]))
        .await
        .map_err(|e| e.to_string())?;
    let rev = resp.header().map_or(0, |h| h.revision());
    let exists = path == "/" || nth_get(&resp, 0).is_some_and(|g| g.count() > 0);
    let modified_rev = first_kv(&nth_get(&resp, 1)).map_or(0, |kv| kv.mod_revision());
    let children = nth_get(&resp, 2).map_or(0, |g| g.count());
    Ok((
        Seen {
            exists,
            children,
            modified_rev,
        },
        rev,
    ))
}

pub(super) async fn watch_task(
    inner: Weak<Inner>,
    path: String,
    tx: mpsc::UnboundedSender<Notification>,
    mut signals: broadcast::Receiver<Signal>,
    ready: tokio::sync::oneshot::Sender<Result<()>>,
) {
    let mut ready = Some(ready);
    // The state and revision the stream starts from.
    let (mut seen, mut rev) = loop {
        let Some(store) = inner.upgrade() else { return };
        match snapshot(&store, &path).await {
            Ok(s) => break s,
            Err(e) => {
                debug!(error = %e, "watch snapshot failed; retrying");
                drop(store);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let send = |n: Notification| tx.send(n).is_ok();
    'outer: loop {
        let Some(store) = inner.upgrade() else { return };
        if store.is_closed() {
            return;
        }
        let base = store.side_base(&path);
        let mut end = base.clone();
        if let Some(last) = end.last_mut() {
            *last = 1;
        }
        let opened = store
            .client
            .watch_client()
            .watch(
                base.clone(),
                Some(
                    WatchOptions::new()
                        .with_range(end)
                        .with_start_revision(rev + 1),
                ),
            )
            .await;
        let key_t = store.side(&path, "t");
        let key_m = store.side(&path, "m");
        let k_prefix = store.side(&path, "k");
        drop(store);
        let mut watch = match opened {
            Ok(w) => w,
            Err(e) => {
                debug!(error = %e, "watch not opened; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                    _ = tx.closed() => return,
                }
            }
        };
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                signal = signals.recv() => match signal {
                    Ok(Signal::Session(event)) => {
                        if !send(Notification::Session(event)) {
                            return;
                        }
                    }
                    Ok(Signal::Closed) | Err(broadcast::error::RecvError::Closed) => return,
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                },
                message = watch.message() => {
                    let response = match message {
                        Ok(Some(r)) => r,
                        Ok(None) | Err(_) => continue 'outer,
                    };
                    if response.created() {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Ok(()));
                        }
                    }
                    if response.compact_revision() > 0 {
                        // The history we need is gone: re-read and report what
                        // differs.
                        let Some(store) = inner.upgrade() else { return };
                        match snapshot(&store, &path).await {
                            Ok((now, at)) => {
                                for n in diff(&path, seen, now, rev) {
                                    if !send(n) {
                                        return;
                                    }
                                }
                                seen = now;
                                rev = at;
                            }
                            Err(e) => debug!(error = %e, "watch resync failed"),
                        }
                        continue 'outer;
                    }
                    if response.canceled() {
                        continue 'outer;
                    }
                    let mut i = 0;
                    let events = response.events();
                    while i < events.len() {
                        let Some(kv) = events[i].kv() else { i += 1; continue };
                        let at = kv.mod_revision();
                        let mut created = false;
                        let mut deleted = false;
                        let mut modified = false;
                        let mut children = 0i64;
                        let mut children_changed = false;
                        while i < events.len() {
                            let Some(kv) = events[i].kv() else { i += 1; continue };
                            if kv.mod_revision() != at {
                                break;
                            }
                            let key = kv.key();
                            let put = events[i].event_type() == EventType::Put;
                            if key == key_t.as_slice() {
                                if put { created = true } else { deleted = true }
                            } else if key == key_m.as_slice() {
                                if put { modified = true }
                            } else if key.starts_with(&k_prefix) {
                                children_changed = true;
                                children += if put && kv.version() == 1 { 1 } else if put { 0 } else { -1 };
                            }
                            i += 1;
                        }
                        if created {
                            seen.exists = true;
                            if !send(Notification::Created { path: path.clone() }) { return; }
                        } else if deleted {
                            seen.exists = false;
                            if !send(Notification::Deleted { path: path.clone() }) { return; }
                        } else if modified {
                            seen.modified_rev = at;
                            if !send(Notification::Modified { path: path.clone() }) { return; }
                        }
                        if children_changed && !deleted {
                            seen.children += children;
                            if !send(Notification::ChildrenChanged { path: path.clone() }) { return; }
                        }
                        rev = rev.max(at);
                    }
                    if let Some(h) = response.header() {
                        // Events up to the header's revision were all sent.
                        if events.is_empty() && !response.created() {
                            rev = rev.max(h.revision());
                        }
                    }
                }
            }
        }
    }
}

/// Notifications that turn `before` into `now` (after a compaction).
fn diff(path: &str, before: Seen, now: Seen, rev: i64) -> Vec<Notification> {
    let path = path.to_owned();
    let mut out = Vec::new();
    match (before.exists, now.exists) {
        (false, true) => out.push(Notification::Created { path: path.clone() }),
        (true, false) => out.push(Notification::Deleted { path: path.clone() }),
        (true, true) if now.modified_rev > rev => {
            out.push(Notification::Modified { path: path.clone() })
        }
        _ => {}
    }
    if now.children != before.children {
        out.push(Notification::ChildrenChanged { path });
    }
    out
}
