//! Stored values that do not parse: a switch record of the coordinator's own
//! (`CorruptRecord`) and a schema locator the switch flips
//! (`CorruptMetadata`). Each error names the node and what to do, and the
//! stored metadata is left as it was.

mod common;

use std::sync::Arc;

use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore};
use bkswitch_switch_orchestrator::{OrchestratorError, Phase};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_switch_record_is_named_and_nothing_is_written() {
    let _scenario = fail::FailScenario::setup();
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    env.populate(2, 1).await;
    let orch = env.orchestrator();
    let started = orch.start_switch(NEW, Some("node-1")).await.unwrap();
    let path = format!("{}/{}", orch.records_root(), started.switch_id);
    store
        .put(&path, b"{not json", ExpectedVersion::Any)
        .await
        .unwrap();
    let before = dump(store.as_ref(), "/").await;

    let status = orch.status(&started.switch_id).await.unwrap_err();
    let run = orch.run(&started.switch_id).await.unwrap_err();
    for e in [&status, &run] {
        match e {
            OrchestratorError::CorruptRecord { path: p, .. } => assert_eq!(p, &path),
            other => panic!("expected CorruptRecord, got {other:?}"),
        }
        let msg = e.to_string();
        assert!(msg.contains(&path), "{msg}");
        assert!(msg.contains("restore the node from a backup"), "{msg}");
        assert!(!e.is_retryable());
    }
    assert_eq!(dump(store.as_ref(), "/").await, before, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupt_schema_locator_is_named_and_left_untouched() {
    let scenario = fail::FailScenario::setup();
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    env.populate(0, 1).await;
    let orch = env.orchestrator();
    let started = orch.start_switch(NEW, Some("node-1")).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    // BUILD copies the schema ledgers; PROMOTE stops before its CAS.
    fail::cfg("orchestrator::schema_cas", "return").unwrap();
    let crashed = orch.run(&started.switch_id).await.unwrap_err();
    fail::remove("orchestrator::schema_cas");
    assert!(
        matches!(crashed, OrchestratorError::Injected { .. }),
        "{crashed:?}"
    );
    assert_eq!(
        orch.status(&started.switch_id).await.unwrap().phase,
        Phase::Promote
    );

    // The locator goes bad between BUILD and PROMOTE.
    let locator = format!("/schemas/{}", schema_id(0));
    store
        .put(&locator, b"not a locator", ExpectedVersion::Any)
        .await
        .unwrap();
    let before = metadata(store.as_ref()).await;

    let e = orch.run(&started.switch_id).await.unwrap_err();
    match &e {
        OrchestratorError::CorruptMetadata { path, reason } => {
            assert_eq!(path, &locator);
            assert!(reason.contains("not a SchemaLocator"), "{reason}");
        }
        other => panic!("expected CorruptMetadata, got {other:?}"),
    }
    let msg = e.to_string();
    assert!(msg.contains("left it untouched"), "{msg}");
    assert!(!e.is_retryable());
    assert_eq!(metadata(store.as_ref()).await, before, "metadata untouched");
    assert_eq!(
        store.get(&locator).await.unwrap().unwrap().value,
        b"not a locator"
    );
    scenario.teardown();
}

/// A cursor node that does not decode: the switch cannot know which ledger
/// the node names, and going on would leave that ledger uncopied on the
/// old cluster while the switch reports SWITCHED. A start is refused
/// naming the node (nothing written); a switch under way stops in BUILD
/// naming it; once the node is repaired, a resume copies its ledger and
/// finishes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_node_that_does_not_decode_stops_build_until_it_is_repaired() {
    use bkswitch_proto::Stamped;

    let _scenario = fail::FailScenario::setup();
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    // An idle topic: no node has it loaded, so nothing but the switch
    // touches its cursor node (a loaded topic's cursor would be fenced by
    // the repair written behind its back, and reloaded by its node).
    let mls = env.populate(1, 0).await;
    env.topics.remove(&topic(0));
    mls[0].close().await.unwrap();
    let orch = env.orchestrator();
    let cursor = format!("/managed-ledgers/{}/sub-b", topic(0));
    let good = store.get(&cursor).await.unwrap().unwrap().value;
    let corrupt = || async {
        store
            .put(&cursor, b"\xff\xfenot a cursor", ExpectedVersion::Any)
            .await
            .unwrap();
    };
    let check = |e: &OrchestratorError| {
        match e {
            OrchestratorError::CorruptMetadata { path, reason } => {
                assert_eq!(path, &cursor);
                assert!(reason.contains("ManagedCursorInfo"), "{reason}");
            }
            other => panic!("expected CorruptMetadata, got {other:?}"),
        }
        assert!(e.to_string().contains("then resume"), "{e}");
        assert!(!e.is_retryable());
    };

    // A start is refused, and writes nothing.
    corrupt().await;
    let before = dump(store.as_ref(), "/").await;
    let e = orch.start_switch(NEW, Some("node-1")).await.unwrap_err();
    check(&e);
    assert_eq!(dump(store.as_ref(), "/").await, before, "nothing written");

    // Repaired, the switch starts; the node goes bad before BUILD.
    store
        .put(&cursor, &good, ExpectedVersion::Any)
        .await
        .unwrap();
    let started = orch.start_switch(NEW, Some("node-1")).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    corrupt().await;
    let before = metadata(store.as_ref()).await;
    let e = orch.run(&started.switch_id).await.unwrap_err();
    check(&e);
    assert_ne!(
        orch.status(&started.switch_id).await.unwrap().phase,
        Phase::Switched,
        "a switch that could not read a cursor node must not report SWITCHED"
    );
    assert_eq!(metadata(store.as_ref()).await, before, "metadata untouched");

    // Repaired: resumes (as the node's coordinator retries them) copy the
    // cursor's ledger and finish.
    store
        .put(&cursor, &good, ExpectedVersion::Any)
        .await
        .unwrap();
    let mut attempts = 0;
    let done = loop {
        match orch.run(&started.switch_id).await {
            Ok(done) => break done,
            Err(e) if e.is_retryable() && attempts < 50 => {
                attempts += 1;
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
            Err(e) => panic!("after {attempts} resumes: {e}"),
        }
    };
    assert_eq!(done.phase, Phase::Switched);
    let value = store.get(&cursor).await.unwrap().unwrap().value;
    let info = bkswitch_proto::codec::decode_managed_cursor_info(&value).unwrap();
    assert_eq!(info.cluster_stamp().unwrap(), Some(NEW), "{info:?}");
}
