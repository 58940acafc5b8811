//! Failures: missing or unavailable source, unavailable destination, invalid
//! arguments, and failures midway (the partial destination is removed).

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{
    BkErrorKind, BookKeeper, LedgerConfig, MemoryBookKeeper, UnavailableMode,
};
use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyError, CopyOptions, CopyOutcome};
use bytes::Bytes;
use common::{dump, payload, write_ledger, Probe, Probed};

async fn setup(n: usize) -> (MemoryBookKeeper, MemoryBookKeeper, i64) {
    let src = MemoryBookKeeper::new("bk-old");
    src.cluster().advance_ledger_id_to(42).unwrap();
    let dst = MemoryBookKeeper::new("bk-new");
    let payloads: Vec<Bytes> = (0..n).map(|i| payload(i, 20)).collect();
    let w = write_ledger(&src, &LedgerConfig::default(), &payloads, true).await;
    (src, dst, w.id())
}

#[tokio::test]
async fn missing_source_is_a_non_retryable_source_read_error() {
    let (src, dst, _) = setup(1).await;
    let err = copy_ledger_preserving_ids(4242, &src, &dst, &CopyOptions::default())
        .await
        .unwrap_err();
    match &err {
        CopyError::SourceRead {
            ledger_id,
            cluster,
            source,
        } => {
            assert_eq!(*ledger_id, 4242);
            assert_eq!(cluster, "bk-old");
            assert_eq!(source.kind(), BkErrorKind::NoSuchLedgerOnMetadataServer);
        }
        other => panic!("expected SourceRead, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(err.ledger_id(), 4242);
    let msg = err.to_string();
    assert!(
        msg.contains("ledger 4242") && msg.contains("'bk-old'"),
        "{msg}"
    );
    assert!(dst.cluster().ledger_ids().is_empty(), "nothing created");
}

#[tokio::test]
async fn unavailable_source_is_a_retryable_source_read_error() {
    let (src, dst, id) = setup(3).await;
    src.cluster().set_unavailable(UnavailableMode::FailFast);
    let err = copy_ledger_preserving_ids(id, &src, &dst, &CopyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, CopyError::SourceRead { .. }), "{err:?}");
    assert_eq!(err.bk_error().unwrap().kind(), BkErrorKind::Unavailable);
    assert!(err.is_retryable());
    assert!(dst.cluster().ledger_ids().is_empty());
    src.cluster().set_available();
    let report = copy_ledger_preserving_ids(id, &src, &dst, &CopyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.outcome, CopyOutcome::Copied);
}

#[tokio::test]
async fn unavailable_destination_is_a_retryable_destination_write_error() {
    let (src, dst, id) = setup(3).await;
    let src_before = dump(&src, id).await;
    dst.cluster().set_unavailable(UnavailableMode::FailFast);
    let err = copy_ledger_preserving_ids(id, &src, &dst, &CopyOptions::default())
        .await
        .unwrap_err();
    match &err {
        CopyError::DestinationWrite {
            cluster, source, ..
        } => {
            assert_eq!(cluster, "bk-new");
            assert_eq!(source.kind(), BkErrorKind::Unavailable);
        }
        other => panic!("expected DestinationWrite, got {other:?}"),
    }
    assert!(err.is_retryable());
    dst.cluster().set_available();
    assert!(dst.cluster().ledger_ids().is_empty());
    assert_eq!(dump(&src, id).await, src_before, "the source is untouched");
}

#[tokio::test]
async fn invalid_arguments_touch_nothing() {
    let (src, dst, id) = setup(2).await;
    let src_before = dump(&src, id).await;
    for (ledger_id, options) in [
        (-1, CopyOptions::default()),
        (id, CopyOptions::default().with_window(0)),
    ] {
        let err = copy_ledger_preserving_ids(ledger_id, &src, &dst, &options)
            .await
            .unwrap_err();
        assert!(matches!(err, CopyError::InvalidArgument { .. }), "{err:?}");
        assert!(!err.is_retryable());
        assert_eq!(err.ledger_id(), ledger_id);
        assert!(err.to_string().contains("nothing was read or written"));
        let err = bkswitch_ledger_copy::verify_dst_matches_src(ledger_id, &src, &dst, &options)
            .await
            .unwrap_err();
        assert!(matches!(err, CopyError::InvalidArgument { .. }));
    }
    assert!(dst.cluster().ledger_ids().is_empty());
    assert_eq!(dump(&src, id).await, src_before);
}

#[tokio::test]
async fn add_failure_midway_removes_the_partial_destination_so_a_retry_succeeds() {
    let (src, dst, id) = setup(40).await;
    let probe = Arc::new(Probe::default());
    *probe.fail_add_at.lock() = Some(17);
    let pdst = Probed::new(Arc::new(dst.clone()), probe);
    let err = copy_ledger_preserving_ids(id, &src, &pdst, &CopyOptions::default().with_window(4))
        .await
        .unwrap_err();
    assert!(matches!(err, CopyError::DestinationWrite { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(
        !dst.cluster().contains_ledger(id),
        "the partial destination was deleted"
    );
    let report = copy_ledger_preserving_ids(id, &src, &dst, &CopyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.outcome, CopyOutcome::Copied);
    assert_eq!(dump(&dst, id).await.1, dump(&src, id).await.1);
}

#[tokio::test]
async fn read_failure_midway_removes_the_partial_destination() {
    let (src, dst, id) = setup(40).await;
    let probe = Arc::new(Probe::default());
    *probe.fail_read_at.lock() = Some(25);
    let psrc = Probed::new(Arc::new(src.clone()), probe);
    let err = copy_ledger_preserving_ids(id, &psrc, &dst, &CopyOptions::default().with_window(4))
        .await
        .unwrap_err();
    assert!(matches!(err, CopyError::SourceRead { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(!dst.cluster().contains_ledger(id));
    assert_eq!(src.cluster().is_fenced(id), Some(false));
}

#[tokio::test]
async fn destination_lost_midway_leaves_a_partial_copy_that_a_retry_reports_as_mismatch() {
    // The destination becomes unreachable during the copy: the add fails, and so do
    // the close and the delete. The partial ledger stays; once the cluster is back a
    // retry reports Mismatch (not silent success) and, after the documented delete,
    // copies.
    let (src, dst, id) = setup(40).await;
    let probe = Arc::new(Probe::default());
    *probe.fail_read_at.lock() = Some(20);
    let psrc = Probed::new(Arc::new(src.clone()), probe);
    let dst_cluster = dst.cluster().clone();
    let options = CopyOptions::default()
        .with_window(4)
        .with_progress(move |p| {
            if p.entries_copied >= 8 {
                dst_cluster.set_unavailable(UnavailableMode::FailFast);
            }
        });
    let err = copy_ledger_preserving_ids(id, &psrc, &dst, &options)
        .await
        .unwrap_err();
    assert!(err.is_retryable(), "{err:?}");
    dst.cluster().set_available();
    assert!(
        dst.cluster().contains_ledger(id),
        "the delete could not run"
    );
    let err = copy_ledger_preserving_ids(id, &src, &dst, &CopyOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(err, CopyError::Mismatch { .. }), "{err:?}");
    dst.delete_ledger(id).await.unwrap();
    let report = copy_ledger_preserving_ids(id, &src, &dst, &CopyOptions::default())
        .await
        .unwrap();
    assert_eq!(report.entries, 40);
}
