//! Fault knobs of `MemoryCluster`: fail-fast and hanging unavailability (with and
//! without an operation timeout) and latency injection, on paused tokio time.

use std::time::Duration;

use bkswitch_bk_client::{
    BkErrorKind, BookKeeper, BookKeeperExt, DigestType, LedgerConfig, MemoryCluster,
    MemoryClusterConfig, OpKind, ReadHandle, UnavailableMode, WriteHandle,
};
use bytes::Bytes;
use futures::FutureExt;
use tokio::time::Instant;

fn cfg() -> LedgerConfig {
    LedgerConfig::default()
}

fn data(i: i64) -> Bytes {
    Bytes::from(format!("entry-{i}"))
}

#[tokio::test(start_paused = true)]
async fn fail_fast_fails_every_operation_at_once_with_a_retryable_error() {
    let cluster = MemoryCluster::new("ff");
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();
    let reader = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();

    cluster.set_unavailable(UnavailableMode::FailFast);
    assert_eq!(cluster.unavailable_mode(), Some(UnavailableMode::FailFast));
    let start = Instant::now();
    let checks = [
        bk.create_ledger(&cfg()).await.map(|_| ()),
        bk.create_ledger_adv(1 << 40, &cfg()).await.map(|_| ()),
        bk.open_ledger(w.id(), DigestType::Crc32c, b"")
            .await
            .map(|_| ()),
        bk.open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
            .await
            .map(|_| ()),
        bk.delete_ledger(w.id()).await,
        reader.read_entries(0, 0).await.map(|_| ()),
        reader.read_unconfirmed(0, 0).await.map(|_| ()),
        reader.read_last_add_confirmed().await.map(|_| ()),
        w.add_entry(data(1)).await.map(|_| ()),
    ];
    assert_eq!(start.elapsed(), Duration::ZERO, "fail-fast must not wait");
    for r in checks {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::Unavailable, "{e}");
        assert_eq!(e.code(), -8);
        assert!(e.is_retryable());
        assert_eq!(e.cluster(), Some("ff"));
        assert!(e.to_string().contains("cluster 'ff'"), "{e}");
    }
    // Client-side checks still come first.
    assert_eq!(
        reader.read_entries(1, 0).await.unwrap_err().kind(),
        BkErrorKind::InvalidArgument
    );

    cluster.set_available();
    // The failed add closed the writer for adds, as BookKeeper does after an
    // unrecoverable add error; the ledger itself is still OPEN until sealed.
    let e = w.add_entry(data(1)).await.unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::LedgerClosed, "{e}");
    assert!(!cluster.ledger_metadata(w.id()).unwrap().is_closed());
    w.close().await.unwrap();
    let m = cluster.ledger_metadata(w.id()).unwrap();
    assert!(m.is_closed());
    assert_eq!(m.last_entry_id, 0);
    // Everything works again.
    assert_eq!(reader.read_entries(0, 0).await.unwrap()[0].data, data(0));
    bk.create_ledger(&cfg()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn fail_fast_fails_pending_adds_and_a_failed_close_can_be_retried() {
    let cluster = MemoryCluster::new("ff-pending");
    let bk = cluster.client();
    let w = bk.create_ledger_adv(7, &cfg()).await.unwrap();
    w.add_entry_at(0, data(0)).await.unwrap();
    let mut pending = w.add_entry_at(2, data(2));
    assert!((&mut pending).now_or_never().is_none());
    cluster.set_unavailable(UnavailableMode::FailFast);
    let e = w.add_entry_at(1, data(1)).await.unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::Unavailable);
    assert_eq!(pending.await.unwrap_err().kind(), BkErrorKind::Unavailable);
    // The seal cannot reach the cluster either.
    assert_eq!(
        w.close().await.unwrap_err().kind(),
        BkErrorKind::Unavailable
    );
    assert!(!w.is_closed());
    cluster.restore();
    w.close().await.unwrap();
    assert!(w.is_closed());
    assert_eq!(w.metadata().last_entry_id, 0);
}

#[tokio::test(start_paused = true)]
async fn hang_without_timeout_waits_until_available() {
    let cluster = MemoryCluster::new("hang");
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();

    cluster.set_unavailable(UnavailableMode::Hang);
    // Callers can put their own timeout around operations.
    let r = tokio::time::timeout(Duration::from_secs(30), bk.create_ledger(&cfg())).await;
    assert!(r.is_err(), "a hanging cluster must not answer");
    let r = tokio::time::timeout(Duration::from_secs(30), w.read_entries(0, 0)).await;
    assert!(r.is_err(), "a hanging cluster must not answer reads");

    let bk2 = bk.clone();
    let create = tokio::spawn(async move { bk2.create_ledger(&LedgerConfig::default()).await });
    let add = w.add_entry(data(1));
    tokio::time::sleep(Duration::from_secs(3600)).await;
    assert!(!create.is_finished());
    assert_eq!(w.last_add_confirmed(), 0, "the add must wait too");
    cluster.set_available();
    let created = create.await.unwrap().unwrap();
    assert!(created.id() > w.id());
    assert_eq!(add.await.unwrap(), 1);
    assert_eq!(w.last_add_confirmed(), 1);
}

#[tokio::test(start_paused = true)]
async fn hang_with_timeout_fails_with_retryable_timeout() {
    let cluster = MemoryCluster::with_config(
        "hang-timeout",
        MemoryClusterConfig::default().with_operation_timeout(Some(Duration::from_secs(2))),
    );
    assert_eq!(cluster.operation_timeout(), Some(Duration::from_secs(2)));
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();
    cluster.set_unavailable(UnavailableMode::Hang);

    let start = Instant::now();
    let e = bk
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), Duration::from_secs(2));
    assert_eq!(e.kind(), BkErrorKind::Timeout);
    assert_eq!(e.code(), -23);
    assert!(e.is_retryable());
    assert_eq!(e.ledger_id(), Some(w.id()));
    assert!(e.to_string().contains("timed out after 2s"), "{e}");

    // An add that times out fails the writer and its pending adds.
    let first = w.add_entry(data(1));
    let second = w.add_entry(data(2));
    assert_eq!(first.await.unwrap_err().kind(), BkErrorKind::Timeout);
    assert_eq!(second.await.unwrap_err().kind(), BkErrorKind::Timeout);
    assert_eq!(w.last_add_confirmed(), 0);

    cluster.set_operation_timeout(Some(Duration::from_millis(10)));
    let start = Instant::now();
    assert_eq!(
        bk.delete_ledger(w.id()).await.unwrap_err().kind(),
        BkErrorKind::Timeout
    );
    assert_eq!(start.elapsed(), Duration::from_millis(10));

    cluster.restore();
    assert_eq!(
        w.add_entry(data(3)).await.unwrap_err().kind(),
        BkErrorKind::LedgerClosed
    );
    w.close().await.unwrap();
    assert_eq!(w.metadata().last_entry_id, 0);
}

#[tokio::test(start_paused = true)]
async fn switching_from_hang_to_fail_fast_releases_waiters_with_unavailable() {
    let cluster = MemoryCluster::new("hang-then-ff");
    let bk = cluster.client();
    cluster.set_unavailable(UnavailableMode::Hang);
    let bk2 = bk.clone();
    let waiting = tokio::spawn(async move { bk2.create_ledger(&LedgerConfig::default()).await });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished());
    cluster.set_unavailable(UnavailableMode::FailFast);
    let e = waiting.await.unwrap().unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::Unavailable);
}

#[tokio::test(start_paused = true)]
async fn latency_is_injected_per_operation_kind() {
    let cluster = MemoryCluster::new("slow");
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();

    cluster.set_latency(OpKind::Read, Duration::from_millis(40));
    let start = Instant::now();
    w.read_entries(0, 0).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(40));
    // Other operations are not delayed.
    let start = Instant::now();
    w.add_entry(data(1)).await.unwrap();
    bk.open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);

    cluster.set_latency(OpKind::Add, Duration::from_millis(25));
    let start = Instant::now();
    // Pipelined adds overlap: ten adds take one latency, not ten.
    let futures: Vec<_> = (2..12).map(|i| w.add_entry(data(i))).collect();
    assert_eq!(
        w.last_add_confirmed(),
        1,
        "no add is confirmed before its latency"
    );
    for (f, expected) in futures.into_iter().zip(2..) {
        assert_eq!(f.await.unwrap(), expected);
        assert!(w.last_add_confirmed() >= expected);
    }
    assert_eq!(start.elapsed(), Duration::from_millis(25));

    cluster.set_latency_all(Duration::from_millis(5));
    let start = Instant::now();
    bk.create_ledger(&cfg()).await.unwrap();
    assert_eq!(start.elapsed(), Duration::from_millis(5));

    cluster.clear_latency();
    let start = Instant::now();
    w.read_entries(0, 11).await.unwrap();
    w.add_entry(data(12)).await.unwrap();
    assert_eq!(start.elapsed(), Duration::ZERO);
}

#[tokio::test(start_paused = true)]
async fn a_dropped_add_future_still_writes_the_entry() {
    let cluster = MemoryCluster::new("dropped");
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    cluster.set_latency(OpKind::Add, Duration::from_millis(10));
    drop(w.add_entry(data(0)));
    let second = w.add_entry(data(1));
    assert_eq!(second.await.unwrap(), 1);
    assert_eq!(w.last_add_confirmed(), 1);
    assert_eq!(cluster.entry_count(w.id()), Some(2));
}

#[tokio::test(start_paused = true)]
async fn adds_with_latency_complete_in_entry_id_order_when_written_out_of_order() {
    let cluster = MemoryCluster::new("adv-latency");
    let bk = cluster.client();
    let w = bk.create_ledger_adv(3, &cfg()).await.unwrap();
    cluster.set_latency(OpKind::Add, Duration::from_millis(30));
    let late = w.add_entry_at(0, data(0));
    cluster.set_latency(OpKind::Add, Duration::from_millis(10));
    let early = w.add_entry_at(1, data(1));
    // Entry 1 reaches the bookies first but completes only after entry 0.
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(cluster.entry_count(3), Some(1));
    assert_eq!(w.last_add_confirmed(), -1);
    let mut early = early;
    assert!((&mut early).now_or_never().is_none());
    assert_eq!(late.await.unwrap(), 0);
    assert_eq!(early.await.unwrap(), 1);
    assert_eq!(w.last_add_confirmed(), 1);
}

#[tokio::test(start_paused = true)]
async fn close_during_add_latency_fails_the_in_flight_add() {
    let cluster = MemoryCluster::new("close-in-flight");
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();
    cluster.set_latency(OpKind::Add, Duration::from_millis(50));
    let in_flight = w.add_entry(data(1));
    w.close().await.unwrap();
    assert_eq!(
        in_flight.await.unwrap_err().kind(),
        BkErrorKind::LedgerClosed
    );
    tokio::time::sleep(Duration::from_millis(100)).await;
    let m = w.metadata();
    assert_eq!(m.last_entry_id, 0);
    assert_eq!(
        cluster.entry_count(w.id()),
        Some(1),
        "the late write is discarded"
    );
}

#[tokio::test(start_paused = true)]
async fn recovery_during_add_latency_fences_the_in_flight_add() {
    let cluster = MemoryCluster::new("fence-in-flight");
    let (a, b) = (cluster.client(), cluster.client());
    let w = a.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();
    cluster.set_latency(OpKind::Add, Duration::from_millis(50));
    let in_flight = w.add_entry(data(1));
    let r = b
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 0);
    assert_eq!(
        in_flight.await.unwrap_err().kind(),
        BkErrorKind::LedgerFenced
    );
    assert_eq!(cluster.is_fenced(w.id()), Some(true));
    // The writer's close agrees with the recovered end.
    w.close().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn delete_ledger_if_exists_is_unaffected_by_latency_and_counts_missing_as_gone() {
    let cluster = MemoryCluster::new("ext");
    cluster.set_delete_missing(bkswitch_bk_client::DeleteMissing::NoSuchLedger);
    let bk = cluster.client();
    cluster.set_latency(OpKind::Delete, Duration::from_millis(5));
    let w = bk.create_ledger(&cfg()).await.unwrap();
    assert!(bk.delete_ledger_if_exists(w.id()).await.unwrap());
    assert!(!bk.delete_ledger_if_exists(w.id()).await.unwrap());
    cluster.set_unavailable(UnavailableMode::FailFast);
    assert!(bk.delete_ledger_if_exists(w.id()).await.is_err());
}
