//! The soak's objective: a breach fails the batch once it lasted the grace
//! (five seconds), not at its first look — clients come back on the new
//! cluster after their reconnect back-off, which can end after the settle
//! (found on real brokers: the soak began 15 ms after the eviction, before
//! the Java consumer had reconnected, and the move rolled back).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use bkswitch_metadata_store::MetadataStore;
use bkswitch_topic_switch::{
    Batch, Phase, Plan, PulsarAdmin, SloProbe, State, SwitchOptions, TopicSwitcher,
};
use common::*;

/// Breaches until `ok_after` has passed since its first look (`None`:
/// always).
#[derive(Debug)]
struct LateClients {
    first: parking_lot::Mutex<Option<Instant>>,
    ok_after: Option<Duration>,
}

#[async_trait]
impl SloProbe for LateClients {
    async fn check(&self, _: &Batch, _: &dyn PulsarAdmin) -> Result<(), String> {
        let first = *self.first.lock().get_or_insert_with(Instant::now);
        match self.ok_after {
            Some(d) if first.elapsed() >= d => Ok(()),
            _ => Err("subscription `sub` had consumers and has none on the new cluster".into()),
        }
    }
}

async fn run(ok_after: Option<Duration>) -> (World, bkswitch_topic_switch::SwitchRecord, Duration) {
    let w = World::new(&["t1"]).await;
    let store: Arc<dyn MetadataStore> = Arc::new(w.store.clone());
    let s = TopicSwitcher::new(store, w.routes.clone(), "c1")
        .with_admins(w.admins())
        .with_slo(Arc::new(LateClients {
            first: parking_lot::Mutex::new(None),
            ok_after,
        }));
    let options = SwitchOptions {
        soak_ms: 300,
        ..quick()
    };
    let plan = Plan {
        to: "b".into(),
        batches: vec![vec![format!("topic:{}", topic("t1"))]],
    };
    s.start("m1", plan, options).await.unwrap();
    let started = Instant::now();
    let rec = s.run().await.unwrap();
    (w, rec, started.elapsed())
}

#[tokio::test]
async fn clients_that_come_back_within_the_grace_pass_the_soak() {
    let (w, rec, _) = run(Some(Duration::from_millis(1_500))).await;
    assert_eq!(rec.state, State::Done, "{rec:#?}");
    assert_eq!(w.where_is("t1"), "b");
    assert!(rec.batches[0]
        .evidence
        .iter()
        .any(|e| e.note.contains("soaked 300 ms within its objective")));
}

#[tokio::test]
async fn a_breach_that_lasts_the_grace_rolls_the_batch_back() {
    let (w, rec, took) = run(None).await;
    // The batch rolled back by itself; the plan stops, failed.
    assert_eq!(rec.state, State::Failed, "{rec:#?}");
    assert_eq!(rec.batches[0].phase, Phase::RolledBack);
    let error = rec.batches[0].error.clone().unwrap();
    assert!(
        error.contains("objective breached while soaking"),
        "{error}"
    );
    assert_eq!(w.where_is("t1"), "a");
    assert!(
        took >= Duration::from_secs(5),
        "failed after {took:?}, before the grace"
    );
}
