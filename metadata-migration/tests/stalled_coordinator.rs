//! A coordinator stalled in the middle of a step — its process paused, or
//! its source store slow to answer — while another coordinator takes the
//! migration over and flips it: when it goes on, it must write nothing more
//! to the target, where the nodes now write (N23, found by the nemesis).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_metadata_migration::{Coordinator, Phase};
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{ErrorKind, ExpectedVersion, MetadataStore, Result};
use common::*;
use tokio::sync::{watch, Notify};

/// A source store whose next read of one path waits until released (a
/// process stopped with that call in flight).
#[derive(Debug)]
struct StallOn {
    next: Arc<dyn MetadataStore>,
    path: String,
    armed: AtomicBool,
    stalled: Notify,
    release: watch::Sender<bool>,
}

impl StallOn {
    fn new(next: Arc<dyn MetadataStore>, path: &str) -> Arc<StallOn> {
        Arc::new(StallOn {
            next,
            path: path.to_owned(),
            armed: AtomicBool::new(false),
            stalled: Notify::new(),
            release: watch::channel(false).0,
        })
    }
}

#[async_trait]
impl Layer for StallOn {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.next.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        if call == (Call::Get { path: &self.path }) && self.armed.swap(false, Ordering::SeqCst) {
            self.stalled.notify_one();
            let mut rx = self.release.subscribe();
            let _ = rx.wait_for(|go| *go).await;
        }
        call.run(self.next.as_ref()).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_coordinator_stalled_in_a_catch_up_round_writes_nothing_after_another_flipped() {
    let (stores, opener) = setup(50, 0).await;
    let p = participant(opener.clone(), "memory://src", "broker-1").await;
    let path = topic(0);
    let source = StallOn::new(src(&stores), &path);
    let mut stalled = Coordinator::start(
        source.clone(),
        opener.as_ref(),
        request("m"),
        coordinator_options(),
    )
    .await
    .expect("start");
    while stalled.record().phase != Phase::CatchUp {
        stalled.step().await.expect("step");
    }
    // A write the next catch-up round copies again.
    let before = p
        .put(&path, b"written while tracked", ExpectedVersion::Any)
        .await
        .expect("put");
    // The round stops in the middle, at its read of that node.
    source.armed.store(true, Ordering::SeqCst);
    let round = tokio::spawn(async move {
        let r = stalled.step().await;
        (stalled, r)
    });
    tokio::time::timeout(Duration::from_secs(10), source.stalled.notified())
        .await
        .expect("the round reached the node");
    // Another coordinator takes over and runs the migration to the end.
    let mut other = Coordinator::resume(src(&stores), opener.as_ref(), coordinator_options())
        .await
        .expect("resume")
        .expect("running");
    assert_eq!(other.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&p], "memory://dst").await;
    // A write on the target, acknowledged.
    let after = p
        .put(
            &path,
            b"after the flip",
            ExpectedVersion::Exactly(before.version),
        )
        .await
        .expect("write after the flip");
    // The stalled round goes on: it stops before writing to the target.
    source.release.send_replace(true);
    let (_, r) = tokio::time::timeout(Duration::from_secs(10), round)
        .await
        .expect("the round ends")
        .expect("joined");
    let err = r.expect_err("the stalled coordinator lost its record");
    assert_eq!(err.kind(), ErrorKind::BadVersion, "{err}");
    let dst = stores.session("dst");
    let r = dst.get(&path).await.unwrap().expect("the node");
    assert_eq!(
        (r.value.as_slice(), r.stat.version),
        (&b"after the flip"[..], after.version),
        "the write made on the target after the flip was overwritten"
    );
}
