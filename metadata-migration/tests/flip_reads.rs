//! Reads across the flip: participants learn of a completed migration one
//! after the other, and one that moved already writes in the target while
//! another still reads the source. The one behind must not answer from the
//! source what the target already changed (a stale read, found by the
//! linearizability nemesis: `nemesis/tests/histories/migrating-flip-seed7-ci.txt`,
//! a `Get` that returned a node a `Delete` had removed before it began).

mod common;

use std::time::Duration;

use bkswitch_metadata_migration::{ParticipantOptions, Phase};
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use common::*;

/// A participant that re-reads the record only when told (its watch still
/// runs, but the test never yields to it between the calls below).
fn slow(name: &str) -> ParticipantOptions {
    ParticipantOptions {
        poll_interval: Duration::from_secs(3600),
        ..participant_options(name)
    }
}

#[tokio::test]
async fn a_participant_behind_the_flip_does_not_read_the_source() {
    let (stores, opener) = setup(5, 0).await;
    let ahead = wrap_src(&stores, &opener, slow("ahead")).await;
    let behind = wrap_src(&stores, &opener, slow("behind")).await;
    // The participants follow the record when this helper tells them to,
    // until both closed their gates in the pause.
    let helper = {
        let (a, b) = (ahead.clone(), behind.clone());
        tokio::spawn(async move {
            loop {
                let _ = a.reconcile().await;
                let _ = b.reconcile().await;
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let mut c = start_coordinator(&stores, &opener, "m").await;
    while c.step().await.expect("step") != Phase::Paused {}
    wait_paused(&[&ahead, &behind]).await;
    assert!(ahead.is_paused() && behind.is_paused());
    helper.abort();
    let _ = helper.await;
    while !c.step().await.expect("step").is_terminal() {}
    assert_eq!(c.record().phase, Phase::Completed);
    // The first participant follows the flip and writes in the target.
    ahead.reconcile().await.expect("flip");
    assert_eq!(ahead.url(), "memory://dst");
    ahead
        .delete(&topic(1), ExpectedVersion::Any)
        .await
        .expect("delete in the target");
    ahead
        .put(&topic(2), b"changed", ExpectedVersion::Any)
        .await
        .expect("put in the target");
    // The other has not moved yet: its reads must not come from the source.
    assert_eq!(behind.url(), "memory://src", "the window under test");
    assert!(behind.is_paused(), "writes stay paused until it moves");
    assert_eq!(
        behind.get(&topic(1)).await.expect("get"),
        None,
        "a node deleted in the target before the read began"
    );
    assert_eq!(
        behind
            .get(&topic(2))
            .await
            .expect("get")
            .expect("node")
            .value,
        b"changed"
    );
    assert_eq!(behind.url(), "memory://dst", "the read moved it");
    assert!(!behind.is_paused());
    assert!(behind.exists(&topic(1)).await.expect("exists").is_none());
}

/// Reads in the pause, before anything completed, are answered by the
/// source and leave the participant where it is.
#[tokio::test]
async fn reads_in_the_pause_before_the_flip_stay_on_the_source() {
    let (stores, opener) = setup(5, 0).await;
    let p = wrap_src(&stores, &opener, participant_options("p")).await;
    let mut c = start_coordinator(&stores, &opener, "m").await;
    while c.step().await.expect("step") != Phase::Paused {}
    wait_paused(&[&p]).await;
    assert!(p.is_paused());
    assert_eq!(
        p.get(&topic(1)).await.expect("get").expect("node").value,
        b"ml-1"
    );
    assert_eq!(p.url(), "memory://src");
    assert!(
        p.children("/managed-ledgers/public/default/persistent")
            .await
            .expect("children")
            .len()
            >= 5
    );
}
