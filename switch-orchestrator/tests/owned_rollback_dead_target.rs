//! The rollback of a switch whose cursors were promoted by their owners, once
//! the target cluster is really dead: the owners flip the stamps back without
//! it (a metadata-only flip, as the coordinator's for unowned topics).

mod common;

use std::sync::Arc;

use bkswitch_bk_client::UnavailableMode;
use bkswitch_metadata_store::MemoryStore;
use bkswitch_switch_orchestrator::{LedgerKind, Phase};
use common::*;

#[tokio::test]
async fn owned_cursors_roll_back_with_the_target_dead() {
    let store = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    let mls = env.populate(2, 0).await;
    let before = ledgers(&metadata(store.as_ref()).await);
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    let st = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(st.phase, Phase::Switched, "{st:?}");
    assert!(st.counts.promoted >= 4, "{:?}", st.counts);

    // The target dies for good while every topic stays owned here.
    env.advance_old_beyond_new();
    env.storage.switch_active_cluster(OLD).await.unwrap();
    env.clusters
        .get(NEW)
        .unwrap()
        .set_unavailable(UnavailableMode::FailFast);
    let rolled = orch.rollback(&s.switch_id).await.unwrap();
    assert_eq!(rolled.phase, Phase::RolledBack, "{rolled:?}");
    for (kind, path, id, stamp) in ledgers(&metadata(store.as_ref()).await) {
        if kind == LedgerKind::Cursor && before.iter().any(|(_, p, i, _)| *p == path && *i == id) {
            assert_eq!(stamp.as_deref(), Some(OLD), "{path} {id}");
        }
    }
    // The owners go on acknowledging on the source.
    for ml in &mls {
        let c = ml.cursor("sub-a").unwrap();
        let next = c.read_entries(1).await.unwrap();
        c.mark_delete(next[0].position).await.unwrap();
    }
}

/// A source cluster unreachable for a moment during BUILD costs no ledger:
/// a retryable copy failure is copied again (after 0.5 s, then 1 s) before
/// the ledger would be recorded FAILED.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_unreachable_for_a_moment_during_build_fails_no_ledger() {
    let store = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    let _mls = env.populate(2, 2).await;
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    let old = env.clusters.get(OLD).unwrap();
    old.set_unavailable(UnavailableMode::FailFast);
    let back = tokio::spawn({
        let old = old.clone();
        async move {
            tokio::time::sleep(std::time::Duration::from_millis(300)).await;
            old.set_available();
        }
    });
    env.storage.switch_active_cluster(NEW).await.unwrap();
    let st = orch.run(&s.switch_id).await.unwrap();
    back.await.unwrap();
    assert_eq!(st.phase, Phase::Switched, "{st:?}");
    assert_eq!(st.counts.failed, 0, "{:?}", st.failures);
    assert!(st.counts.to_build >= 6, "{:?}", st.counts);
    assert_eq!(st.counts.built, st.counts.to_build, "{:?}", st.counts);

    // A source that stays down still fails its ledgers (after the retries),
    // and they stay on the source.
    let env = env_with(Arc::new(MemoryStore::new()), true).await;
    let _mls = env.populate(1, 1).await;
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    env.clusters
        .get(OLD)
        .unwrap()
        .set_unavailable(UnavailableMode::FailFast);
    let st = orch.run(&s.switch_id).await.unwrap();
    assert!(st.counts.failed > 0, "{:?}", st.counts);
    assert!(
        st.failures.iter().all(|f| f.reason.contains("retryable")),
        "{:?}",
        st.failures
    );
}
