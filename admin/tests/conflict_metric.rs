//! The ledger-id conflict metric (issue #20, defect 5.13): its help text says
//! what it counts — identical ledgers found under the same id on the target
//! and adopted — and the node's `/metrics` counts exactly those, not the
//! copies refused because a different ledger holds the id.
//!
//! The counter is process-wide; this binary has one test, so it can assert
//! exact deltas.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, MemoryBookKeeper, WriteHandleExt};
use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyError, CopyOptions, CopyOutcome};
use bkswitch_metadata_store::MemoryStore;
use bytes::Bytes;
use common::*;

const METRIC: &str = "migration_ledger_id_conflict_total";

/// The metric's help text and value as the node exposes them.
async fn read_metric(url: &str) -> (String, u64) {
    let (code, text) = raw("GET", &format!("{url}/metrics"), None, None).await;
    assert_eq!(code, 200, "{text}");
    let text = text.as_str().expect("the exposition is text").to_owned();
    let help = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("# HELP {METRIC} ")))
        .unwrap_or_else(|| panic!("no help line for {METRIC}:\n{text}"))
        .to_owned();
    let value = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{METRIC} ")))
        .unwrap_or_else(|| panic!("no sample of {METRIC}:\n{text}"))
        .trim()
        .parse::<f64>()
        .expect("a number") as u64;
    (help, value)
}

fn config() -> LedgerConfig {
    LedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_digest_type(DigestType::Crc32)
        .with_password(b"pw".to_vec())
}

fn options() -> CopyOptions {
    CopyOptions::new(DigestType::Crc32, b"pw".to_vec())
}

async fn sealed(bk: &MemoryBookKeeper, id: Option<i64>, payloads: &[&'static [u8]]) -> i64 {
    let w = match id {
        Some(id) => {
            let w = bk.create_ledger_adv(id, &config()).await.unwrap();
            for (i, p) in payloads.iter().enumerate() {
                w.add_entry_at(i as i64, Bytes::from_static(p))
                    .await
                    .unwrap();
            }
            w
        }
        None => {
            let w = bk.create_ledger(&config()).await.unwrap();
            w.add_all(payloads.iter().map(|p| Bytes::from_static(p)))
                .await
                .unwrap();
            w
        }
    };
    w.close().await.unwrap();
    w.id()
}

#[tokio::test]
async fn the_conflict_metric_counts_adopted_identical_ledgers_and_says_so() {
    let store = Arc::new(MemoryStore::new());
    let node = start("node-1", store, &clusters()).await;
    let url = node.url().to_owned();

    let (help, before) = read_metric(&url).await;
    // What it counts, in the words an operator reads next to the graph; the
    // text once said the opposite.
    for needle in [
        "identical ledger already under the same id",
        "adopted",
        "different ledger",
        "not counted",
    ] {
        assert!(help.contains(needle), "help text lacks `{needle}`: {help}");
    }

    // An identical ledger under the id on the target: adopted and counted.
    let src = MemoryBookKeeper::new("src");
    let dst = MemoryBookKeeper::new("dst");
    let id = sealed(&src, None, &[b"a", b"b", b"c"]).await;
    let first = copy_ledger_preserving_ids(id, &src, &dst, &options())
        .await
        .unwrap();
    assert_eq!(first.outcome, CopyOutcome::Copied);
    assert_eq!(
        read_metric(&url).await.1,
        before,
        "a plain copy is no conflict"
    );
    let again = copy_ledger_preserving_ids(id, &src, &dst, &options())
        .await
        .unwrap();
    assert_eq!(again.outcome, CopyOutcome::AlreadyPresent);
    assert_eq!(read_metric(&url).await.1, before + 1);

    // A different ledger under the id: the copy fails and is not counted.
    let other = sealed(&src, None, &[b"x", b"y"]).await;
    sealed(&dst, Some(other), &[b"x", b"z"]).await;
    let err = copy_ledger_preserving_ids(other, &src, &dst, &options())
        .await
        .unwrap_err();
    assert!(matches!(err, CopyError::Mismatch { .. }), "{err:?}");
    assert_eq!(read_metric(&url).await.1, before + 1);
    node.stop().await;
}
