//! Leader election on the in-memory store and on real ZooKeeper.

use std::sync::Arc;
use std::time::Duration;

use std::sync::atomic::{AtomicUsize, Ordering};

use async_trait::async_trait;
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{
    ExpectedVersion, MemoryStore, MetadataError, MetadataStore, Operation, ZkStore, ZkStoreOptions,
};
use bkswitch_registry::{LeaderElection, Registry};
use bkswitch_zk_harness::ZkServer;

const WAIT: Duration = Duration::from_secs(15);

async fn settle<F: Fn() -> bool>(what: &str, f: F) {
    let ok = tokio::time::timeout(WAIT, async {
        while !f() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
    assert!(ok.is_ok(), "timed out waiting for: {what}");
}

fn leaders(es: &[&LeaderElection]) -> Vec<String> {
    es.iter()
        .filter(|e| e.is_leader())
        .map(|e| e.node_id().to_owned())
        .collect()
}

#[tokio::test]
async fn memory_lowest_candidate_leads_and_successors_take_over() {
    let first = MemoryStore::new();
    let stores = [first.clone(), first.new_session(), first.new_session()];
    let mut es = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        let reg = Registry::new(Arc::new(s.clone()));
        es.push(reg.elect(&format!("node-{i}")).await.unwrap());
    }
    es[0].wait_for_leadership().await.unwrap();
    settle("all see node-0", || {
        es.iter().all(|e| e.leader().as_deref() == Some("node-0"))
    })
    .await;
    assert_eq!(leaders(&es.iter().collect::<Vec<_>>()), ["node-0"]);

    // The leader's session expires: node-1 takes over, node-0 re-joins last.
    stores[0].expire_session().unwrap();
    es[1].wait_for_leadership().await.unwrap();
    settle("all see node-1", || {
        es.iter().all(|e| e.leader().as_deref() == Some("node-1"))
    })
    .await;
    assert_eq!(leaders(&es.iter().collect::<Vec<_>>()), ["node-1"]);
    let children = stores[1]
        .children("/admin/bookie-clusters/leader")
        .await
        .unwrap();
    assert_eq!(children.len(), 3, "node-0 re-joined: {children:?}");

    // Resigning hands over to the next candidate in line.
    es[1].resign().await.unwrap();
    es[1].resign().await.unwrap();
    assert!(!es[1].is_leader());
    assert!(es[1].wait_for_leadership().await.is_err());
    es[2].wait_for_leadership().await.unwrap();
    assert_eq!(leaders(&[&es[0], &es[2]]), ["node-2"]);

    // Closing the leader's store: node-0 leads.
    stores[2].close().await.unwrap();
    es[0].wait_for_leadership().await.unwrap();
    assert_eq!(leaders(&[&es[0], &es[2]]), ["node-0"]);
    assert!(es[2].wait_for_leadership().await.is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_exactly_one_leader_and_takeover_on_close() {
    let connect = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let options = ZkStoreOptions {
        session_timeout: Duration::from_secs(2),
        operation_timeout: Duration::from_secs(5),
        ..ZkStoreOptions::default()
    };
    let mut stores = Vec::new();
    let mut es = Vec::new();
    for i in 0..3 {
        let store = Arc::new(
            ZkStore::connect(&format!("zk://{connect}{chroot}"), options.clone())
                .await
                .unwrap(),
        );
        let reg = Registry::new(store.clone());
        es.push(reg.elect(&format!("node-{i}")).await.unwrap());
        stores.push(store);
    }
    settle("one leader all agree on", || {
        let l = es[0].leader();
        l.is_some() && es.iter().all(|e| e.leader() == l)
    })
    .await;
    let all: Vec<&LeaderElection> = es.iter().collect();
    let lead = leaders(&all);
    assert_eq!(lead.len(), 1, "leaders: {lead:?}");
    let idx: usize = lead[0].trim_start_matches("node-").parse().unwrap();

    stores[idx].close().await.unwrap();
    let rest: Vec<&LeaderElection> = es
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != idx)
        .map(|(_, e)| e)
        .collect();
    settle("a successor leads", || leaders(&rest).len() == 1).await;
    let next = leaders(&rest)[0].clone();
    assert_ne!(next, lead[0]);
    settle("the others agree", || {
        rest.iter()
            .all(|e| e.leader().as_deref() == Some(next.as_str()))
    })
    .await;
    assert!(!es[idx].is_leader());
    for (i, s) in stores.iter().enumerate() {
        if i != idx {
            s.close().await.unwrap();
        }
    }
}

/// A store whose next creates lose their reply (performed, then reported as a
/// lost connection) or their request (not performed), and whose next children
/// listings fail.
#[derive(Debug)]
struct LossyStore {
    inner: Arc<dyn MetadataStore>,
    lose_replies: AtomicUsize,
    lose_requests: AtomicUsize,
    fail_listings: AtomicUsize,
    /// Moved to `fail_listings` when a reply is lost.
    listing_failures_after_loss: AtomicUsize,
}

impl LossyStore {
    fn new(inner: Arc<dyn MetadataStore>) -> Arc<LossyStore> {
        Arc::new(LossyStore {
            inner,
            lose_replies: AtomicUsize::new(0),
            lose_requests: AtomicUsize::new(0),
            fail_listings: AtomicUsize::new(0),
            listing_failures_after_loss: AtomicUsize::new(0),
        })
    }
}

fn take(n: &AtomicUsize) -> bool {
    n.fetch_update(Ordering::AcqRel, Ordering::Acquire, |v| v.checked_sub(1))
        .is_ok()
}

fn lost(op: Operation, path: &str) -> MetadataError {
    MetadataError::Unavailable {
        op,
        path: path.to_owned(),
        reason: "injected connection loss".to_owned(),
    }
}

#[async_trait]
impl Layer for LossyStore {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.inner.clone()
    }

    /// Loses creates' requests or replies, and fails listings, as armed.
    async fn call(&self, call: Call<'_>) -> bkswitch_metadata_store::Result<Reply> {
        match call {
            Call::Create { path, .. } => {
                if take(&self.lose_requests) {
                    return Err(lost(Operation::Create, path));
                }
                let created = call.run(self.inner.as_ref()).await?;
                if take(&self.lose_replies) {
                    let n = self.listing_failures_after_loss.swap(0, Ordering::AcqRel);
                    self.fail_listings.fetch_add(n, Ordering::AcqRel);
                    return Err(lost(Operation::Create, path));
                }
                Ok(created)
            }
            Call::Children { path } if take(&self.fail_listings) => {
                Err(lost(Operation::Children, path))
            }
            _ => call.run(self.inner.as_ref()).await,
        }
    }
}

const LEADER_DIR: &str = "/admin/bookie-clusters/leader";

/// `(child, value)` of every candidate node.
async fn candidates(store: &dyn MetadataStore) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for c in store.children(LEADER_DIR).await.unwrap() {
        if let Some(r) = store.get(&format!("{LEADER_DIR}/{c}")).await.unwrap() {
            out.push((c, String::from_utf8(r.value).unwrap()));
        }
    }
    out
}

fn values(c: &[(String, String)]) -> Vec<&str> {
    c.iter().map(|(_, v)| v.as_str()).collect()
}

#[tokio::test]
async fn memory_lost_create_reply_adopts_the_node_instead_of_a_duplicate() {
    let base = MemoryStore::new();
    let lossy = LossyStore::new(Arc::new(base.clone()));
    lossy.lose_replies.store(1, Ordering::Release);
    let e0 = Registry::new(lossy.clone()).elect("node-0").await.unwrap();
    assert_eq!(
        lossy.lose_replies.load(Ordering::Acquire),
        0,
        "no create was made"
    );
    assert!(e0.is_leader());
    assert_eq!(values(&candidates(&base).await), ["node-0"]);

    let other = base.new_session();
    let e1 = Registry::new(Arc::new(other.clone()))
        .elect("node-1")
        .await
        .unwrap();
    assert_eq!(e1.leader().as_deref(), Some("node-0"));

    // While running: the node disappears, the re-create loses its reply.
    lossy.lose_replies.store(1, Ordering::Release);
    let (own, _) = candidates(&base).await.remove(0);
    base.delete(&format!("{LEADER_DIR}/{own}"), ExpectedVersion::Any)
        .await
        .unwrap();
    e1.wait_for_leadership().await.unwrap();
    settle("node-0 re-joined once", || {
        lossy.lose_replies.load(Ordering::Acquire) == 0 && e0.leader().as_deref() == Some("node-1")
    })
    .await;
    let mut vs = candidates(&base).await;
    vs.sort();
    assert_eq!(values(&vs), ["node-1", "node-0"]);
    assert_eq!(leaders(&[&e0, &e1]), ["node-1"]);

    // Its adopted node is the one it resigns with: node-0 leads afterwards
    // only through that node, and resigning leaves no orphan.
    e1.resign().await.unwrap();
    e0.wait_for_leadership().await.unwrap();
    e0.resign().await.unwrap();
    assert!(candidates(&base).await.is_empty());
}

#[tokio::test]
async fn memory_lost_create_request_creates_exactly_one_node() {
    let base = MemoryStore::new();
    let lossy = LossyStore::new(Arc::new(base.clone()));
    lossy.lose_requests.store(2, Ordering::Release);
    let e0 = Registry::new(lossy.clone()).elect("node-0").await.unwrap();
    assert!(e0.is_leader());
    assert_eq!(values(&candidates(&base).await), ["node-0"]);
    e0.resign().await.unwrap();
    assert!(candidates(&base).await.is_empty());
}

#[tokio::test]
async fn memory_failed_join_after_a_lost_reply_leaves_no_node() {
    let base = MemoryStore::new();
    let lossy = LossyStore::new(Arc::new(base.clone()));
    // The create loses its reply and the listing right after fails: `elect`
    // fails, and removes the node the create made (found by a later listing).
    lossy.lose_replies.store(1, Ordering::Release);
    lossy
        .listing_failures_after_loss
        .store(1, Ordering::Release);
    assert!(Registry::new(lossy.clone()).elect("node-0").await.is_err());
    assert_eq!(lossy.fail_listings.load(Ordering::Acquire), 0);
    assert!(
        candidates(&base).await.is_empty(),
        "{:?}",
        candidates(&base).await
    );
    // A later join works and makes one node.
    let e0 = Registry::new(lossy.clone()).elect("node-0").await.unwrap();
    assert!(e0.is_leader());
    assert_eq!(values(&candidates(&base).await), ["node-0"]);
}

fn zk_options(session_secs: u64, reconnect_ms: u64) -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(session_secs),
        operation_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(10),
        reconnect_delay: Duration::from_millis(reconnect_ms),
        auth: None,
        tls: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_lost_create_replies_make_no_duplicate_and_one_leader() {
    let connect = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let mut stores = Vec::new();
    let mut es = Vec::new();
    for i in 0..4 {
        let zk = ZkStore::connect(&format!("zk://{connect}{chroot}"), zk_options(10, 100))
            .await
            .unwrap();
        let lossy = LossyStore::new(Arc::new(zk.clone()));
        if i % 2 == 0 {
            lossy.lose_replies.store(1, Ordering::Release);
        }
        es.push(
            Registry::new(lossy.clone())
                .elect(&format!("node-{i}"))
                .await
                .unwrap(),
        );
        assert_eq!(lossy.lose_replies.load(Ordering::Acquire), 0);
        stores.push(zk);
    }
    settle("one leader all agree on", || {
        let l = es[0].leader();
        l.is_some() && es.iter().all(|e| e.leader() == l)
    })
    .await;
    let all: Vec<&LeaderElection> = es.iter().collect();
    assert_eq!(leaders(&all), ["node-0"]);
    let mut vs: Vec<String> = values(&candidates(&stores[0]).await)
        .into_iter()
        .map(str::to_owned)
        .collect();
    vs.sort();
    assert_eq!(vs, ["node-0", "node-1", "node-2", "node-3"]);
    for s in &stores {
        s.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_leader_session_expiry_gives_exactly_one_new_leader() {
    let server = ZkServer::start();
    let url = format!("zk://{}/election", server.connect_string());
    // node-0 leads; it reconnects only long after its 2 s session expired.
    let mut stores = vec![ZkStore::connect(&url, zk_options(2, 6_000)).await.unwrap()];
    for _ in 1..4 {
        stores.push(ZkStore::connect(&url, zk_options(20, 100)).await.unwrap());
    }
    let mut es = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        es.push(
            Registry::new(Arc::new(s.clone()))
                .elect(&format!("node-{i}"))
                .await
                .unwrap(),
        );
    }
    es[0].wait_for_leadership().await.unwrap();
    settle("all see node-0", || {
        es.iter().all(|e| e.leader().as_deref() == Some("node-0"))
    })
    .await;
    let all: Vec<&LeaderElection> = es.iter().collect();
    assert_eq!(leaders(&all), ["node-0"]);

    server.stop();
    server.start_again();
    es[1].wait_for_leadership().await.unwrap();
    settle("all see node-1, node-0 re-joined", || {
        es.iter().all(|e| e.leader().as_deref() == Some("node-1"))
    })
    .await;
    assert_eq!(leaders(&all), ["node-1"]);
    assert!(stores[0].session_generation() >= 2);
    let cs = candidates(&stores[1]).await;
    let mut vs: Vec<&str> = values(&cs);
    vs.sort_unstable();
    assert_eq!(vs, ["node-0", "node-1", "node-2", "node-3"], "{cs:?}");
    // node-0 re-joined behind the others.
    let lowest_after = cs.iter().min().unwrap();
    assert_eq!(lowest_after.1, "node-1");
    for s in &stores {
        s.close().await.unwrap();
    }
}
