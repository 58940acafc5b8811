//! Behaviour specific to the in-memory cluster: id generator control, fenced
//! re-creation, bookie count, independent named clusters, digest checks, stale
//! handles, exact LAC visibility and introspection.

use bkswitch_bk_client::{
    BkErrorKind, BookKeeper, DigestType, FencedRecreateFailure, LedgerConfig, LedgerState,
    MemoryBookKeeper, MemoryCluster, MemoryClusterConfig, MemoryClusters, ReadHandle,
    ReadHandleExt, WriteHandle, WriteHandleExt,
};
use bytes::Bytes;
use futures::FutureExt;

fn cfg() -> LedgerConfig {
    LedgerConfig::default()
}

fn data(i: i64) -> Bytes {
    Bytes::from(format!("payload-{i}"))
}

#[tokio::test]
async fn id_generator_starts_at_zero_and_can_be_advanced_but_not_rewound() {
    let cluster = MemoryCluster::new("idgen");
    let bk = cluster.client();
    assert_eq!(cluster.next_ledger_id(), 0);
    assert_eq!(bk.create_ledger(&cfg()).await.unwrap().id(), 0);
    assert_eq!(bk.create_ledger(&cfg()).await.unwrap().id(), 1);
    assert_eq!(cluster.next_ledger_id(), 2);

    cluster.advance_ledger_id_to(100).unwrap();
    assert_eq!(cluster.next_ledger_id(), 100);
    assert_eq!(bk.create_ledger(&cfg()).await.unwrap().id(), 100);
    cluster.advance_ledger_id_to(101).unwrap(); // no-op: already there

    let e = cluster.advance_ledger_id_to(50).unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::InvalidArgument);
    assert_eq!(e.code(), -14);
    let msg = e.to_string();
    assert!(msg.contains("backwards from 101 to 50"), "{msg}");
    assert!(msg.contains("cluster 'idgen'"), "{msg}");
    assert_eq!(cluster.next_ledger_id(), 101);
}

#[tokio::test]
async fn create_ledger_skips_ids_taken_by_adv_exactly() {
    let cluster = MemoryCluster::new("skip");
    let bk = cluster.client();
    for id in [0, 1, 3] {
        bk.create_ledger_adv(id, &cfg()).await.unwrap();
    }
    // The generator was not moved by the Adv creates…
    assert_eq!(cluster.next_ledger_id(), 0);
    // …and skips the taken ids one by one.
    assert_eq!(bk.create_ledger(&cfg()).await.unwrap().id(), 2);
    assert_eq!(bk.create_ledger(&cfg()).await.unwrap().id(), 4);
    assert_eq!(cluster.next_ledger_id(), 5);
    assert_eq!(cluster.ledger_ids(), vec![0, 1, 2, 3, 4]);
}

#[tokio::test]
async fn fenced_then_deleted_ids_can_fail_recreation_on_create() {
    let cluster = MemoryCluster::new("fenced-recreate");
    let (a, b) = (cluster.client(), cluster.client());
    let w = a.create_ledger_adv(42, &cfg()).await.unwrap();
    w.add_entry_at(0, data(0)).await.unwrap();
    b.open_ledger(42, DigestType::Crc32c, b"").await.unwrap(); // fences
    b.delete_ledger(42).await.unwrap();
    assert!(cluster.was_fenced_then_deleted(42));

    // Off by default.
    b.create_ledger_adv(42, &cfg()).await.unwrap();
    b.delete_ledger(42).await.unwrap();
    // The re-created ledger was never fenced, but the id stays remembered.
    assert!(cluster.was_fenced_then_deleted(42));

    cluster.fail_fenced_recreates(2, FencedRecreateFailure::OnCreate);
    for remaining in [1, 0] {
        let e = b.create_ledger_adv(42, &cfg()).await.unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::LedgerFenced);
        assert_eq!(e.code(), -101);
        assert!(!cluster.contains_ledger(42));
        assert_eq!(cluster.fenced_recreates_remaining(), remaining);
    }
    let w = b.create_ledger_adv(42, &cfg()).await.unwrap();
    w.add_entry_at(0, data(0)).await.unwrap();

    // Ids that were never fenced are not affected.
    cluster.fail_fenced_recreates(5, FencedRecreateFailure::OnCreate);
    b.create_ledger_adv(43, &cfg()).await.unwrap();
    assert_eq!(cluster.fenced_recreates_remaining(), 5);
    cluster.fail_fenced_recreates(0, FencedRecreateFailure::OnCreate);
}

#[tokio::test]
async fn fenced_then_deleted_ids_can_fail_recreation_on_first_add() {
    let cluster = MemoryCluster::new("fenced-first-add");
    let bk = cluster.client();
    let w = bk.create_ledger_adv(9, &cfg()).await.unwrap();
    bk.open_ledger(9, DigestType::Crc32c, b"").await.unwrap();
    bk.delete_ledger(9).await.unwrap();
    drop(w);
    cluster.fail_fenced_recreates(1, FencedRecreateFailure::OnFirstAdd);
    let w = bk.create_ledger_adv(9, &cfg()).await.unwrap();
    assert!(cluster.contains_ledger(9));
    let e = w.add_entry_at(0, data(0)).await.unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::LedgerFenced);
    // The writer is closed for adds afterwards; the caller deletes and retries.
    assert_eq!(
        w.add_entry_at(0, data(0)).await.unwrap_err().kind(),
        BkErrorKind::LedgerClosed
    );
    bk.delete_ledger(9).await.unwrap();
    let w = bk.create_ledger_adv(9, &cfg()).await.unwrap();
    w.add_entry_at(0, data(0)).await.unwrap();
}

#[tokio::test]
async fn ensemble_larger_than_bookie_count_is_not_enough_bookies() {
    let cluster =
        MemoryCluster::with_config("small", MemoryClusterConfig::default().with_bookies(2));
    assert_eq!(cluster.bookies().len(), 2);
    let bk = cluster.client();
    for r in [
        bk.create_ledger(&cfg()).await.map(|_| ()),
        bk.create_ledger_adv(5, &cfg()).await.map(|_| ()),
    ] {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::NotEnoughBookies);
        assert_eq!(e.code(), -6);
        assert!(e.to_string().contains("cluster has 2"), "{e}");
    }
    assert!(cluster.ledger_ids().is_empty());
    assert_eq!(cluster.next_ledger_id(), 0, "no id is consumed");
    let w = bk
        .create_ledger(&cfg().with_quorums(2, 2, 2))
        .await
        .unwrap();
    let m = w.metadata();
    assert_eq!(m.ensembles.len(), 1);
    assert_eq!(m.ensembles[0].first_entry_id, 0);
    assert_eq!(m.first_ensemble().len(), 2);
    assert!(m
        .first_ensemble()
        .iter()
        .all(|b| cluster.bookies().contains(b)));
    // Validation of quorums comes before the bookie check.
    let e = bk
        .create_ledger(&cfg().with_quorums(5, 6, 1))
        .await
        .unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::InvalidArgument);
}

#[tokio::test]
async fn named_clusters_are_independent() {
    let clusters = MemoryClusters::new();
    let a = clusters.get_or_create("a");
    let b = clusters.get_or_create("b");
    let (ca, cb) = (a.client(), b.client());
    let wa = ca.create_ledger(&cfg()).await.unwrap();
    wa.add_entry(data(0)).await.unwrap();
    let wb = cb.create_ledger(&cfg()).await.unwrap();
    // Same id on both: separate id generators.
    assert_eq!(wa.id(), 0);
    assert_eq!(wb.id(), 0);
    assert_eq!(wb.last_add_confirmed(), -1);
    assert_eq!(cb.cluster_name(), "b");
    // Faults on one do not touch the other.
    a.set_unavailable(bkswitch_bk_client::UnavailableMode::FailFast);
    assert!(ca.create_ledger(&cfg()).await.is_err());
    cb.create_ledger(&cfg()).await.unwrap();
    a.restore();
    // Deleting on one leaves the other's ledger.
    ca.delete_ledger(0).await.unwrap();
    assert!(!a.contains_ledger(0));
    assert!(b.contains_ledger(0));
    // The registry hands back the same cluster by name.
    assert_eq!(clusters.get_or_create("b").ledger_ids(), vec![0, 1]);
    assert_eq!(clusters.names(), vec!["a".to_string(), "b".to_string()]);
    assert!(clusters.get("c").is_none());
    let custom = clusters.get_or_create_with("c", MemoryClusterConfig::default().with_bookies(5));
    assert_eq!(custom.bookies().len(), 5);
    assert_eq!(
        clusters
            .get_or_create_with("c", MemoryClusterConfig::default())
            .bookies()
            .len(),
        5,
        "an existing cluster keeps its settings"
    );
}

#[tokio::test]
async fn digest_autodetection_can_be_turned_off() {
    let cluster = MemoryCluster::with_config(
        "digest",
        MemoryClusterConfig::default().with_digest_autodetection(false),
    );
    let bk = cluster.client();
    let w = bk
        .create_ledger(&cfg().with_digest_type(DigestType::Crc32))
        .await
        .unwrap();
    let e = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::DigestMismatch);
    assert_eq!(e.code(), -5);
    bk.open_ledger_no_recovery(w.id(), DigestType::Crc32, b"")
        .await
        .unwrap();
    // With autodetection (the default) the stored digest wins.
    let auto = MemoryBookKeeper::new("auto");
    let w = auto
        .create_ledger(&cfg().with_digest_type(DigestType::Mac))
        .await
        .unwrap();
    let r = auto
        .open_ledger_no_recovery(w.id(), DigestType::Dummy, b"")
        .await
        .unwrap();
    assert_eq!(r.metadata().digest_type, DigestType::Mac);
}

#[tokio::test]
async fn stale_handles_of_a_deleted_ledger_get_no_such_ledger() {
    let cluster = MemoryCluster::new("stale");
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();
    let r = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    bk.delete_ledger(w.id()).await.unwrap();
    for e in [
        r.read_entries(0, 0).await.map(|_| ()).unwrap_err(),
        r.read_unconfirmed(0, 0).await.map(|_| ()).unwrap_err(),
        r.read_last_add_confirmed().await.map(|_| ()).unwrap_err(),
        w.read_entries(0, 0).await.map(|_| ()).unwrap_err(),
        w.add_entry(data(1)).await.map(|_| ()).unwrap_err(),
    ] {
        assert_eq!(e.kind(), BkErrorKind::NoSuchLedger, "{e}");
        assert_eq!(e.code(), -7);
        assert!(e.is_already_deleted());
    }
    // Sealing a deleted ledger fails with the metadata service's code.
    assert_eq!(
        w.close().await.unwrap_err().kind(),
        BkErrorKind::NoSuchLedgerOnMetadataServer
    );
    // Cached values stay readable.
    assert_eq!(r.last_add_confirmed(), 0);
    r.close().await.unwrap();
}

#[tokio::test]
async fn delete_fails_pending_adds_with_no_such_ledger() {
    let cluster = MemoryCluster::new("delete-pending");
    let bk = cluster.client();
    let w = bk.create_ledger_adv(1, &cfg()).await.unwrap();
    let pending = w.add_entry_at(1, data(1));
    bk.delete_ledger(1).await.unwrap();
    assert_eq!(pending.await.unwrap_err().kind(), BkErrorKind::NoSuchLedger);
}

#[tokio::test]
async fn no_recovery_handles_see_the_exact_lac_and_closure_after_refresh() {
    let cluster = MemoryCluster::new("exact-lac");
    let (a, b) = (cluster.client(), cluster.client());
    let w = a.create_ledger(&cfg()).await.unwrap();
    w.add_all((0..3).map(data)).await.unwrap();
    let r = b
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    // Bookies know the LAC at once in the fake: no piggyback lag.
    assert_eq!(r.last_add_confirmed(), 2);
    let len3: u64 = (0..3).map(|i| data(i).len() as u64).sum();
    assert_eq!(r.length(), len3);
    w.add_all((3..5).map(data)).await.unwrap();
    assert_eq!(r.read_last_add_confirmed().await.unwrap(), 4);
    assert!(!r.is_closed());
    w.close().await.unwrap();
    assert!(!r.is_closed(), "the handle's view changes only on refresh");
    assert_eq!(r.read_last_add_confirmed().await.unwrap(), 4);
    assert!(r.is_closed());
    assert_eq!(r.metadata().state, LedgerState::Closed);
    assert_eq!(r.length(), w.metadata().length);
    assert_eq!(r.read_all().await.unwrap().len(), 5);
    assert_eq!(r.read_entry(3).await.unwrap().data, data(3));
}

#[tokio::test]
async fn writer_length_counts_only_confirmed_entries_while_adds_are_pending() {
    let cluster = MemoryCluster::new("pending-length");
    let bk = cluster.client();
    let w = bk.create_ledger_adv(0, &cfg()).await.unwrap();
    let mut pending = w.add_entry_at(1, Bytes::from_static(b"four"));
    assert!((&mut pending).now_or_never().is_none());
    assert_eq!(w.length(), 0);
    assert_eq!(cluster.entry_count(0), Some(1));
    assert_eq!(cluster.last_add_confirmed(0), Some(-1));
    w.add_entry_at(0, Bytes::from_static(b"xy")).await.unwrap();
    assert_eq!(pending.await.unwrap(), 1);
    assert_eq!(w.length(), 6);
}

#[tokio::test]
async fn closed_client_also_closes_its_handles() {
    let cluster = MemoryCluster::new("client-close");
    let bk = cluster.client();
    let w = bk.create_ledger(&cfg()).await.unwrap();
    w.add_entry(data(0)).await.unwrap();
    let r = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    bk.close().await.unwrap();
    assert!(bk.is_closed());
    for e in [
        w.add_entry(data(1)).await.map(|_| ()).unwrap_err(),
        w.read_entries(0, 0).await.map(|_| ()).unwrap_err(),
        r.read_entries(0, 0).await.map(|_| ()).unwrap_err(),
        r.read_last_add_confirmed().await.map(|_| ()).unwrap_err(),
        w.close().await.unwrap_err(),
        bk.delete_ledger(w.id()).await.unwrap_err(),
    ] {
        assert_eq!(e.kind(), BkErrorKind::ClientClosed, "{e}");
        assert_eq!(e.code(), -19);
    }
    r.close().await.unwrap();
    // The ledger stays OPEN for the cluster; a recovery open by another client seals it.
    let other = cluster.client();
    let rec = other
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(rec.last_add_confirmed(), 0);
}

#[tokio::test]
async fn introspection_reports_ledgers_metadata_and_entries() {
    let cluster = MemoryCluster::new("introspect");
    let bk = cluster.client();
    let w = bk
        .create_ledger(&cfg().with_custom_metadata("k", b"v".to_vec()))
        .await
        .unwrap();
    w.add_all((0..4).map(data)).await.unwrap();
    assert_eq!(cluster.ledger_ids(), vec![w.id()]);
    assert_eq!(cluster.entry_count(w.id()), Some(4));
    assert_eq!(cluster.last_add_confirmed(w.id()), Some(3));
    assert_eq!(cluster.is_fenced(w.id()), Some(false));
    let m = cluster.ledger_metadata(w.id()).unwrap();
    assert_eq!(m.custom_metadata["k"], b"v".to_vec());
    assert_eq!(m.state, LedgerState::Open);
    assert!(m.ctime > 0);
    assert_eq!(cluster.ledger_metadata(999), None);
    assert_eq!(cluster.entry_count(999), None);
    assert!(cluster.remove_ledger(w.id()));
    assert!(!cluster.remove_ledger(w.id()));
    assert!(cluster.ledger_ids().is_empty());
}

#[tokio::test]
async fn reads_share_payload_buffers() {
    let bk = MemoryBookKeeper::new("zero-copy");
    let w = bk.create_ledger(&cfg()).await.unwrap();
    let payload = Bytes::from(vec![1u8; 4096]);
    w.add_entry(payload.clone()).await.unwrap();
    let read = w.read_entry(0).await.unwrap();
    assert_eq!(
        read.data.as_ptr(),
        payload.as_ptr(),
        "reads must not copy payloads"
    );
}

#[tokio::test]
async fn writer_close_after_recovery_with_a_matching_lac_succeeds_and_seals_nothing_new() {
    let cluster = MemoryCluster::new("close-after-recovery");
    let (a, b) = (cluster.client(), cluster.client());
    let w = a.create_ledger(&cfg()).await.unwrap();
    w.add_all((0..2).map(data)).await.unwrap();
    b.open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert!(w.is_closed(), "the writer sees the sealed metadata");
    let before = cluster.ledger_metadata(w.id()).unwrap();
    w.close().await.unwrap();
    w.close().await.unwrap();
    assert_eq!(cluster.ledger_metadata(w.id()).unwrap(), before);
}

#[tokio::test]
async fn errors_name_cluster_ledger_and_remedy() {
    let bk = MemoryBookKeeper::new("bk-errors");
    let w = bk.create_ledger_adv(77, &cfg()).await.unwrap();
    let e = w.add_entry(data(0)).await.unwrap_err();
    let msg = e.to_string();
    assert_eq!(e.code(), -100);
    assert!(msg.contains("cluster 'bk-errors', ledger 77"), "{msg}");
    assert!(msg.contains("add_entry_at"), "{msg}");
    let e = bk.create_ledger_adv(77, &cfg()).await.unwrap_err();
    assert_eq!(e.ledger_id(), Some(77));
    assert!(e.to_string().contains("already exists"), "{e}");
}
