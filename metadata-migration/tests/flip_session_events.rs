//! A watch forwarded by a participant across the flip: a consumer that heard
//! the old store's connection was lost (and not that it came back) hears
//! that the store it now follows answers (N24, found by the nemesis: a node
//! that lost its connection just before a migration's flip kept its managed
//! ledgers paused — no rollover, no trim — after it).

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_migration::{MigratingStore, Phase};
use bkswitch_metadata_store::{MetadataStore, Notification, SessionEvent};
use common::*;
use futures::StreamExt;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_lost_before_the_flip_is_followed_by_reconnected_after_it() {
    let (stores, opener) = setup(20, 0).await;
    let session = stores.session("src");
    let p = MigratingStore::wrap(
        Arc::new(session.clone()),
        "memory://src",
        opener.clone(),
        participant_options("broker-1"),
    )
    .await
    .expect("participant");
    let mut w = p.watch(&topic(1)).await.expect("watch");
    // The old store's connection drops (its calls still work: the session
    // lives) and does not come back before the flip.
    session.announce_connection(false).expect("announce");
    let lost = tokio::time::timeout(Duration::from_secs(2), w.next())
        .await
        .expect("a notification")
        .expect("stream open");
    assert_eq!(lost, Notification::Session(SessionEvent::ConnectionLost));
    let mut c = start_coordinator(&stores, &opener, "m").await;
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&p], "memory://dst").await;
    let mut heard = Vec::new();
    while let Ok(Some(n)) = tokio::time::timeout(Duration::from_millis(500), w.next()).await {
        heard.push(n);
    }
    assert!(
        heard.contains(&Notification::Session(SessionEvent::Reconnected)),
        "after the flip the stream follows a store that answers, and must say so: {heard:?}"
    );
}
