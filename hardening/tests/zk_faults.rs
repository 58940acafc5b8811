//! ZooKeeper faults while a switch runs, on a private ZooKeeper server: the
//! server restarts, one node's session expires, the elected leader's session
//! expires under an origin-less directive; and on a three-server ensemble,
//! the ZooKeeper leader is killed. Three nodes, each with its own
//! session and REST API, share in-memory bookie clusters; their topics carry
//! live traffic.

mod switch_stack;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_hardening::{wait_for, ADMIN};
use bkswitch_metadata_store::{ZkStore, ZkStoreOptions};
use bkswitch_registry::ClusterStatus;
use bkswitch_zk_harness::{ZkEnsemble, ZkServer};
use switch_stack::{applied, converged, duties, metadata_intact, rolled, stop_traffic};

fn options(session_secs: u64, reconnect_delay_ms: u64) -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(session_secs),
        operation_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(30),
        reconnect_delay: Duration::from_millis(reconnect_delay_ms),
        auth: None,
        tls: None,
    }
}

/// The ZooKeeper a stack runs on.
enum Zk {
    Server(ZkServer),
    Ensemble(ZkEnsemble),
}

impl Zk {
    fn connect_string(&self) -> String {
        match self {
            Zk::Server(s) => s.connect_string(),
            Zk::Ensemble(e) => e.connect_string(),
        }
    }
}

type Stack = switch_stack::Stack<ZkStore, Zk>;

/// Starts a private server and one node per entry of `sessions` (session
/// seconds, reconnect delay ms), in order (the first one leads), each with
/// `topics_per_node` topics when `with_topics[i]`; registers `new` STANDBY.
async fn start(sessions: &[(u64, u64)], topics_per_node: usize, with_topics: &[bool]) -> Stack {
    start_on(
        Zk::Server(ZkServer::start()),
        sessions,
        topics_per_node,
        with_topics,
    )
    .await
}

/// As [`start`], on `zk`.
async fn start_on(
    zk: Zk,
    sessions: &[(u64, u64)],
    topics_per_node: usize,
    with_topics: &[bool],
) -> Stack {
    let url = format!(
        "zk://{}{}",
        zk.connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let mut stores = Vec::new();
    for (session, reconnect) in sessions {
        stores.push(Arc::new(
            ZkStore::connect(&url, options(*session, *reconnect))
                .await
                .expect("ZooKeeper session"),
        ));
    }
    Stack::start(zk, stores, topics_per_node, with_topics).await
}

/// Stops the private server (clients see their connections drop) and starts
/// it again after `down`, off the async threads. Returns when it answers.
async fn bounce(stack: &Stack, down: Duration) {
    let Zk::Server(server) = &stack.meta else {
        panic!("bounce needs a single server");
    };
    tokio::task::block_in_place(|| server.stop());
    tokio::time::sleep(down).await;
    tokio::task::block_in_place(|| server.start_again());
}

/// (a) The ZooKeeper server restarts (down ~1 s) right after `POST /switch`
/// returned: every node still applies the directive, the switch converges,
/// no metadata is lost and no acknowledged entry is lost (publishes may fail
/// and be retried during the outage).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_restart_during_a_switch() {
    let stack = start(&[(20, 100), (20, 100), (20, 100)], 2, &[true; 3]).await;
    let traffic = stack.traffic().await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let admin = AdminClient::new(stack.members[0].node.url(), ADMIN).expect("client");
    let epoch = admin
        .switch("new")
        .await
        .expect("switch")
        .epoch()
        .expect("epoch");
    let applied_before = stack.nodes().all(|n| n.sync().applied_epoch() >= epoch);
    bounce(&stack, Duration::from_secs(1)).await;
    let back = Instant::now();
    let mut took = Vec::new();
    for n in stack.nodes() {
        took.push(applied(n, epoch, back, Duration::from_secs(20)).await);
        assert_eq!(n.storage().active_cluster().as_deref(), Some("new"));
    }
    let st = converged(&stack.members[0].node).await;
    let switched_after = back.elapsed();
    assert_eq!(st.epoch, epoch);
    assert!(
        st.counts.built >= 6 + 6,
        "6 schema + 6 cursor ledgers: {st:?}"
    );
    assert_eq!(duties(&stack), [1, 0, 0]);
    rolled(&stack).await;
    let reports = stop_traffic(traffic).await;
    metadata_intact(&stack).await;
    let failures: u64 = reports.iter().map(|r| r.publish_failures).sum();
    let first = reports.iter().find_map(|r| r.first_publish_error.clone());
    eprintln!(
        "zookeeper restart: directive {} when the server stopped; directive applied {took:?} \
         after the server was back; SWITCHED {switched_after:?} after; publish failures (retried) {failures}, first: {first:?}; \
         published {:?}",
        if applied_before { "applied everywhere" } else { "not yet applied everywhere" },
        reports.iter().map(|r| r.published).collect::<Vec<_>>()
    );
    stack.shutdown().await;
}

/// (b) node-3's session expires while a switch that node-1 asked for runs
/// (node-3 reconnects only after its 2 s session is gone): node-3 opens a new
/// session, reads the registry again and applies the directive; node-1 is
/// the only coordinator of the epoch.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn session_expiry_of_a_node_during_a_switch() {
    let stack = start(&[(20, 100), (20, 100), (2, 6_000)], 2, &[true, true, false]).await;
    let traffic = stack.traffic().await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    bounce(&stack, Duration::from_millis(200)).await;
    let back = Instant::now();
    // node-3 is away for 6 s: the directive is written while it cannot see it.
    let admin = AdminClient::new(stack.members[0].node.url(), ADMIN).expect("client");
    let epoch = loop {
        match admin.switch("new").await {
            Ok(s) => break s.epoch().expect("epoch"),
            Err(e) if e.is_retryable() && back.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("switch: {e}"),
        }
    };
    let mut took = Vec::new();
    for n in stack.nodes() {
        took.push(applied(n, epoch, back, Duration::from_secs(25)).await);
    }
    let third = &stack.members[2];
    assert!(
        third.store.session_generation() >= 2,
        "node-3's session did not expire"
    );
    // The watcher reports what changed, then that it read the registry again.
    wait_for("node-3's registry re-read", Duration::from_secs(5), || {
        third.node.sync().metrics().snapshot().registry_resyncs >= 1
    })
    .await;
    assert_eq!(
        third.node.storage().active_cluster().as_deref(),
        Some("new")
    );
    let st = converged(&stack.members[0].node).await;
    assert_eq!(st.epoch, epoch);
    // Exactly one coordinator for the epoch: the origin.
    assert_eq!(duties(&stack), [1, 0, 0]);
    rolled(&stack).await;
    let reports = stop_traffic(traffic).await;
    metadata_intact(&stack).await;
    let failures: u64 = reports.iter().map(|r| r.publish_failures).sum();
    eprintln!(
        "session expiry: directive applied {took:?} after the server was back \
         (node-3 after its new session); publish failures (retried) {failures}"
    );
    stack.shutdown().await;
}

/// (c, fault after the duty) An origin-less switch (directive and record
/// without origin) is coordinated by the elected leader, node-1, whose
/// session then expires while BUILD runs: node-2 becomes leader and takes the
/// duty over; node-1's lease on the switch went with its session, so node-1
/// stops at its next write and the two never work on the switch at once. No
/// ledger is copied twice over all nodes, and the switch converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn leader_session_expires_while_it_coordinates_an_origin_less_switch() {
    let stack = start(&[(2, 6_000), (20, 100), (20, 100)], 3, &[false, true, true]).await;
    assert!(
        stack.members[0].node.sync().is_leader(),
        "node-1 joined first"
    );
    let traffic = stack.traffic().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Slow copies: BUILD is still running when the leader's session goes.
    stack
        .clusters
        .get("new")
        .expect("new")
        .set_latency_all(Duration::from_millis(30));
    let orch = bkswitch_admin::testkit::unchecked_orchestrator(&stack.members[1].node);
    let started = orch.start_switch("new", None).await.expect("switch");
    let leader = &stack.members[0].node;
    wait_for("the leader's duty", Duration::from_secs(10), || {
        leader.sync().metrics().snapshot().coordinator_duties == 1
    })
    .await;
    let phase_at_fault = orch
        .current_status()
        .await
        .expect("status")
        .map(|s| s.phase);
    bounce(&stack, Duration::from_millis(200)).await;
    let back = Instant::now();
    wait_for("a new leader", Duration::from_secs(15), || {
        stack.members[1].node.sync().leader().as_deref() == Some("node-2")
    })
    .await;
    let new_leader_after = back.elapsed();
    let st = converged(&stack.members[1].node).await;
    let switched_after = back.elapsed();
    assert_eq!(st.epoch, started.epoch);
    wait_for("node-1's new session", Duration::from_secs(15), || {
        stack.members[0].store.session_generation() >= 2
    })
    .await;
    assert_eq!(duties(&stack), [1, 1, 0], "node-2 took the duty over");
    let copied: u64 = stack
        .nodes()
        .map(|n| n.orchestrator().copy_stats().copied)
        .sum();
    let again: u64 = stack
        .nodes()
        .map(|n| n.orchestrator().copy_stats().already_present)
        .sum();
    assert!(
        copied <= st.counts.built,
        "a ledger was copied twice: {copied} copies for {} built",
        st.counts.built
    );
    assert_eq!(
        copied + again,
        st.counts.built,
        "every built ledger was copied once, or found already copied by the first leader"
    );
    stack
        .clusters
        .get("new")
        .expect("new")
        .set_latency_all(Duration::from_millis(2));
    rolled(&stack).await;
    let _ = stop_traffic(traffic).await;
    metadata_intact(&stack).await;
    eprintln!(
        "leader expiry while coordinating: phase at the fault {phase_at_fault:?}; node-2 led \
         {new_leader_after:?} after the server was back; SWITCHED {switched_after:?} after; \
         copied {copied}"
    );
    stack.shutdown().await;
}

/// (c, fault before the duty) An origin-less switch is started while the
/// elected leader, node-1, is away and its session expiring: the nodes apply
/// the directive while the dead session still holds the leadership, so no
/// node takes the duty then; the node elected afterwards must take it over
/// (`RegistrySync` hands an origin-less directive's duty to a node that
/// becomes leader after applying it) and the switch converges.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn origin_less_switch_while_the_leader_session_expires() {
    let stack = start(&[(2, 6_000), (20, 100), (20, 100)], 3, &[false, true, true]).await;
    assert!(
        stack.members[0].node.sync().is_leader(),
        "node-1 joined first"
    );
    let traffic = stack.traffic().await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    bounce(&stack, Duration::from_millis(200)).await;
    let back = Instant::now();
    let orch = bkswitch_admin::testkit::unchecked_orchestrator(&stack.members[1].node);
    let started = loop {
        match orch.start_switch("new", None).await {
            Ok(s) => break s,
            Err(e) if e.is_retryable() && back.elapsed() < Duration::from_secs(10) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("switch: {e}"),
        }
    };
    let d = stack.members[1]
        .node
        .registry()
        .switch_directive()
        .await
        .expect("directive")
        .expect("a directive");
    assert_eq!(d.origin, None);
    let mut took = Vec::new();
    for n in stack.nodes() {
        took.push(applied(n, started.epoch, back, Duration::from_secs(25)).await);
    }
    let st = converged(&stack.members[1].node).await;
    let all_duties = duties(&stack);
    assert_eq!(all_duties.iter().sum::<u64>(), 1, "{all_duties:?}");
    let copied: u64 = stack
        .nodes()
        .map(|n| n.orchestrator().copy_stats().copied)
        .sum();
    let again: u64 = stack
        .nodes()
        .map(|n| n.orchestrator().copy_stats().already_present)
        .sum();
    assert_eq!(copied, st.counts.built, "every ledger copied exactly once");
    assert_eq!(again, 0, "a second coordinator re-copied ledgers");
    let records = orch
        .ledger_records(&st.switch_id)
        .await
        .expect("ledger records");
    let mut ids: Vec<i64> = records.iter().map(|r| r.ledger_id).collect();
    ids.sort_unstable();
    ids.dedup();
    assert_eq!(ids.len(), records.len(), "one record per ledger");
    rolled(&stack).await;
    let _ = stop_traffic(traffic).await;
    metadata_intact(&stack).await;
    eprintln!(
        "leader expiry: directive applied {took:?}; duties {all_duties:?}; copied {copied}; \
         leader now {:?}",
        stack.members[1].node.sync().leader()
    );
    stack.shutdown().await;
}

/// The ensemble scenario: three ZooKeeper servers, three nodes with
/// live traffic; the ZooKeeper leader is killed (SIGKILL) right after `POST
/// /switch` returned. The remaining two elect a new leader, the nodes'
/// sessions move to them, and the switch converges: every node applies the
/// directive, one ACTIVE cluster, nothing failed, 0 publish failures, no
/// acknowledged entry lost and no metadata lost. The killed server then
/// rejoins.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn zookeeper_leader_killed_in_an_ensemble_during_a_switch() {
    let ensemble = tokio::task::block_in_place(|| ZkEnsemble::start(3));
    let stack = start_on(
        Zk::Ensemble(ensemble),
        &[(20, 100), (20, 100), (20, 100)],
        2,
        &[true; 3],
    )
    .await;
    let traffic = stack.traffic().await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let admin = AdminClient::new(stack.members[0].node.url(), ADMIN).expect("client");
    let epoch = admin
        .switch("new")
        .await
        .expect("switch")
        .epoch()
        .expect("epoch");
    let Zk::Ensemble(ensemble) = &stack.meta else {
        unreachable!()
    };
    let killed = tokio::task::block_in_place(|| ensemble.kill_leader());
    let at = Instant::now();
    tokio::task::block_in_place(|| ensemble.wait_for_quorum(Duration::from_secs(30)))
        .expect("the two servers left elect a leader");
    let new_leader_after = at.elapsed();
    for n in stack.nodes() {
        applied(n, epoch, at, Duration::from_secs(30)).await;
        assert_eq!(n.storage().active_cluster().as_deref(), Some("new"));
    }
    let st = converged(&stack.members[0].node).await;
    assert_eq!(st.epoch, epoch);
    assert!(st.counts.built >= 12, "6 schema + 6 cursor ledgers: {st:?}");
    rolled(&stack).await;
    let reports = stop_traffic(traffic).await;
    metadata_intact(&stack).await;
    let failures: u64 = reports.iter().map(|r| r.publish_failures).sum();
    assert_eq!(
        failures,
        0,
        "first: {:?}",
        reports.iter().find_map(|r| r.first_publish_error.clone())
    );
    assert!(reports.iter().all(|r| r.published > 0), "{reports:?}");
    // One ACTIVE cluster, the other registered and not ACTIVE.
    let registry = stack.members[0].node.registry();
    let active: Vec<_> = registry
        .list()
        .await
        .expect("list")
        .into_iter()
        .filter(|c| c.status == ClusterStatus::Active)
        .map(|c| c.name)
        .collect();
    assert_eq!(active.len(), 1, "{active:?}");
    // The killed server rejoins the quorum.
    tokio::task::block_in_place(|| ensemble.start_again(killed));
    eprintln!(
        "ensemble: server {} (the leader) killed after POST /switch; a new leader in \
         {new_leader_after:?}; published {:?}",
        killed + 1,
        reports.iter().map(|r| r.published).collect::<Vec<_>>()
    );
    stack.shutdown().await;
}
