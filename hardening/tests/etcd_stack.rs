//! The whole stack on etcd: three nodes, each with its own lease (session) on a
//! real three-member etcd cluster and its own REST API, share in-memory bookie
//! clusters; their topics carry live traffic. The registry, the election of
//! the coordinator, topic ownership and the switch coordinator all live in
//! etcd (the bookie clusters keep their own metadata service).
//!
//! - the etcd leader is killed (SIGKILL) during a switch, then restarted;
//! - the elected node is cut off from etcd until its lease expires while it
//!   coordinates an origin-less switch (the twin of `zk_faults`' session
//!   expiry of the leader).
//!
//! Needs the `etcd` feature (`cargo test -p bkswitch-hardening --features etcd
//! --test etcd_stack`).

mod switch_stack;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_etcd_harness::{unique_prefix, EtcdCluster};
use bkswitch_hardening::{wait_for, ADMIN};
use bkswitch_metadata_store::{EtcdStore, EtcdStoreOptions, MetadataStore};
use bkswitch_registry::Registry;
use switch_stack::{
    active_clusters, applied, converged, duties, election_settled, metadata_intact,
    ownership_and_registrations, rolled, stop_traffic,
};

/// The etcd cluster of a stack and the key prefix its nodes share.
struct Etcd {
    cluster: EtcdCluster,
    prefix: String,
}

type Stack = switch_stack::Stack<EtcdStore, Etcd>;

fn options(session_secs: u64) -> EtcdStoreOptions {
    EtcdStoreOptions {
        session_timeout: Duration::from_secs(session_secs),
        operation_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(30),
        ..EtcdStoreOptions::default()
    }
}

/// Starts a three-member etcd cluster and one node per `(session seconds,
/// members it connects to)`, in order (node-1 leads), all under one fresh key
/// prefix, each with `topics_per_node` topics when `with_topics[i]`.
async fn start(nodes: &[(u64, &[usize])], topics_per_node: usize, with_topics: &[bool]) -> Stack {
    let cluster = tokio::task::block_in_place(|| EtcdCluster::start(3));
    let prefix = unique_prefix();
    let mut stores = Vec::new();
    for (session, members) in nodes {
        let hosts: Vec<String> = members.iter().map(|&i| cluster.endpoint(i)).collect();
        let url = format!("etcd://{}{prefix}", hosts.join(","));
        stores.push(Arc::new(
            EtcdStore::connect(&url, options(*session))
                .await
                .expect("etcd session"),
        ));
    }
    Stack::start(
        Etcd { cluster, prefix },
        stores,
        topics_per_node,
        with_topics,
    )
    .await
}

const ALL: &[usize] = &[0, 1, 2];

/// The scenario on etcd: three members, three nodes with live
/// traffic; the etcd leader is killed (SIGKILL) right after `POST /switch`
/// returned. The two members left elect a new leader, the nodes' requests,
/// leases and watches move to them, and the switch converges: every node
/// applies the directive, one ACTIVE cluster, nothing failed, 0 publish
/// failures, no acknowledged entry lost (no consumer gap) and no metadata
/// lost; topic ownership, node registrations and the election are intact.
/// The killed member then rejoins and serves the same registry.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn etcd_leader_killed_during_a_switch_with_live_traffic() {
    let stack = start(&[(20, ALL), (20, ALL), (20, ALL)], 2, &[true; 3]).await;
    election_settled(&stack, "node-1", Duration::from_secs(10)).await;
    let traffic = stack.traffic().await;
    tokio::time::sleep(Duration::from_millis(300)).await;

    let admin = AdminClient::new(stack.members[0].node.url(), ADMIN).expect("client");
    let epoch = admin
        .switch("new")
        .await
        .expect("switch")
        .epoch()
        .expect("epoch");
    let killed = tokio::task::block_in_place(|| stack.meta.cluster.kill_leader());
    let at = Instant::now();
    wait_for("a new etcd leader", Duration::from_secs(30), || {
        tokio::task::block_in_place(|| stack.meta.cluster.leader()).is_some()
    })
    .await;
    let new_leader_after = at.elapsed();
    assert_ne!(
        tokio::task::block_in_place(|| stack.meta.cluster.leader()),
        Some(killed)
    );
    let mut took = Vec::new();
    for n in stack.nodes() {
        took.push(applied(n, epoch, at, Duration::from_secs(30)).await);
        assert_eq!(n.storage().active_cluster().as_deref(), Some("new"));
    }
    let st = converged(&stack.members[0].node).await;
    assert_eq!(st.epoch, epoch);
    assert!(st.counts.built >= 12, "6 schema + 6 cursor ledgers: {st:?}");
    // The origin coordinated, nobody else.
    assert_eq!(duties(&stack), [1, 0, 0]);
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
    // One ACTIVE record (it turns to `new` at CLEANUP; the directive routes
    // the writes meanwhile).
    let active = active_clusters(&stack.members[0].node).await;
    assert_eq!(active.len(), 1, "{active:?}");
    ownership_and_registrations(&stack).await;
    election_settled(&stack, "node-1", Duration::from_secs(10)).await;
    // No lease was lost: the new etcd leader kept every node's session.
    for m in &stack.members {
        assert_eq!(
            m.store.session_generation(),
            Some(1),
            "{}",
            m.node.node_id()
        );
    }

    // The killed member rejoins and serves the registry as the others do.
    tokio::task::block_in_place(|| stack.meta.cluster.start_again(killed));
    let alone = EtcdStore::connect(
        &format!(
            "etcd://{}{}",
            stack.meta.cluster.endpoint(killed),
            stack.meta.prefix
        ),
        options(5),
    )
    .await
    .expect("a session on the restarted member");
    let alone: Arc<dyn MetadataStore> = Arc::new(alone);
    let expected = stack.members[0].node.registry().list().await.expect("list");
    let mut seen = Vec::new();
    for _ in 0..50 {
        seen = Registry::new(alone.clone())
            .list()
            .await
            .expect("the restarted member lists the registry");
        if seen == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(seen, expected, "the restarted member's registry");
    alone.close().await.expect("close");
    eprintln!(
        "etcd: member {killed} (the leader) killed after POST /switch; a new leader in \
         {new_leader_after:?}; directive applied {took:?} after the kill; published {:?}",
        reports.iter().map(|r| r.published).collect::<Vec<_>>()
    );
    stack.shutdown().await;
}

/// The elected node, node-1, coordinates an origin-less switch (directive and
/// record without origin) and is cut off from etcd — the only member it talks
/// to is frozen (SIGSTOP) — until its 2 s lease expires, while BUILD runs:
/// its candidacy, ownership and switch lease go with the lease, node-2 (on the
/// two other members) becomes leader and takes the duty over, and node-1
/// stops at its next write. When the member resumes, node-1 sees its session
/// expired, takes a new lease and rejoins the election behind node-2. No
/// ledger is copied twice, the switch converges, 0 acknowledged entries lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn elected_node_loses_its_lease_while_it_coordinates_an_origin_less_switch() {
    let stack = start(
        &[(2, &[0]), (20, &[1, 2]), (20, &[1, 2])],
        3,
        &[false, true, true],
    )
    .await;
    election_settled(&stack, "node-1", Duration::from_secs(10)).await;
    let traffic = stack.traffic().await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    // Slow copies: BUILD is still running when the leader's lease goes.
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
    tokio::task::block_in_place(|| stack.meta.cluster.pause(0));
    let at = Instant::now();
    wait_for("node-2 elected", Duration::from_secs(20), || {
        stack.members[1].node.sync().leader().as_deref() == Some("node-2")
    })
    .await;
    let new_leader_after = at.elapsed();
    // Well past node-1's lease.
    tokio::time::sleep(Duration::from_secs(4).saturating_sub(at.elapsed())).await;
    tokio::task::block_in_place(|| stack.meta.cluster.resume(0));
    let st = converged(&stack.members[1].node).await;
    let switched_after = at.elapsed();
    assert_eq!(st.epoch, started.epoch);
    wait_for("node-1's new lease", Duration::from_secs(20), || {
        stack.members[0].store.session_generation().unwrap_or(0) >= 2
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
    let reports = stop_traffic(traffic).await;
    metadata_intact(&stack).await;
    assert!(reports[1..].iter().all(|r| r.published > 0), "{reports:?}");
    let active = active_clusters(&stack.members[1].node).await;
    assert_eq!(active.len(), 1, "{active:?}");
    // node-1 rejoined the election on its new lease, behind node-2; every
    // node registered, every topic owned.
    election_settled(&stack, "node-2", Duration::from_secs(20)).await;
    ownership_and_registrations(&stack).await;
    eprintln!(
        "etcd lease expiry of the elected node: phase at the fault {phase_at_fault:?}; node-2 led \
         {new_leader_after:?} after the freeze; SWITCHED {switched_after:?} after; copied {copied}"
    );
    stack.shutdown().await;
}
