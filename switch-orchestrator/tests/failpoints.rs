//! Crash tests: every failpoint of the switch path makes the step return an
//! error (the coordinator "crashes" there); a new coordinator on the same store
//! resumes and converges, with the invariants holding.
//!
//! Run with `cargo test -p bkswitch-switch-orchestrator --features failpoints --test failpoints`.
#![cfg(feature = "failpoints")]

mod common;

use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_managed_ledger::ManagedLedger;
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::adapters::LocalTopics;
use bkswitch_switch_orchestrator::{
    CleanupOptions, CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, Orchestrator,
    Phase, PromoteError, SwitchLedgerState, TopicOwners, FAILPOINTS,
};
use common::*;

/// The owners of the test topics; before each promote the consumer of `sub-a`
/// acknowledges one more entry, as a live cursor does between BUILD and
/// PROMOTE, so the owner must take the rollover fallback.
#[derive(Clone)]
struct AckingOwners(LocalTopics);

#[async_trait]
impl TopicOwners for AckingOwners {
    async fn owner(
        &self,
        ml: &str,
    ) -> bkswitch_switch_orchestrator::Result<Option<Arc<dyn CursorPromoter>>> {
        Ok(self
            .0
            .get(ml)
            .map(|_| Arc::new(self.clone()) as Arc<dyn CursorPromoter>))
    }
}

#[async_trait]
impl CursorPromoter for AckingOwners {
    async fn promote_cursor(
        &self,
        req: &CursorPromoteRequest,
    ) -> Result<CursorPromoteOutcome, PromoteError> {
        if req.cursor_name == "sub-a" && req.target_cluster_name == NEW {
            if let Some(ml) = self.0.get(&req.managed_ledger) {
                let p = ml.append("live").await.unwrap();
                let c = ml.cursor("sub-a").unwrap();
                if c.cursor_ledger_id() == req.expected_cursors_ledger_id {
                    c.mark_delete(p).await.unwrap();
                }
            }
        }
        self.0.promote_cursor(req).await
    }
}

struct Setup {
    env: Env,
    store: Arc<dyn MetadataStore>,
    mls: Vec<ManagedLedger>,
}

async fn setup() -> Setup {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    let mls = env.populate(3, 2).await;
    // One topic nobody owns: the coordinator promotes its cursors itself.
    env.topics.remove(mls[2].name());
    mls[2].close().await.unwrap();
    Setup { env, store, mls }
}

fn orchestrator(env: &Env) -> Orchestrator {
    env.orchestrator_with(Arc::new(AckingOwners(env.topics.clone())))
}

/// Start, switch the node, run, clean up: stops at the first error.
async fn forward(env: &Env, orch: &Orchestrator) -> bkswitch_switch_orchestrator::Result<Phase> {
    let s = orch.start_switch(NEW, None).await?;
    env.storage.switch_active_cluster(NEW).await.unwrap();
    orch.resume(&s.switch_id).await?;
    let report = orch
        .cleanup(&s.switch_id, CleanupOptions::execute().with_force(true))
        .await?;
    Ok(report.phase)
}

async fn check_forward_invariants(s: &Setup, copies: u64) {
    let env = &s.env;
    let meta = metadata(s.store.as_ref()).await;
    for (_, path, id, stamp) in ledgers(&meta) {
        assert_eq!(stamp.as_deref(), Some(NEW), "{path} ledger {id}");
        assert!(
            env.clusters.get(NEW).unwrap().contains_ledger(id),
            "{path} {id}"
        );
        assert!(
            !env.clusters.get(OLD).unwrap().contains_ledger(id),
            "{path} {id}"
        );
    }
    assert_eq!(env.registry.active().await.unwrap().as_deref(), Some(NEW));
    assert_eq!(
        env.registry.get(OLD).await.unwrap().unwrap().status,
        ClusterStatus::Deprecated
    );
    let orch = orchestrator(env);
    let status = orch.current_status().await.unwrap().unwrap();
    assert_eq!(status.phase, Phase::Done);
    let records = orch.ledger_records(&status.switch_id).await.unwrap();
    assert!(
        records
            .iter()
            .all(|r| r.state == SwitchLedgerState::Deleted),
        "{records:?}"
    );
    assert_eq!(copies as usize, records.len(), "a ledger was copied twice");
    assert!(status.counts.rollover_fallback >= 2, "{:?}", status.counts);
    // Cursors recover after a restart.
    for ml in &s.mls[..2] {
        ml.close().await.unwrap();
    }
    let factory = env.factory();
    for ml in &s.mls {
        let m = factory.open(ml.name(), env.config()).await.unwrap();
        assert_eq!(m.cursors().len(), 2);
        m.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_forward_failpoint_is_resumed() {
    let scenario = fail::FailScenario::setup();
    for point in FAILPOINTS.iter().filter(|p| !p.contains("rollback")) {
        let s = setup().await;
        fail::cfg(*point, "return").unwrap();
        let crashed = orchestrator(&s.env);
        let first = forward(&s.env, &crashed).await;
        fail::remove(*point);
        let err = first.expect_err(point);
        assert!(err.to_string().contains(point), "{point}: {err}");
        assert!(err.is_retryable());
        let resumed = orchestrator(&s.env);
        assert_eq!(
            forward(&s.env, &resumed).await.unwrap(),
            Phase::Done,
            "{point}"
        );
        let copies = crashed.copy_stats().copied + resumed.copy_stats().copied;
        check_forward_invariants(&s, copies).await;
    }
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_rollback_failpoint_is_resumed() {
    let scenario = fail::FailScenario::setup();
    for point in FAILPOINTS.iter().filter(|p| {
        p.contains("rollback") || p.ends_with("switch_record") || p.ends_with("ledger_record")
    }) {
        let s = setup().await;
        // No live acknowledgements here: the metadata must come back byte for byte.
        let orch = s.env.orchestrator();
        let before = metadata(s.store.as_ref()).await;
        let sw = orch.start_switch(NEW, None).await.unwrap();
        s.env.storage.switch_active_cluster(NEW).await.unwrap();
        orch.run(&sw.switch_id).await.unwrap();
        s.env.advance_old_beyond_new();
        fail::cfg(*point, "return").unwrap();
        let err = orch.rollback(&sw.switch_id).await.expect_err(point);
        fail::remove(*point);
        assert!(err.to_string().contains(point), "{point}: {err}");
        let resumed = s.env.orchestrator();
        let mut status = resumed.resume(&sw.switch_id).await.unwrap();
        if status.phase == Phase::Switched {
            // The crash came before the rollback was recorded: the operator
            // asks again.
            assert!(point.ends_with("switch_record"), "{point}");
            status = resumed.rollback(&sw.switch_id).await.unwrap();
        }
        assert_eq!(status.phase, Phase::RolledBack, "{point}");
        assert_eq!(metadata(s.store.as_ref()).await, before, "{point}");
        let report = resumed
            .cleanup(&sw.switch_id, CleanupOptions::execute().with_force(true))
            .await
            .unwrap();
        assert_eq!(report.phase, Phase::Done);
        for (_, _, id, stamp) in ledgers(&before) {
            assert_eq!(stamp.as_deref(), Some(OLD));
            assert!(s.env.clusters.get(OLD).unwrap().contains_ledger(id));
            assert!(
                !s.env.clusters.get(NEW).unwrap().contains_ledger(id),
                "{point} {id}"
            );
        }
        assert_eq!(s.env.registry.active().await.unwrap().as_deref(), Some(OLD));
    }
    scenario.teardown();
}
