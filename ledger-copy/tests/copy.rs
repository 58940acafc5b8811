//! The copy keeps ids, entry ids, bytes, quorums and custom metadata (I8), never
//! fences the source, and reports progress.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{
    BookKeeper, DigestType, LedgerConfig, LedgerState, MemoryBookKeeper, WriteHandle,
    WriteHandleExt, NO_ENTRY,
};
use bkswitch_ledger_copy::{
    copy_ledger_preserving_ids, verify_dst_matches_src, CopyOptions, CopyOutcome, CopyProgress,
    Verification,
};
use bytes::Bytes;
use common::{dump, payload, rich_config, write_ledger};
use parking_lot::Mutex;

fn clusters() -> (MemoryBookKeeper, MemoryBookKeeper) {
    let src = MemoryBookKeeper::new("bk-old");
    src.cluster().advance_ledger_id_to(1000).unwrap();
    (src, MemoryBookKeeper::new("bk-new"))
}

fn rich_options() -> CopyOptions {
    CopyOptions::new(DigestType::Crc32, b"pw".to_vec())
}

#[tokio::test]
async fn copy_keeps_ids_entries_bytes_quorums_and_custom_metadata() {
    let (src, dst) = clusters();
    let payloads: Vec<Bytes> = (0..20).map(|i| payload(i, 10 + i * 13)).collect();
    let w = write_ledger(&src, &rich_config(), &payloads, true).await;
    let id = w.id();
    assert_eq!(id, 1000);
    let total: u64 = payloads.iter().map(|p| p.len() as u64).sum();

    let report = copy_ledger_preserving_ids(id, &src, &dst, &rich_options().with_window(4))
        .await
        .unwrap();
    assert_eq!(report.ledger_id, id);
    assert_eq!(report.outcome, CopyOutcome::Copied);
    assert_eq!(report.entries, 20);
    assert_eq!(report.bytes, total);
    assert_eq!(report.last_entry_id, 19);

    let (src_meta, src_entries) = dump(&src, id).await;
    let (meta, entries) = dump(&dst, id).await;
    assert_eq!(meta.ledger_id, id);
    assert_eq!(meta.state, LedgerState::Closed);
    assert_eq!(meta.last_entry_id, 19);
    assert_eq!(meta.length, total);
    assert_eq!(
        (
            meta.ensemble_size,
            meta.write_quorum_size,
            meta.ack_quorum_size
        ),
        (3, 2, 1)
    );
    assert_eq!(meta.digest_type, DigestType::Crc32);
    assert_eq!(meta.password, b"pw".to_vec());
    assert_eq!(meta.custom_metadata, src_meta.custom_metadata);
    assert_eq!(meta.custom_metadata["application"], b"pulsar".to_vec());
    assert_eq!(entries, src_entries, "same entry ids and bytes");
    assert_eq!(
        dst.cluster().next_ledger_id(),
        0,
        "the destination's id generator is untouched"
    );
    assert_eq!(dst.cluster().ledger_ids(), vec![id]);
}

#[tokio::test]
async fn empty_ledger_is_copied_and_sealed_empty() {
    let (src, dst) = clusters();
    let w = write_ledger(&src, &LedgerConfig::default(), &[], true).await;
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let options = CopyOptions::default().with_progress(move |p| s.lock().push(*p));
    let report = copy_ledger_preserving_ids(w.id(), &src, &dst, &options)
        .await
        .unwrap();
    assert_eq!(report.outcome, CopyOutcome::Copied);
    assert_eq!((report.entries, report.bytes), (0, 0));
    assert_eq!(report.last_entry_id, NO_ENTRY);
    let meta = dst.cluster().ledger_metadata(w.id()).unwrap();
    assert_eq!(meta.state, LedgerState::Closed);
    assert_eq!((meta.last_entry_id, meta.length), (NO_ENTRY, 0));
    assert_eq!(
        *seen.lock(),
        vec![CopyProgress {
            ledger_id: w.id(),
            entries_copied: 0,
            bytes_copied: 0,
            last_entry_id: NO_ENTRY,
            entries_total: 0,
            bytes_total: 0,
        }]
    );
}

#[tokio::test]
async fn open_source_is_copied_up_to_its_lac_and_its_writer_is_not_fenced() {
    let (src, dst) = clusters();
    let payloads: Vec<Bytes> = (0..10).map(|i| payload(i, 100)).collect();
    let writer = write_ledger(&src, &rich_config(), &payloads, false).await;
    let id = writer.id();

    let report = copy_ledger_preserving_ids(id, &src, &dst, &rich_options())
        .await
        .unwrap();
    assert_eq!(report.last_entry_id, 9);
    assert_eq!(report.entries, 10);

    // The source is neither fenced nor sealed and its writer keeps going.
    assert_eq!(src.cluster().is_fenced(id), Some(false));
    assert_eq!(
        src.cluster().ledger_metadata(id).unwrap().state,
        LedgerState::Open
    );
    assert_eq!(writer.add_entry(payload(10, 100)).await.unwrap(), 10);
    assert_eq!(writer.add_entry(payload(11, 100)).await.unwrap(), 11);

    // The copy is the snapshot at LAC 9, sealed.
    let (meta, entries) = dump(&dst, id).await;
    assert_eq!(meta.state, LedgerState::Closed);
    assert_eq!(meta.last_entry_id, 9);
    assert_eq!(entries.len(), 10);
    assert_eq!(
        entries.iter().map(|e| e.data.clone()).collect::<Vec<_>>(),
        payloads
    );
}

#[tokio::test]
async fn closed_source_is_copied_up_to_its_last_entry_id() {
    let (src, dst) = clusters();
    let payloads: Vec<Bytes> = (0..7).map(|i| payload(i, 50)).collect();
    let w = write_ledger(&src, &LedgerConfig::default(), &payloads, true).await;
    let report = copy_ledger_preserving_ids(w.id(), &src, &dst, &CopyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.last_entry_id, 6);
    let (meta, entries) = dump(&dst, w.id()).await;
    assert_eq!((meta.last_entry_id, meta.length), (6, 350));
    assert_eq!(entries.len(), 7);
}

#[tokio::test]
async fn progress_is_reported_per_batch_monotonically_up_to_the_totals() {
    let (src, dst) = clusters();
    let payloads: Vec<Bytes> = (0..25).map(|i| payload(i, 8)).collect();
    let w = write_ledger(&src, &LedgerConfig::default(), &payloads, true).await;
    let seen: Arc<Mutex<Vec<CopyProgress>>> = Arc::default();
    let s = seen.clone();
    let options = CopyOptions::default()
        .with_window(4)
        .with_progress(move |p| s.lock().push(*p));
    copy_ledger_preserving_ids(w.id(), &src, &dst, &options)
        .await
        .unwrap();
    let seen = seen.lock();
    assert!(seen.len() >= 25 / 4, "one report per batch: {seen:?}");
    assert_eq!(
        (seen[0].entries_copied, seen[0].bytes_copied),
        (0, 0),
        "the first report comes before the first batch"
    );
    for pair in seen.windows(2) {
        assert!(pair[0].entries_copied < pair[1].entries_copied, "{seen:?}");
        assert!(pair[0].bytes_copied < pair[1].bytes_copied);
    }
    for p in seen.iter() {
        assert_eq!(p.ledger_id, w.id());
        assert_eq!(p.last_entry_id, p.entries_copied as i64 - 1);
        assert_eq!(p.bytes_copied, p.entries_copied * 8);
        assert_eq!((p.entries_total, p.bytes_total), (25, 200), "{p:?}");
    }
    let last = seen.last().unwrap();
    assert_eq!(
        (last.entries_copied, last.bytes_copied, last.last_entry_id),
        (25, 200, 24)
    );
}

#[tokio::test]
async fn window_of_one_copies_everything() {
    let (src, dst) = clusters();
    let payloads: Vec<Bytes> = (0..9).map(|i| payload(i, 3)).collect();
    let w = write_ledger(&src, &LedgerConfig::default(), &payloads, true).await;
    copy_ledger_preserving_ids(w.id(), &src, &dst, &CopyOptions::default().with_window(1))
        .await
        .unwrap();
    assert_eq!(dump(&dst, w.id()).await.1, dump(&src, w.id()).await.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copies_run_as_spawned_tasks_on_shared_clients() {
    let (src, dst) = clusters();
    let src: Arc<dyn BookKeeper> = Arc::new(src);
    let dst: Arc<dyn BookKeeper> = Arc::new(dst);
    let mut ids = Vec::new();
    for n in 0..8 {
        let w = src.create_ledger(&LedgerConfig::default()).await.unwrap();
        w.add_all((0..n).map(|i| payload(i, 64))).await.unwrap();
        w.close().await.unwrap();
        ids.push(w.id());
    }
    let tasks: Vec<_> = ids
        .iter()
        .map(|&id| {
            let (src, dst) = (src.clone(), dst.clone());
            tokio::spawn(async move {
                copy_ledger_preserving_ids(id, &*src, &*dst, &CopyOptions::default()).await
            })
        })
        .collect();
    for (task, n) in tasks.into_iter().zip(0u64..) {
        let report = task.await.unwrap().unwrap();
        assert_eq!(report.entries, n);
    }
    for id in ids {
        let v = verify_dst_matches_src(id, &*src, &*dst, &CopyOptions::default())
            .await
            .unwrap();
        assert!(v.is_identical(), "{v:?}");
    }
}

#[tokio::test]
async fn verify_reports_identical_after_a_copy_and_different_when_missing() {
    let (src, dst) = clusters();
    let payloads: Vec<Bytes> = (0..5).map(|i| payload(i, 40)).collect();
    let w = write_ledger(&src, &rich_config(), &payloads, true).await;
    let id = w.id();
    let before = verify_dst_matches_src(id, &src, &dst, &rich_options())
        .await
        .unwrap();
    match before {
        Verification::Different { reason } => {
            assert!(reason.contains("no ledger 1000"), "{reason}");
            assert!(reason.contains("bk-new"), "{reason}");
        }
        other => panic!("expected a difference, got {other:?}"),
    }
    copy_ledger_preserving_ids(id, &src, &dst, &rich_options())
        .await
        .unwrap();
    assert_eq!(
        verify_dst_matches_src(id, &src, &dst, &rich_options())
            .await
            .unwrap(),
        Verification::Identical {
            last_entry_id: 4,
            length: 200
        }
    );
}

#[tokio::test]
async fn source_writer_keeps_appending_during_and_after_the_copy() {
    // A writer that keeps writing while a copy of its snapshot is taken.
    let (src, dst) = clusters();
    let writer: Arc<dyn WriteHandle> = src.create_ledger(&LedgerConfig::default()).await.unwrap();
    writer
        .add_all((0..30).map(|i| payload(i, 16)))
        .await
        .unwrap();
    let id = writer.id();
    let options = CopyOptions::default().with_window(2);
    let copy = copy_ledger_preserving_ids(id, &src, &dst, &options);
    let more = writer.add_all((30..40).map(|i| payload(i, 16)));
    let (report, added) = futures::join!(copy, more);
    let report = report.unwrap();
    assert_eq!(added.unwrap(), (30..40).collect::<Vec<_>>());
    assert!(report.last_entry_id >= 29, "{report:?}");
    let (meta, entries) = dump(&dst, id).await;
    assert_eq!(meta.last_entry_id, report.last_entry_id);
    assert_eq!(entries, dump(&src, id).await.1[..entries.len()].to_vec());
    assert_eq!(src.cluster().is_fenced(id), Some(false));
    writer.close().await.unwrap();
}

#[tokio::test]
async fn on_created_runs_once_after_the_create_and_a_refusal_abandons_the_copy() {
    let (src, dst) = clusters();
    let payloads: Vec<Bytes> = (0..5).map(|i| payload(i, 32)).collect();
    let id = write_ledger(&src, &rich_config(), &payloads, true)
        .await
        .id();
    let calls = Arc::new(Mutex::new(Vec::new()));

    // A refusal: the ledger it had created is deleted, nothing else written.
    let refuse = rich_options().with_on_created(|_| Box::pin(async { Err("store down".into()) }));
    let e = copy_ledger_preserving_ids(id, &src, &dst, &refuse)
        .await
        .unwrap_err();
    assert!(
        matches!(e, bkswitch_ledger_copy::CopyError::NotRecorded { ledger_id, .. } if ledger_id == id),
        "{e}"
    );
    assert!(e.is_retryable());
    assert!(e.to_string().contains("store down"), "{e}");
    assert!(dst.cluster().ledger_ids().is_empty());

    // Recorded: called once with the id, before the entries are written.
    let seen = calls.clone();
    let dst_cluster = dst.cluster().clone();
    let record = rich_options().with_on_created(move |ledger_id| {
        let entries_then = dst_cluster
            .ledger_metadata(ledger_id)
            .map(|m| m.last_entry_id);
        seen.lock().push((ledger_id, entries_then));
        Box::pin(async { Ok(()) })
    });
    let report = copy_ledger_preserving_ids(id, &src, &dst, &record)
        .await
        .unwrap();
    assert_eq!(report.outcome, CopyOutcome::Copied);
    assert_eq!(*calls.lock(), vec![(id, Some(NO_ENTRY))]);

    // The destination exists: not called again.
    let again = copy_ledger_preserving_ids(id, &src, &dst, &record)
        .await
        .unwrap();
    assert_eq!(again.outcome, CopyOutcome::AlreadyPresent);
    assert_eq!(calls.lock().len(), 1);
}
