//! Faults below the ledger of `MemoryCluster`: copies lost on single bookies
//! (reads and recovery served by the other copies; data gone only with every
//! copy), and ledger metadata that no longer decodes.

use bkswitch_bk_client::{
    BkErrorKind, BookKeeper, DigestType, LedgerConfig, MemoryCluster, ReadHandle, WriteHandle,
};
use bytes::Bytes;

fn data(i: i64) -> Bytes {
    Bytes::from(format!("entry-{i}"))
}

/// E3 WQ2 AQ2 (the default): entry `e` is on ensemble indexes `e % 3` and
/// `(e + 1) % 3`.
async fn ledger_with(cluster: &MemoryCluster, n: i64) -> std::sync::Arc<dyn WriteHandle> {
    let bk = cluster.client();
    let w = bk.create_ledger(&LedgerConfig::default()).await.unwrap();
    for i in 0..n {
        w.add_entry(data(i)).await.unwrap();
    }
    w
}

#[tokio::test]
async fn reads_go_to_the_next_copy_and_fail_only_when_every_copy_is_gone() {
    let cluster = MemoryCluster::new("rep");
    let w = ledger_with(&cluster, 6).await;
    let id = w.id();
    let ensemble = cluster.ledger_metadata(id).unwrap().ensembles[0]
        .bookies
        .clone();
    assert_eq!(ensemble.len(), 3);

    // One bookie's disk is replaced: it lost its copy of 4 of the 6 entries
    // (entries 0, 2, 3, 5 for index 0), never a last copy.
    assert_eq!(cluster.lose_bookie(&ensemble[0], false), 4);
    assert_eq!(cluster.copies(id, 0), Some(1));
    assert_eq!(cluster.copies(id, 1), Some(2));
    // Losing another bookie now may take no entry's last copy.
    assert_eq!(
        cluster.lose_bookie(&ensemble[1], false),
        2,
        "entries 1 and 4 only"
    );
    for e in 0..6 {
        assert_eq!(cluster.copies(id, e), Some(1), "entry {e}");
        assert_eq!(cluster.entry(id, e), Some(data(e)));
    }
    let bk = cluster.client();
    let r = bk
        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let got: Vec<Bytes> = r
        .read_entries(0, 5)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.data)
        .collect();
    assert_eq!(got, (0..6).map(data).collect::<Vec<_>>());

    // The last copy of entry 2 taken on purpose: that entry is lost, named.
    assert_eq!(cluster.lose_copies(id, &ensemble[2], 2, 2, true), 1);
    assert_eq!(cluster.copies(id, 2), Some(0));
    assert_eq!(cluster.entry(id, 2), None);
    let e = r.read_entries(0, 5).await.unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::NoSuchEntry, "{e}");
    assert!(
        e.to_string().contains("entry 2 is on none of its bookies"),
        "{e}"
    );
    assert!(e.to_string().contains(&ensemble[2]), "{e}");
    assert!(r.read_unconfirmed(2, 2).await.is_err());
    // The others still read.
    assert_eq!(r.read_entries(3, 5).await.unwrap().len(), 3);
    // Entries written afterwards are stored on every bookie again.
    w.add_entry(data(6)).await.unwrap();
    assert_eq!(cluster.copies(id, 6), Some(2));
}

#[tokio::test]
async fn a_recovery_reads_the_last_entry_from_a_copy_left_and_writes_it_back() {
    let cluster = MemoryCluster::new("rec");
    let w = ledger_with(&cluster, 5).await;
    let id = w.id();
    let ensemble = cluster.ledger_metadata(id).unwrap().ensembles[0]
        .bookies
        .clone();
    // Entry 4 is on indexes 1 and 2; index 1 loses it.
    assert_eq!(cluster.lose_copies(id, &ensemble[1], 4, 4, false), 1);
    assert_eq!(cluster.copies(id, 4), Some(1));
    let bk = cluster.client();
    let r = bk.open_ledger(id, DigestType::Crc32c, b"").await.unwrap();
    assert!(r.is_closed());
    assert_eq!(r.last_add_confirmed(), 4);
    assert_eq!(
        cluster.copies(id, 4),
        Some(2),
        "written back by the recovery"
    );
    assert!(w.add_entry(data(5)).await.is_err(), "the writer is fenced");

    // With no copy left of the last entry the recovery cannot tell whether it
    // was acknowledged: it fails (retryable) rather than ending the ledger at
    // entry 2.
    let w = ledger_with(&cluster, 4).await;
    let id = w.id();
    let ensemble = cluster.ledger_metadata(id).unwrap().ensembles[0]
        .bookies
        .clone();
    for b in &ensemble {
        cluster.lose_copies(id, b, 3, 3, true);
    }
    let e = bk
        .open_ledger(id, DigestType::Crc32c, b"")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("cannot tell whether entry 3"), "{e}");
    assert!(!cluster.ledger_metadata(id).unwrap().is_closed());
    assert_eq!(cluster.is_fenced(id), Some(true));
}

#[tokio::test]
async fn corrupt_metadata_fails_opens_and_seals_naming_the_ledger_until_restored() {
    let cluster = MemoryCluster::new("meta");
    let w = ledger_with(&cluster, 3).await;
    let id = w.id();
    let bk = cluster.client();
    let reader = bk
        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert!(cluster.corrupt_metadata(id));
    assert_eq!(cluster.is_metadata_corrupt(id), Some(true));
    for recovery in [false, true] {
        let e = if recovery {
            bk.open_ledger(id, DigestType::Crc32c, b"").await
        } else {
            bk.open_ledger_no_recovery(id, DigestType::Crc32c, b"")
                .await
        }
        .unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::Other, "{e}");
        assert!(!e.is_retryable());
        assert_eq!(e.ledger_id(), Some(id));
        assert!(
            e.to_string()
                .contains(&format!("the metadata of ledger {id} cannot be decoded")),
            "{e}"
        );
    }
    // Bookies still answer handles already open, and take adds.
    assert_eq!(reader.read_entries(0, 2).await.unwrap().len(), 3);
    w.add_entry(data(3)).await.unwrap();
    // The writer cannot seal it.
    let e = w.close().await.unwrap_err();
    assert!(e.to_string().contains("cannot be decoded"), "{e}");
    assert!(!cluster.ledger_metadata(id).unwrap().is_closed());
    // Restored: the seal goes through, the ledger opens.
    assert!(cluster.restore_metadata(id));
    w.close().await.unwrap();
    let r = bk.open_ledger(id, DigestType::Crc32c, b"").await.unwrap();
    assert_eq!(r.last_add_confirmed(), 3);
    // A delete does not read the metadata.
    let other = ledger_with(&cluster, 1).await;
    assert!(cluster.corrupt_metadata(other.id()));
    bk.delete_ledger(other.id()).await.unwrap();
    assert!(!cluster.contains_ledger(other.id()));
    assert!(!cluster.restore_metadata(other.id()));
}
