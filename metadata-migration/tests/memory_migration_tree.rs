//! Memory → memory migrations of the tree's edge cases: watches, ephemerals
//! and late nodes across the flip, overflowing dirty sets, wide parents,
//! stale coordinators, targets still in use, resumed copies.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_migration::{
    abort, Coordinator, MigratingStore, MigrationRequest, NamedMemoryStores, Phase, StoreOpener,
};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataStore, Notification,
};
use common::*;
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watches_ephemerals_and_late_nodes_follow_the_target() {
    let (stores, opener) = setup(20, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    p.create("/loadbalance/brokers/b1", b"me", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    let mut w = p.watch(&topic(3)).await.expect("watch");
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&p], "memory://dst").await;
    let dst = stores.session("dst");
    // The ephemeral was not copied but recreated by its owner.
    let b1 = dst
        .get("/loadbalance/brokers/b1")
        .await
        .unwrap()
        .expect("recreated");
    assert!(b1.stat.ephemeral);
    assert_eq!(b1.value, b"me");
    // The old watch stream re-read the node at the swap, and reports the
    // target's changes.
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(100), w.next()).await {
        let _ = n;
    }
    dst.put(&topic(3), b"from-another-node", ExpectedVersion::Any)
        .await
        .expect("put");
    let n = tokio::time::timeout(Duration::from_secs(2), w.next())
        .await
        .expect("a notification from the target")
        .expect("stream open");
    assert_eq!(n, Notification::Modified { path: topic(3) });
    // A node started later with the old URL follows the target.
    let late = participant(opener.clone(), "memory://src", "broker-late").await;
    assert_eq!(late.url(), "memory://dst");
    assert_eq!(
        late.get(&topic(3)).await.unwrap().unwrap().value,
        b"from-another-node"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_overflowing_dirty_set_falls_back_to_a_full_rescan() {
    let (stores, opener) = setup(300, 0).await;
    let p = MigratingStore::open(
        "memory://src",
        opener.clone(),
        bkswitch_metadata_migration::ParticipantOptions {
            dirty_limit: 4,
            ..participant_options("broker-1")
        },
    )
    .await
    .expect("participant");
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    assert_eq!(c.step().await.expect("prep"), Phase::Copying);
    assert_eq!(c.step().await.expect("copy"), Phase::Copying);
    for i in 0..20 {
        p.put(&topic(i), b"overflow", ExpectedVersion::Any)
            .await
            .expect("put");
    }
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    assert!(rec.rescans >= 1, "{rec:?}");
    wait_swapped(&[&p], "memory://dst").await;
    assert_same_tree(&stores.session("src"), &stores.session("dst")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_that_dies_with_unpublished_changes_triggers_a_rescan() {
    let (stores, opener) = setup(300, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let doomed_store = stores.session("src");
    let doomed = MigratingStore::wrap(
        Arc::new(doomed_store.clone()),
        "memory://src",
        opener.clone(),
        participant_options("broker-doomed"),
    )
    .await
    .expect("participant");
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    while c.step().await.expect("step") != Phase::CatchUp {}
    // Wait until it tracks, then it writes and dies (its session ends
    // without publishing).
    doomed
        .put(&topic(9), b"last words", ExpectedVersion::Any)
        .await
        .expect("put");
    // It crashes: its session ends (last handle dropped) without a word.
    drop(doomed);
    drop(doomed_store);
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    assert!(rec.rescans >= 1, "{rec:?}");
    wait_swapped(&[&p], "memory://dst").await;
    let dst = stores.session("dst");
    assert_eq!(
        dst.get(&topic(9)).await.unwrap().unwrap().value,
        b"last words"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_with_thousands_of_children_is_copied_with_bounded_walk_memory() {
    let (stores, opener) = setup(10, 4_000).await;
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed);
    assert!(rec.copied >= 4_000);
    let n = assert_same_tree(&stores.session("src"), &stores.session("dst")).await;
    assert!(n >= 4_010);
    // The walk held one level of names at a time, never the tree.
    assert!(c.peak_walk_names() <= 4_010, "{}", c.peak_walk_names());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_thousand_children() {
    let (stores, opener) = setup(0, 60_000).await;
    let options = bkswitch_metadata_migration::CoordinatorOptions {
        page_size: 5_000,
        ..coordinator_options()
    };
    let mut c = Coordinator::start(src(&stores), opener.as_ref(), request("m"), options)
        .await
        .expect("start");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed);
    assert!(assert_same_tree(&stores.session("src"), &stores.session("dst")).await >= 60_000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paused_watch_follows_the_gate_and_completed_keeps_the_record() {
    let (stores, opener) = setup(20, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let mut paused = p.paused_watch();
    assert!(!*paused.borrow_and_update());
    assert!(p.completed().is_none());
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("w1"),
        coordinator_options(),
    )
    .await
    .expect("start");
    while c.record().phase != Phase::Paused {
        c.step().await.expect("step");
    }
    // The gate closes: the watch turns true, writes are refused.
    tokio::time::timeout(Duration::from_secs(10), paused.wait_for(|p| *p))
        .await
        .expect("the gate closes")
        .expect("watch");
    assert!(p.is_paused());
    let e = p
        .put("/during", b"x", ExpectedVersion::Any)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WritesPaused);
    assert_eq!(c.step().await.expect("flip"), Phase::Completed);
    // The flip reopens writes on the target; the record is kept.
    tokio::time::timeout(Duration::from_secs(10), paused.wait_for(|p| !*p))
        .await
        .expect("the gate reopens")
        .expect("watch");
    wait_swapped(&[&p], "memory://dst").await;
    let done = p.completed().expect("the followed record");
    assert_eq!(done.id, "w1");
    assert_eq!(done.phase, Phase::Completed);
    p.put("/after", b"x", ExpectedVersion::Any)
        .await
        .expect("writes reopen");

    // Abort during the pause reopens writes on the source as well.
    let (stores, opener) = setup(5, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-2").await;
    let mut paused = p.paused_watch();
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("w2"),
        coordinator_options(),
    )
    .await
    .expect("start");
    while c.record().phase != Phase::Paused {
        c.step().await.expect("step");
    }
    tokio::time::timeout(Duration::from_secs(10), paused.wait_for(|p| *p))
        .await
        .expect("the gate closes")
        .expect("watch");
    abort(src(&stores).as_ref(), "test").await.expect("abort");
    tokio::time::timeout(Duration::from_secs(10), paused.wait_for(|p| !*p))
        .await
        .expect("the gate reopens after the abort")
        .expect("watch");
    assert!(p.completed().is_none());
    assert_eq!(p.url(), "memory://src");
}

/// Two coordinators for a while (a leader that has not yet seen it lost the
/// lead): the stale one, left at COPYING, must not copy the source again
/// over the target once the other one flipped and writes went on there
/// (the copy of an old value over a newer one loses an acknowledged write).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_coordinator_copies_nothing_after_another_one_flipped() {
    let (stores, opener) = setup(50, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let stat = p
        .put(&topic(0), b"before", ExpectedVersion::Any)
        .await
        .expect("put");
    let mut stale = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    assert_eq!(stale.step().await.expect("prep"), Phase::Copying);
    // Another coordinator takes over and runs it to the end.
    let mut other = Coordinator::resume(src(&stores), opener.as_ref(), coordinator_options())
        .await
        .expect("resume")
        .expect("running");
    assert_eq!(other.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&p], "memory://dst").await;
    // A write on the target, acknowledged.
    let after = p
        .put(&topic(0), b"after", ExpectedVersion::Exactly(stat.version))
        .await
        .expect("write after the flip");
    // The stale coordinator's next step is refused before it writes.
    let err = stale.step().await.expect_err("stale");
    assert_eq!(err.kind(), ErrorKind::BadVersion, "{err}");
    let dst = stores.session("dst");
    let r = dst.get(&topic(0)).await.unwrap().unwrap();
    assert_eq!(
        (r.value.as_slice(), r.stat.version),
        (&b"after"[..], after.version)
    );
}

/// A participant lost in the pause (its session ends without a word): the
/// pause re-scans the whole tree, completes, and the record counts the
/// re-scan.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_lost_in_the_pause_is_covered_by_a_counted_rescan() {
    let (stores, opener) = setup(100, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let doomed_store = stores.session("src");
    let doomed = MigratingStore::wrap(
        Arc::new(doomed_store.clone()),
        "memory://src",
        opener.clone(),
        participant_options("broker-doomed"),
    )
    .await
    .expect("participant");
    let mut c = Coordinator::start(
        src(&stores),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    while c.step().await.expect("step") != Phase::Paused {}
    assert_eq!(c.record().rescans, 0);
    drop(doomed);
    drop(doomed_store);
    // Waited for (its session may have ended while it lives on), then
    // presumed dead after the ack timeout.
    let mut c = Coordinator::resume(
        src(&stores),
        opener.as_ref(),
        bkswitch_metadata_migration::CoordinatorOptions {
            ack_timeout: Duration::from_millis(300),
            ..coordinator_options()
        },
    )
    .await
    .expect("resume")
    .expect("running");
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    assert_eq!(rec.rescans, 1, "{rec:?}");
    assert!(
        rec.pause_nodes >= 100,
        "the pause re-scanned the tree: {rec:?}"
    );
    wait_swapped(&[&p], "memory://dst").await;
}

/// A node still registered in the target (it has not followed an earlier
/// migration away from it, or is configured with it): wiping the target or
/// copying into it would leave it writing where nobody reads. Refused, with
/// both stores untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_that_nodes_still_use_is_refused_even_with_wipe() {
    let (stores, opener) = setup(20, 0).await;
    let _p = participant(opener.clone(), "memory://src", "broker-1").await;
    let lagging = participant(opener.clone(), "memory://dst", "broker-lagging").await;
    lagging
        .put("/left/behind", b"x", ExpectedVersion::Any)
        .await
        .expect("put");
    let before_src = tree(&stores.session("src")).await;
    let before_dst = tree(&stores.session("dst")).await;
    let err = Coordinator::start(
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
    .expect_err("refused");
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let msg = err.to_string();
    assert!(
        msg.contains("broker-lagging") && msg.contains("still use the target"),
        "{msg}"
    );
    assert_eq!(tree(&stores.session("src")).await, before_src);
    assert_eq!(tree(&stores.session("dst")).await, before_dst);
    // Once it left, the start goes through.
    lagging.close().await.expect("close");
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
    .expect("start");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
}

/// The copy takes siblings in batches and walks below those with children
/// afterwards; its cursor must never pass a subtree still to walk. Copied
/// in pages of 7 by a coordinator that dies after every page, a tree where
/// some siblings have subtrees and others not is complete when COPYING ends
/// (before any catch-up or verification could mend a gap).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_resumed_after_every_page_misses_no_subtree() {
    let stores = NamedMemoryStores::new();
    let s = stores.session("src");
    for i in 0..40 {
        let a = format!("/t/a{i:02}");
        s.put(&a, b"a", ExpectedVersion::Any).await.expect("put");
        if i % 3 == 0 {
            for j in 0..(i % 7 + 1) {
                s.put(&format!("{a}/b{j}"), b"b", ExpectedVersion::Any)
                    .await
                    .expect("put");
                if j % 2 == 1 {
                    s.put(&format!("{a}/b{j}/c"), b"c", ExpectedVersion::Any)
                        .await
                        .expect("put");
                }
            }
        }
    }
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let options = || bkswitch_metadata_migration::CoordinatorOptions {
        page_size: 7,
        ..coordinator_options()
    };
    let mut c = Coordinator::start(src(&stores), opener.as_ref(), request("m"), options())
        .await
        .expect("start");
    let mut pages = 0;
    loop {
        let phase = c.step().await.expect("step");
        if phase == Phase::CatchUp {
            break;
        }
        pages += 1;
        drop(c); // dies after every page
        c = Coordinator::resume(src(&stores), opener.as_ref(), options())
            .await
            .expect("resume")
            .expect("a migration to resume");
    }
    assert!(pages > 10, "{pages} pages");
    let n = assert_same_tree(&stores.session("src"), &stores.session("dst")).await;
    assert!(n > 40, "{n}");
}
