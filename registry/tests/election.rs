//! Leader election on the in-memory store and on real ZooKeeper.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{MemoryStore, MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_registry::{LeaderElection, Registry};

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
