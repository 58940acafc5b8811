//! Rollback, refusals of bad input and resume after a crash.

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore};
use bkswitch_switch_orchestrator::{
    CleanupOptions, CursorPromoter, OrchestratorError, Phase, SwitchLedgerState, TopicOwners,
};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rollback_restores_the_pre_switch_metadata_bytes() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    let mls = env.populate(3, 2).await;
    // One topic nobody owns: its cursors are promoted by the coordinator.
    env.topics.remove(mls[2].name());
    let before = metadata(store.as_ref()).await;

    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    orch.run(&s.switch_id).await.unwrap();
    let moved = metadata(store.as_ref()).await;
    assert_ne!(moved, before);
    assert!(ledgers(&moved).iter().all(|l| l.3.as_deref() == Some(NEW)));

    // The old cluster's id generator is behind the new one's: going back
    // would make positions go backwards, so the rollback is refused and
    // nothing changes.
    let untouched = metadata(store.as_ref()).await;
    let err = orch.rollback(&s.switch_id).await.unwrap_err();
    assert!(matches!(err, OrchestratorError::PrecheckFailed(_)), "{err}");
    assert_eq!(metadata(store.as_ref()).await, untouched);
    assert_eq!(
        orch.status(&s.switch_id).await.unwrap().phase,
        Phase::Switched
    );
    env.advance_old_beyond_new();
    let rolled = orch.rollback(&s.switch_id).await.unwrap();
    assert_eq!(rolled.phase, Phase::RolledBack);
    assert_eq!(
        env.registry
            .switch_directive()
            .await
            .unwrap()
            .unwrap()
            .target,
        OLD
    );
    env.storage.switch_active_cluster(OLD).await.unwrap();
    assert_eq!(metadata(store.as_ref()).await, before);
    // Idempotent.
    assert_eq!(
        orch.rollback(&s.switch_id).await.unwrap().phase,
        Phase::RolledBack
    );

    // The target copies go after the window (forced here); the old ones stay.
    let targets = orch.cleanup_targets(&s.switch_id).await.unwrap();
    assert!(!targets.is_empty() && targets.iter().all(|t| t.cluster == NEW));
    let err = orch
        .cleanup(&s.switch_id, CleanupOptions::execute())
        .await
        .unwrap_err();
    assert!(
        matches!(err, OrchestratorError::InsideRollbackWindow { .. }),
        "{err}"
    );
    let report = orch
        .cleanup(&s.switch_id, CleanupOptions::execute().with_force(true))
        .await
        .unwrap();
    assert_eq!(report.phase, Phase::Done);
    for t in &targets {
        assert!(!env.clusters.get(NEW).unwrap().contains_ledger(t.ledger_id));
        assert!(env.clusters.get(OLD).unwrap().contains_ledger(t.ledger_id));
    }
    assert_eq!(env.registry.active().await.unwrap().as_deref(), Some(OLD));
    // Every schema still reads after the rollback.
    for i in 0..2 {
        assert_eq!(
            env.schemas
                .list_versions(&schema_id(i))
                .await
                .unwrap()
                .len(),
            3
        );
    }
}

#[tokio::test]
async fn bad_input_is_refused_and_leaves_the_store_untouched() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    env.populate(2, 1).await;
    // A DEPRECATED cluster (as left by an earlier switch).
    store
        .put(
            "/admin/bookie-clusters/gone",
            br#"{"name":"gone","metadataServiceUri":"memory://gone","status":"DEPRECATED"}"#,
            ExpectedVersion::NotExists,
        )
        .await
        .unwrap();
    let orch = env.orchestrator();
    let snapshot = dump(store.as_ref(), "/").await;
    let err = orch.start_switch("nope", None).await.unwrap_err();
    assert!(
        matches!(err, OrchestratorError::UnknownCluster { .. }),
        "{err}"
    );
    let err = orch.start_switch("gone", None).await.unwrap_err();
    assert!(
        matches!(err, OrchestratorError::ClusterDeprecated { .. }),
        "{err}"
    );
    let err = orch.start_switch(OLD, None).await.unwrap_err();
    assert!(
        matches!(err, OrchestratorError::AlreadyActive { .. }),
        "{err}"
    );
    let err = orch.status("42").await.unwrap_err();
    assert!(
        matches!(err, OrchestratorError::NoSuchSwitch { .. }),
        "{err}"
    );
    assert_eq!(dump(store.as_ref(), "/").await, snapshot);

    let s = orch.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    orch.run(&s.switch_id).await.unwrap();
    let snapshot = dump(store.as_ref(), "/").await;
    let err = orch
        .cleanup(&s.switch_id, CleanupOptions::execute())
        .await
        .unwrap_err();
    assert!(
        matches!(err, OrchestratorError::InsideRollbackWindow { .. }),
        "{err}"
    );
    assert!(err.to_string().contains("force"));
    assert_eq!(dump(store.as_ref(), "/").await, snapshot);

    // Partial cleanup: rollback is refused from then on.
    let first = orch
        .cleanup(
            &s.switch_id,
            CleanupOptions::execute()
                .with_force(true)
                .with_max_deletions(1),
        )
        .await
        .unwrap();
    assert_eq!(first.targets.len(), 1);
    assert_eq!(first.phase, Phase::Cleanup);
    assert!(first.remaining > 0);
    let snapshot = dump(store.as_ref(), "/").await;
    let err = orch.rollback(&s.switch_id).await.unwrap_err();
    assert!(
        matches!(err, OrchestratorError::CleanupStarted { .. }),
        "{err}"
    );
    assert_eq!(dump(store.as_ref(), "/").await, snapshot);
    // A later call continues.
    let rest = orch
        .cleanup(&s.switch_id, CleanupOptions::execute())
        .await
        .unwrap();
    assert_eq!(rest.phase, Phase::Done);
    assert_eq!(rest.targets.len(), first.remaining);
}

#[tokio::test]
async fn precheck_failure_refuses_the_switch_and_writes_nothing() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env_with(store.clone(), false).await;
    env.populate(2, 1).await;
    let snapshot = dump(store.as_ref(), "/").await;
    let err = env
        .orchestrator()
        .start_switch(NEW, None)
        .await
        .unwrap_err();
    let OrchestratorError::PrecheckFailed(p) = &err else {
        panic!("{err}")
    };
    assert!(!p.ready && p.at_risk_ledger_count > 0);
    assert_eq!(dump(store.as_ref(), "/").await, snapshot);
}

/// Owners whose promote never returns: the run hangs in PROMOTE after BUILD.
struct Stuck;

#[async_trait]
impl TopicOwners for Stuck {
    async fn owner(
        &self,
        _: &str,
    ) -> bkswitch_switch_orchestrator::Result<Option<Arc<dyn CursorPromoter>>> {
        futures::future::pending::<()>().await;
        Ok(None)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_after_a_crash_converges_without_copying_twice() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    let mls = env.populate(4, 3).await;
    let first = env.orchestrator_with(Arc::new(Stuck));
    let s = first.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    // The coordinator dies during PROMOTE (the future is dropped).
    let crashed = tokio::time::timeout(
        std::time::Duration::from_millis(500),
        first.run(&s.switch_id),
    )
    .await;
    assert!(crashed.is_err(), "the run should have been stuck");
    let records = first.ledger_records(&s.switch_id).await.unwrap();
    let total = ledgers(&metadata(store.as_ref()).await).len();
    assert_eq!(records.len(), total);
    assert_eq!(first.copy_stats().copied as usize, total);

    // A new coordinator on the same store resumes.
    let second = env.orchestrator();
    // The crashed run's lease is released in the background (a crashed
    // process's lease goes with its session): retry while it is held.
    let resumed = loop {
        match second.resume_all().await {
            Err(OrchestratorError::Locked { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(resumed.len(), 1);
    assert_eq!(resumed[0].phase, Phase::Switched);
    assert_eq!(second.copy_stats().copied, 0, "a ledger was copied twice");
    let records = second.ledger_records(&s.switch_id).await.unwrap();
    assert!(records.iter().all(|r| matches!(
        r.state,
        SwitchLedgerState::Promoted | SwitchLedgerState::RolledOver
    )));
    for ml in &mls {
        for c in ml.cursors() {
            // Live cursors keep working after the switch.
            let p = ml.append("after").await.unwrap();
            c.mark_delete(p).await.unwrap();
        }
    }
}

/// The owner acknowledges once more after BUILD, then closes the topic and
/// goes away: the coordinator finds the source cursor ledger longer than the
/// copy, replaces the stale copy and promotes.
struct LeavingOwner {
    topics: bkswitch_switch_orchestrator::adapters::LocalTopics,
    acked: parking_lot::Mutex<Vec<(String, bkswitch_managed_ledger::Position)>>,
}

#[async_trait]
impl TopicOwners for LeavingOwner {
    async fn owner(
        &self,
        name: &str,
    ) -> bkswitch_switch_orchestrator::Result<Option<Arc<dyn CursorPromoter>>> {
        if let Some(ml) = self.topics.remove(name) {
            let p = ml.append("late").await.unwrap();
            for c in ml.cursors() {
                c.mark_delete(p).await.unwrap();
            }
            self.acked.lock().push((name.to_owned(), p));
            ml.close().await.unwrap();
        }
        Ok(None)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unowned_cursor_with_a_stale_copy_is_recopied_then_promoted() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    let mls = env.populate(2, 0).await;
    let owners = Arc::new(LeavingOwner {
        topics: env.topics.clone(),
        acked: parking_lot::Mutex::new(Vec::new()),
    });
    let orch = env.orchestrator_with(owners.clone());
    let s = orch.start_switch(NEW, None).await.unwrap();
    // This node keeps creating on the old cluster: the late acknowledgements
    // append to the copied cursor ledgers (no rollover).
    let status = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(status.phase, Phase::Switched);
    assert_eq!(status.counts.promoted, 4, "{:?}", status.counts);
    // Copied once in BUILD, then again after the late acknowledgements.
    assert_eq!(orch.copy_stats().copied, 8);
    let old = env.client(OLD);
    let new = env.client(NEW);
    for r in orch.ledger_records(&s.switch_id).await.unwrap() {
        assert_eq!(r.state, SwitchLedgerState::Promoted);
        assert_same_ledger(old.as_ref(), new.as_ref(), r.ledger_id, r.kind).await;
    }
    // Reopened on the new cluster, every cursor has its last acknowledgement.
    env.storage.switch_active_cluster(NEW).await.unwrap();
    let factory = env.factory();
    let acked = owners.acked.lock().clone();
    assert_eq!(acked.len(), mls.len());
    for (name, p) in acked {
        let ml = factory.open(&name, env.config()).await.unwrap();
        for c in ml.cursors() {
            assert_eq!(c.mark_delete_position(), p, "{name}/{}", c.name());
        }
    }
}

#[tokio::test]
async fn forced_rollover_moves_every_open_topic_to_the_active_cluster() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    let mls = env.populate(3, 0).await;
    env.storage.switch_active_cluster(NEW).await.unwrap();
    for ml in &mls {
        let id = ml.current_ledger_id().unwrap();
        assert!(env.clusters.get(OLD).unwrap().contains_ledger(id));
    }
    let report = env.topics.force_rollover(1000).await;
    assert_eq!(report.rolled, 3);
    assert!(report.errors.is_empty());
    for ml in &mls {
        let p = ml.append("x").await.unwrap();
        assert!(env.clusters.get(NEW).unwrap().contains_ledger(p.ledger_id));
    }
}

/// Two coordinators never work on one switch at once: the second is refused
/// (retryably) while the first holds the switch's lease, and takes over once
/// the first one's metadata session ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_coordinator_waits_for_the_lease_of_the_first() {
    let base = Arc::new(MemoryStore::new());
    let first_session = Arc::new(base.new_session());
    let env = env(base.clone()).await;
    env.populate(2, 1).await;
    let first = bkswitch_switch_orchestrator::Orchestrator::new(
        first_session.clone(),
        env.registry.clone(),
        env.storage.clone(),
        Arc::new(Stuck),
        bkswitch_switch_orchestrator::OrchestratorConfig::default(),
    )
    .with_idgen(Arc::new(env.clusters.clone()));
    let s = first.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    // The first coordinator hangs in PROMOTE, holding the lease.
    let hung = tokio::spawn({
        let first = first.clone();
        let id = s.switch_id.clone();
        async move { first.run(&id).await }
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let second = env.orchestrator();
    let err = second.run(&s.switch_id).await.unwrap_err();
    assert!(
        matches!(err, OrchestratorError::Locked { .. }) && err.is_retryable(),
        "{err}"
    );
    // The first coordinator's process dies: its session ends, the lease goes.
    hung.abort();
    let _ = hung.await;
    first_session.close().await.unwrap();
    let status = loop {
        match second.run(&s.switch_id).await {
            Err(OrchestratorError::Locked { .. }) => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await
            }
            other => break other.unwrap(),
        }
    };
    assert_eq!(status.phase, Phase::Switched);
    assert_eq!(status.counts.failed, 0);
}
