//! Add coalescing (`ClientConfig::add_coalescing`) on real bookies: every add
//! is acknowledged in order and readable, as without it, and a bookie killed while requests are held for it changes the
//! ensemble without losing or reordering an entry. (What is held and what
//! lets it go: the connection's unit tests.)

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, ReadHandle, WriteHandle};
use bkswitch_bk_harness::BkCluster;
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt};

fn body(i: i64) -> Bytes {
    let mut b = format!("entry {i} ").into_bytes();
    b.resize(b.len() + (i % 700) as usize, b'c');
    Bytes::from(b)
}

/// Adds `count` entries with up to `window` in flight; `kill` runs once
/// `kill_at` adds have been acknowledged, with the ledger's first ensemble.
/// Returns the ledger, the entry ids acknowledged (in the order they were
/// acknowledged) and how many ensembles the ledger had.
async fn write(
    bk: &BookKeeperClient,
    count: i64,
    window: usize,
    kill_at: i64,
    kill: impl FnOnce(&[String]),
) -> (i64, Vec<i64>, usize) {
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let mut kill = Some(kill);
    let mut acked = Vec::new();
    let mut adds = FuturesOrdered::new();
    for i in 0..count {
        if adds.len() >= window {
            let r: bkswitch_bk_client::Result<i64> = adds.next().await.unwrap();
            acked.push(r.unwrap());
        }
        if acked.len() as i64 >= kill_at {
            if let Some(k) = kill.take() {
                k(&w.metadata().ensembles[0].bookies);
            }
        }
        adds.push_back(w.add_entry(body(i)));
    }
    while let Some(r) = adds.next().await {
        acked.push(r.unwrap());
    }
    w.close().await.unwrap();
    (w.id(), acked, w.metadata().ensembles.len())
}

async fn read_all(bk: &BookKeeperClient, ledger: i64, count: i64) {
    let r = bk
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), count - 1);
    let mut first = 0;
    while first < count {
        let last = (first + 499).min(count - 1);
        for e in r.read_entries(first, last).await.unwrap() {
            assert_eq!(e.data, body(e.entry_id), "entry {}", e.entry_id);
        }
        first = last + 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_adds_are_acknowledged_in_order_and_read_back() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let uri = cluster.metadata_service_uri();
    let count = 4_000;
    for coalescing in [0, 16] {
        let bk = BookKeeperClient::connect(
            &uri,
            ClientConfig::default().with_add_coalescing(coalescing),
        )
        .await
        .unwrap();
        let (ledger, acked, _) = write(&bk, count, 256, i64::MAX, |_| {}).await;
        assert_eq!(
            acked,
            (0..count).collect::<Vec<_>>(),
            "coalescing {coalescing}"
        );
        read_all(&bk, ledger, count).await;
        bk.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_killed_while_adds_are_held_for_it_loses_nothing() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(4);
    let uri = cluster.metadata_service_uri();
    let bk = BookKeeperClient::connect(&uri, ClientConfig::default().with_add_coalescing(8))
        .await
        .unwrap();
    let count = 3_000;
    // The first bookie of the ledger's ensemble dies after 1,000 adds, with
    // up to 256 in flight and requests held for it.
    let kill = |ensemble: &[String]| {
        let victim = (0..cluster.bookie_count())
            .find(|&i| cluster.bookie_id(i) == ensemble[0])
            .expect("an ensemble bookie of this cluster");
        cluster.kill(victim);
    };
    let (ledger, acked, ensembles) = write(&bk, count, 256, 1_000, kill).await;
    assert_eq!(acked, (0..count).collect::<Vec<_>>());
    assert!(ensembles >= 2, "the ensemble changed after the kill");
    let reader = BookKeeperClient::connect(&uri, ClientConfig::default())
        .await
        .unwrap();
    read_all(&reader, ledger, count).await;
    for c in [bk, reader] {
        c.close().await.unwrap();
    }
}
