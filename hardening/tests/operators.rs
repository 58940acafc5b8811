//! Operators acting at the same time: two switches requested at once on two
//! nodes, and a switch requested while the previous switch's CLEANUP runs.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::wire::{CleanupRequest, SwitchStatusDoc};
use bkswitch_admin::Node;
use bkswitch_admin::{AdminClient, ClientError};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_hardening::{clusters, start_node, tree, wait_switched, zk_store, ADMIN};
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_registry::ClusterStatus;

/// An in-memory session whose every operation first sleeps a little, so that
/// two requests on two nodes interleave as they would on a real store (the
/// bare in-memory store answers at once, and the first request finishes
/// before the second one reads anything).
#[derive(Debug)]
struct SlowStore {
    inner: MemoryStore,
    delay: Duration,
}

impl SlowStore {
    async fn pause(&self) {
        tokio::time::sleep(self.delay).await;
    }
}

#[async_trait::async_trait]
impl Layer for SlowStore {
    fn next(&self) -> Arc<dyn MetadataStore> {
        Arc::new(self.inner.clone())
    }

    /// Every call but watches and close sleeps first.
    async fn call(&self, call: Call<'_>) -> bkswitch_metadata_store::Result<Reply> {
        if !matches!(call, Call::Watch { .. } | Call::Close) {
            self.pause().await;
        }
        call.run(&self.inner).await
    }
}

/// `clusters()` plus `new2`, whose id generator is beyond both others.
fn three_clusters() -> MemoryClusters {
    let c = clusters();
    c.get_or_create("new2")
        .advance_ledger_id_to(2_000_000)
        .expect("fresh cluster");
    c
}

/// Two nodes on `stores`, `new` and `new2` registered STANDBY.
async fn two_nodes(
    stores: [Arc<dyn MetadataStore>; 2],
    clusters: &MemoryClusters,
) -> (Vec<Node>, Vec<AdminClient>) {
    let [s1, s2] = stores;
    let nodes = vec![
        start_node("node-1", s1, clusters).await,
        start_node("node-2", s2, clusters).await,
    ];
    let admins: Vec<AdminClient> = nodes
        .iter()
        .map(|n| AdminClient::new(n.url(), ADMIN).expect("admin client"))
        .collect();
    for name in ["new", "new2"] {
        admins[0]
            .register(
                name,
                &format!("memory://{name}"),
                Some(ClusterStatus::Standby),
            )
            .await
            .expect("register");
    }
    (nodes, admins)
}

/// What one round of concurrent switch requests produced.
#[derive(Debug, Default)]
struct Outcomes {
    rounds: usize,
    refused: usize,
    same_epoch: usize,
}

/// Checks one concurrent pair of answers: exactly one directive epoch wins,
/// the other answer is a 409 naming a switch in progress or (same target
/// only) the same epoch; the registry directive and the only switch record
/// name the winner.
async fn check_round(
    nodes: &[Node],
    targets: [&str; 2],
    answers: [Result<SwitchStatusDoc, ClientError>; 2],
    out: &mut Outcomes,
) {
    out.rounds += 1;
    let wins: Vec<(usize, &SwitchStatusDoc)> = answers
        .iter()
        .enumerate()
        .filter_map(|(i, a)| a.as_ref().ok().map(|s| (i, s)))
        .collect();
    assert!(!wins.is_empty(), "both requests failed: {answers:?}");
    let (w, winner) = wins[0];
    let epoch = winner.epoch().expect("epoch");
    assert_eq!(winner.target(), Some(targets[w]));
    for (i, a) in answers.iter().enumerate() {
        match a {
            Ok(s) => {
                assert_eq!(s.epoch(), Some(epoch), "two epochs won: {answers:?}");
                assert_eq!(targets[i], targets[w], "two targets won: {answers:?}");
                if i != w {
                    out.same_epoch += 1;
                }
            }
            Err(e) => {
                assert_eq!(e.status(), Some(409), "{e}");
                let msg = e.to_string();
                assert!(msg.contains("in progress"), "{msg}");
                assert!(
                    msg.contains(targets[w]),
                    "loser must name the winner: {msg}"
                );
                out.refused += 1;
            }
        }
    }
    let d = nodes[0]
        .registry()
        .switch_directive()
        .await
        .expect("directive")
        .expect("a directive");
    assert_eq!(d.epoch, epoch);
    assert_eq!(d.target, targets[w]);
    let ids = nodes[0].orchestrator().switch_ids().await.expect("ids");
    assert_eq!(ids, vec![epoch.to_string()], "exactly one switch record");
    let st = wait_switched(&nodes[0].orchestrator(), Duration::from_secs(10)).await;
    assert_eq!(st.switch_id, epoch.to_string());
    assert_eq!(st.phase.as_str(), "SWITCHED");
    // Exactly one node coordinated it.
    let duties: u64 = nodes
        .iter()
        .map(|n| n.sync().metrics().snapshot().coordinator_duties)
        .sum();
    assert_eq!(duties, 1);
}

async fn race_round(stores: [Arc<dyn MetadataStore>; 2], targets: [&str; 2], out: &mut Outcomes) {
    let clusters = three_clusters();
    let (nodes, admins) = two_nodes(stores, &clusters).await;
    let (a, b) = tokio::join!(admins[0].switch(targets[0]), admins[1].switch(targets[1]));
    check_round(&nodes, targets, [a, b], out).await;
    for n in &nodes {
        n.stop().await;
    }
}

/// Two operators switch at once, `new` on node-1 and `new2` on node-2 (and,
/// some rounds, both to `new`), 20 fresh stacks on the in-memory store:
/// exactly one directive epoch wins; the other request is refused with 409
/// (switch in progress) naming the winner, or answers the same epoch when it
/// asked for the same target; there is only ever one switch record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_switches_on_memory_store_have_one_winner() {
    let mut out = Outcomes::default();
    for round in 0..20 {
        let store = MemoryStore::new();
        let slow = |delay_us: u64| -> Arc<dyn MetadataStore> {
            Arc::new(SlowStore {
                inner: store.new_session(),
                delay: Duration::from_micros(delay_us),
            })
        };
        // Different delays per round shift where the two requests interleave.
        let stores = [slow(200), slow(100 + 50 * (round % 6))];
        let targets = if round % 5 == 4 {
            ["new", "new"]
        } else if round % 2 == 0 {
            ["new", "new2"]
        } else {
            ["new2", "new"]
        };
        race_round(stores, targets, &mut out).await;
    }
    eprintln!("concurrent switches (memory): {out:?}");
    assert_eq!(out.rounds, 20);
    // 16 rounds with different targets: every one of them refused one side.
    assert!(out.refused >= 16, "{out:?}");
}

/// The same race on ZooKeeper (each node its own session), 3 rounds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_switches_on_zookeeper_have_one_winner() {
    let mut out = Outcomes::default();
    for round in 0..3 {
        let chroot = bkswitch_zk_harness::unique_chroot();
        let s1 = zk_store(&chroot).await;
        let s2 = zk_store(&chroot).await;
        let stores: [Arc<dyn MetadataStore>; 2] = [s1.clone(), s2.clone()];
        let targets = if round == 1 {
            ["new2", "new"]
        } else {
            ["new", "new2"]
        };
        race_round(stores, targets, &mut out).await;
        s1.close().await.expect("close");
        s2.close().await.expect("close");
    }
    eprintln!("concurrent switches (ZooKeeper): {out:?}");
    assert_eq!(out.refused, 3, "{out:?}");
}

/// A switch requested while the previous switch's CLEANUP is in progress is
/// **refused, not queued**: the request answers 409 naming the running switch
/// and writes nothing; the operator finishes the cleanup (DONE) and asks
/// again, and then the switch to a new target runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn switch_during_cleanup_is_refused_then_works_after_done() {
    let clusters = three_clusters();
    let store = Arc::new(MemoryStore::new());
    let stores: [Arc<dyn MetadataStore>; 2] =
        [Arc::new(store.new_session()), Arc::new(store.new_session())];
    let (nodes, admins) = two_nodes(stores, &clusters).await;
    // Three schema ledgers on `old`: three copies for the cleanup to delete.
    for i in 0..3 {
        nodes[0]
            .schemas()
            .put(
                &format!("tenant-ns-s{i}"),
                format!("v1-{i}").as_bytes(),
                b"h1",
            )
            .await
            .expect("schema");
    }
    let first = admins[0].switch("new").await.expect("switch to new");
    let first_id = first.switch_id().expect("id").to_owned();
    let st = wait_switched(&nodes[0].orchestrator(), Duration::from_secs(10)).await;
    assert_eq!(st.phase.as_str(), "SWITCHED");
    assert!(st.counts.built >= 3, "{st:?}");

    let partial = admins[0]
        .cleanup(&CleanupRequest {
            dry_run: false,
            src_cluster_filter: None,
            max_deletions: 1,
            force: true,
        })
        .await
        .expect("partial cleanup");
    assert_eq!(partial.deleted(), 1, "{:?}", partial.raw());
    let mid = nodes[0]
        .orchestrator()
        .status(&first_id)
        .await
        .expect("status");
    assert_eq!(mid.phase.as_str(), "CLEANUP");

    // Refused on both nodes; nothing written.
    let root: &dyn MetadataStore = store.as_ref();
    let before = tree(root).await;
    for a in &admins {
        for target in ["new2", "old"] {
            let e = a.switch(target).await.expect_err("refused during cleanup");
            assert_eq!(e.status(), Some(409), "{e}");
            let msg = e.to_string();
            assert!(msg.contains(&format!("`{first_id}`")), "{msg}");
            assert!(msg.contains("CLEANUP"), "{msg}");
        }
    }
    assert_eq!(
        before,
        tree(root).await,
        "a refused switch changed metadata"
    );

    // Finish the cleanup: DONE, `new` ACTIVE, `old` DEPRECATED.
    let rest = admins[0]
        .cleanup(&CleanupRequest {
            dry_run: false,
            src_cluster_filter: None,
            max_deletions: 0,
            force: true,
        })
        .await
        .expect("cleanup");
    assert_eq!(rest.outcome(), Some("DONE"), "{:?}", rest.raw());
    assert_eq!(
        nodes[0]
            .registry()
            .active()
            .await
            .expect("active")
            .as_deref(),
        Some("new")
    );

    // Now a switch to a new target runs.
    let second = admins[1].switch("new2").await.expect("switch to new2");
    assert!(second.epoch() > first.epoch());
    let st = wait_switched(&nodes[0].orchestrator(), Duration::from_secs(10)).await;
    assert_eq!(st.switch_id, second.switch_id().expect("id"));
    assert_eq!(st.phase.as_str(), "SWITCHED", "{st:?}");
    assert_eq!(st.counts.failed, 0, "{st:?}");
    let d = nodes[0]
        .registry()
        .switch_directive()
        .await
        .expect("directive")
        .expect("a directive");
    assert_eq!(d.target, "new2");
    for n in &nodes {
        n.stop().await;
    }
}
