//! `LedgerExists` on the destination: identical → idempotent success counted by
//! `migration_ledger_id_conflict_total`; different → `Mismatch`, destination untouched.
//!
//! Only one test of this binary produces `AlreadyPresent`, so it can assert the
//! exact counter delta.

mod common;

use bkswitch_bk_client::{BkErrorKind, BookKeeper, DigestType, LedgerConfig, MemoryBookKeeper};
use bkswitch_ledger_copy::{
    copy_ledger_preserving_ids, migration_ledger_id_conflict_total, CopyError, CopyOptions,
    CopyOutcome,
};
use bytes::Bytes;
use common::{dump, payload, rich_config, write_ledger};

fn options() -> CopyOptions {
    CopyOptions::new(DigestType::Crc32, b"pw".to_vec())
}

/// A source ledger with 12 entries, and an empty destination cluster.
async fn setup() -> (MemoryBookKeeper, MemoryBookKeeper, i64, Vec<Bytes>) {
    let src = MemoryBookKeeper::new("bk-old");
    src.cluster().advance_ledger_id_to(77).unwrap();
    let dst = MemoryBookKeeper::new("bk-new");
    let payloads: Vec<Bytes> = (0..12).map(|i| payload(i, 30 + i)).collect();
    let w = write_ledger(&src, &rich_config(), &payloads, true).await;
    (src, dst, w.id(), payloads)
}

/// Write `payloads` to ledger `id` on `dst` with `config` and seal it.
async fn plant(dst: &MemoryBookKeeper, id: i64, config: &LedgerConfig, payloads: &[Bytes]) {
    let w = dst.create_ledger_adv(id, config).await.unwrap();
    for (i, p) in payloads.iter().enumerate() {
        w.add_entry_at(i as i64, p.clone()).await.unwrap();
    }
    w.close().await.unwrap();
}

async fn expect_mismatch(src: &MemoryBookKeeper, dst: &MemoryBookKeeper, id: i64, needle: &str) {
    let before = dump(dst, id).await;
    let err = copy_ledger_preserving_ids(id, src, dst, &options())
        .await
        .unwrap_err();
    match &err {
        CopyError::Mismatch { ledger_id, reason } => {
            assert_eq!(*ledger_id, id);
            assert!(reason.contains(needle), "{reason}");
        }
        other => panic!("expected Mismatch, got {other:?}"),
    }
    assert!(!err.is_retryable());
    assert_eq!(err.ledger_id(), id);
    let msg = err.to_string();
    assert!(msg.contains(&format!("ledger {id}")), "{msg}");
    assert!(msg.contains("left untouched"), "{msg}");
    assert_eq!(dump(dst, id).await, before, "the destination is untouched");
}

#[tokio::test]
async fn identical_existing_destination_is_already_present_and_counted() {
    let (src, dst, id, payloads) = setup().await;
    let first = copy_ledger_preserving_ids(id, &src, &dst, &options())
        .await
        .unwrap();
    assert_eq!(first.outcome, CopyOutcome::Copied);
    let before = dump(&dst, id).await;
    let conflicts = migration_ledger_id_conflict_total();

    let again = copy_ledger_preserving_ids(id, &src, &dst, &options())
        .await
        .unwrap();
    assert_eq!(again.outcome, CopyOutcome::AlreadyPresent);
    assert_eq!(again.entries, 12);
    assert_eq!(again.last_entry_id, 11);
    assert_eq!(
        again.bytes,
        payloads.iter().map(|p| p.len() as u64).sum::<u64>()
    );
    assert_eq!(migration_ledger_id_conflict_total(), conflicts + 1);
    assert_eq!(dump(&dst, id).await, before, "nothing rewritten");

    // A destination planted by someone else with identical content counts too.
    let src2 = src.clone();
    let w = write_ledger(&src2, &rich_config(), &payloads[..3], true).await;
    plant(&dst, w.id(), &rich_config(), &payloads[..3]).await;
    let report = copy_ledger_preserving_ids(w.id(), &src, &dst, &options())
        .await
        .unwrap();
    assert_eq!(report.outcome, CopyOutcome::AlreadyPresent);
    assert_eq!(migration_ledger_id_conflict_total(), conflicts + 2);
}

#[tokio::test]
async fn existing_destination_with_one_different_byte_is_a_mismatch() {
    let (src, dst, id, mut payloads) = setup().await;
    let mut changed = payloads[5].to_vec();
    changed[3] ^= 0xff;
    payloads[5] = Bytes::from(changed);
    plant(&dst, id, &rich_config(), &payloads).await;
    expect_mismatch(&src, &dst, id, "entry 5 differs at byte 3").await;
}

#[tokio::test]
async fn existing_destination_with_fewer_entries_is_a_mismatch() {
    let (src, dst, id, payloads) = setup().await;
    plant(&dst, id, &rich_config(), &payloads[..8]).await;
    expect_mismatch(&src, &dst, id, "last entry is 7, the source's 11").await;
}

#[tokio::test]
async fn existing_unsealed_partial_destination_is_a_mismatch_with_a_hint() {
    let (src, dst, id, payloads) = setup().await;
    let w = dst.create_ledger_adv(id, &rich_config()).await.unwrap();
    for (i, p) in payloads[..4].iter().enumerate() {
        w.add_entry_at(i as i64, p.clone()).await.unwrap();
    }
    expect_mismatch(&src, &dst, id, "not sealed").await;
    // The verification did not fence the (possibly live) destination writer.
    assert_eq!(w.add_entry_at(4, payloads[4].clone()).await.unwrap(), 4);
}

#[tokio::test]
async fn existing_destination_with_other_custom_metadata_is_a_mismatch() {
    let (src, dst, id, payloads) = setup().await;
    let config = rich_config().with_custom_metadata("component", b"cursor".to_vec());
    plant(&dst, id, &config, &payloads).await;
    expect_mismatch(&src, &dst, id, "custom metadata differs").await;
}

#[tokio::test]
async fn existing_destination_with_another_password_is_a_mismatch() {
    let (src, dst, id, payloads) = setup().await;
    plant(
        &dst,
        id,
        &rich_config().with_password(b"other".to_vec()),
        &payloads,
    )
    .await;
    expect_mismatch(&src, &dst, id, "password").await;
}

#[tokio::test]
async fn without_verification_ledger_exists_is_a_destination_error() {
    let (src, dst, id, payloads) = setup().await;
    plant(&dst, id, &rich_config(), &payloads).await;
    let before = dump(&dst, id).await;
    let err = copy_ledger_preserving_ids(id, &src, &dst, &options().with_verify_existing(false))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, CopyError::DestinationWrite { cluster, .. } if cluster == "bk-new"),
        "{err:?}"
    );
    assert_eq!(err.bk_error().unwrap().kind(), BkErrorKind::LedgerExists);
    assert!(!err.is_retryable());
    assert_eq!(dump(&dst, id).await, before);
}
