//! What production deployments turn on, on real bookies: sticky reads,
//! speculative reads past a stalled bookie, and the budget of add bytes in
//! flight (backpressure).

use std::time::{Duration, Instant};

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, ReadHandle, WriteHandle};
use bkswitch_bk_harness::BkCluster;
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt};

async fn client(cluster: &BkCluster, config: ClientConfig) -> BookKeeperClient {
    BookKeeperClient::connect(&cluster.metadata_service_uri(), config)
        .await
        .unwrap()
}

/// Writes `count` entries `entry <i>` to a new E3/W3/A3 ledger and closes it.
async fn written_ledger(bk: &BookKeeperClient, count: i64) -> i64 {
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 3, 3))
        .await
        .unwrap();
    let mut adds = FuturesOrdered::new();
    for i in 0..count {
        adds.push_back(w.add_entry(Bytes::from(format!("entry {i}"))));
    }
    while let Some(r) = adds.next().await {
        r.unwrap();
    }
    w.close().await.unwrap();
    w.id()
}

/// Sticky reads ask one bookie for every entry of a handle (write quorum =
/// ensemble); without them, reads go round the ensemble.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_reads_ask_one_bookie_for_every_entry() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let writer = client(&cluster, ClientConfig::default()).await;
    let ledger = written_ledger(&writer, 300).await;

    for sticky in [true, false] {
        let reader = client(&cluster, ClientConfig::default().with_sticky_reads(sticky)).await;
        let r = reader
            .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
            .await
            .unwrap();
        let before = reader.requests_by_bookie();
        for first in (0..300).step_by(50) {
            let got = r.read_entries(first, first + 49).await.unwrap();
            assert_eq!(got[0].data, Bytes::from(format!("entry {first}")));
        }
        let after = reader.requests_by_bookie();
        let mut reads: Vec<u64> = after
            .iter()
            .map(|(b, n)| n - before.get(b).copied().unwrap_or(0))
            .collect();
        reads.sort_unstable();
        assert_eq!(reads.iter().sum::<u64>(), 300, "{after:?}");
        if sticky {
            assert_eq!(reads, vec![300], "sticky reads went to {after:?}");
        } else {
            assert_eq!(
                reads,
                vec![100, 100, 100],
                "round-robin reads went to {after:?}"
            );
        }
        reader.close().await.unwrap();
    }
    writer.close().await.unwrap();
}

/// A bookie stopped for a moment (SIGSTOP) keeps its connections but answers
/// nothing: with speculative reads, reads whose first replica it is are
/// answered by the next replica after the speculative timeout, not after the
/// read timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn speculative_reads_go_around_a_stalled_bookie() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let writer = client(&cluster, ClientConfig::default()).await;
    let ledger = written_ledger(&writer, 30).await;
    let read_timeout = Duration::from_secs(2);
    let base = ClientConfig::default()
        .with_sticky_reads(false)
        .with_read_timeout(read_timeout);
    let fast = client(
        &cluster,
        base.clone()
            .with_speculative_read_timeout(Duration::from_millis(100)),
    )
    .await;
    let slow = client(&cluster, base).await;
    let r_fast = fast
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let r_slow = slow
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    // Connections are up (the opens read the last add confirmed from all).
    let first = r_fast.metadata().ensembles[0].bookies[0].clone();
    let index = cluster
        .bookie_ids()
        .iter()
        .position(|b| *b == first)
        .unwrap();
    cluster.pause(index);
    let result = async {
        // Entries 0, 3, 6, … ask the stalled bookie first.
        let started = Instant::now();
        for e in (0..30).step_by(3) {
            let t = Instant::now();
            let got = r_fast.read_entries(e, e).await.unwrap();
            assert_eq!(got[0].data, Bytes::from(format!("entry {e}")));
            assert!(
                t.elapsed() < Duration::from_secs(1),
                "entry {e} took {:?} with speculative reads",
                t.elapsed()
            );
        }
        let speculative = started.elapsed();
        // Without speculation, the same read waits for the read timeout.
        let t = Instant::now();
        let got = r_slow.read_entries(0, 0).await.unwrap();
        assert_eq!(got[0].data, Bytes::from("entry 0"));
        let plain = t.elapsed();
        assert!(
            plain >= read_timeout / 2,
            "a plain read took only {plain:?}"
        );
        (speculative, plain)
    }
    .await;
    cluster.resume(index);
    let (speculative, plain) = result;
    eprintln!("10 reads with speculation: {speculative:?}; one without: {plain:?}");
    fast.close().await.unwrap();
    slow.close().await.unwrap();
    writer.close().await.unwrap();
}

/// A caller that issues many adds at once is held to the budget of add bytes
/// in flight; every add still completes, in order, and reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adds_over_the_budget_wait_and_all_complete_in_order() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let budget = 64 * 1024;
    let bk = client(
        &cluster,
        ClientConfig::default().with_max_add_bytes_in_flight(budget),
    )
    .await;
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let payload = |i: u8| Bytes::from(vec![i; 4096]);
    let mut adds = FuturesOrdered::new();
    for i in 0..200u8 {
        adds.push_back(w.add_entry(payload(i)));
    }
    // 200 × 4 KiB were asked for at once; at most 64 KiB are in flight.
    let mut max_in_flight = bk.add_bytes_in_flight();
    let mut expected = 0;
    while let Some(r) = adds.next().await {
        assert_eq!(r.unwrap(), expected);
        expected += 1;
        max_in_flight = max_in_flight.max(bk.add_bytes_in_flight());
    }
    assert!(max_in_flight <= budget, "{max_in_flight} bytes in flight");
    assert!(
        max_in_flight > budget / 2,
        "the budget was hardly used: {max_in_flight}"
    );
    assert_eq!(bk.add_bytes_in_flight(), 0);
    w.close().await.unwrap();
    let r = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    let all = r.read_entries(0, 199).await.unwrap();
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.data, payload(i as u8));
    }
    bk.close().await.unwrap();
}

/// With the bookies' racks in the metadata store (Pulsar's
/// `BookiesRackConfiguration` JSON), ensembles spread over racks: two bookies
/// in rack A and one in rack B, every ensemble of two has one of each.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensembles_spread_over_the_racks_in_the_metadata_store() {
    use bkswitch_metadata_store::{ExpectedVersion, MetadataStore, ZkStore, ZkStoreOptions};
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let ids = cluster.bookie_ids();
    let racks = serde_json::json!({
        "default": {
            ids[0].clone(): {"rack": "/A", "hostname": "a0"},
            ids[1].clone(): {"rack": "/A", "hostname": "a1"},
            ids[2].clone(): {"rack": "/B", "hostname": "b0"},
        }
    });
    let path = format!("{}-racks", cluster.ledgers_root());
    let store = ZkStore::connect(
        &format!("zk://{}", cluster.zk_connect()),
        ZkStoreOptions::default(),
    )
    .await
    .unwrap();
    store
        .put(&path, racks.to_string().as_bytes(), ExpectedVersion::Any)
        .await
        .unwrap();
    let bk = client(&cluster, ClientConfig::default().with_rack_info_path(&path)).await;
    for _ in 0..20 {
        let w = bk
            .create_ledger(&LedgerConfig::default().with_quorums(2, 2, 2))
            .await
            .unwrap();
        let ensemble = &w.metadata().ensembles[0].bookies;
        assert!(ensemble.contains(&ids[2]), "{ensemble:?} is all in rack /A");
        w.close().await.unwrap();
    }
    bk.close().await.unwrap();
    store.delete(&path, ExpectedVersion::Any).await.unwrap();
    store.close().await.unwrap();
}
