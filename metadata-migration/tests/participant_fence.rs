//! A participant whose session ended writes nothing until it registered
//! again, so the coordinator need not wait for it: a gone registration and a
//! dead incarnation (superseded by a later registration of the same node)
//! cost one re-scan, never the acknowledgement timeout.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_metadata_migration::{
    joined_path, Coordinator, CoordinatorOptions, MigratingStore, MigrationRequest,
    NamedMemoryStores, ParticipantOptions, Phase, StoreOpener, PARTICIPANTS_PATH,
};
use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MetadataStore};
use common::*;

fn request() -> MigrationRequest {
    MigrationRequest {
        id: Some("m".to_owned()),
        source_url: "memory://src".to_owned(),
        target_url: "memory://dst".to_owned(),
        wipe_target: None,
        protected: Vec::new(),
    }
}

/// An acknowledgement timeout far above what any test here may take.
fn slow_acks() -> CoordinatorOptions {
    CoordinatorOptions {
        ack_timeout: Duration::from_secs(30),
        ..coordinator_options()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_whose_session_ended_writes_nothing_until_it_registered_again() {
    let stores = NamedMemoryStores::new();
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let session = stores.session("src");
    let p = MigratingStore::wrap(
        Arc::new(session.clone()),
        "memory://src",
        opener,
        ParticipantOptions {
            // Slow on purpose: the write below comes before the participant
            // looks at anything.
            poll_interval: Duration::from_secs(30),
            ..participant_options("p")
        },
    )
    .await
    .expect("participant");
    p.put("/before", b"x", ExpectedVersion::Any)
        .await
        .expect("write");
    session.expire_session().expect("expire");
    // Its registration went with the session: the next write is refused
    // (retryable), whatever the participant has seen so far — unless its
    // control loop, woken by the session event, registered again first
    // (then the write may go through: it is registered).
    match p.put("/after", b"x", ExpectedVersion::Any).await {
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::WritesPaused, "{e}");
            assert!(session.get("/after").await.unwrap().is_none());
        }
        Ok(_) => assert!(
            session
                .exists(&format!("{PARTICIPANTS_PATH}/p"))
                .await
                .unwrap()
                .is_some(),
            "a write went through after the session ended, unregistered"
        ),
    }
    // Once it registered again, writes go on.
    p.reconcile().await.expect("reconcile");
    assert!(session
        .exists(&format!("{PARTICIPANTS_PATH}/p"))
        .await
        .unwrap()
        .is_some());
    p.put("/after", b"x", ExpectedVersion::Any)
        .await
        .expect("write");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_incarnation_and_a_gone_registration_are_not_waited_for() {
    let stores = NamedMemoryStores::new();
    populate(&stores.session("src"), 200, 0).await;
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    // A process of node `n` that died during the copy: its registration
    // (still alive: its session has not expired yet) never answers, and it
    // had joined the migration.
    let dead = stores.session("src");
    dead.create(
        &format!("{PARTICIPANTS_PATH}/n-1"),
        br#"{"node":"n"}"#,
        CreateMode::EPHEMERAL,
    )
    .await
    .unwrap();
    // A participant of another node that joined and whose registration is
    // gone (its process died, its session expired).
    let live = participant(opener.clone(), "memory://src", "other").await;
    let mut c = Coordinator::start(src.clone(), opener.as_ref(), request(), slow_acks())
        .await
        .expect("start");
    for name in ["n-1", "ghost"] {
        src.put(
            &format!("{}/{name}", joined_path("m")),
            b"",
            ExpectedVersion::Any,
        )
        .await
        .unwrap();
    }
    // The same node, restarted: a later registration.
    tokio::time::sleep(Duration::from_millis(5)).await;
    let restarted = MigratingStore::open(
        "memory://src",
        opener.clone(),
        ParticipantOptions {
            node: Some("n".to_owned()),
            ..participant_options("n-2")
        },
    )
    .await
    .expect("restarted");
    let started = Instant::now();
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "waited {:?} (the acknowledgement timeout is 30 s)",
        started.elapsed()
    );
    // Covered by one re-scan, not one per round.
    assert_eq!(rec.rescans, 1, "{rec:?}");
    wait_swapped(&[&live, &restarted], "memory://dst").await;
    dead.close().await.unwrap();
}

/// M1: a publication that fails part-way (one transient error on a page of
/// dirty paths) keeps what it did not publish: the next answer publishes it
/// and the flip carries the acknowledged write. Before, the dirty set was
/// emptied first, the next answer published nothing, and the coordinator
/// flipped without that write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_publication_keeps_its_paths() {
    use bkswitch_metadata_store::testkit::{InjectedFailure, RecordingStore};
    let stores = NamedMemoryStores::new();
    populate(&stores.session("src"), 20, 0).await;
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let recording = Arc::new(RecordingStore::new(Arc::new(stores.session("src"))));
    let p = MigratingStore::wrap(
        recording.clone(),
        "memory://src",
        opener.clone(),
        participant_options("p"),
    )
    .await
    .expect("participant");
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    let mut c = Coordinator::start(
        src.clone(),
        opener.as_ref(),
        request(),
        CoordinatorOptions {
            pause_threshold: 1,
            ..coordinator_options()
        },
    )
    .await
    .expect("start");
    while c.record().phase != Phase::CatchUp {
        c.step().await.expect("step");
    }
    // Round one finds two paths (more than the threshold): verified, and a
    // second round follows.
    p.put("/a", b"1", ExpectedVersion::Any).await.unwrap();
    p.put("/b", b"1", ExpectedVersion::Any).await.unwrap();
    assert_eq!(c.step().await.expect("round 1"), Phase::CatchUp);
    // An acknowledged write, then one failure on the next page it publishes
    // (in this round or in the pause).
    let stat = p.put("/k", b"acked", ExpectedVersion::Any).await.unwrap();
    recording.fail_writes_matching("/dirty/", 1, InjectedFailure::Unavailable);
    let rec = c.run().await.expect("run");
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    let dst = stores.session("dst");
    let k = dst.get("/k").await.unwrap().expect("/k copied");
    assert_eq!(
        (k.value.as_slice(), k.stat.version),
        (&b"acked"[..], stat.version)
    );
    wait_swapped(&[&p], "memory://dst").await;
}

/// M3: the ephemeral nodes of an ended session do not come back at the
/// flip; only those still in the source as the participant left them are
/// recreated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ephemerals_of_an_ended_session_do_not_come_back() {
    let stores = NamedMemoryStores::new();
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let session = stores.session("src");
    let p = MigratingStore::wrap(
        Arc::new(session.clone()),
        "memory://src",
        opener.clone(),
        participant_options("p"),
    )
    .await
    .expect("participant");
    p.create("/election/cand-0001", b"me", CreateMode::EPHEMERAL)
        .await
        .unwrap();
    p.create("/owners/t1", b"me", CreateMode::EPHEMERAL)
        .await
        .unwrap();
    // The session ends: both go. The participant registers again and its
    // owner takes a new candidate node.
    session.expire_session().unwrap();
    p.reconcile().await.unwrap();
    p.create("/election/cand-0002", b"me", CreateMode::EPHEMERAL)
        .await
        .unwrap();
    p.create("/owners/t2", b"me", CreateMode::EPHEMERAL)
        .await
        .unwrap();
    // One of the new ones is deleted behind the participant's back.
    stores
        .session("src")
        .delete("/owners/t2", ExpectedVersion::Any)
        .await
        .unwrap();
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    let mut c = Coordinator::start(src, opener.as_ref(), request(), coordinator_options())
        .await
        .expect("start");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&p], "memory://dst").await;
    let dst = stores.session("dst");
    assert!(dst.exists("/election/cand-0002").await.unwrap().is_some());
    for gone in ["/election/cand-0001", "/owners/t1", "/owners/t2"] {
        assert!(
            dst.exists(gone).await.unwrap().is_none(),
            "{gone} came back at the flip"
        );
    }
}

/// Found by the migration nemesis (seed 1035 with store faults): a failed
/// write of the joined marker left the participant tracking without a
/// marker, so when it died later with unpublished writes nobody re-scanned
/// and they were lost. Now a participant that could not write its marker
/// starts tracking again, and has its marker before it acknowledges.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_participant_acknowledges_only_once_its_marker_is_written() {
    use bkswitch_metadata_store::testkit::{InjectedFailure, RecordingStore};
    let stores = NamedMemoryStores::new();
    populate(&stores.session("src"), 10, 0).await;
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let recording = Arc::new(RecordingStore::new(Arc::new(stores.session("src"))));
    recording.fail_writes_matching("/joined/", 1, InjectedFailure::Unavailable);
    let p = MigratingStore::wrap(
        recording.clone(),
        "memory://src",
        opener.clone(),
        participant_options("p"),
    )
    .await
    .expect("participant");
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    let mut c = Coordinator::start(src.clone(), opener.as_ref(), request(), slow_acks())
        .await
        .expect("start");
    // PREPARATION: every participant acknowledged tracking.
    assert_eq!(c.step().await.expect("preparation"), Phase::Copying);
    assert!(
        src.exists(&format!("{}/p", joined_path("m")))
            .await
            .unwrap()
            .is_some(),
        "acknowledged without its joined marker"
    );
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&p], "memory://dst").await;
}

/// A read that began on the source just before the flip and met it closed
/// (the participant closes a source it opened once it moved) is read again
/// on the target: callers see the value, never "the store is closed"
/// (CI caught a status call failing that way right at a flip).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_across_the_flip_is_answered_by_the_target() {
    use bkswitch_metadata_store::testkit::RecordingStore;
    let stores = NamedMemoryStores::new();
    let session = stores.session("src");
    session
        .put("/slow", b"v", ExpectedVersion::Any)
        .await
        .unwrap();
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let recording = Arc::new(RecordingStore::new(Arc::new(session.clone())));
    let p = MigratingStore::wrap(
        recording.clone(),
        "memory://src",
        opener.clone(),
        participant_options("p"),
    )
    .await
    .expect("participant");
    let hold = recording.hold_reads_matching("/slow");
    let reader = {
        let p = p.clone();
        tokio::spawn(async move { p.get("/slow").await })
    };
    while hold.waiting() == 0 {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    let mut c = Coordinator::start(src, opener.as_ref(), request(), slow_acks())
        .await
        .expect("start");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&p], "memory://dst").await;
    session.close().await.unwrap();
    hold.release();
    let got = reader.await.unwrap().expect("read across the flip");
    assert_eq!(got.expect("/slow copied").value, b"v");
}
