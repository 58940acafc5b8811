//! Faults on real bookies and a real ZooKeeper: a bookie SIGKILLed during a
//! stream of adds (ensemble change) and during reads (replica failover), a
//! bookie restarted, ZooKeeper restarted while writing, and writers that crash
//! without closing. In every case, nothing acknowledged is lost.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{
    BookKeeper, DigestType, LedgerConfig, LedgerState, ReadHandle, WriteHandle,
};
use bkswitch_bk_harness::{BkCluster, CreateOptions, DigestType as JavaDigest};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bkswitch_zk_harness::ZkServer;
use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt};

fn java<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

fn payload(i: i64) -> Bytes {
    Bytes::from(format!("entry {i} ").repeat(1 + (i % 7) as usize))
}

fn config() -> ClientConfig {
    ClientConfig::default()
        .with_add_timeout(Duration::from_secs(3))
        .with_read_timeout(Duration::from_secs(3))
}

async fn client(cluster: &BkCluster) -> BookKeeperClient {
    BookKeeperClient::connect(&cluster.metadata_service_uri(), config())
        .await
        .unwrap()
}

/// Adds `count` entries with at most `window` in flight, calling `at(i)` before
/// sending entry `i`; returns the last acknowledged entry and the first error.
async fn stream_adds(
    w: &Arc<dyn WriteHandle>,
    count: i64,
    window: usize,
    mut at: impl FnMut(i64),
) -> (i64, Option<bkswitch_bk_client::BkError>) {
    let mut inflight = FuturesOrdered::new();
    let mut acked = -1;
    for i in 0..count {
        at(i);
        inflight.push_back(w.add_entry(payload(i)));
        if inflight.len() >= window {
            match inflight.next().await.unwrap() {
                Ok(id) => acked = id,
                Err(e) => return (acked, Some(e)),
            }
        }
    }
    while let Some(r) = inflight.next().await {
        match r {
            Ok(id) => acked = id,
            Err(e) => return (acked, Some(e)),
        }
    }
    (acked, None)
}

async fn check_entries(r: &Arc<dyn ReadHandle>, last: i64) {
    let mut first = 0;
    while first <= last {
        let to = (first + 99).min(last);
        let entries = r.read_entries(first, to).await.unwrap();
        for e in entries {
            assert_eq!(e.data, payload(e.entry_id), "entry {}", e.entry_id);
        }
        first = to + 1;
    }
}

fn index_of(cluster: &BkCluster, bookie: &str) -> usize {
    (0..cluster.bookie_count())
        .find(|i| cluster.bookie_id(*i) == bookie)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_adds_changes_the_ensemble_and_loses_nothing() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(4);
    let bk = client(&cluster).await;
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let victim = w.metadata().first_ensemble()[1].clone();
    let victim_index = index_of(&cluster, &victim);
    let (acked, error) = stream_adds(&w, 3000, 64, |i| {
        if i == 1000 {
            java(|| cluster.kill(victim_index));
        }
    })
    .await;
    assert!(
        error.is_none(),
        "an add failed although a spare bookie exists: {error:?}"
    );
    assert_eq!(acked, 2999);
    let m = w.metadata();
    assert!(
        m.ensembles.len() >= 2,
        "no ensemble change recorded: {:?}",
        m.ensembles
    );
    let last = m.ensembles.last().unwrap();
    assert!(
        !last.bookies.contains(&victim),
        "{victim} still in {last:?}"
    );
    assert!(last.first_entry_id > 0 && last.first_entry_id <= 1000 + 64);
    w.close().await.unwrap();

    // Another client, and the Java client, read every acknowledged entry.
    let other = client(&cluster).await;
    let r = other
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 2999);
    assert_eq!(r.metadata().ensembles, m.ensembles);
    check_entries(&r, 2999).await;
    let j = java(|| cluster.java_client());
    let jm = java(|| j.metadata(w.id())).unwrap();
    assert_eq!(jm.ensembles.len(), m.ensembles.len());
    java(|| j.open(w.id(), false, JavaDigest::Crc32c, b"")).unwrap();
    let entries = java(|| j.read(w.id(), 990, 1100)).unwrap();
    for e in entries {
        assert_eq!(e.data, payload(e.entry_id).to_vec());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spare_bookie_fails_the_writer_but_keeps_what_it_acknowledged() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(3);
    let bk = client(&cluster).await;
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let (acked, error) = stream_adds(&w, 2000, 32, |i| {
        if i == 500 {
            java(|| cluster.kill(0));
        }
    })
    .await;
    let error = error.expect("with 3 bookies and ensemble 3, losing one fails the writer");
    assert!(
        matches!(error.code(), -6 | -8 | -23),
        "unexpected error {error}"
    );
    // Entry 500 was sent with up to 32 adds in flight before it.
    assert!(acked >= 500 - 32, "acknowledged {acked}");
    assert_eq!(w.last_add_confirmed(), acked);
    // Later adds are refused, close seals at the LAC.
    assert!(w.add_entry(Bytes::from_static(b"late")).await.is_err());
    w.close().await.unwrap();
    assert_eq!(w.metadata().last_entry_id, acked);
    java(|| cluster.restart(0));
    let r = bk
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), acked);
    check_entries(&r, acked).await;
    // The restarted bookie takes new ledgers again.
    bk.refresh_bookies().await.unwrap();
    let w2 = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 3, 3))
        .await
        .unwrap();
    w2.add_entry(Bytes::from_static(b"after restart"))
        .await
        .unwrap();
    w2.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_during_reads_fails_over_to_other_replicas() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(3);
    let bk = client(&cluster).await;
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let (acked, error) = stream_adds(&w, 600, 32, |_| {}).await;
    assert!(error.is_none());
    // A writer still open: a tailing reader keeps working when a bookie dies.
    let tail = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    let reader_client = client(&cluster).await;
    let r = reader_client
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    // The reader knows the LAC piggybacked on the last entries: with 32 adds in
    // flight, up to 32 entries behind the writer.
    let known = r.last_add_confirmed();
    assert!(known >= 598 - 32, "{known}");
    let reads = tokio::spawn(async move {
        for round in 0..6 {
            check_entries(&r, known).await;
            if round == 1 {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    java(|| cluster.kill(2));
    reads.await.unwrap();
    assert!(tail.read_last_add_confirmed().await.unwrap() >= known);
    // Recovery with a dead bookie and no spare: it cannot rewrite entries whose
    // write set lost a bookie, so the open fails and leaves the ledger to retry.
    drop(w);
    let e = bk.open_ledger(tail.id(), DigestType::Crc32c, b"").await;
    if let Err(e) = &e {
        assert!(matches!(e.code(), -6 | -10 | -8 | -23), "{e}");
    }
    java(|| cluster.restart(2));
    let r = bk
        .open_ledger(tail.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert!(r.last_add_confirmed() >= acked);
    check_entries(&r, r.last_add_confirmed()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookie_restart_during_writes_with_a_spare() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(4);
    let bk = client(&cluster).await;
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();
    let victim = index_of(&cluster, &w.metadata().first_ensemble()[0]);
    let (acked, error) = stream_adds(&w, 1500, 16, |i| {
        if i == 300 {
            java(|| cluster.stop(victim));
        }
        if i == 900 {
            java(|| cluster.restart(victim));
        }
    })
    .await;
    assert!(error.is_none(), "{error:?}");
    assert_eq!(acked, 1499);
    w.close().await.unwrap();
    let r = client(&cluster)
        .await
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    check_entries(&r, 1499).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_restart_while_writing() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let zk = ZkServer::start();
    let cluster = BkCluster::start(&zk.connect_string(), "/ledgers", 3);
    let bk = client(&cluster).await;
    let w = bk.create_ledger(&LedgerConfig::default()).await.unwrap();
    let (first, error) = stream_adds(&w, 200, 16, |_| {}).await;
    assert!(error.is_none());
    java(|| zk.stop());
    // Adds need only the bookies.
    let mut acked = first;
    for i in 200..400 {
        acked = w.add_entry(payload(i)).await.unwrap();
    }
    java(|| zk.start_again());
    // Closing needs the metadata: it waits for the session to come back.
    w.close().await.unwrap();
    assert_eq!(w.metadata().last_entry_id, acked);
    let r = client(&cluster)
        .await
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 399);
    check_entries(&r, 399).await;
    let again = bk.create_ledger(&LedgerConfig::default()).await.unwrap();
    assert!(again.id() > w.id());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crashed_writers_are_recovered_by_the_other_client() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(3);
    // A Rust writer that never closes (its client goes away): Java recovers it.
    let id = {
        let bk = client(&cluster).await;
        let w = bk.create_ledger(&LedgerConfig::default()).await.unwrap();
        let (acked, _) = stream_adds(&w, 100, 16, |_| {}).await;
        assert_eq!(acked, 99);
        let id = w.id();
        bk.close().await.unwrap();
        id
    };
    let j = java(|| cluster.java_client());
    let opened = java(|| j.open(id, true, JavaDigest::Crc32c, b"")).unwrap();
    assert_eq!(
        opened.lac, 99,
        "Java recovered the Rust writer's last entry"
    );
    let expected_len: u64 = (0..100).map(|i| payload(i).len() as u64).sum();
    assert_eq!(opened.length as u64, expected_len);

    // A Java writer that dies: Rust recovers it.
    let jid = java(|| j.create(&CreateOptions::new(3, 2, 2))).unwrap();
    java(|| j.add_many(jid, 77, Some(100))).unwrap();
    drop(j); // kills the Java session without closing the ledger
    let bk = client(&cluster).await;
    let r = bk.open_ledger(jid, DigestType::Crc32c, b"").await.unwrap();
    assert_eq!(r.last_add_confirmed(), 76);
    assert_eq!(r.length(), 7700);
    assert_eq!(r.metadata().state, LedgerState::Closed);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_with_a_dead_bookie_replaces_it_and_both_clients_agree() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(4);
    let bk = client(&cluster).await;
    // Two ledgers in the same state: one recovered by Rust, one by Java.
    let cfg = LedgerConfig::default().with_quorums(3, 2, 2);
    let mut ledgers = Vec::new();
    let victim = loop {
        let a = bk.create_ledger(&cfg).await.unwrap();
        let b = bk.create_ledger(&cfg).await.unwrap();
        let shared: Vec<String> = a
            .metadata()
            .first_ensemble()
            .iter()
            .filter(|x| b.metadata().first_ensemble().contains(x))
            .cloned()
            .collect();
        if let Some(v) = shared.first() {
            ledgers.push(a);
            ledgers.push(b);
            break v.clone();
        }
    };
    for w in &ledgers {
        let (acked, error) = stream_adds(w, 300, 8, |_| {}).await;
        assert!(error.is_none() && acked == 299);
    }
    java(|| cluster.kill(index_of(&cluster, &victim)));
    java(|| cluster.wait_unregistered(index_of(&cluster, &victim), Duration::from_secs(20)));
    let (rust_one, java_one) = (ledgers[0].id(), ledgers[1].id());
    drop(ledgers);
    bk.close().await.unwrap();

    let fresh = client(&cluster).await;
    let r = fresh
        .open_ledger(rust_one, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let j = java(|| cluster.java_client());
    let opened = java(|| j.open(java_one, true, JavaDigest::Crc32c, b"")).unwrap();
    assert_eq!(r.last_add_confirmed(), 299);
    assert_eq!(opened.lac, 299);
    assert_eq!(r.length() as i64, opened.length);
    check_entries(&r, 299).await;
    let read = java(|| j.read(java_one, 0, 299)).unwrap();
    assert_eq!(read.len(), 300);
}
