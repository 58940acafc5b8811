//! The live copy progress of BUILD: observed mid-copy on a slow source,
//! monotonic, and at the end equal to what the copies hold; a coordinator
//! that takes over starts from the ledger records.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::OpKind;
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MemoryStore, MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_switch_orchestrator::{
    BuildProgress, Orchestrator, OrchestratorConfig, OrchestratorError, Phase, SwitchLedgerState,
};
use common::*;

/// Topics whose two cursors each wrote `acks` mark-deletes (so their cursor
/// ledgers hold that many entries), and two schemas.
async fn populate(env: &Env, topics: usize, acks: usize) {
    let factory = env.factory();
    for i in 0..topics {
        let ml = factory.open(&topic(i), env.config()).await.unwrap();
        for n in 0..acks {
            ml.append(format!("message-{n}")).await.unwrap();
        }
        for c in ["sub-a", "sub-b"] {
            let cursor = ml
                .open_cursor_at(c, InitialPosition::Earliest)
                .await
                .unwrap();
            for e in cursor.read_entries(acks).await.unwrap() {
                cursor.mark_delete(e.position).await.unwrap();
            }
        }
        env.topics.insert(ml);
    }
    for i in 0..2 {
        env.schemas
            .put(&schema_id(i), b"{\"v\":0}", b"h0")
            .await
            .unwrap();
    }
}

/// An orchestrator copying two entries at a time.
fn slow_orchestrator(env: &Env) -> Orchestrator {
    let mut config =
        OrchestratorConfig::default().with_promote_retry(20, Duration::from_millis(20));
    config.copy_window = 2;
    env.0
        .orchestrator_with(Arc::new(env.topics.clone()), config)
}

/// Every `poll` of `orch`'s live progress of `id` until `task` ends.
async fn watch(
    orch: &Orchestrator,
    id: &str,
    task: &tokio::task::JoinHandle<
        Result<bkswitch_switch_orchestrator::SwitchStatus, OrchestratorError>,
    >,
) -> Vec<BuildProgress> {
    let mut seen = Vec::new();
    while !task.is_finished() {
        if let Some(p) = orch.live_copy_progress(id) {
            seen.push(p);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    seen
}

/// `(ledgers, entries, bytes)` of the switch's copies, from the target.
async fn copied_totals(env: &Env, orch: &Orchestrator, id: &str) -> (u64, u64, u64) {
    let new = env.clusters.get(NEW).unwrap();
    let records = orch.ledger_records(id).await.unwrap();
    let (mut entries, mut bytes) = (0, 0);
    for r in &records {
        assert_eq!(r.state, SwitchLedgerState::Promoted, "{r:?}");
        let meta = new.ledger_metadata(r.ledger_id).unwrap();
        entries += (meta.last_entry_id + 1) as u64;
        bytes += meta.length;
        assert_eq!(r.copied_bytes, Some(meta.length), "{r:?}");
        assert_eq!(r.copied_last_entry_id, meta.last_entry_id, "{r:?}");
    }
    (records.len() as u64, entries, bytes)
}

fn assert_monotonic(seen: &[BuildProgress]) {
    for w in seen.windows(2) {
        let (a, b) = (&w[0], &w[1]);
        assert!(b.entries_copied >= a.entries_copied, "{a:?} -> {b:?}");
        assert!(b.bytes_copied >= a.bytes_copied, "{a:?} -> {b:?}");
        assert!(b.ledgers_done >= a.ledgers_done, "{a:?} -> {b:?}");
        assert!(b.entries_total >= a.entries_total, "{a:?} -> {b:?}");
    }
    for p in seen {
        assert!(p.entries_copied <= p.entries_total, "{p:?}");
        assert!(p.bytes_copied <= p.bytes_total, "{p:?}");
        assert!(p.ledgers_done <= p.ledgers_total, "{p:?}");
        for l in &p.copying {
            assert!(l.entries_copied <= l.entries_total, "{l:?}");
            assert_eq!((l.source.as_str(), l.target.as_str()), (OLD, NEW));
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_advances_during_a_slow_copy_on_memory() {
    progress_advances_during_a_slow_copy(Arc::new(MemoryStore::new())).await;
}

/// The same on real ZooKeeper (the records a non-coordinator reads, the
/// records a takeover would start from).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_advances_during_a_slow_copy_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    let store = ZkStore::connect(&url, ZkStoreOptions::default())
        .await
        .unwrap();
    progress_advances_during_a_slow_copy(Arc::new(store)).await;
}

/// Progress advances monotonically during a slow copy, shows ledgers
/// mid-copy, and ends at the copies' totals.
async fn progress_advances_during_a_slow_copy(store: Arc<dyn MetadataStore>) {
    let env = env(store.clone()).await;
    populate(&env, 3, 40).await;
    // Every read of the source takes 15 ms: two entries per read.
    let old = env.clusters.get(OLD).unwrap();
    old.set_latency(OpKind::Read, Duration::from_millis(15));

    let orch = slow_orchestrator(&env);
    let started = orch.start_switch(NEW, Some("node-1")).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    let id = started.switch_id.clone();
    assert_eq!(orch.live_copy_progress(&id), None, "nothing copied yet");
    let runner = orch.clone();
    let rid = id.clone();
    let task = tokio::spawn(async move { runner.run(&rid).await });

    // A node that does not coordinate answers from the records.
    let other = env.orchestrator();
    let mut seen = Vec::new();
    let mut from_records = None;
    while !task.is_finished() {
        if let Some(p) = orch.live_copy_progress(&id) {
            // The live figures count a ledger done before its record is
            // written: the records catch up.
            if from_records.is_none() && p.ledgers_done > 0 && p.ledgers_done < p.ledgers_total {
                from_records = other
                    .copy_progress(&id)
                    .await
                    .unwrap()
                    .filter(|r| r.ledgers_done > 0);
            }
            seen.push(p);
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let status = task.await.unwrap().unwrap();
    assert_eq!(status.phase, Phase::Switched);
    assert_monotonic(&seen);

    // Intermediate states: a ledger half copied, the switch half done.
    assert!(
        seen.iter().any(|p| p
            .copying
            .iter()
            .any(|l| l.entries_copied > 0 && l.entries_copied < l.entries_total)),
        "no ledger seen mid-copy in {} polls",
        seen.len()
    );
    assert!(
        seen.iter()
            .any(|p| p.entries_copied > 0 && p.entries_copied < p.entries_total),
        "no switch-wide intermediate state"
    );
    let recorded = from_records.expect("the records were read mid-copy");
    assert!(
        !recorded.live && recorded.copying.is_empty(),
        "{recorded:?}"
    );
    assert_eq!(recorded.entries_copied, recorded.entries_total);
    assert!(recorded.ledgers_done >= 1);

    // At the end: the totals of the copies on the target.
    let (ledgers, entries, bytes) = copied_totals(&env, &orch, &id).await;
    assert_eq!(ledgers, 3 * 2 + 2, "six cursor ledgers, two schema ledgers");
    assert!(entries >= 6 * 40, "{entries}");
    let end = orch.live_copy_progress(&id).expect("kept after the run");
    assert!(end.live && end.is_complete(), "{end:?}");
    assert_eq!(
        (end.ledgers_total, end.ledgers_done, end.ledgers_failed),
        (ledgers, ledgers, 0)
    );
    assert_eq!((end.entries_copied, end.entries_total), (entries, entries));
    assert_eq!((end.bytes_copied, end.bytes_total), (bytes, bytes));
    let counters = orch.copy_counters();
    assert_eq!((counters.entries, counters.bytes), (entries, bytes));
    // Once SWITCHED, a node that did not copy has nothing to show.
    assert_eq!(other.copy_progress(&id).await.unwrap(), None);
    assert_eq!(orch.copy_progress(&id).await.unwrap().as_ref(), Some(&end));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_taking_over_starts_from_the_records() {
    let store = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    populate(&env, 4, 40).await;
    env.clusters
        .get(OLD)
        .unwrap()
        .set_latency(OpKind::Read, Duration::from_millis(15));
    let first = slow_orchestrator(&env);
    let started = first.start_switch(NEW, Some("node-1")).await.unwrap();
    env.storage.switch_active_cluster(NEW).await.unwrap();
    let id = started.switch_id.clone();

    // Schema ledgers are one entry each and go first; stop the coordinator
    // once some ledgers are recorded and others are still copying.
    let runner = first.clone();
    let rid = id.clone();
    let task = tokio::spawn(async move { runner.run(&rid).await });
    loop {
        let p = first.live_copy_progress(&id);
        if p.as_ref()
            .is_some_and(|p| p.ledgers_done >= 1 && p.entries_copied > p.ledgers_done * 2)
        {
            break;
        }
        assert!(!task.is_finished(), "the copy ended before it was stopped");
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    task.abort();
    let _ = task.await;
    assert_eq!(
        first.live_copy_progress(&id),
        None,
        "a cancelled run leaves no stale progress"
    );
    let recorded = first.ledger_records(&id).await.unwrap();
    let recorded_entries: u64 = recorded
        .iter()
        .map(|r| (r.copied_last_entry_id + 1) as u64)
        .sum();
    assert!(!recorded.is_empty());

    // The next coordinator (another process, as far as progress goes).
    let second = slow_orchestrator(&env);
    let status = loop {
        let runner = second.clone();
        let rid = id.clone();
        let task = tokio::spawn(async move { runner.run(&rid).await });
        let seen = watch(&second, &id, &task).await;
        match task.await.unwrap() {
            // The first one's lease is released in the background.
            Err(OrchestratorError::Locked { .. }) => {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            r => {
                let status = r.unwrap();
                assert_monotonic(&seen);
                let start = seen.first().expect("progress seen");
                assert!(
                    start.ledgers_done >= recorded.len() as u64,
                    "the recorded ledgers count as done from the start: {start:?}"
                );
                assert!(start.entries_copied >= recorded_entries, "{start:?}");
                break status;
            }
        }
    };
    assert_eq!(status.phase, Phase::Switched);
    let (ledgers, entries, bytes) = copied_totals(&env, &second, &id).await;
    let end = second.live_copy_progress(&id).unwrap();
    assert_eq!((end.ledgers_total, end.ledgers_done), (ledgers, ledgers));
    assert_eq!((end.entries_copied, end.entries_total), (entries, entries));
    assert_eq!((end.bytes_copied, end.bytes_total), (bytes, bytes));
    // It copied only what the records did not hold (a copy cut short is
    // copied again from its first entry).
    let written = second.copy_counters().entries;
    assert!(
        written > 0 && written <= entries - recorded_entries,
        "{written} written, {entries} in all, {recorded_entries} recorded"
    );
}
