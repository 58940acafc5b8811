//! Batched reads (BookKeeper 4.17's `BATCH_READ_ENTRY`): on real bookies they
//! return the same entries as single reads with far fewer requests, for
//! ledgers whose write quorum is the ensemble and for striped ones; against
//! bookies that do not know them (the test kit's fake bookies close the
//! connection, as bookies before 4.17 do) every read still succeeds and the
//! client stops sending them to that bookie. (A bookie that stalls while it
//! holds a batch: `production.rs`, with speculative reads.)

use bkswitch_bk_client::{
    BookKeeper, DigestType, LedgerConfig, LedgerEntry, ReadHandle, WriteHandle,
};
use bkswitch_bk_harness::BkCluster;
use bkswitch_bookkeeper::testkit::{generated_payload, FakeBookies};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt};

async fn client(uri: &str, batch: bool) -> BookKeeperClient {
    BookKeeperClient::connect(uri, ClientConfig::default().with_batch_reads(batch))
        .await
        .unwrap()
}

fn sent(bk: &BookKeeperClient) -> u64 {
    bk.requests_by_bookie().values().sum()
}

/// Writes `count` entries of varied sizes (`entry <i>` then `i` bytes) to a
/// new ledger of quorums `(e, wq, wq)` and closes it.
async fn written(bk: &BookKeeperClient, (e, wq): (u32, u32), count: i64) -> i64 {
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(e, wq, wq))
        .await
        .unwrap();
    let mut adds = FuturesOrdered::new();
    for i in 0..count {
        let mut body = format!("entry {i} ").into_bytes();
        body.resize(body.len() + i as usize, b'x');
        adds.push_back(w.add_entry(Bytes::from(body)));
    }
    while let Some(r) = adds.next().await {
        r.unwrap();
    }
    w.close().await.unwrap();
    w.id()
}

async fn read(bk: &BookKeeperClient, ledger: i64, first: i64, last: i64) -> Vec<LedgerEntry> {
    let r = bk
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let got = r.read_entries(first, last).await.unwrap();
    assert_eq!(
        got.iter().map(|e| e.entry_id).collect::<Vec<_>>(),
        (first..=last).collect::<Vec<_>>()
    );
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batched_reads_return_what_single_reads_do_with_fewer_requests() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let uri = cluster.metadata_service_uri();
    let writer = client(&uri, true).await;
    let single = client(&uri, false).await;
    let batched = client(&uri, true).await;
    // Striped (runs of two per bookie), whole ledger on every bookie (runs of
    // up to 64 from one bookie), and whole ledger on every one of three.
    for (quorums, per_200) in [((3, 2), 100), ((2, 2), 4), ((3, 3), 4)] {
        let ledger = written(&writer, quorums, 200).await;
        for (first, last) in [(0, 199), (7, 150), (198, 199), (5, 5)] {
            let before = (sent(&single), sent(&batched));
            let want = read(&single, ledger, first, last).await;
            let got = read(&batched, ledger, first, last).await;
            assert_eq!(got, want, "{quorums:?} {first}..={last}");
            let n = (last - first + 1) as u64;
            assert_eq!(
                sent(&single) - before.0,
                n,
                "single reads: one request per entry"
            );
            let requests = sent(&batched) - before.1;
            if (first, last) == (0, 199) {
                assert_eq!(
                    requests, per_200,
                    "{quorums:?}: batched requests for 200 entries"
                );
            }
            assert!(
                requests <= n.div_ceil(2),
                "{quorums:?} {first}..={last}: {requests} requests"
            );
        }
    }
    for bk in [writer, single, batched] {
        bk.close().await.unwrap();
    }
}

/// Bookies that do not know batched reads (they close the connection): every
/// read still returns every entry, and after the first refusal the client
/// reads those bookies entry by entry.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookies_without_batched_reads_are_read_entry_by_entry() {
    let (fakes, bk) = FakeBookies::with_client(3, ClientConfig::default())
        .await
        .unwrap();
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    for i in 0..300 {
        w.add_entry(generated_payload(i, 100)).await.unwrap();
    }
    w.close().await.unwrap();
    fakes.generate(w.id(), 300, 100, DigestType::Crc32c);
    let r = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    for round in 0..3 {
        let before = sent(&bk);
        let got = r.read_entries(0, 299).await.unwrap();
        assert_eq!(got.len(), 300);
        for (i, e) in got.iter().enumerate() {
            assert_eq!(e.entry_id, i as i64);
            assert_eq!(
                e.data,
                generated_payload(i as i64, 100),
                "entry {i} in round {round}"
            );
        }
        let requests = sent(&bk) - before;
        if round > 0 {
            // No batch is sent any more: one request per entry.
            assert_eq!(requests, 300, "round {round}");
        } else {
            // At most one refused batch per bookie on top of the single reads
            // (plus single reads the closed connections failed and retried).
            assert!(requests >= 300, "round 0: {requests}");
        }
    }
    bk.close().await.unwrap();
}
