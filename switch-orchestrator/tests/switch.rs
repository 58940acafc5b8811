//! The switch on the in-memory store and on real ZooKeeper, with traffic.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{MemoryStore, MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::{CleanupOptions, Phase, SwitchLedgerState};
use common::*;

/// BUILD + PROMOTE with producers and consumers running, then crash/reopen
/// every cursor, then cleanup (docs/DESIGN.md §5.1; I8, I9, I10, I12 of
/// docs/INVARIANTS.md).
async fn main_scenario(store: Arc<dyn MetadataStore>) {
    let env = env(store.clone()).await;
    let mls = env.populate(6, 4).await;
    let before = metadata(store.as_ref()).await;
    let traffic = Traffic::start(&mls);
    tokio::time::sleep(Duration::from_millis(30)).await;

    let orch = env.orchestrator();
    let started = orch.start_switch(NEW, Some("node-1")).await.unwrap();
    assert_eq!(started.phase, Phase::Build);
    assert_eq!(
        (started.source.as_str(), started.target.as_str()),
        (OLD, NEW)
    );
    // What every node's registry sync does on the directive.
    env.storage.switch_active_cluster(NEW).await.unwrap();
    let status = orch.run(&started.switch_id).await.unwrap();
    assert_eq!(status.phase, Phase::Switched);
    assert_eq!(status.counts.failed, 0, "{:?}", status.failures);
    assert!(status.counts.promoted >= 12, "{:?}", status.counts);
    assert!(status.rollback_deadline.is_some());
    // Idempotent start.
    let again = orch.start_switch(NEW, Some("node-1")).await.unwrap();
    assert_eq!(again.switch_id, started.switch_id);

    tokio::time::sleep(Duration::from_millis(30)).await;
    let result = traffic.stop().await;
    for (topic, (ok, failed)) in &result.published {
        assert_eq!(*failed, 0, "publishes failed on {topic}");
        for cursor in ["sub-a", "sub-b"] {
            let (seen, _) = &result.received[&(topic.clone(), cursor.to_owned())];
            let mut distinct = seen.clone();
            distinct.sort_unstable();
            distinct.dedup();
            // The cursor acknowledged entries 0..=1 before the traffic started.
            assert_eq!(
                distinct,
                (2..*ok).collect::<Vec<_>>(),
                "gap on {topic}/{cursor}"
            );
        }
    }

    // Copies: same ids, same entries, same bytes.
    let old = env.client(OLD);
    let new = env.client(NEW);
    let records = orch.ledger_records(&started.switch_id).await.unwrap();
    assert_records_moved(&records);
    for r in records
        .iter()
        .filter(|r| r.state == SwitchLedgerState::Promoted)
    {
        if r.kind == bkswitch_switch_orchestrator::LedgerKind::Schema {
            assert_same_ledger(old.as_ref(), new.as_ref(), r.ledger_id, r.kind).await;
        }
    }
    // Metadata: only stamps changed on the ledgers that were moved.
    let after = metadata(store.as_ref()).await;
    let mut compared = 0;
    for (path, value) in &before {
        let Some(a) = unstamped(path, value) else {
            continue;
        };
        let Some(b) = after.get(path).and_then(|v| unstamped(path, v)) else {
            panic!("{path} vanished")
        };
        let same_ledger = ledgers(&[(path.clone(), value.clone())].into())
            .iter()
            .map(|l| l.2)
            .eq(ledgers(&[(path.clone(), after[path].clone())].into())
                .iter()
                .map(|l| l.2));
        if path.starts_with("/schemas/") || same_ledger {
            assert_eq!(a, b, "{path} changed beyond its stamp");
            compared += 1;
        }
    }
    assert!(compared >= 4, "compared {compared}");
    // Nothing schema or cursor is left on the old cluster.
    for (_, path, id, stamp) in ledgers(&after) {
        assert_eq!(stamp.as_deref(), Some(NEW), "{path} ledger {id}");
        assert!(env.clusters.get(NEW).unwrap().contains_ledger(id), "{id}");
    }

    // Crash/reopen: every cursor recovers exactly its last acknowledged position.
    for ml in &mls {
        ml.close().await.unwrap();
        env.topics.remove(ml.name());
    }
    let factory = env.factory();
    for ml in &mls {
        let reopened = factory.open(ml.name(), env.config()).await.unwrap();
        for cursor in ["sub-a", "sub-b"] {
            let (_, acked) = &result.received[&(ml.name().to_owned(), cursor.to_owned())];
            assert_eq!(
                reopened.cursor(cursor).unwrap().mark_delete_position(),
                *acked,
                "{}/{cursor}",
                ml.name()
            );
        }
        reopened.close().await.unwrap();
    }

    // Cleanup: dry run lists, changes nothing; then deletes and flips statuses.
    let snapshot = dump(store.as_ref(), "/").await;
    let dry = orch
        .cleanup(
            &started.switch_id,
            CleanupOptions::default().with_force(true),
        )
        .await
        .unwrap();
    assert!(dry.dry_run && !dry.targets.is_empty());
    assert!(dry.targets.iter().all(|t| t.cluster == OLD));
    assert_eq!(dump(store.as_ref(), "/").await, snapshot);
    assert_eq!(
        orch.cleanup_targets(&started.switch_id).await.unwrap(),
        dry.targets
    );
    let done = orch
        .cleanup(
            &started.switch_id,
            CleanupOptions::execute().with_force(true),
        )
        .await
        .unwrap();
    assert_eq!(done.phase, Phase::Done);
    assert_eq!(done.targets, dry.targets);
    for t in &done.targets {
        assert!(!env.clusters.get(OLD).unwrap().contains_ledger(t.ledger_id));
        assert!(
            env.clusters.get(NEW).unwrap().contains_ledger(t.ledger_id)
                || t.kind == bkswitch_switch_orchestrator::LedgerKind::Cursor
        );
    }
    assert_eq!(env.registry.active().await.unwrap().as_deref(), Some(NEW));
    assert_eq!(
        env.registry.get(OLD).await.unwrap().unwrap().status,
        ClusterStatus::Deprecated
    );
    assert_eq!(
        env.registry.get(NEW).await.unwrap().unwrap().status,
        ClusterStatus::Active
    );
    let status = orch.current_status().await.unwrap().unwrap();
    assert_eq!(status.phase, Phase::Done);
    assert_eq!(status.counts.deleted as usize, done.targets.len());
    // The status serialises as the REST API returns it.
    let json = serde_json::to_value(&status).unwrap();
    assert_eq!(json["phase"], "DONE");
    assert!(json["counts"]["rolloverFallback"].is_u64());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switch_with_traffic_on_memory() {
    main_scenario(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switch_with_traffic_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    let store = ZkStore::connect(&url, ZkStoreOptions::default())
        .await
        .unwrap();
    main_scenario(Arc::new(store)).await;
}
