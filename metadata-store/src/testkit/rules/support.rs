//! What the rules share: opening namespaces and sessions, unwrapping results
//! with a message naming the step, waiting for notifications, and dumping a tree.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;

use crate::error::{ErrorKind, MetadataError, Result};
use crate::store::MetadataStore;
use crate::testkit::env::{MetadataStoreTestEnv, TestNamespace};
use crate::types::{Notification, WatchStream};

/// How long a rule waits for an expected notification.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

pub(super) type Store = Arc<dyn MetadataStore>;

pub(super) async fn namespace<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> Box<dyn TestNamespace> {
    env.namespace()
        .await
        .unwrap_or_else(|e| panic!("the environment cannot open a namespace: {e}"))
}

pub(super) async fn session(ns: &dyn TestNamespace) -> Store {
    ns.session()
        .await
        .unwrap_or_else(|e| panic!("the namespace cannot open a session: {e}"))
}

pub(super) fn ok<T>(what: &str, r: Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: unexpected error: {e}"))
}

pub(super) fn expect_kind<T: std::fmt::Debug>(
    what: &str,
    r: Result<T>,
    kind: ErrorKind,
) -> MetadataError {
    match r {
        Ok(v) => panic!("{what}: expected {kind:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{what}: wrong error kind: {e}");
            e
        }
    }
}

pub(super) async fn value(store: &Store, path: &str) -> Option<Vec<u8>> {
    ok(&format!("get {path}"), store.get(path).await).map(|r| r.value)
}

/// The next node notification (session events are skipped).
pub(super) async fn next_node_event(w: &mut WatchStream, waiting_for: &str) -> Notification {
    loop {
        match tokio::time::timeout(EVENT_TIMEOUT, w.next()).await {
            Ok(Some(Notification::Session(_))) => continue,
            Ok(Some(n)) => return n,
            Ok(None) => panic!(
                "watch on {} ended while waiting for {waiting_for}",
                w.path()
            ),
            Err(_) => panic!(
                "no notification on {} within {EVENT_TIMEOUT:?} while waiting for {waiting_for}",
                w.path()
            ),
        }
    }
}

pub(super) async fn expect_next(w: &mut WatchStream, expected: Notification) {
    let what = format!("{expected:?}");
    let got = next_node_event(w, &what).await;
    assert_eq!(
        got,
        expected,
        "watch on {}: unexpected notification",
        w.path()
    );
}

pub(super) fn created(p: &str) -> Notification {
    Notification::Created { path: p.into() }
}
pub(super) fn modified(p: &str) -> Notification {
    Notification::Modified { path: p.into() }
}
pub(super) fn deleted(p: &str) -> Notification {
    Notification::Deleted { path: p.into() }
}
pub(super) fn children_changed(p: &str) -> Notification {
    Notification::ChildrenChanged { path: p.into() }
}

/// Every node under `/`: path → (value, version, cversion).
pub(super) async fn dump(store: &Store) -> BTreeMap<String, (Vec<u8>, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec!["/".to_owned()];
    while let Some(p) = todo.pop() {
        if let Some(r) = ok("dump get", store.get(&p).await) {
            out.insert(p.clone(), (r.value, r.stat.version, r.stat.cversion));
        }
        for c in ok("dump children", store.children(&p).await) {
            todo.push(if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            });
        }
    }
    out
}

pub(super) async fn close(stores: &[&Store]) {
    for s in stores {
        let _ = s.close().await;
    }
}
