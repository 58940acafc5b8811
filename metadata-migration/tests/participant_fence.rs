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
    // Its registration went with the session: the very next write is
    // refused (retryable), whatever the participant has seen so far.
    let e = p
        .put("/after", b"x", ExpectedVersion::Any)
        .await
        .expect_err("fenced");
    assert_eq!(e.kind(), ErrorKind::WritesPaused, "{e}");
    assert!(session.get("/after").await.unwrap().is_none());
    assert!(session
        .exists(&format!("{PARTICIPANTS_PATH}/p"))
        .await
        .unwrap()
        .is_none());
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
