//! What production deployments turn on, on real bookies: sticky reads,
//! speculative reads past a stalled bookie, the budget of add bytes in
//! flight (backpressure), the throttle (adds per second) and rack-aware
//! placement.

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
/// ensemble); without them, reads go round the ensemble. (Entry by entry:
/// batched reads, which ask for whole runs, are off here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sticky_reads_ask_one_bookie_for_every_entry() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let writer = client(&cluster, ClientConfig::default()).await;
    let ledger = written_ledger(&writer, 300).await;

    for sticky in [true, false] {
        let reader = client(
            &cluster,
            ClientConfig::default()
                .with_sticky_reads(sticky)
                .with_batch_reads(false),
        )
        .await;
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
/// read timeout; so is a batched read of a range held by it.
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
        // A range from entry 0 is one batched read of the stalled bookie (the
        // first of entry 0's write set): given up after the speculative
        // timeout, its entries read from the other replicas.
        let t = Instant::now();
        let got = r_fast.read_entries(0, 29).await.unwrap();
        assert_eq!(got.len(), 30);
        assert_eq!(got[29].data, Bytes::from("entry 29"));
        assert!(
            t.elapsed() < Duration::from_secs(1),
            "a batched range took {:?} with speculative reads",
            t.elapsed()
        );
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

/// Java's `throttle` (Pulsar's `bookkeeperClientThrottleValue`): a write
/// handle sends at most that many adds per second. 300 adds issued at once
/// at 100 per second: entry `i` cannot be acknowledged before `i × 10 ms`;
/// every add still completes, in order, and reads back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn throttled_adds_keep_to_their_rate_and_all_complete() {
    bkswitch_bk_harness::require_bk();
    let cluster = BkCluster::on_shared_zk(3);
    let bk = client(&cluster, ClientConfig::default().with_throttle(100)).await;
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let started = Instant::now();
    let mut adds = FuturesOrdered::new();
    for i in 0..300 {
        adds.push_back(w.add_entry(Bytes::from(format!("entry {i}"))));
    }
    let mut expected = 0i64;
    while let Some(r) = adds.next().await {
        assert_eq!(r.unwrap(), expected);
        let at = started.elapsed();
        // The limiter starts with no saved slot: slot i opens at i × 10 ms
        // (a little slack for the clock's granularity).
        let earliest = Duration::from_millis(10) * (expected as u32);
        assert!(
            at + Duration::from_millis(5) >= earliest,
            "entry {expected} acknowledged after {at:?}, before its slot at {earliest:?}"
        );
        expected += 1;
    }
    assert!(started.elapsed() >= Duration::from_millis(2_900));
    w.close().await.unwrap();
    let r = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    let all = r.read_entries(0, 299).await.unwrap();
    assert_eq!(all[299].data, Bytes::from("entry 299"));

    // Without the throttle the same adds are not spaced out (a new handle on
    // the same client would be throttled too: another client).
    let free = client(&cluster, ClientConfig::default()).await;
    let w = free
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let started = Instant::now();
    let adds: Vec<_> = (0..300)
        .map(|i| w.add_entry(Bytes::from(format!("entry {i}"))))
        .collect();
    for add in adds {
        add.await.unwrap();
    }
    eprintln!(
        "300 adds unthrottled: {:?} (throttled at 100/s: at least 2.99 s)",
        started.elapsed()
    );
    w.close().await.unwrap();
    free.close().await.unwrap();
    bk.close().await.unwrap();
}

/// Writes a test CA and a bookie certificate signed by it (for `127.0.0.1`
/// and `localhost`) into a fresh folder: `(ca.pem, bookie-cert.pem,
/// bookie-key.pem)`.
fn test_pki(tag: &str) -> (std::path::PathBuf, std::path::PathBuf, std::path::PathBuf) {
    use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};
    let dir = std::env::temp_dir().join(format!(
        "bkswitch-tls-{tag}-{}-{}",
        std::process::id(),
        fastrand_suffix()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params
        .distinguished_name
        .push(DnType::CommonName, format!("bkswitch test CA {tag}"));
    let ca = ca_params.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let mut params =
        CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
    params.distinguished_name.push(DnType::CommonName, "bookie");
    let cert = params.signed_by(&key, &ca, &ca_key).unwrap();
    let paths = (
        dir.join("ca.pem"),
        dir.join("bookie-cert.pem"),
        dir.join("bookie-key.pem"),
    );
    std::fs::write(&paths.0, ca.pem()).unwrap();
    std::fs::write(&paths.1, cert.pem()).unwrap();
    std::fs::write(&paths.2, key.serialize_pem()).unwrap();
    paths
}

fn fastrand_suffix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// TLS to the bookies: bookies configured for TLS with a CA the test makes
/// (PEM key store and trust store, BookKeeper's `TLSContextFactory`), a
/// client trusting that CA writes and reads a ledger over connections that
/// start with `START_TLS`; a client trusting another CA cannot (the handshake
/// checks the bookies' certificates), and a trust store that is not there is
/// refused at connect, naming the file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_to_bookies_with_a_test_ca() {
    bkswitch_bk_harness::require_bk();
    let (ca, cert, key) = test_pki("bookies");
    let (other_ca, _, _) = test_pki("other");
    let cluster = BkCluster::builder(
        &bkswitch_zk_harness::shared().connect_string(),
        &bkswitch_bk_harness::unique_ledgers_root(),
    )
    .bookies(3)
    .start_timeout(Duration::from_secs(240))
    .conf("tlsProviderFactoryClass=org.apache.bookkeeper.tls.TLSContextFactory")
    .conf("tlsProvider=JDK")
    .conf("tlsClientAuthentication=false")
    .conf("tlsKeyStoreType=PEM")
    .conf(format!("tlsKeyStore={}", key.display()))
    .conf(format!("tlsCertificatePath={}", cert.display()))
    .conf("tlsTrustStoreType=PEM")
    .conf(format!("tlsTrustStore={}", ca.display()))
    .start();

    // A TLS handshake with a bookie's JVM can take seconds on a loaded
    // machine: generous bounds.
    let patient = ClientConfig::default()
        .with_connect_timeout(Duration::from_secs(30))
        .with_add_timeout(Duration::from_secs(30))
        .with_read_timeout(Duration::from_secs(30));
    let bk = client(&cluster, patient.clone().with_tls_trust_store(&ca)).await;
    let ledger = written_ledger(&bk, 100).await;
    let r = bk
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let all = r.read_entries(0, 99).await.unwrap();
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.data, Bytes::from(format!("entry {i}")));
    }
    // Host names are checked too when asked (the certificate names 127.0.0.1).
    let strict = client(
        &cluster,
        patient
            .clone()
            .with_tls_trust_store(&ca)
            .with_tls_hostname_verification(true),
    )
    .await;
    let r = strict
        .open_ledger(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(
        r.read_entries(99, 99).await.unwrap()[0].data,
        Bytes::from("entry 99")
    );
    strict.close().await.unwrap();

    // Another CA: no bookie is trusted, nothing can be written or read.
    let untrusting = client(
        &cluster,
        ClientConfig::default()
            .with_tls_trust_store(&other_ca)
            .with_connect_timeout(Duration::from_secs(5))
            .with_add_timeout(Duration::from_secs(5))
            .with_read_timeout(Duration::from_secs(5)),
    )
    .await;
    let r = untrusting
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let e = r.read_entries(0, 0).await.unwrap_err();
    eprintln!("read with an untrusted CA: {e}");
    assert!(
        e.to_string().contains("TLS") || e.to_string().contains("certificate"),
        "{e}"
    );
    untrusting.close().await.unwrap();

    // A trust store that is not there: refused at connect, naming it.
    let missing = std::env::temp_dir().join("bkswitch-no-such-ca.pem");
    let e = BookKeeperClient::connect(
        &cluster.metadata_service_uri(),
        ClientConfig::default().with_tls_trust_store(&missing),
    )
    .await
    .unwrap_err();
    assert!(e.to_string().contains("bkswitch-no-such-ca.pem"), "{e}");
    bk.close().await.unwrap();
    let _ = std::fs::remove_dir_all(ca.parent().unwrap());
    let _ = std::fs::remove_dir_all(other_ca.parent().unwrap());
}
