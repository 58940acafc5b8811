//! The operator's view, with processes: three `bookie-switch serve` processes
//! on a real ZooKeeper, started on a real BookKeeper cluster by its
//! metadata-service URI, each owning topics under live traffic. Through REST
//! and the `bookie-switch idgen` command: register the second real cluster,
//! advance its id generator, switch, clean up. Every cursor moves to the new
//! cluster with nothing failed, the processes stop on
//! SIGTERM reporting 0 publish failures and 0 gaps, and start again on the
//! same metadata with every topic opening on the new cluster.
//!
//! The origin of a switch killed mid-BUILD and never restarted: the leader
//! takes its duty over once its session is gone, and the switch converges.
//!
//! Needs Java and the BookKeeper jars; skipped with a note without them
//! unless `BKSWITCH_REQUIRE_BK=1`.

mod common;

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::wire::CleanupRequest;
use bkswitch_admin::AdminClient;
use bkswitch_bk_harness::BkCluster;
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_proto::codec::decode_managed_cursor_info;
use bkswitch_proto::Stamped;
use bkswitch_registry::ClusterStatus;
use common::procs::{free_port, kill, launch, terminate, Proc, BIN};
use common::*;

fn topics_of(node: usize) -> Vec<String> {
    (0..2)
        .map(|t| format!("tenant/ns/persistent/proc-n{node}-t{t}"))
        .collect()
}

/// Starts `bookie-switch serve` as `node-<node>` on `metadata` and the
/// bookies of `old_uri`, with traffic on its two topics and `extra` flags;
/// returns once its REST API answers.
async fn spawn_with(
    dir: &Path,
    node: usize,
    metadata: &str,
    old_uri: &str,
    rate: u32,
    extra: &[&str],
) -> Proc {
    let port = free_port();
    let log = dir.join(format!("node-{node}-{port}.log"));
    let mut args: Vec<String> = [
        "--node-id",
        &format!("node-{node}"),
        "--metadata-store",
        metadata,
        "--bookkeeper-uri",
        old_uri,
        "--cluster-name",
        "old",
        "--topics",
        &topics_of(node).join(","),
        "--rate",
        &rate.to_string(),
        "--old-ledger-read-timeout-ms",
        "2000",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    args.extend(extra.iter().map(|a| (*a).to_owned()));
    launch("serve", port, &args, ADMIN, INTERNAL, &log).await
}

/// `count` nodes started at once.
async fn spawn_all(
    count: usize,
    dir: &Path,
    metadata: &str,
    old_uri: &str,
    rate: u32,
    extra: &[&str],
) -> Vec<Proc> {
    futures::future::join_all(
        (0..count).map(|i| spawn_with(dir, i, metadata, old_uri, rate, extra)),
    )
    .await
}

fn log_of(p: &Proc) -> String {
    p.log_text()
}

/// Stops every process with SIGTERM and returns each one's traffic line.
fn stop(nodes: Vec<Proc>) -> Vec<String> {
    nodes
        .into_iter()
        .map(|p| {
            let log = terminate(p);
            log.lines()
                .find(|l| l.starts_with("traffic: "))
                .unwrap_or_else(|| panic!("no traffic summary:\n{log}"))
                .to_owned()
        })
        .collect()
}

/// `(published, failures, gaps)` of a `traffic: …` line.
fn traffic(line: &str) -> (u64, u64, u64) {
    let n = |word: &str| -> u64 {
        let before = line.split(word).next().unwrap();
        before
            .split_whitespace()
            .last()
            .unwrap()
            .trim_end_matches(',')
            .parse()
            .unwrap()
    };
    (n(" published"), n(" publish failures"), n(" gaps"))
}

async fn cursor_ledgers(store: &dyn MetadataStore, cluster: &str) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    for node in 0..3 {
        for topic in topics_of(node) {
            let path = format!("/managed-ledgers/{topic}/sub");
            let Some(r) = store.get(&path).await.unwrap() else {
                continue;
            };
            let info = decode_managed_cursor_info(&r.value).unwrap();
            if info.cursors_ledger_id >= 0 && info.cluster_stamp().unwrap() == Some(cluster) {
                out.insert(info.cursors_ledger_id, path);
            }
        }
    }
    out
}

/// The operator's steps before a switch, through REST and the binary:
/// register `new` STANDBY, read the precheck (not ready: its id generator is
/// behind), advance the generator beyond the source's next id with
/// `bookie-switch idgen`, and check the precheck is ready.
async fn register_and_advance(admin: &AdminClient, new_uri: &str) {
    admin
        .register("new", new_uri, Some(ClusterStatus::Standby))
        .await
        .unwrap();
    let pre = admin.precheck("new").await.unwrap();
    assert!(!pre.ready, "{pre:?}");
    let above = pre.source_next_ledger_id.unwrap() + 10_000;
    let out = Command::new(BIN)
        .args([
            "idgen",
            "--metadata-service-uri",
            new_uri,
            "--advance-beyond",
            &above.to_string(),
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\"advanced\":true"), "{stdout}");
    assert!(admin.precheck("new").await.unwrap().ready);
}

/// Waits (up to 120 s) until the switch `admin` reports is settled, and
/// checks it is SWITCHED with nothing failed and every ledger moved;
/// `context` is printed when it does not settle.
async fn wait_switched(admin: &AdminClient, context: impl Fn() -> String) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = admin.status().await.unwrap();
        if let Some(sw) = st.switch() {
            if sw.is_settled() {
                assert_eq!(sw.phase_name(), Some("SWITCHED"), "{:?}", sw.raw());
                let c = sw.counts();
                assert_eq!(c.failed, 0, "{:?}", sw.raw());
                assert_eq!(c.built, c.to_build, "{:?}", sw.raw());
                assert_eq!(
                    c.promoted + c.rollover_fallback + c.obsolete,
                    c.to_build,
                    "{:?}",
                    sw.raw()
                );
                return;
            }
        }
        assert!(
            Instant::now() < deadline,
            "switch did not settle: {:?}\n{}",
            st.raw(),
            context()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_serve_processes_switch_between_real_clusters() {
    if !bkswitch_bk_harness::bk_available() {
        bkswitch_bk_harness::require_bk();
        eprintln!("skipped: Java or the BookKeeper jars are missing");
        return;
    }
    let old = BkCluster::on_shared_zk(3);
    let new = BkCluster::on_shared_zk(3);
    let zk_connect = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let metadata = format!("zk://{zk_connect}{chroot}");
    let dir = tempfile::tempdir().unwrap();
    let old_uri = old.metadata_service_uri();
    let new_uri = new.metadata_service_uri();

    let nodes = spawn_all(3, dir.path(), &metadata, &old_uri, 30, &[]).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let store: Arc<ZkStore> = Arc::new(
        ZkStore::connect(&metadata, ZkStoreOptions::default())
            .await
            .unwrap(),
    );
    let admin = AdminClient::new(&nodes[0].url, ADMIN)
        .unwrap()
        .with_timeout(Duration::from_secs(60));
    // The operator's step, with the binary.
    register_and_advance(&admin, &new_uri).await;

    let before = cursor_ledgers(store.as_ref(), "old").await;
    assert_eq!(before.len(), 6, "{before:?}");
    admin.switch("new").await.unwrap();
    wait_switched(&admin, String::new).await;
    // Every node swapped.
    for n in &nodes {
        let a = AdminClient::new(&n.url, ADMIN).unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while a.status().await.unwrap().active_cluster() != Some("new") {
            assert!(Instant::now() < deadline, "{} did not swap", n.url);
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    // Every cursor now names `new`: its copy promoted, or (a cursor acked
    // while BUILD ran, as these are) rolled over onto a new ledger there. The
    // copies themselves are compared entry by entry with the Java client in
    // `real_bookkeeper.rs`.
    let after = cursor_ledgers(store.as_ref(), "new").await;
    assert_eq!(after.len(), before.len(), "{after:?}");
    let report = admin
        .cleanup(&CleanupRequest {
            dry_run: false,
            src_cluster_filter: None,
            max_deletions: 0,
            force: true,
        })
        .await
        .unwrap();
    assert_eq!(report.outcome(), Some("DONE"), "{:?}", report.raw());

    tokio::time::sleep(Duration::from_secs(1)).await;
    for line in stop(nodes) {
        let (published, failures, gaps) = traffic(&line);
        assert!(published > 0, "{line}");
        assert_eq!((failures, gaps), (0, 0), "{line}");
    }

    // Every process starts again on the same metadata: the registry names
    // `new`, every topic opens (serve exits if one does not) and traffic runs.
    let nodes = spawn_all(3, dir.path(), &metadata, &old_uri, 30, &[]).await;
    for n in &nodes {
        assert!(log_of(n).contains("(active cluster: new)"), "{}", log_of(n));
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    for line in stop(nodes) {
        let (published, failures, gaps) = traffic(&line);
        assert!(published > 0, "{line}");
        assert_eq!((failures, gaps), (0, 0), "{line}");
    }
    store.close().await.unwrap();
}

/// The fifth item: the directive's origin (the node the switch was
/// asked on) is killed with SIGKILL while BUILD runs and never comes back.
/// Once its ZooKeeper session is gone (its candidacy leaves the election),
/// the elected leader takes the duty over (the switch lease keeps that safe)
/// and the switch converges: every cursor, the dead node's too, names the new
/// cluster, nothing failed, and the surviving nodes saw 0 publish failures
/// and 0 gaps. Before, only the origin resumed BUILD/PROMOTE, so the switch
/// stayed in BUILD for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_takes_over_a_switch_whose_origin_died() {
    if !bkswitch_bk_harness::bk_available() {
        bkswitch_bk_harness::require_bk();
        eprintln!("skipped: Java or the BookKeeper jars are missing");
        return;
    }
    let old = BkCluster::on_shared_zk(2);
    let new = BkCluster::on_shared_zk(2);
    let zk_connect = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let metadata = format!("zk://{zk_connect}{chroot}");
    let dir = tempfile::tempdir().unwrap();
    let old_uri = old.metadata_service_uri();
    let new_uri = new.metadata_service_uri();
    let session = ["--metadata-store-session-timeout-ms", "4000"];
    let mut nodes = spawn_all(3, dir.path(), &metadata, &old_uri, 20, &session).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let store: Arc<ZkStore> = Arc::new(
        ZkStore::connect(&metadata, ZkStoreOptions::default())
            .await
            .unwrap(),
    );
    let origin = AdminClient::new(&nodes[0].url, ADMIN)
        .unwrap()
        .with_timeout(Duration::from_secs(60));
    register_and_advance(&origin, &new_uri).await;
    let before = cursor_ledgers(store.as_ref(), "old").await;
    assert_eq!(before.len(), 6, "{before:?}");

    // Asked on node-0, which is the directive's origin; killed at once.
    origin.switch("new").await.unwrap();
    let dead = nodes.remove(0);
    kill(dead);
    let survivor = AdminClient::new(&nodes[0].url, ADMIN)
        .unwrap()
        .with_timeout(Duration::from_secs(60));
    let st = survivor.status().await.unwrap();
    let directive = st.directive().expect("the directive is written");
    assert_eq!(directive["origin"], "node-0", "{directive}");
    let sw = st.switch().expect("the switch is recorded");
    assert!(
        !sw.is_settled(),
        "the switch finished before its origin was killed; the test proves nothing: {:?}",
        sw.raw()
    );

    // Converges without node-0: its session expires (4 s), the leader
    // adopts the duty.
    wait_switched(&survivor, || {
        format!(
            "the switch did not converge without its origin:\n{}\n{}",
            log_of(&nodes[0]),
            log_of(&nodes[1])
        )
    })
    .await;
    let after = cursor_ledgers(store.as_ref(), "new").await;
    assert_eq!(after.len(), before.len(), "{after:?}");
    let took_over = nodes
        .iter()
        .filter(|n| log_of(n).contains("origin left the election"))
        .count();
    assert_eq!(
        took_over,
        1,
        "exactly one node (the leader) took the duty over:\n{}\n{}",
        log_of(&nodes[0]),
        log_of(&nodes[1])
    );

    tokio::time::sleep(Duration::from_secs(1)).await;
    for line in stop(nodes) {
        let (published, failures, gaps) = traffic(&line);
        assert!(published > 0, "{line}");
        assert_eq!((failures, gaps), (0, 0), "{line}");
    }
    store.close().await.unwrap();
}

async fn spawn_coordinator(dir: &Path, metadata: &str, old_uri: &str) -> Proc {
    let port = free_port();
    let log = dir.join(format!("coordinator-{port}.log"));
    let args: Vec<String> = [
        "--node-id",
        "coordinator",
        "--metadata-store",
        metadata,
        "--bookkeeper-uri",
        old_uri,
        "--cluster-name",
        "old",
    ]
    .iter()
    .map(|a| (*a).to_owned())
    .collect();
    launch("coordinator", port, &args, ADMIN, INTERNAL, &log).await
}

/// A dedicated coordinator (`bookie-switch coordinator`) beside two brokers
/// on real bookies: asked through its own REST API it is the switch's origin
/// and does the BUILD/PROMOTE work (its metrics show the duty, the brokers'
/// none), the brokers promote their open cursors when it asks them, and
/// their traffic sees 0 publish failures and 0 gaps. It refuses topics.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_dedicated_coordinator_runs_the_switch_for_the_brokers() {
    if !bkswitch_bk_harness::bk_available() {
        bkswitch_bk_harness::require_bk();
        eprintln!("skipped: Java or the BookKeeper jars are missing");
        return;
    }
    let out = Command::new(BIN)
        .args(["coordinator", "--topics", "tenant/ns/persistent/x"])
        .env("BKSWITCH_ADMIN_TOKEN", ADMIN)
        .env("BKSWITCH_INTERNAL_TOKEN", INTERNAL)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("serves no topics"));

    let old = BkCluster::on_shared_zk(2);
    let new = BkCluster::on_shared_zk(2);
    let zk_connect = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let metadata = format!("zk://{zk_connect}{chroot}");
    let dir = tempfile::tempdir().unwrap();
    let old_uri = old.metadata_service_uri();
    let new_uri = new.metadata_service_uri();
    let nodes = spawn_all(2, dir.path(), &metadata, &old_uri, 20, &[]).await;
    let mut coordinator = vec![spawn_coordinator(dir.path(), &metadata, &old_uri).await];
    let deadline = Instant::now() + Duration::from_secs(60);
    while !log_of(&coordinator[0]).contains("coordinator coordinator serving") {
        assert!(coordinator[0].is_running(), "{}", log_of(&coordinator[0]));
        assert!(Instant::now() < deadline, "{}", log_of(&coordinator[0]));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let admin = AdminClient::new(&coordinator[0].url, ADMIN)
        .unwrap()
        .with_timeout(Duration::from_secs(60));
    register_and_advance(&admin, &new_uri).await;
    admin.switch("new").await.unwrap();
    wait_switched(&admin, || log_of(&coordinator[0])).await;
    let duties = |url: String| async move {
        let (code, text) = raw("GET", &format!("{url}/metrics"), None, None).await;
        assert_eq!(code, 200);
        let text = text.as_str().unwrap_or_default().to_owned();
        text.lines()
            .find_map(|l| l.strip_prefix("bkswitch_coordinator_duties_total "))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no duty counter:\n{text}"))
    };
    assert_eq!(duties(coordinator[0].url.clone()).await, 1);
    for n in &nodes {
        assert_eq!(duties(n.url.clone()).await, 0);
    }
    let after = cursor_ledgers(store_of(&metadata).await.as_ref(), "new").await;
    assert_eq!(after.len(), 4, "{after:?}");
    tokio::time::sleep(Duration::from_secs(1)).await;
    for line in stop(nodes) {
        let (published, failures, gaps) = traffic(&line);
        assert!(published > 0, "{line}");
        assert_eq!((failures, gaps), (0, 0), "{line}");
    }
    terminate(coordinator.remove(0));
}

async fn store_of(metadata: &str) -> Arc<ZkStore> {
    Arc::new(
        ZkStore::connect(metadata, ZkStoreOptions::default())
            .await
            .unwrap(),
    )
}

/// A node that cannot open its topic yet (one of its cluster's two bookies
/// is down, its ledgers need two) keeps retrying; SIGTERM then stops it
/// cleanly, exit 0, instead of killing it mid-retry (seed 3002 of the real
/// nemesis: a node still recovering its cursor when it was stopped).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_stopped_while_it_opens_its_topics_exits_cleanly() {
    if !bkswitch_bk_harness::bk_available() {
        bkswitch_bk_harness::require_bk();
        eprintln!("skipped: Java or the BookKeeper jars are missing");
        return;
    }
    let old = BkCluster::on_shared_zk(2);
    old.stop(1);
    old.wait_unregistered(1, Duration::from_secs(30));
    let metadata = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let dir = tempfile::tempdir().unwrap();
    let node = spawn_with(
        dir.path(),
        0,
        &metadata,
        &old.metadata_service_uri(),
        20,
        &[],
    )
    .await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while !log_of(&node).contains("retrying") {
        assert!(Instant::now() < deadline, "no retry: {}", log_of(&node));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // `terminate` asserts a clean exit (status 0) within 30 s.
    let log = terminate(node);
    assert!(log.contains("stopped while opening topic"), "{log}");
}
