//! The precheck an operator runs before a rollback (issue #22, item 1): while
//! a switch can be rolled back, `precheck(<its source>)` is the rollback's
//! own precheck — from the cluster new ledgers go to now back to the source —
//! and gives the exact `bookie-switch idgen … --advance-beyond N` to run; the
//! rollback's refusal names the same N; running that step makes both pass.

mod common;

use std::sync::Arc;

use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_switch_orchestrator::{OrchestratorError, Phase};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_rollback_precheck_gives_the_number_the_rollback_needs() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    env.populate(2, 2).await;
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    let st = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(st.phase, Phase::Switched, "{st:?}");

    // Before the operator's reverse idgen step: not ready, with the number.
    let p = orch.precheck(OLD).await.unwrap();
    assert!(p.rollback, "{p:?}");
    assert!(!p.ready, "{p:?}");
    assert_eq!(
        p.source_cluster_name, NEW,
        "compared against the cluster in use"
    );
    assert_eq!(p.target_cluster_name, OLD);
    let new_next = env.clusters.get(NEW).unwrap().next_ledger_id();
    assert_eq!(p.source_next_ledger_id, Some(new_next));
    let margin = orch.config().idgen_safety_margin;
    let n = p.advance_beyond.expect("a number to advance beyond");
    assert_eq!(n, new_next + margin - 1, "{p:?}");
    let cmd = p.advance_command.clone().unwrap();
    let old_uri = env
        .registry
        .get(OLD)
        .await
        .unwrap()
        .unwrap()
        .metadata_service_uri;
    assert_eq!(
        cmd,
        format!("bookie-switch idgen --metadata-service-uri {old_uri} --advance-beyond {n}")
    );

    // The rollback refuses with the same number and writes nothing.
    let before = metadata(store.as_ref()).await;
    let err = orch.rollback(&s.switch_id).await.unwrap_err();
    match &err {
        OrchestratorError::PrecheckFailed(r) => assert_eq!(r.advance_beyond, Some(n)),
        other => panic!("expected PrecheckFailed, got {other:?}"),
    }
    assert!(err.to_string().contains(&cmd), "{err}");
    assert!(err.to_string().contains("refused the rollback"), "{err}");
    assert_eq!(metadata(store.as_ref()).await, before, "nothing written");

    // One id short of the number is still refused (the margin counts) ...
    let old = env.clusters.get(OLD).unwrap();
    old.advance_ledger_id_to(n).unwrap();
    assert!(!orch.precheck(OLD).await.unwrap().ready);
    // ... and what `--advance-beyond N` does (every id from now on > N)
    // makes both the precheck and the rollback pass.
    old.advance_ledger_id_to(n + 1).unwrap();
    let p = orch.precheck(OLD).await.unwrap();
    assert!(p.ready && p.rollback, "{p:?}");
    assert_eq!(p.advance_beyond, None);
    let rolled = orch.rollback(&s.switch_id).await.unwrap();
    assert_eq!(rolled.phase, Phase::RolledBack);
}

/// Without a switch in progress the precheck compares with the ACTIVE
/// cluster; asking for the ACTIVE cluster itself is a clear error (it once
/// compared the cluster with itself), and a switch's precheck gives the
/// number too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_precheck_of_the_active_cluster_is_refused_and_a_switch_gets_its_number() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env_with(store.clone(), false).await;
    env.populate(1, 1).await;
    let orch = env.orchestrator();
    let before = metadata(store.as_ref()).await;
    let err = orch.precheck(OLD).await.unwrap_err();
    assert!(
        matches!(err, OrchestratorError::AlreadyActive { ref name } if name == OLD),
        "{err:?}"
    );
    assert!(err.to_string().contains(OLD), "{err}");
    assert_eq!(metadata(store.as_ref()).await, before, "nothing written");

    let p = orch.precheck(NEW).await.unwrap();
    assert!(!p.ready && !p.rollback, "{p:?}");
    let n = p.advance_beyond.expect("a number");
    assert!(p
        .advance_command
        .unwrap()
        .ends_with(&format!("--advance-beyond {n}")));
    env.clusters
        .get(NEW)
        .unwrap()
        .advance_ledger_id_to(n + 1)
        .unwrap();
    assert!(orch.precheck(NEW).await.unwrap().ready);
    orch.start_switch(NEW, None).await.unwrap();
}
