//! The traffic summary after a restart: a restarted run's consumers resume the
//! previous run's unacknowledged backlog while its producers start a new
//! incarnation at sequence 1. The summary counts that backlog apart
//! (`resumed_backlog`) and reports no gap where nothing was lost, and still
//! catches a real gap (a seeded missing sequence number).

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{BookKeeper, MemoryCluster};
use bkswitch_cli::{encode_payload, TopicHandle, Traffic};
use bkswitch_managed_ledger::{InitialPosition, ManagedLedgerFactory};
use bkswitch_metadata_store::MemoryStore;
use bkswitch_mledger_spi::ManagedLedgerConfig;

async fn topic(name: &str) -> TopicHandle {
    let client: Arc<dyn BookKeeper> = Arc::new(MemoryCluster::new("old").client());
    let factory = ManagedLedgerFactory::new(Arc::new(MemoryStore::new()), client);
    let config = ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1);
    let ledger = factory.open(name, config).await.unwrap();
    let cursor = ledger
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    TopicHandle { ledger, cursor }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_resumes_the_backlog_without_gaps_and_a_real_gap_is_caught() {
    let t = topic("tenant/ns/persistent/restart").await;

    // A first run is killed (its tasks aborted) with entries published but
    // not acknowledged; the previous incarnation also left a backlog the
    // first run never saw (published after its consumer stopped).
    let first = Traffic::start(std::slice::from_ref(&t), 200, 32);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let published_before = first.published();
    assert!(published_before > 0);
    drop(first);
    let old = 7u64;
    for seq in 1..=20 {
        t.ledger.append(encode_payload(old, seq, 32)).await.unwrap();
    }
    // The restarted node's consumer reads again from its mark-delete.
    t.cursor.rewind();
    let second = Traffic::start(std::slice::from_ref(&t), 200, 32);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let r = second.stop(Duration::from_secs(10)).await;
    assert_eq!(r.consumer_gaps, 0, "{r:?}");
    assert!(r.published > 0, "{r:?}");
    assert_eq!(r.consumed, r.published, "{r:?}");
    assert!(r.resumed_backlog >= 20, "{r:?}");
    assert_ne!(r.incarnation, old);

    // A real gap: incarnation 9 lost sequence 3 (4 and 5 arrive).
    for seq in [1, 2, 4, 5] {
        t.ledger.append(encode_payload(9, seq, 32)).await.unwrap();
    }
    t.cursor.rewind();
    let third = Traffic::start(std::slice::from_ref(&t), 200, 32);
    tokio::time::sleep(Duration::from_millis(200)).await;
    let r = third.stop(Duration::from_secs(10)).await;
    assert_eq!(r.consumer_gaps, 1, "{r:?}");
    assert_eq!(r.consumed, r.published, "{r:?}");
    assert_eq!(r.resumed_backlog, 4, "{r:?}");
}
