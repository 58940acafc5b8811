//! Coordinator loss paths: two coordinators on the same ledgers, a target
//! ledger the switch did not create, a crash between creating a copy and
//! recording it, a canary whose coordinator died, deletions while the
//! metadata session is lost, the idgen safety margin, and one instance's
//! lease shared between two of its operations.
//!
//! Run with `cargo test -p bkswitch-switch-orchestrator --features failpoints --test loss_paths`.
#![cfg(feature = "failpoints")]

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc, Mutex};
use std::time::Duration;

use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyOptions};
use bkswitch_metadata_store::{MemoryStore, MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_switch_orchestrator::{
    CleanupOptions, Orchestrator, OrchestratorConfig, OrchestratorError, Phase, SwitchLedgerState,
};
use common::*;

const CANARY: &str = "tenant/ns/";

async fn schemas_only(schemas: usize) -> (Env, Arc<MemoryStore>) {
    let mem = Arc::new(MemoryStore::new());
    let store: Arc<dyn MetadataStore> = mem.clone();
    let env = env(store).await;
    env.populate(0, schemas).await;
    (env, mem)
}

/// A failpoint that stops the first coordinator reaching it until the test
/// lets it go: `reached` answers once it is there, `go` releases it.
struct Pause {
    reached: mpsc::Receiver<()>,
    go: mpsc::Sender<()>,
}

fn pause_at(point: &'static str) -> Pause {
    let (reached_tx, reached) = mpsc::channel();
    let (go, go_rx) = mpsc::channel::<()>();
    let reached_tx = Mutex::new(reached_tx);
    let go_rx = Mutex::new(go_rx);
    let once = AtomicBool::new(false);
    fail::cfg_callback(point, move || {
        if !once.swap(true, Ordering::SeqCst) {
            let _ = reached_tx.lock().unwrap().send(());
            let _ = go_rx.lock().unwrap().recv();
        }
    })
    .unwrap();
    Pause { reached, go }
}

impl Pause {
    async fn wait(self) -> mpsc::Sender<()> {
        let Pause { reached, go } = self;
        tokio::task::spawn_blocking(move || reached.recv_timeout(Duration::from_secs(20)))
            .await
            .unwrap()
            .expect("the coordinator never reached the failpoint");
        go
    }
}

/// Every schema or cursor ledger the metadata references exists on the
/// cluster its stamp names (unstamped: `old`, the bootstrap cluster), and
/// every schema version still reads.
async fn assert_nothing_lost(env: &Env, schemas: usize) {
    let meta = metadata(env.store.as_ref()).await;
    for (kind, path, id, stamp) in ledgers(&meta) {
        let cluster = stamp.as_deref().unwrap_or(OLD);
        assert!(
            env.clusters.get(cluster).unwrap().contains_ledger(id),
            "{kind:?} ledger {id} of `{path}` is referenced on `{cluster}` but is gone from it"
        );
    }
    for i in 0..schemas {
        for v in 0..3 {
            let got = env
                .schemas
                .get(
                    &schema_id(i),
                    bkswitch_managed_ledger::schema::SchemaVersion(v),
                )
                .await;
            assert!(got.is_ok(), "schema {} version {v}: {got:?}", schema_id(i));
        }
    }
}

/// A cluster-wide switch run to SWITCHED.
async fn switched(env: &Env, orch: &Orchestrator) -> String {
    let s = orch.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    assert_eq!(orch.run(&s.switch_id).await.unwrap().phase, Phase::Switched);
    s.switch_id
}

// ------------------------------------------------------------------ 5.1

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_canary_is_refused_while_a_cluster_wide_switch_is_unfinished() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(2).await;
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    let canary = orch.for_prefix(CANARY);
    let before = metadata(env.store.as_ref()).await;
    let err = canary.start_switch(NEW, None).await.expect_err("BUILD");
    assert!(
        matches!(err, OrchestratorError::SwitchInProgress { .. }),
        "{err}"
    );
    assert_eq!(
        metadata(env.store.as_ref()).await,
        before,
        "nothing written"
    );
    // In CLEANUP (one deletion of several done) as well.
    env.storage.switch_active_cluster(NEW).await.unwrap();
    orch.run(&s.switch_id).await.unwrap();
    let r = orch
        .cleanup(
            &s.switch_id,
            CleanupOptions::execute()
                .with_force(true)
                .with_max_deletions(1),
        )
        .await
        .unwrap();
    assert_eq!(r.phase, Phase::Cleanup);
    let before = metadata(env.store.as_ref()).await;
    let err = canary.start_switch(NEW, None).await.expect_err("CLEANUP");
    assert!(
        err.to_string().contains(&s.switch_id) && err.to_string().contains("CLEANUP"),
        "{err}"
    );
    assert_eq!(
        metadata(env.store.as_ref()).await,
        before,
        "nothing written"
    );
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overlapping_canary_is_refused_while_another_runs() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(2).await;
    let orch = env.orchestrator();
    orch.for_prefix(CANARY)
        .start_switch(NEW, None)
        .await
        .unwrap();
    let before = metadata(env.store.as_ref()).await;
    let nested = orch.for_prefix("tenant/ns/persistent/topic-");
    let err = nested.start_switch(NEW, None).await.expect_err("nested");
    assert!(
        matches!(err, OrchestratorError::SwitchInProgress { .. }),
        "{err}"
    );
    assert!(err.to_string().contains(CANARY), "{err}");
    assert_eq!(
        metadata(env.store.as_ref()).await,
        before,
        "nothing written"
    );
    scenario.teardown();
}

/// The loss the issue describes: a rolled-back switch's cleanup has listed
/// the copies it deletes; a canary adopts those copies (identical ledgers
/// already on `new`) and promotes them; the cleanup then deletes them.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rolled_back_switchs_cleanup_never_deletes_what_a_canary_adopted() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(2).await;
    let orch = env.orchestrator();
    let id = switched(&env, &orch).await;
    env.advance_old_beyond_new();
    env.storage.switch_active_cluster(OLD).await.unwrap();
    assert_eq!(orch.rollback(&id).await.unwrap().phase, Phase::RolledBack);
    // `new`'s ids beyond `old`'s again, for the canary's precheck.
    env.advance_beyond(NEW, OLD, 1_000_000).unwrap();

    let pause = pause_at("orchestrator::cleanup_delete");
    let cleaner = orch.clone();
    let cid = id.clone();
    let cleanup = tokio::spawn(async move {
        cleaner
            .cleanup(&cid, CleanupOptions::execute().with_force(true))
            .await
    });
    let go = pause.wait().await;
    // Meanwhile, on another node, a canary of the whole namespace.
    let canary = env.orchestrator().for_prefix(CANARY);
    let started = canary.start_switch(NEW, None).await;
    if let Ok(st) = &started {
        let _ = canary.run(&st.switch_id).await;
    }
    go.send(()).unwrap();
    fail::remove("orchestrator::cleanup_delete");
    let report = cleanup.await.unwrap().unwrap();
    assert_eq!(report.phase, Phase::Done, "{report:?}");
    // The canary runs once the cleanup is over.
    let st = match started {
        Ok(st) => st,
        Err(e) => {
            assert!(
                e.is_retryable() || matches!(e, OrchestratorError::SwitchInProgress { .. }),
                "{e}"
            );
            canary.start_switch(NEW, None).await.unwrap()
        }
    };
    assert_eq!(
        canary.run(&st.switch_id).await.unwrap().phase,
        Phase::Switched
    );
    assert_nothing_lost(&env, 2).await;
    // The canary's own cleanup deletes the sources only: still nothing lost.
    let r = canary
        .cleanup(&st.switch_id, CleanupOptions::execute().with_force(true))
        .await
        .unwrap();
    assert_eq!(r.phase, Phase::Done, "{r:?}");
    assert_nothing_lost(&env, 2).await;
    scenario.teardown();
}

/// The same loss without any concurrency: the canary adopted the copies and
/// stopped before PROMOTE (its node died); the rolled-back switch's cleanup
/// runs; then the canary is resumed and promotes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_switchs_cleanup_keeps_the_copies_a_canary_built() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(2).await;
    let orch = env.orchestrator();
    let id = switched(&env, &orch).await;
    env.advance_old_beyond_new();
    env.storage.switch_active_cluster(OLD).await.unwrap();
    assert_eq!(orch.rollback(&id).await.unwrap().phase, Phase::RolledBack);
    env.advance_beyond(NEW, OLD, 1_000_000).unwrap();
    let canary = env.orchestrator().for_prefix(CANARY);
    let st = canary.start_switch(NEW, None).await.unwrap();
    fail::cfg("orchestrator::schema_cas", "return").unwrap();
    canary
        .run(&st.switch_id)
        .await
        .expect_err("dies before PROMOTE");
    fail::remove("orchestrator::schema_cas");
    let built = canary.ledger_records(&st.switch_id).await.unwrap();
    assert!(
        !built.is_empty()
            && built
                .iter()
                .all(|r| r.state == SwitchLedgerState::Built && r.already_present),
        "{built:?}"
    );
    let r = orch
        .cleanup(&id, CleanupOptions::execute().with_force(true))
        .await
        .unwrap();
    for rec in &built {
        assert!(
            env.clusters
                .get(NEW)
                .unwrap()
                .contains_ledger(rec.ledger_id),
            "the cleanup of switch {id} deleted ledger {} that the canary built on: {r:?}",
            rec.ledger_id
        );
    }
    assert_eq!(
        env.orchestrator()
            .for_prefix(CANARY)
            .resume(&st.switch_id)
            .await
            .unwrap()
            .phase,
        Phase::Switched
    );
    assert_nothing_lost(&env, 2).await;
    scenario.teardown();
}

/// Cleanup never deletes a source copy whose target copy is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cleanup_keeps_a_source_whose_target_copy_is_missing() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(1).await;
    let orch = env.orchestrator();
    let id = switched(&env, &orch).await;
    let victim = orch.ledger_records(&id).await.unwrap()[0].ledger_id;
    env.client(NEW).delete_ledger(victim).await.unwrap();
    let r = orch
        .cleanup(&id, CleanupOptions::execute().with_force(true))
        .await
        .unwrap();
    assert!(
        env.clusters.get(OLD).unwrap().contains_ledger(victim),
        "the source copy of {victim} was deleted although `new` lost its copy: {r:?}"
    );
    assert!(
        r.errors
            .iter()
            .any(|(c, l, why)| c == OLD && *l == victim && why.contains(NEW)),
        "{r:?}"
    );
    assert_ne!(r.phase, Phase::Done);
    scenario.teardown();
}

// ------------------------------------------------------------------ 5.8

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_ledger_this_switch_did_not_create_is_never_deleted() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(1).await;
    // Identical ledgers already on `new` under the same ids (left there by
    // someone else): the switch adopts them (AlreadyPresent).
    let meta = metadata(env.store.as_ref()).await;
    let ids: Vec<i64> = ledgers(&meta).into_iter().map(|l| l.2).collect();
    let (old, new) = (env.client(OLD), env.client(NEW));
    let cfg = OrchestratorConfig::default();
    for id in &ids {
        copy_ledger_preserving_ids(
            *id,
            old.as_ref(),
            new.as_ref(),
            &CopyOptions::new(cfg.schema_digest_type, cfg.schema_password.clone()),
        )
        .await
        .unwrap();
    }
    let orch = env.orchestrator();
    let id = switched(&env, &orch).await;
    assert!(orch
        .ledger_records(&id)
        .await
        .unwrap()
        .iter()
        .all(|r| r.already_present));
    env.advance_old_beyond_new();
    env.storage.switch_active_cluster(OLD).await.unwrap();
    orch.rollback(&id).await.unwrap();
    let r = orch
        .cleanup(&id, CleanupOptions::execute().with_force(true))
        .await
        .unwrap();
    for l in &ids {
        assert!(
            env.clusters.get(NEW).unwrap().contains_ledger(*l),
            "ledger {l} on `new`, not created by switch {id}, was deleted: {r:?}"
        );
    }
    assert_eq!(r.phase, Phase::Done, "{r:?}");
    assert_nothing_lost(&env, 1).await;
    scenario.teardown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_between_creating_a_copy_and_recording_it_is_recovered() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(2).await;
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    fail::cfg("orchestrator::created_record", "return").unwrap();
    let err = orch.run(&s.switch_id).await.expect_err("crash");
    fail::remove("orchestrator::created_record");
    assert!(err.to_string().contains("created_record"), "{err}");
    // A new coordinator resumes.
    let resumed = env.orchestrator();
    let st = resumed.resume(&s.switch_id).await.unwrap();
    let records = resumed.ledger_records(&s.switch_id).await.unwrap();
    assert!(
        records
            .iter()
            .all(|r| r.state == SwitchLedgerState::Promoted),
        "{records:?}"
    );
    assert_eq!(st.phase, Phase::Switched);
    let r = resumed
        .cleanup(&s.switch_id, CleanupOptions::execute().with_force(true))
        .await
        .unwrap();
    assert_eq!(r.phase, Phase::Done, "{r:?}");
    assert_nothing_lost(&env, 2).await;
    scenario.teardown();
}

// ------------------------------------------------------------------ 5.4

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_takes_over_a_canary_whose_coordinator_died() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(2).await;
    let dead = env.orchestrator().for_prefix(CANARY);
    let st = dead.start_switch(NEW, None).await.unwrap();
    fail::cfg("orchestrator::copy", "return").unwrap();
    dead.run(&st.switch_id).await.expect_err("crash");
    fail::remove("orchestrator::copy");
    drop(dead);
    // The elected leader (a cluster-wide coordinator, as after a restart).
    let leader = env.orchestrator();
    leader.resume_all().await.unwrap();
    let canary = leader.for_prefix(CANARY);
    assert_eq!(
        canary.status(&st.switch_id).await.unwrap().phase,
        Phase::Switched
    );
    assert_nothing_lost(&env, 2).await;
    scenario.teardown();
}

// ------------------------------------------------------------------ 6

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_deletion_once_the_metadata_session_was_lost() {
    let scenario = fail::FailScenario::setup();
    let (env, mem) = schemas_only(2).await;
    let orch = env.orchestrator();
    let id = switched(&env, &orch).await;
    let targets = orch.cleanup_targets(&id).await.unwrap();
    assert!(!targets.is_empty());
    let once = AtomicBool::new(false);
    let m = mem.clone();
    fail::cfg_callback("orchestrator::cleanup_delete", move || {
        if !once.swap(true, Ordering::SeqCst) {
            m.expire_session().unwrap();
        }
    })
    .unwrap();
    let err = orch
        .cleanup(&id, CleanupOptions::execute().with_force(true))
        .await
        .expect_err("the session was lost");
    fail::remove("orchestrator::cleanup_delete");
    assert!(err.is_retryable(), "{err}");
    for t in &targets {
        assert!(
            env.clusters
                .get(&t.cluster)
                .unwrap()
                .contains_ledger(t.ledger_id),
            "ledger {} deleted from `{}` after the session was lost",
            t.ledger_id,
            t.cluster
        );
    }
    // The session is back: the next pass deletes.
    let r = orch
        .cleanup(&id, CleanupOptions::execute().with_force(true))
        .await
        .unwrap();
    assert_eq!(r.phase, Phase::Done, "{r:?}");
    assert_nothing_lost(&env, 2).await;
    scenario.teardown();
}

/// The same on a real ZooKeeper: the server stops right before a deletion
/// and comes back 3 s later; nothing is deleted while it is gone, and the
/// cleanup finishes once it is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_deletion_while_zookeeper_is_gone() {
    let scenario = fail::FailScenario::setup();
    bkswitch_zk_harness::require_zk();
    let server = Arc::new(bkswitch_zk_harness::ZkServer::start());
    let url = format!(
        "zk://{}{}",
        server.connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let options = ZkStoreOptions {
        session_timeout: Duration::from_secs(4),
        operation_timeout: Duration::from_secs(2),
        ..ZkStoreOptions::default()
    };
    let store: Arc<dyn MetadataStore> = Arc::new(ZkStore::connect(&url, options).await.unwrap());
    let env = env(store).await;
    env.populate(0, 2).await;
    let orch = env.orchestrator();
    let id = switched(&env, &orch).await;
    let targets = orch.cleanup_targets(&id).await.unwrap();
    assert!(!targets.is_empty());
    // Whether every listed copy was still there while the server was down.
    let (seen_tx, seen) = mpsc::channel::<Vec<i64>>();
    let seen_tx = Mutex::new(seen_tx);
    let once = AtomicBool::new(false);
    let (srv, clusters, listed) = (server.clone(), env.clusters.clone(), targets.clone());
    fail::cfg_callback("orchestrator::cleanup_delete", move || {
        if once.swap(true, Ordering::SeqCst) {
            return;
        }
        srv.stop();
        let (srv, clusters, listed) = (srv.clone(), clusters.clone(), listed.clone());
        let tx = seen_tx.lock().unwrap().clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(3));
            let gone: Vec<i64> = listed
                .iter()
                .filter(|t| {
                    !clusters
                        .get(&t.cluster)
                        .unwrap()
                        .contains_ledger(t.ledger_id)
                })
                .map(|t| t.ledger_id)
                .collect();
            let _ = tx.send(gone);
            srv.start_again();
        });
    })
    .unwrap();
    let first = orch
        .cleanup(&id, CleanupOptions::execute().with_force(true))
        .await;
    fail::remove("orchestrator::cleanup_delete");
    let gone = tokio::task::spawn_blocking(move || seen.recv_timeout(Duration::from_secs(30)))
        .await
        .unwrap()
        .unwrap();
    assert!(
        gone.is_empty(),
        "ledgers {gone:?} deleted while ZooKeeper was gone (first pass: {first:?})"
    );
    // Back: later passes finish the cleanup.
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        match orch
            .cleanup(&id, CleanupOptions::execute().with_force(true))
            .await
        {
            Ok(r) if r.phase == Phase::Done => break,
            Ok(r) => panic!("{r:?}"),
            Err(e) if e.is_retryable() && std::time::Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_nothing_lost(&env, 2).await;
    scenario.teardown();
}

// ------------------------------------------------------------------ 5.9

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idgen_precheck_requires_the_safety_margin() {
    let scenario = fail::FailScenario::setup();
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env_with(store, false).await;
    env.populate(0, 1).await;
    // `new` one id beyond `old`: enough for today's check, not for the
    // ledgers nodes still create on `old` until they applied the directive.
    env.advance_beyond(NEW, OLD, 1).unwrap();
    let orch = env.orchestrator();
    let p = orch.precheck(NEW).await.unwrap();
    assert!(!p.ready, "{p:?}");
    let before = metadata(env.store.as_ref()).await;
    let err = orch.start_switch(NEW, None).await.expect_err("margin");
    assert!(err.to_string().contains("margin"), "{err}");
    assert_eq!(
        metadata(env.store.as_ref()).await,
        before,
        "nothing written"
    );
    // With the margin, it starts.
    let margin = orch.config().idgen_safety_margin;
    env.advance_beyond(NEW, OLD, margin + 1).unwrap();
    assert!(orch.precheck(NEW).await.unwrap().ready);
    orch.start_switch(NEW, None).await.unwrap();
    scenario.teardown();
}

// ------------------------------------------------------------------ 5.13

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_instance_does_not_share_its_lease_between_two_operations() {
    let scenario = fail::FailScenario::setup();
    let (env, _) = schemas_only(2).await;
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    let pause = pause_at("orchestrator::schema_cas");
    let runner = orch.clone();
    let sid = s.switch_id.clone();
    let run = tokio::spawn(async move { runner.run(&sid).await });
    let go = pause.wait().await;
    // A REST cleanup on the same instance while its own run holds the lease.
    let cleaner = orch.clone();
    let sid = s.switch_id.clone();
    let cleanup = tokio::spawn(async move {
        cleaner
            .cleanup(&sid, CleanupOptions::execute().with_force(true))
            .await
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    go.send(()).unwrap();
    fail::remove("orchestrator::schema_cas");
    assert_eq!(run.await.unwrap().unwrap().phase, Phase::Switched);
    let r = cleanup.await.unwrap();
    assert_eq!(r.expect("the cleanup waits for the run").phase, Phase::Done);
    assert_nothing_lost(&env, 2).await;
    scenario.teardown();
}
