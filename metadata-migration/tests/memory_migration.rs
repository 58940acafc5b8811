//! Memory → memory migrations: the gate, dirty tracking, resume, verify, flip
//! (the tree's edge cases: `memory_migration_tree.rs`).

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bkswitch_metadata_migration::{
    abort, read_current, Coordinator, MigrationRequest, Phase, CURRENT_PATH, PARTICIPANTS_PATH,
};
use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MetadataStore};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn live_writers_keep_their_versions_across_the_flip() {
    let (stores, opener) = setup(400, 0).await;
    let p1 = participant(opener.clone(), "memory://src", "broker-1").await;
    let p2 = participant(opener.clone(), "memory://src", "broker-2").await;
    let topics: Vec<String> = (0..40).map(topic).collect();
    let w1 = start_writer(p1.clone(), topics[..20].to_vec(), "a").await;
    let w2 = start_writer(p2.clone(), topics[20..].to_vec(), "b").await;
    tokio::time::sleep(Duration::from_millis(50)).await;

    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m1"),
        coordinator_options(),
    )
    .await
    .expect("start");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    assert!(rec.copied >= 400, "{rec:?}");
    wait_swapped(&[&p1, &p2], "memory://dst").await;
    let before = w1.writes.load(Ordering::Relaxed) + w2.writes.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = w1.writes.load(Ordering::Relaxed) + w2.writes.load(Ordering::Relaxed);
    assert!(
        after > before + 10,
        "writes go on in the target: {before} → {after}"
    );
    for w in [&w1, &w2] {
        w.stop.store(true, Ordering::Relaxed);
    }
    let held1 = w1.handle.await.expect("writer 1");
    let held2 = w2.handle.await.expect("writer 2");
    // The migration caused no conflict: versions read before it still work.
    assert_eq!(w1.conflicts.load(Ordering::Relaxed), 0);
    assert_eq!(w2.conflicts.load(Ordering::Relaxed), 0);
    // The writes after the flip went to the target, with the versions held.
    let dst = stores.session("dst");
    for (path, v) in held1.iter().chain(held2.iter()) {
        let t = dst.get(path).await.expect("get").expect("in target");
        assert_eq!(t.stat.version, *v, "{path}");
    }
    // The source is frozen at the flip; the rest of the target equals it.
    let frozen = stores.session("src");
    for i in 40..400 {
        let s = frozen.get(&topic(i)).await.expect("get").expect("src");
        let t = dst.get(&topic(i)).await.expect("get").expect("dst");
        assert_eq!((s.value, s.stat.version), (t.value, t.stat.version));
    }
    let idgen = dst
        .exists("/ledgers/idgen")
        .await
        .expect("exists")
        .expect("idgen");
    assert_eq!(
        idgen.next_sequential_suffix(),
        7,
        "the id counter never goes back"
    );
    let (id, _) = dst
        .create("/ledgers/idgen/ID-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
        .await
        .expect("seq");
    assert_eq!(id, "/ledgers/idgen/ID-0000000007");
    // Nodes created during the migration are in the target.
    assert!(!dst.children("/new/a").await.expect("children").is_empty());
    assert_eq!(p1.swaps(), 1);
    assert!(rec.pause_ms < 1_000, "{rec:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pause_does_not_grow_with_the_tree() {
    let mut pause_nodes = Vec::new();
    for n in [300, 3_000] {
        let (stores, opener) = setup(n, 0).await;
        let p = participant(opener.clone(), "memory://src", "broker-1").await;
        let w = start_writer(p.clone(), (0..5).map(topic).collect(), "a").await;
        let mut c = Coordinator::start(
            src(&stores),
            opener.as_ref(),
            request("m"),
            coordinator_options(),
        )
        .await
        .expect("start");
        let rec = c.run().await.expect("run");
        assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
        wait_swapped(&[&p], "memory://dst").await;
        w.stop.store(true, Ordering::Relaxed);
        w.handle.await.expect("writer");
        assert_eq!(w.conflicts.load(Ordering::Relaxed), 0);
        assert!(rec.copied as usize >= n);
        pause_nodes.push(rec.pause_nodes);
        // The nodes nobody wrote are in the target as they were.
        let dst = stores.session("dst");
        for i in 5..n {
            let t = dst.get(&topic(i)).await.unwrap().expect("copied");
            assert_eq!(t.stat.version, (i % 3) as i64);
        }
    }
    // Only the paths written since the last round are handled in the pause
    // (the writer's 5 topics, its new nodes and their parents): the same
    // bound for 300 and 3,000 topics, far below either tree.
    for n in &pause_nodes {
        assert!(*n <= 100, "pause handled {pause_nodes:?} nodes");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_coordinator_resumes_mid_copy_and_mid_catch_up() {
    let (stores, opener) = setup(1_000, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    // Pause only when a round finds nothing (the test writes between steps).
    let coordinator_options = || bkswitch_metadata_migration::CoordinatorOptions {
        pause_threshold: 0,
        ..common::coordinator_options()
    };
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    assert_eq!(c.step().await.expect("prep"), Phase::Copying);
    for _ in 0..3 {
        assert_eq!(c.step().await.expect("copy"), Phase::Copying);
    }
    let cursor = c.record().copy_cursor.clone().expect("cursor");
    drop(c); // the coordinator dies mid-COPYING
             // Writes before and after the cursor meanwhile.
    p.put(&topic(0), b"changed-0", ExpectedVersion::Any)
        .await
        .expect("put");
    p.put(&topic(999), b"changed-999", ExpectedVersion::Any)
        .await
        .expect("put");
    p.delete(&topic(1), ExpectedVersion::Any)
        .await
        .expect("delete");
    let mut c = Coordinator::resume(src(&stores), opener.as_ref(), coordinator_options())
        .await
        .expect("resume")
        .expect("a migration to resume");
    assert_eq!(c.record().copy_cursor.as_deref(), Some(cursor.as_str()));
    let copied_before = c.record().copied;
    loop {
        if c.step().await.expect("step") == Phase::CatchUp {
            break;
        }
    }
    assert!(
        c.record().copied - copied_before < 1_000,
        "the copy resumed after the cursor instead of starting again"
    );
    drop(c); // dies at the start of CATCH_UP
    p.put(&topic(5), b"changed-5", ExpectedVersion::Any)
        .await
        .expect("put");
    let mut c = Coordinator::resume(src(&stores), opener.as_ref(), coordinator_options())
        .await
        .expect("resume")
        .expect("a migration to resume");
    assert_eq!(c.step().await.expect("round"), Phase::CatchUp);
    drop(c); // dies mid-CATCH_UP
    p.put(&topic(6), b"changed-6", ExpectedVersion::Any)
        .await
        .expect("put");
    let mut c = Coordinator::resume(src(&stores), opener.as_ref(), coordinator_options())
        .await
        .expect("resume")
        .expect("a migration to resume");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    wait_swapped(&[&p], "memory://dst").await;
    let n = assert_same_tree(&stores.session("src"), &stores.session("dst")).await;
    assert!(n >= 999);
    let dst = stores.session("dst");
    assert_eq!(
        dst.get(&topic(999)).await.unwrap().unwrap().value,
        b"changed-999"
    );
    assert_eq!(
        dst.get(&topic(6)).await.unwrap().unwrap().value,
        b"changed-6"
    );
    assert!(dst.get(&topic(1)).await.unwrap().is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_never_acknowledges_fails_the_migration_and_writes_go_on() {
    let (stores, opener) = setup(50, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    // A participant that registered and never answers.
    let silent = stores.session("src");
    silent
        .create(
            &format!("{PARTICIPANTS_PATH}/stuck-broker"),
            b"{}",
            CreateMode::EPHEMERAL,
        )
        .await
        .expect("register");
    let options = bkswitch_metadata_migration::CoordinatorOptions {
        ack_timeout: Duration::from_millis(300),
        ..coordinator_options()
    };
    let mut c = Coordinator::start(src(&stores), opener.as_ref(), request("m"), options)
        .await
        .expect("start");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Failed);
    let error = rec.error.expect("error");
    assert!(
        error.contains("stuck-broker") && error.contains("never paused"),
        "{error}"
    );
    assert_eq!(rec.copied, 0, "nothing was copied");
    // Writes work, on the source.
    tokio::time::sleep(Duration::from_millis(50)).await;
    p.put(&topic(1), b"after", ExpectedVersion::Any)
        .await
        .expect("write after FAILED");
    assert_eq!(p.url(), "memory://src");
    assert!(!p.is_paused());
    // A new migration can start after the failed one.
    silent.close().await.expect("close");
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        MigrationRequest {
            wipe_target: Some("/".to_owned()),
            protected: Vec::new(),
            ..request("m2")
        },
        coordinator_options(),
    )
    .await
    .expect("start again");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_does_not_close_its_gate_fails_the_migration_in_the_pause() {
    let (stores, opener) = setup(50, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    while c.step().await.expect("step") != Phase::Paused {}
    // Acks of the tracking and rounds were given; now a participant that
    // registers and stays silent holds the pause.
    let silent = stores.session("src");
    silent
        .create(
            &format!("{PARTICIPANTS_PATH}/late-broker"),
            b"{}",
            CreateMode::EPHEMERAL,
        )
        .await
        .expect("register");
    let options = bkswitch_metadata_migration::CoordinatorOptions {
        ack_timeout: Duration::from_millis(300),
        ..coordinator_options()
    };
    let mut c = Coordinator::resume(src(&stores), opener.as_ref(), options)
        .await
        .expect("resume")
        .expect("running");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Failed, "{rec:?}");
    assert!(rec.error.as_deref().unwrap_or("").contains("late-broker"));
    for _ in 0..100 {
        if !p.is_paused() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    p.put(&topic(2), b"after", ExpectedVersion::Any)
        .await
        .expect("writes resume");
    assert_eq!(p.url(), "memory://src");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dirty_target_is_refused_untouched_and_wiped_on_request() {
    let (stores, opener) = setup(30, 0).await;
    let dst = stores.session("dst");
    dst.put("/stale/x", b"old", ExpectedVersion::Any)
        .await
        .expect("put");
    dst.put("/stale/x", b"old2", ExpectedVersion::Any)
        .await
        .expect("put");
    let e = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect_err("dirty target");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    let msg = e.to_string();
    assert!(
        msg.contains("memory://dst") && msg.contains("/stale") && msg.contains("wipeTarget"),
        "{msg}"
    );
    // Nothing was written anywhere.
    let s = stores.session("src");
    assert!(s.get(CURRENT_PATH).await.unwrap().is_none());
    assert!(s.get("/admin").await.unwrap().is_none());
    let x = dst.get("/stale/x").await.unwrap().expect("untouched");
    assert_eq!((x.value.as_slice(), x.stat.version), (&b"old2"[..], 1));
    // With the wipe it goes.
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        MigrationRequest {
            wipe_target: Some("/".to_owned()),
            protected: Vec::new(),
            ..request("m")
        },
        coordinator_options(),
    )
    .await
    .expect("start with wipe");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    assert!(dst.get("/stale").await.unwrap().is_none());
    assert_same_tree(&stores.session("src"), &dst).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verification_refuses_the_flip_on_a_seeded_difference() {
    let (stores, opener) = setup(200, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    while c.step().await.expect("step") != Phase::CatchUp {}
    // Corrupt the target behind the migration's back: a node nobody wrote.
    let dst = stores.session("dst");
    dst.put(&topic(77), b"corrupt", ExpectedVersion::Any)
        .await
        .expect("seed");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Failed, "{rec:?}");
    let error = rec.error.expect("error");
    assert!(
        error.contains(&topic(77)) && error.contains("differ"),
        "{error}"
    );
    // No flip: the participant stays on the source and writes.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(p.url(), "memory://src");
    p.put(&topic(3), b"after", ExpectedVersion::Any)
        .await
        .expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn abort_reopens_writes_and_stops_the_coordinator() {
    let (stores, opener) = setup(300, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let mut c = start_coordinator(&stores, &opener, "m").await;
    while c.step().await.expect("step") != Phase::Paused {}
    // Wait until the participant closed its gate.
    wait_paused(&[&p]).await;
    let e = p
        .put(&topic(1), b"x", ExpectedVersion::Any)
        .await
        .expect_err("paused");
    assert_eq!(e.kind(), ErrorKind::WritesPaused);
    assert!(e.is_retryable());
    let rec = abort(stores.session("src").as_ref_dyn(), "operator")
        .await
        .expect("abort");
    assert_eq!(rec.phase, Phase::Aborted);
    let e = c.step().await.expect_err("the record changed");
    assert_eq!(e.kind(), ErrorKind::BadVersion);
    for _ in 0..200 {
        if !p.is_paused() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    p.put(&topic(1), b"x", ExpectedVersion::Any)
        .await
        .expect("writes resume");
    let (cur, _) = read_current(&stores.session("src")).await.unwrap().unwrap();
    assert_eq!(cur.phase, Phase::Aborted);
}

trait AsDyn {
    fn as_ref_dyn(&self) -> &dyn MetadataStore;
}
impl<T: MetadataStore> AsDyn for T {
    fn as_ref_dyn(&self) -> &dyn MetadataStore {
        self
    }
}
