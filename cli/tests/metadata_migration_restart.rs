//! The write pause when the node that led a migration was SIGKILLed during
//! COPYING and restarted, on real processes, real ZooKeeper and real etcd,
//! beside the pause of a quiet migration: the dead incarnation is not waited
//! for (its session is gone, or a later registration of its node supersedes
//! it); one re-scan in a catch-up round covers what it wrote, and the pause
//! copies only the last round.
//!
//! ZooKeeper → etcd quiet, then etcd → ZooKeeper and ZooKeeper → etcd each
//! with the leader killed in COPYING and restarted on its port. The figures
//! are printed (`PAUSE …`) and recorded in `docs/RELIABILITY.md`.
//!
//! Needs the `etcd` feature (`cargo test -p bkswitch-cli --features etcd
//! --test metadata_migration_restart`).

mod common;

use std::time::{Duration, Instant};

use bkswitch_etcd_harness::{unique_prefix, EtcdCluster};
use bkswitch_metadata_store::open_store;
use common::procs::*;

/// Sessions of 4 s, a 10 s acknowledgement timeout (the default: what the
/// pause used to wait for a dead incarnation), pages of 500 nodes 300 ms
/// apart so that COPYING lasts long enough to kill its leader in it.
const FLAGS: [&str; 6] = [
    "--metadata-store-session-timeout-ms",
    "4000",
    "--metadata-migration-page-size",
    "500",
    "--metadata-migration-step-interval-ms",
    "300",
];

/// Waits until the migration seen through `url` is in `phase`.
async fn until_phase(url: &str, nodes: &[Proc], phase: &str) {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let doc = status(url);
        let now = doc["phase"].as_str().unwrap_or_default().to_owned();
        if now == phase {
            return;
        }
        assert!(
            !matches!(now.as_str(), "COMPLETED" | "FAILED" | "ABORTED"),
            "ended before {phase}: {doc}\n{}",
            logs(nodes)
        );
        assert!(Instant::now() < deadline, "{doc}\n{}", logs(nodes));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Moves the three nodes' store to `target`; with `kill`, the leader is
/// SIGKILLed once COPYING began and started again on its port. Returns the
/// record's pause in milliseconds and the node restarted.
async fn migrate(
    nodes: &mut Vec<Proc>,
    dir: &std::path::Path,
    source: &str,
    target: &str,
    wipe: bool,
    kill_leader: bool,
) -> (u64, Option<usize>) {
    let lead = leader(nodes).await;
    let other = nodes[(lead + 1) % 3].url.clone();
    start(&other, target, wipe).unwrap_or_else(|e| panic!("{e}\n{}", logs(nodes)));
    if kill_leader {
        until_phase(&other, nodes, "COPYING").await;
        let port = nodes[lead].port;
        kill(nodes.remove(lead));
        // The restarted process: same node id, same port, same (source)
        // store URL in its configuration; it follows the migration.
        let log = dir.join(format!(
            "restart-{lead}-{}.log",
            unique_prefix().trim_start_matches('/')
        ));
        let p = serve_on(
            port,
            lead,
            &format!("tenant/ns/persistent/restart-n{lead}"),
            source,
            &log,
            &FLAGS,
        )
        .await;
        nodes.insert(lead, p);
    }
    let doc = until_ended(&other, nodes, 120).await;
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", logs(nodes));
    all_on(nodes, target).await;
    let pause = doc["pauseMs"].as_u64().expect("pauseMs");
    if kill_leader {
        assert!(
            doc["rescans"].as_u64().unwrap_or_default() >= 1,
            "the dead incarnation's writes were covered by a re-scan: {doc}"
        );
    }
    (pause, kill_leader.then_some(lead))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pause_stays_short_when_the_leader_died_in_copying_and_came_back() {
    let _one = SERIAL.lock().await;
    let zk = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let src = open_store(&zk, Default::default()).await.unwrap();
    seed(&src, "/seed", 3_000).await;
    let before = snapshot(src.as_ref(), "/seed").await;
    src.close().await.unwrap();
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let etcd_a = etcd.url(&unique_prefix());
    let etcd_b = etcd.url(&unique_prefix());
    let dir = tempfile::tempdir().unwrap();
    let mut nodes = three(
        dir.path(),
        "restart",
        &zk,
        |i| format!("tenant/ns/persistent/restart-n{i}"),
        &FLAGS,
    )
    .await;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let mut restarted = Vec::new();
    let quiet = migrate(&mut nodes, dir.path(), &zk, &etcd_a, false, false)
        .await
        .0;
    // The way back into the ZooKeeper chroot the tree came from (its old
    // copy is wiped, named by its root).
    let (back, killed) = migrate(&mut nodes, dir.path(), &zk, &zk, true, true).await;
    restarted.extend(killed);
    let (again, killed) = migrate(&mut nodes, dir.path(), &zk, &etcd_b, false, true).await;
    restarted.extend(killed);
    eprintln!(
        "PAUSE quiet ZooKeeper → etcd {quiet} ms; leader killed in COPYING and restarted: \
         etcd → ZooKeeper {back} ms, ZooKeeper → etcd {again} ms"
    );
    // Far below the 10 s acknowledgement timeout the pause used to wait.
    for (what, ms) in [
        ("quiet", quiet),
        ("etcd → ZooKeeper", back),
        ("ZooKeeper → etcd", again),
    ] {
        assert!(ms < 5_000, "{what}: a pause of {ms} ms\n{}", logs(&nodes));
    }
    let store = open_store(&etcd_b, Default::default()).await.unwrap();
    assert_eq!(snapshot(store.as_ref(), "/seed").await, before);
    store.close().await.unwrap();
    // The restarted node's topic lived on in-memory bookies of the killed
    // process (`memory://old`): its ledger went with it, so only the nodes
    // that ran throughout are held to 0 failures and 0 gaps.
    for (i, mut p) in nodes.into_iter().enumerate() {
        if restarted.contains(&i) {
            let _ = std::process::Command::new("kill")
                .args(["-TERM", &p.child.id().to_string()])
                .status();
            assert!(p.child.wait().unwrap().success());
        } else {
            stop_clean(p);
        }
    }
}
