//! CLEANUP runs by itself after the dual-read timeout
//! (`bookieClusterDualReadTimeoutDays`, here shortened to seconds), on a real
//! ZooKeeper, with the manual cleanup's guards: never before the timeout,
//! never inside the rollback window, at most `maxDeletions` per pass.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::{AdminClient, Node};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::Phase;
use common::*;

async fn node(
    rollback_window: Duration,
    dual_read: Duration,
) -> (Node, bkswitch_bk_client::MemoryClusters) {
    bkswitch_zk_harness::require_zk();
    let url = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let store: Arc<dyn MetadataStore> = Arc::new(
        ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .unwrap(),
    );
    let clusters = clusters();
    let mut cfg = bkswitch_admin::testkit::node_config("node-1", store, &clusters);
    cfg.orchestrator = cfg
        .orchestrator
        .clone()
        .with_rollback_window(rollback_window)
        .with_dual_read_timeout(Some(dual_read))
        .with_auto_cleanup(Duration::from_millis(100), 2);
    let node = Node::start(cfg).await.unwrap();
    // Three topics with a cursor and a schema each: six copies to delete.
    for t in 0..3 {
        let name = format!("tenant/ns/persistent/auto-{t}");
        let ml = node.open_topic(&name).await.unwrap();
        let c = ml
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        let p = ml.append(&b"x"[..]).await.unwrap();
        c.mark_delete(p).await.unwrap();
        node.schemas()
            .put(&format!("auto-{t}"), b"v1", b"h1")
            .await
            .unwrap();
    }
    (node, clusters)
}

async fn switched(node: &Node) -> Instant {
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    admin.switch("new").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = node.orchestrator().current_status().await.unwrap().unwrap();
        if st.phase == Phase::Switched {
            return Instant::now();
        }
        assert!(Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_runs_by_itself_after_the_dual_read_timeout() {
    let (node, clusters) = node(Duration::from_millis(500), Duration::from_secs(2)).await;
    let at = switched(&node).await;
    let copies: Vec<i64> = node
        .orchestrator()
        .cleanup_targets(
            &node
                .orchestrator()
                .current_status()
                .await
                .unwrap()
                .unwrap()
                .switch_id,
        )
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.ledger_id)
        .collect();
    assert!(copies.len() >= 6, "{copies:?}");
    let old = clusters.get("old").unwrap();
    // Not before the timeout (the rollback window closed long before).
    tokio::time::sleep(Duration::from_millis(1200)).await;
    let st = node.orchestrator().current_status().await.unwrap().unwrap();
    assert_eq!(st.phase, Phase::Switched, "{st:?}");
    assert!(copies.iter().all(|id| old.contains_ledger(*id)));
    // Then by itself, two deletions per pass, to DONE with the status flip.
    let mut saw_cleanup = false;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = node.orchestrator().current_status().await.unwrap().unwrap();
        saw_cleanup |= st.phase == Phase::Cleanup;
        if st.phase == Phase::Done {
            break;
        }
        assert!(Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let took = at.elapsed();
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(saw_cleanup, "several passes of at most two deletions");
    assert!(copies.iter().all(|id| !old.contains_ledger(*id)));
    let rec = node.registry().get("old").await.unwrap().unwrap();
    assert_eq!(rec.status, ClusterStatus::Deprecated);
    assert_eq!(
        node.registry().active().await.unwrap().as_deref(),
        Some("new")
    );
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_never_runs_by_itself_inside_the_rollback_window() {
    let (node, clusters) = node(Duration::from_secs(3600), Duration::from_millis(300)).await;
    switched(&node).await;
    let id = node
        .orchestrator()
        .current_status()
        .await
        .unwrap()
        .unwrap()
        .switch_id;
    let copies = node.orchestrator().cleanup_targets(&id).await.unwrap();
    tokio::time::sleep(Duration::from_secs(2)).await;
    let st = node.orchestrator().current_status().await.unwrap().unwrap();
    assert_eq!(st.phase, Phase::Switched, "{st:?}");
    let old = clusters.get("old").unwrap();
    assert!(copies.iter().all(|t| old.contains_ledger(t.ledger_id)));
    // The switch can still be rolled back.
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    clusters
        .get("old")
        .unwrap()
        .advance_ledger_id_to(2_000_000)
        .unwrap();
    let rolled = admin.rollback().await.unwrap();
    assert_eq!(
        rolled.phase_name(),
        Some("ROLLED_BACK"),
        "{:?}",
        rolled.raw()
    );
    node.stop().await;
}

/// After a rollback, the target's copies are deleted by themselves once the
/// dual-read timeout has passed since the rollback and the rollback window
/// has closed; the stamps stay on the source.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_switch_loses_its_target_copies_by_itself() {
    let (node, clusters) = node(Duration::from_secs(2), Duration::from_secs(1)).await;
    switched(&node).await;
    // The reverse idgen step, for the rollback.
    clusters
        .get("old")
        .unwrap()
        .advance_ledger_id_to(2_000_000)
        .unwrap();
    let id = node
        .orchestrator()
        .current_status()
        .await
        .unwrap()
        .unwrap()
        .switch_id;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    let rolled = admin.rollback().await.unwrap();
    assert_eq!(
        rolled.phase_name(),
        Some("ROLLED_BACK"),
        "{:?}",
        rolled.raw()
    );
    let copies = node.orchestrator().cleanup_targets(&id).await.unwrap();
    assert!(copies.len() >= 6, "{copies:?}");
    assert!(copies.iter().all(|t| t.cluster == "new"), "{copies:?}");
    let new = clusters.get("new").unwrap();
    tokio::time::sleep(Duration::from_millis(600)).await;
    assert!(copies.iter().all(|t| new.contains_ledger(t.ledger_id)));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let st = node.orchestrator().current_status().await.unwrap().unwrap();
        if st.phase == Phase::Done {
            break;
        }
        assert!(Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(copies.iter().all(|t| !new.contains_ledger(t.ledger_id)));
    assert_eq!(
        node.registry().active().await.unwrap().as_deref(),
        Some("old")
    );
    node.stop().await;
}

/// A canary's old copies go by themselves too after the dual-read timeout,
/// and its cleanup never flips the clusters' statuses (`old` stays ACTIVE:
/// only the prefix moved).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_cleaned_up_by_itself_without_flipping_statuses() {
    let (node, clusters) = node(Duration::from_millis(500), Duration::from_secs(1)).await;
    node.register_cluster("new", "memory://new", ClusterStatus::Standby)
        .await
        .unwrap();
    let st = node.set_override("tenant/ns/", "new").await.unwrap();
    let canary = node.orchestrator().for_prefix("tenant/ns/");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !canary.status(&st.switch_id).await.unwrap().phase.is_built() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // The three cursors under the prefix (the schemas, `auto-<t>`, are not).
    let copies = canary.cleanup_targets(&st.switch_id).await.unwrap();
    assert_eq!(copies.len(), 3, "{copies:?}");
    let old = clusters.get("old").unwrap();
    loop {
        if canary.status(&st.switch_id).await.unwrap().phase == Phase::Done {
            break;
        }
        assert!(Instant::now() < deadline + Duration::from_secs(30));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(copies.iter().all(|t| !old.contains_ledger(t.ledger_id)));
    assert_eq!(
        node.registry().active().await.unwrap().as_deref(),
        Some("old")
    );
    assert_eq!(
        node.registry().get("new").await.unwrap().unwrap().status,
        ClusterStatus::Standby
    );
    node.stop().await;
}
