//! The fault matrix of the switch path, on the whole stack (nodes with their
//! registry sync, REST API and topic ownership; live traffic on an owner node).
//!
//! For every failpoint of the switch path — each registry write (records,
//! `active` marker, directive, bootstrap), the registry sync's swap, and every
//! orchestrator step (directive, switch record, each copy, each ledger record,
//! each schema CAS, each cursor promote, target-copy deletes, cleanup deletes,
//! status flips, rollback steps) — two scenarios run:
//!
//! - **error**: the step fails once (`1*return`); the operator or the sync
//!   retries;
//! - **crash**: the step keeps failing (`return`) until the coordinator is
//!   "restarted": a new node (new metadata session) takes over with a new
//!   orchestrator and resumes from the persisted state.
//!
//! Both must converge (DONE after cleanup, or ROLLED_BACK) with the invariants
//! holding: exactly one ACTIVE cluster (I12), the bootstrap marker intact
//! (I17), every schema and cursor ledger on the cluster its stamp names (I2,
//! I8, I15), every cursor recovering its last acknowledged position after a
//! reopen, and no acknowledged entry lost.
//!
//! Run: `cargo test -p bkswitch-hardening --features failpoints --test fault_matrix`.
#![cfg(feature = "failpoints")]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::Node;
use bkswitch_bk_client::MemoryClusters;
use bkswitch_cli::{TopicHandle, Traffic};
use bkswitch_hardening::{clusters, start_node, tree, wait_for};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::{CleanupOptions, Orchestrator, Phase};

/// Where the operator's steps stand.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Flow {
    /// register → switch → run → cleanup(force) → DONE.
    Forward,
    /// register → switch → run → rollback → ROLLED_BACK.
    Rollback,
}

struct Stack {
    store: Arc<MemoryStore>,
    clusters: MemoryClusters,
    nodes: Vec<Node>,
    /// The node whose orchestrator the operator drives (replaced on a crash).
    coordinator: Node,
    restarts: usize,
}

impl Stack {
    async fn new() -> Stack {
        let store = Arc::new(MemoryStore::new());
        let clusters = clusters();
        let n1 = start_node("node-1", Arc::new(store.new_session()), &clusters).await;
        let n2 = start_node("node-2", Arc::new(store.new_session()), &clusters).await;
        Stack {
            store,
            clusters,
            coordinator: n1.clone(),
            nodes: vec![n1, n2],
            restarts: 0,
        }
    }

    /// The coordinator's orchestrator itself: these scenarios drive its
    /// steps one by one under failpoints (the test kit's way around the
    /// node's verbs).
    fn orch(&self) -> Orchestrator {
        bkswitch_admin::testkit::unchecked_orchestrator(&self.coordinator)
    }

    /// The coordinator crashed: stop it and start a new node (new session)
    /// that resumes.
    async fn restart_coordinator(&mut self) {
        self.coordinator.stop().await;
        let stopped = self.coordinator.node_id().to_owned();
        self.nodes.retain(|n| n.node_id() != stopped);
        self.restarts += 1;
        let id = format!("coordinator-{}", self.restarts);
        let node = start_node(&id, Arc::new(self.store.new_session()), &self.clusters).await;
        self.coordinator = node.clone();
        self.nodes.push(node);
    }
}

/// Runs `step` until it succeeds; a failure naming `point` marks the point as
/// fired and, in crash mode, removes the fault and restarts the coordinator.
macro_rules! step {
    ($stack:ident, $point:expr, $crash:expr, $fired:ident, |$orch:ident| $body:expr) => {{
        let mut attempts = 0;
        loop {
            attempts += 1;
            let result = {
                let $orch = $stack.orch();
                $body.await
            };
            match result {
                Ok(v) => break v,
                Err(e) => {
                    let msg = e.to_string();
                    assert!(attempts < 20, "{}: step keeps failing: {msg}", $point);
                    if msg.contains($point) {
                        $fired = true;
                        if $crash {
                            fail::remove($point);
                            $stack.restart_coordinator().await;
                        }
                    } else if !msg.contains("failpoint") {
                        // Retryable trouble caused by the fault elsewhere
                        // (e.g. a node not switched yet): retry.
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
    }};
}

async fn scenario(point: &'static str, crash: bool, flow: Flow) -> bool {
    let mut s = Stack::new().await;
    // Topics: two on node-2 (live traffic, promoted over HTTP), one on node-1,
    // one unowned (promoted by the coordinator itself); two schemas.
    let owner = s.nodes[1].clone();
    let mut handles = Vec::new();
    for t in 0..2 {
        let ml = owner
            .open_topic(&format!("t/ns/persistent/live-{t}"))
            .await
            .unwrap();
        let cursor = ml
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        handles.push(TopicHandle { ledger: ml, cursor });
    }
    for (name, node) in [
        ("t/ns/persistent/local", &s.nodes[0]),
        ("t/ns/persistent/idle", &s.nodes[0]),
    ] {
        let ml = node.open_topic(name).await.unwrap();
        let c = ml
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        for i in 0..3 {
            let p = ml.append(format!("m{i}").into_bytes()).await.unwrap();
            c.mark_delete(p).await.unwrap();
        }
    }
    s.nodes[0]
        .unload_topic("t/ns/persistent/idle")
        .await
        .unwrap();
    for id in ["t/ns/schema-a", "t/ns/schema-b"] {
        for v in 0..2 {
            s.nodes[0]
                .schemas()
                .put(
                    id,
                    format!("{id}-{v}").as_bytes(),
                    format!("h{v}").as_bytes(),
                )
                .await
                .unwrap();
        }
    }
    let traffic = Traffic::start(&handles, 100, 64);
    tokio::time::sleep(Duration::from_millis(100)).await;

    fail::cfg(point, if crash { "return" } else { "1*return" }).unwrap();
    let injected_before = bkswitch_registry::failpoints::injected(point);
    let mut fired = false;
    let registry = s.nodes[0].registry().clone();
    step!(s, point, crash, fired, |_o| registry.register(
        "new",
        "memory://new",
        ClusterStatus::Standby
    ));
    let sw = step!(s, point, crash, fired, |o| async move {
        o.start_switch("new", Some("operator")).await
    });
    if point == "sync::swap" {
        // The swap fails on the nodes (once, or until the fault is removed);
        // the sync retries with backoff. In crash mode the coordinator node is
        // also restarted while its swap is failing.
        tokio::time::sleep(Duration::from_millis(300)).await;
        fired = s
            .nodes
            .iter()
            .any(|n| n.sync().metrics().snapshot().directive_failures > 0);
        fail::remove(point);
        if crash {
            s.restart_coordinator().await;
        }
    }
    // Every live node applies the directive.
    let live: Vec<Node> = s.nodes.clone();
    wait_for(
        "every node applied the directive",
        Duration::from_secs(20),
        || live.iter().all(|n| n.sync().applied_epoch() >= sw.epoch),
    )
    .await;
    let id = sw.switch_id.clone();
    let status = step!(s, point, crash, fired, |o| {
        let id = id.clone();
        async move { o.run(&id).await }
    });
    assert_eq!(status.phase, Phase::Switched, "{point}: {status:?}");
    assert_eq!(status.counts.failed, 0, "{point}: {status:?}");
    let expected_active = match flow {
        Flow::Forward => {
            // A pass keeps a source copy whose target copy it cannot verify
            // (a live cursor may roll over and delete its promoted ledger
            // between the re-read and the check) and ends in CLEANUP with
            // `remaining`; the operator calls again, and the next pass reads
            // the new reference.
            let mut report = None;
            for _ in 0..5 {
                let r = step!(s, point, crash, fired, |o| {
                    let id = id.clone();
                    async move {
                        o.cleanup(&id, CleanupOptions::execute().with_force(true))
                            .await
                    }
                });
                let done = r.phase == Phase::Done;
                report = Some(r);
                if done {
                    break;
                }
            }
            let report = report.expect("at least one cleanup pass");
            assert_eq!(report.phase, Phase::Done, "{point}: {report:?}");
            "new"
        }
        Flow::Rollback => {
            let next = s.clusters.get("new").unwrap().next_ledger_id();
            s.clusters
                .get("old")
                .unwrap()
                .advance_ledger_id_to(next + 1_000_000)
                .unwrap();
            let st = step!(s, point, crash, fired, |o| {
                let id = id.clone();
                async move { o.rollback(&id).await }
            });
            assert_eq!(st.phase, Phase::RolledBack, "{point}: {st:?}");
            wait_for(
                "every node applied the rollback",
                Duration::from_secs(20),
                || {
                    s.nodes
                        .iter()
                        .all(|n| n.storage().active_cluster().as_deref() == Some("old"))
                },
            )
            .await;
            "old"
        }
    };
    fail::remove(point);
    // A registry fault the registry absorbed itself (it re-reads after an
    // ambiguous write and retries) fired without the operator seeing it.
    fired |= bkswitch_registry::failpoints::injected(point) > injected_before;
    tokio::time::sleep(Duration::from_millis(100)).await;
    let report = traffic.stop(Duration::from_secs(10)).await;
    assert_eq!(
        report.publish_failures, 0,
        "{point}: {:?}",
        report.first_publish_error
    );
    assert_eq!(report.consumer_gaps, 0, "{point}");
    assert_eq!(report.published, report.consumed, "{point}");

    check_invariants(&s, point, expected_active, &report.acknowledged).await;
    for n in &s.nodes {
        n.stop().await;
    }
    fired
}

async fn check_invariants(
    s: &Stack,
    point: &str,
    expected_active: &str,
    acked: &std::collections::BTreeMap<String, bkswitch_managed_ledger::Position>,
) {
    let registry = s.nodes[0].registry();
    let actives: Vec<String> = registry
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.status == ClusterStatus::Active)
        .map(|r| r.name)
        .collect();
    assert_eq!(actives, [expected_active], "{point}: I12");
    assert_eq!(
        registry
            .bootstrap()
            .await
            .unwrap()
            .unwrap()
            .bootstrap_cluster_name,
        "old",
        "{point}: I17"
    );
    // Every stamp names a cluster holding the ledger.
    let snapshot = tree(s.store.as_ref() as &dyn MetadataStore).await;
    let on = |stamp: Option<&str>, id: i64| {
        let name = stamp.unwrap_or("old");
        s.clusters.get(name).is_some_and(|c| c.contains_ledger(id))
    };
    let mut cursors = BTreeSet::new();
    for (path, (value, _)) in &snapshot {
        if path.starts_with("/managed-ledgers/") {
            if let Ok(info) = decode_managed_ledger_info(value) {
                if !info.ledger_info.is_empty() {
                    for l in &info.ledger_info {
                        assert!(
                            on(l.cluster_stamp().unwrap(), l.ledger_id),
                            "{point}: data ledger {} of {path}",
                            l.ledger_id
                        );
                    }
                    continue;
                }
            }
            if let Ok(info) = decode_managed_cursor_info(value) {
                if info.cursors_ledger_id >= 0 {
                    cursors.insert(path.clone());
                    assert!(
                        on(info.cluster_stamp().unwrap(), info.cursors_ledger_id),
                        "{point}: cursor ledger {} of {path}",
                        info.cursors_ledger_id
                    );
                }
            }
        } else if path.starts_with("/schemas/") {
            let loc = SchemaLocator::decode(value.as_slice()).unwrap();
            for e in &loc.index {
                assert!(
                    on(e.position.cluster_stamp().unwrap(), e.position.ledger_id),
                    "{point}: schema ledger {} of {path}",
                    e.position.ledger_id
                );
            }
        }
    }
    assert!(cursors.len() >= 3, "{point}: {cursors:?}");
    // Reopen every topic on a fresh node once the others have stopped (a
    // live node's topics are never taken over): each cursor is at its last
    // acknowledged position, every entry is readable.
    for n in &s.nodes {
        n.stop().await;
    }
    let verifier = start_node("verifier", Arc::new(s.store.new_session()), &s.clusters).await;
    for (name, pos) in acked {
        let ml = verifier.open_topic(name).await.unwrap();
        assert_eq!(
            ml.cursor("sub").unwrap().mark_delete_position(),
            *pos,
            "{point}: cursor of {name}"
        );
        let (info, _) = ml.metadata();
        let first = info.ledger_info.first().map(|l| l.ledger_id).unwrap();
        // A fresh node starts a non-active cluster's client on first use: the
        // first read may answer "retry in a moment".
        let mut tries = 0;
        let all = loop {
            match ml
                .read_entries(bkswitch_managed_ledger::Position::new(first, 0), 100_000)
                .await
            {
                Ok(all) => break all,
                Err(e) if e.is_retryable() && tries < 100 => {
                    tries += 1;
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(e) => panic!("{point}: reading {name}: {e}"),
            }
        };
        assert!(!all.is_empty(), "{point}: {name} lost its entries");
    }
    for name in ["t/ns/persistent/local", "t/ns/persistent/idle"] {
        let ml = verifier.open_topic(name).await.unwrap();
        assert_eq!(
            ml.cursor("sub").unwrap().mark_delete_position().entry_id,
            2,
            "{point}: {name}"
        );
    }
    for id in ["t/ns/schema-a", "t/ns/schema-b"] {
        let latest = verifier.schemas().get_latest(id).await.unwrap();
        assert_eq!(
            latest.data.as_ref(),
            format!("{id}-1").as_bytes(),
            "{point}"
        );
    }
    verifier.stop().await;
}

/// The forward points: registry writes, the sync swap and every orchestrator
/// step up to the status flips.
fn forward_points() -> Vec<&'static str> {
    let mut v: Vec<&'static str> = bkswitch_registry::failpoints::FAILPOINTS.to_vec();
    v.push("sync::swap");
    v.extend(
        bkswitch_switch_orchestrator::FAILPOINTS
            .iter()
            .filter(|p| !p.contains("rollback")),
    );
    v
}

fn rollback_points() -> Vec<&'static str> {
    bkswitch_switch_orchestrator::FAILPOINTS
        .iter()
        .copied()
        .filter(|p| p.contains("rollback"))
        .chain(["registry::write::directive", "sync::swap"])
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_matrix_converges_for_every_failpoint() {
    let scenario_guard = fail::FailScenario::setup();
    let mut fired = Vec::new();
    let mut silent = Vec::new();
    let mut count = 0;
    for (flow, points) in [
        (Flow::Forward, forward_points()),
        (Flow::Rollback, rollback_points()),
    ] {
        for point in points {
            for crash in [false, true] {
                count += 1;
                if scenario(point, crash, flow).await {
                    fired.push((point, crash, flow));
                } else {
                    silent.push((point, crash, flow));
                }
            }
        }
    }
    scenario_guard.teardown();
    println!(
        "fault matrix: {count} scenarios, {} fired their fault, silent: {silent:?}",
        fired.len()
    );
    // The bootstrap marker is written once at first start, before any fault
    // is configured, so it never fires on this path; every other point fires.
    let allowed_silent = [
        "registry::write::bootstrap",
        "orchestrator::delete_target_copy",
    ];
    for (p, crash, flow) in &silent {
        assert!(
            allowed_silent.contains(p),
            "{p} (crash={crash}, {flow:?}) never fired on the switch path"
        );
    }
}
