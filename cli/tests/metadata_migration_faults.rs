//! Faults during a live move of the metadata store (PIP-454), on real
//! processes: three `bookie-switch serve` nodes on a real ZooKeeper, each
//! owning a topic under live traffic (`--rate`), moved to a real etcd with
//! `bookie-clusters metadata-migration start`.
//!
//! - the leader (which runs the migration) SIGKILLed in the write pause: the
//!   next leader finishes it (a re-scan covers the dead participant, not
//!   waited for) and writes resume on the target;
//! - a participant SIGKILLed before it acknowledged: the migration fails
//!   after the ack timeout with writes never paused, and once the dead
//!   participant's registration is gone a new start completes;
//! - a dirty target refused by the CLI (exit code, message, target and
//!   source untouched), then wiped with `--wipe-target`; every node restarted
//!   after COMPLETED comes back on etcd with the data intact; then etcd →
//!   ZooKeeper back under traffic;
//! - a parent with 60,000 children moved under traffic, its sequential
//!   counter with it;
//! - a participant's session lost during the copy (the process stopped for
//!   longer than its session): it registers again and moves with the others.
//!
//! Wherever traffic runs, the SIGTERM summaries report 0 publish failures, 0
//! gaps, every topic loaded once and none fenced: no topic is fenced or
//! reloaded by the migration.
//!
//! Needs the `etcd` feature (`cargo test -p bkswitch-cli --features etcd
//! --test metadata_migration_faults`). The tests run one at a time (each
//! starts its own processes).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_etcd_harness::{unique_prefix, EtcdCluster};
use bkswitch_metadata_store::{
    open_store, CreateMode, EtcdStore, EtcdStoreOptions, ExpectedVersion, MetadataStore,
};

use common::procs::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_leader_killed_in_the_write_pause_is_taken_over_and_writes_resume() {
    let _one = SERIAL.lock().await;
    let zk = zk_url();
    let src = open_store(&zk, Default::default()).await.unwrap();
    // Versions above 0, to see them carried.
    seed(&src, "/seed", 50).await;
    seed(&src, "/seed", 50).await;
    let before = snapshot(src.as_ref(), "/seed").await;
    src.close().await.unwrap();
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let target = etcd.url(&unique_prefix());
    let dir = tempfile::tempdir().unwrap();
    // 2.5 s between two steps of the coordinator: the record stays PAUSED
    // (every gate closed) that long before the step that flips.
    let flags = [
        "--metadata-store-session-timeout-ms",
        "4000",
        "--metadata-migration-step-interval-ms",
        "2500",
        "--metadata-migration-ack-timeout-ms",
        "3000",
    ];
    let mut nodes = three(
        dir.path(),
        "pause",
        &zk,
        |i| format!("tenant/ns/persistent/pause-n{i}"),
        &flags,
    )
    .await;
    let lead = leader(&nodes).await;
    let other = nodes[(lead + 1) % 3].url.clone();
    tokio::time::sleep(Duration::from_secs(1)).await;
    start(&other, &target, false).unwrap_or_else(|e| panic!("{e}\n{}", logs(&nodes)));

    // Wait for the pause, and see the gates closed.
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let doc = status(&other);
        match doc["phase"].as_str().unwrap() {
            "PAUSED" => break,
            "COMPLETED" | "FAILED" | "ABORTED" => {
                panic!("ended before the pause was seen: {doc}\n{}", logs(&nodes))
            }
            _ => {}
        }
        assert!(Instant::now() < deadline, "{doc}\n{}", logs(&nodes));
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let paused_at = Instant::now();
    let deadline = Instant::now() + Duration::from_secs(2);
    while gauge(&other, "bkswitch_metadata_writes_paused").await != Some(1.0) {
        assert!(
            Instant::now() < deadline,
            "gate not closed\n{}",
            logs(&nodes)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(status(&other)["phase"], "PAUSED", "{}", logs(&nodes));
    kill(nodes.remove(lead));

    // The next leader (once the dead session expired) resumes the pause;
    // the dead participant is not registered any more, so it is not waited
    // for: the pause re-scans the tree once (it joined and left without
    // publishing) and flips.
    let doc = until_ended(&nodes[0].url, &nodes, 90).await;
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", logs(&nodes));
    assert!(
        doc["rescans"].as_u64().unwrap() >= 1,
        "{doc}\n{}",
        logs(&nodes)
    );
    all_on(&nodes, &target).await;
    let resumed = paused_at.elapsed();
    // The bound: the dead session's timeout (4 s), the election, one poll of
    // the new leader and the pause step with its re-scan.
    assert!(resumed < Duration::from_secs(20), "{resumed:?}");
    assert!(
        nodes.iter().any(|p| std::fs::read_to_string(&p.log)
            .unwrap_or_default()
            .contains("this node leads: running the metadata migration")),
        "a survivor took the migration over\n{}",
        logs(&nodes)
    );
    // Writes go on, on etcd: the traffic, and versions read before.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let store = EtcdStore::connect(&target, EtcdStoreOptions::default())
        .await
        .unwrap();
    assert_eq!(snapshot(&store, "/seed").await, before);
    let mut topics = store
        .children("/managed-ledgers/tenant/ns/persistent")
        .await
        .unwrap();
    topics.sort();
    assert_eq!(topics, ["pause-n0", "pause-n1", "pause-n2"]);
    store.close().await.unwrap();
    for p in nodes {
        stop_clean(p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_killed_before_it_acknowledged_fails_the_migration_then_a_new_start_completes(
) {
    let _one = SERIAL.lock().await;
    let zk = zk_url();
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let target = etcd.url(&unique_prefix());
    let dir = tempfile::tempdir().unwrap();
    // Sessions of 8 s, acknowledgements within 1.5 s: a participant killed
    // just before the start stays registered well past the ack timeout.
    let flags = [
        "--metadata-store-session-timeout-ms",
        "8000",
        "--metadata-migration-ack-timeout-ms",
        "1500",
    ];
    let mut nodes = three(
        dir.path(),
        "prep",
        &zk,
        |i| format!("tenant/ns/persistent/prep-n{i}"),
        &flags,
    )
    .await;
    let lead = leader(&nodes).await;
    let victim = (lead + 1) % 3;
    let victim_pid = nodes[victim].child.id();
    let src = open_store(&zk, Default::default()).await.unwrap();
    let registered = |names: &[String]| {
        names
            .iter()
            .any(|n| n.starts_with(&format!("node-{victim}-{victim_pid}-")))
    };
    assert!(registered(&src.children(PARTICIPANTS).await.unwrap()));
    tokio::time::sleep(Duration::from_secs(1)).await;
    kill(nodes.remove(victim));
    let url = nodes[0].url.clone();
    start(&url, &target, false).unwrap_or_else(|e| panic!("{e}\n{}", logs(&nodes)));
    let started = Instant::now();

    // PREPARATION waits for the dead participant, which never acknowledges:
    // FAILED after the ack timeout, naming it; writes were never paused.
    let doc = until_ended(&url, &nodes, 30).await;
    let failed_after = started.elapsed();
    assert_eq!(doc["phase"], "FAILED", "{doc}\n{}", logs(&nodes));
    let error = doc["error"].as_str().unwrap();
    assert!(
        error.contains(&format!("node-{victim}-{victim_pid}-"))
            && error.contains("did not acknowledge")
            && error.contains("never paused"),
        "{error}"
    );
    assert_eq!(doc["nodesCopied"], 0, "{doc}");
    assert!(failed_after < Duration::from_secs(8), "{failed_after:?}");
    // The dead participant was still registered when it failed.
    assert!(
        registered(&src.children(PARTICIPANTS).await.unwrap()),
        "the registration went before the failure: the test proves nothing"
    );
    for p in &nodes {
        let doc = AdminClient::new(&p.url, ADMIN)
            .unwrap()
            .migration_status()
            .await
            .unwrap();
        assert!(!doc.writes_paused);
        assert_eq!(doc.node_store_url.as_deref(), Some(zk.as_str()));
    }
    // Writes go on in the source, and nothing was copied to the target.
    src.put("/after-failure", b"x", ExpectedVersion::NotExists)
        .await
        .unwrap();
    let etcd_store = EtcdStore::connect(&target, EtcdStoreOptions::default())
        .await
        .unwrap();
    assert!(etcd_store.children("/").await.unwrap().is_empty());

    // Once the dead session expired its registration is gone: a new start
    // (the target is still empty) completes.
    let deadline = Instant::now() + Duration::from_secs(30);
    while registered(&src.children(PARTICIPANTS).await.unwrap()) {
        assert!(Instant::now() < deadline, "the dead session never expired");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    src.close().await.unwrap();
    start(&url, &target, false).unwrap_or_else(|e| panic!("{e}\n{}", logs(&nodes)));
    let doc = until_ended(&url, &nodes, 60).await;
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", logs(&nodes));
    all_on(&nodes, &target).await;
    assert!(etcd_store.exists("/after-failure").await.unwrap().is_some());
    etcd_store.close().await.unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    for p in nodes {
        stop_clean(p);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dirty_target_is_refused_then_wiped_every_node_restarts_on_etcd_and_it_moves_back() {
    let _one = SERIAL.lock().await;
    let zk = zk_url();
    let src = open_store(&zk, Default::default()).await.unwrap();
    seed(&src, "/seed", 100).await;
    seed(&src, "/seed", 100).await;
    let seeded = snapshot(src.as_ref(), "/seed").await;
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let target = etcd.url(&unique_prefix());
    let etcd_store = EtcdStore::connect(&target, EtcdStoreOptions::default())
        .await
        .unwrap();
    etcd_store
        .put("/stale/key", b"left over", ExpectedVersion::NotExists)
        .await
        .unwrap();
    let stale = etcd_store.get("/stale/key").await.unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let nodes = three(
        dir.path(),
        "gen0",
        &zk,
        |i| format!("tenant/ns/persistent/gen0-n{i}"),
        &[],
    )
    .await;
    let url = nodes[0].url.clone();
    tokio::time::sleep(Duration::from_secs(1)).await;

    // Refused: exit code 1, the message names the store and what to do;
    // neither store changed, no migration recorded.
    let (code, _, err) = clusters(
        &url,
        &["metadata-migration", "start", "--target-url", &target],
    );
    assert_eq!(code, 1, "{err}");
    assert!(
        err.contains("not empty") && err.contains("/stale") && err.contains("wipe"),
        "{err}"
    );
    assert!(err.contains(&target), "{err}");
    assert_eq!(etcd_store.children("/").await.unwrap(), ["stale"]);
    let again = etcd_store.get("/stale/key").await.unwrap().unwrap();
    assert_eq!((again.value, again.stat), (stale.value, stale.stat));
    assert!(src
        .exists("/admin/metadata-migration/current")
        .await
        .unwrap()
        .is_none());
    let (code, _, err) = clusters(&url, &["metadata-migration", "status"]);
    assert_ne!(code, 0);
    assert!(err.contains("no metadata migration"), "{err}");

    // Accepted with --wipe-target: the stale key goes, everything moves.
    start(&url, &target, true).unwrap_or_else(|e| panic!("{e}\n{}", logs(&nodes)));
    let doc = until_ended(&url, &nodes, 120).await;
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", logs(&nodes));
    all_on(&nodes, &target).await;
    assert!(etcd_store.exists("/stale").await.unwrap().is_none());
    assert_eq!(snapshot(&etcd_store, "/seed").await, seeded);
    tokio::time::sleep(Duration::from_secs(1)).await;
    for p in nodes {
        stop_clean(p);
    }
    src.close().await.unwrap();
    let topics_meta = |gen: &str| {
        (0..3)
            .map(|i| format!("/managed-ledgers/tenant/ns/persistent/{gen}-n{i}"))
            .collect::<Vec<_>>()
    };
    let mut gen0 = Vec::new();
    for path in topics_meta("gen0") {
        let r = etcd_store.get(&path).await.unwrap().unwrap();
        gen0.push((path, r.value, r.stat.version));
    }

    // Every node restarted with its old configuration (the ZooKeeper URL):
    // all come back on etcd, the data intact. (New topics: the in-memory
    // bookie cluster of a process does not outlive it.)
    let nodes = three(
        dir.path(),
        "gen1",
        &zk,
        |i| format!("tenant/ns/persistent/gen1-n{i}"),
        &[],
    )
    .await;
    all_on(&nodes, &target).await;
    for p in &nodes {
        let text = std::fs::read_to_string(&p.log).unwrap();
        assert!(text.contains("was migrated to"), "{text}");
    }
    assert_eq!(snapshot(&etcd_store, "/seed").await, seeded);
    for (path, value, version) in &gen0 {
        let r = etcd_store.get(path).await.unwrap().unwrap();
        assert_eq!((&r.value, r.stat.version), (value, *version), "{path}");
    }
    tokio::time::sleep(Duration::from_secs(2)).await;

    // etcd → ZooKeeper back, under traffic. The old ZooKeeper tree is not
    // empty (the state before the move): refused, then wiped on request.
    let url = nodes[1].url.clone();
    let refused = start(&url, &zk, false).unwrap_err();
    assert!(refused.contains("not empty"), "{refused}");
    start(&url, &zk, true).unwrap_or_else(|e| panic!("{e}\n{}", logs(&nodes)));
    let doc = until_ended(&url, &nodes, 120).await;
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", logs(&nodes));
    assert_eq!(doc["sourceUrl"], target.as_str(), "{doc}");
    all_on(&nodes, &zk).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    for p in nodes {
        stop_clean(p);
    }
    // In ZooKeeper again, with the versions (reached by writes).
    let back = open_store(&zk, Default::default()).await.unwrap();
    assert_eq!(snapshot(back.as_ref(), "/seed").await, seeded);
    for (path, value, version) in &gen0 {
        let r = back.get(path).await.unwrap().unwrap();
        assert_eq!((&r.value, r.stat.version), (value, *version), "{path}");
    }
    let mut topics = back
        .children("/managed-ledgers/tenant/ns/persistent")
        .await
        .unwrap();
    topics.sort();
    assert_eq!(
        topics,
        ["gen0-n0", "gen0-n1", "gen0-n2", "gen1-n0", "gen1-n1", "gen1-n2"]
    );
    back.close().await.unwrap();
    etcd_store.close().await.unwrap();
}

/// Moves a parent with `children` children under traffic; returns how long
/// the migration took.
async fn big_parent(children: usize) -> Duration {
    let zk = zk_url();
    let src = open_store(&zk, Default::default()).await.unwrap();
    let seeding = Instant::now();
    seed(&src, "/big", children).await;
    eprintln!("seeded {children} children in {:?}", seeding.elapsed());
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let target = etcd.url(&unique_prefix());
    let dir = tempfile::tempdir().unwrap();
    let nodes = three(
        dir.path(),
        "big",
        &zk,
        |i| format!("tenant/ns/persistent/big-n{i}"),
        &[],
    )
    .await;
    let url = nodes[2].url.clone();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    start(&url, &target, false).unwrap_or_else(|e| panic!("{e}\n{}", logs(&nodes)));
    let doc = until_ended(&url, &nodes, 600).await;
    let took = started.elapsed();
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", logs(&nodes));
    assert!(
        doc["nodesCopied"].as_u64().unwrap() >= children as u64,
        "{doc}"
    );
    eprintln!(
        "moved {children} children in {took:?} (pause {} ms)",
        doc["pauseMs"]
    );
    all_on(&nodes, &target).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    for p in nodes {
        stop_clean(p);
    }
    let store = EtcdStore::connect(&target, EtcdStoreOptions::default())
        .await
        .unwrap();
    let mut names = store.children("/big").await.unwrap();
    assert_eq!(names.len(), children);
    names.sort();
    assert_eq!(names[0], "c000000");
    assert_eq!(names[children - 1], format!("c{:06}", children - 1));
    for i in [0, children / 2, children - 1] {
        let r = store.get(&format!("/big/c{i:06}")).await.unwrap().unwrap();
        assert_eq!(r.value, format!("value-{i}").as_bytes());
        assert_eq!(r.stat.version, 0);
    }
    // The parent's sequential counter came along: a sequential child never
    // takes a suffix the source already gave out (the copied children count
    // as creations in the target too, so it may be higher).
    let source_next = src
        .exists("/big")
        .await
        .unwrap()
        .unwrap()
        .next_sequential_suffix();
    assert!(source_next >= children as i64, "{source_next}");
    let (made, _) = store
        .create("/big/seq-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
        .await
        .unwrap();
    let suffix: i64 = made.strip_prefix("/big/seq-").unwrap().parse().unwrap();
    assert!(
        suffix >= source_next,
        "{made} repeats a suffix below {source_next}"
    );
    store.close().await.unwrap();
    src.close().await.unwrap();
    took
}

/// The time is in `bench/RESULTS.md` (about 90 s on two cores).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_with_60_000_children_moves_under_traffic() {
    let _one = SERIAL.lock().await;
    big_parent(60_000).await;
}

/// A participant's session lost during the copy: a node that does not lead is
/// stopped (SIGSTOP) for longer than its 4 s session, then continued. Its
/// registration and ephemeral nodes are gone meanwhile, so the coordinator
/// does not wait for it (one re-scan covers what it wrote): the migration may
/// flip while it is stopped. When it runs again its store has a new session:
/// it writes nothing until it registered again and read the record, then
/// follows the migration to the target; nothing written before is lost and
/// its traffic has no gap.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_whose_session_is_lost_during_the_copy_moves_with_the_others() {
    let _one = SERIAL.lock().await;
    let zk = zk_url();
    let src = open_store(&zk, Default::default()).await.unwrap();
    seed(&src, "/seed", 300).await;
    let before = snapshot(src.as_ref(), "/seed").await;
    src.close().await.unwrap();
    let etcd = tokio::task::block_in_place(|| EtcdCluster::start(1));
    let target = etcd.url(&unique_prefix());
    let dir = tempfile::tempdir().unwrap();
    // Pages of 10 nodes, 100 ms apart: COPYING lasts a few seconds.
    let flags = [
        "--metadata-store-session-timeout-ms",
        "4000",
        "--metadata-migration-page-size",
        "10",
        "--metadata-migration-step-interval-ms",
        "100",
        "--metadata-migration-ack-timeout-ms",
        "10000",
    ];
    let nodes = three(
        dir.path(),
        "lost",
        &zk,
        |i| format!("tenant/ns/persistent/lost-n{i}"),
        &flags,
    )
    .await;
    let lead = leader(&nodes).await;
    let stopped = (lead + 1) % 3;
    let url = nodes[lead].url.clone();
    tokio::time::sleep(Duration::from_secs(1)).await;
    start(&url, &target, false).unwrap_or_else(|e| panic!("{e}\n{}", logs(&nodes)));
    let deadline = Instant::now() + Duration::from_secs(60);
    while status(&url)["phase"] != "COPYING" {
        assert!(Instant::now() < deadline, "{}", logs(&nodes));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let pid = nodes[stopped].child.id().to_string();
    assert!(Command::new("kill")
        .args(["-STOP", &pid])
        .status()
        .unwrap()
        .success());
    // Longer than the session: ZooKeeper expires it.
    tokio::time::sleep(Duration::from_secs(7)).await;
    let doc = status(&url);
    eprintln!(
        "phase while the participant was stopped past its session: {}",
        doc["phase"]
    );
    assert!(Command::new("kill")
        .args(["-CONT", &pid])
        .status()
        .unwrap()
        .success());
    let doc = until_ended(&url, &nodes, 120).await;
    assert_eq!(doc["phase"], "COMPLETED", "{doc}\n{}", logs(&nodes));
    all_on(&nodes, &target).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let store = EtcdStore::connect(&target, EtcdStoreOptions::default())
        .await
        .unwrap();
    assert_eq!(snapshot(&store, "/seed").await, before);
    store.close().await.unwrap();
    for (i, mut p) in nodes.into_iter().enumerate() {
        if i != stopped {
            stop_clean(p);
            continue;
        }
        // The stopped node lost its session (and with it its topic's
        // ownership): it may have reloaded its topic, which is the lost
        // session's doing, not the migration's. Nothing acknowledged is lost.
        assert!(Command::new("kill")
            .args(["-TERM", &p.child.id().to_string()])
            .status()
            .unwrap()
            .success());
        let code = p.child.wait().unwrap();
        let text = std::fs::read_to_string(&p.log).unwrap_or_default();
        assert!(code.success(), "serve exited {code}: {text}");
        let (published, failures, gaps) = traffic(&text);
        eprintln!("stopped node: {published} published, {failures} publish failures, {gaps} gaps");
        assert!(published > 0, "{text}");
        assert_eq!(gaps, 0, "{text}");
        assert!(
            text.contains("ZooKeeper session expired"),
            "the session was really lost:\n{text}"
        );
    }
}
