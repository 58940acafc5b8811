//! Property: for any entry sizes, count, window and source state, the copy is
//! byte-identical to the source and verifies as identical.

mod common;

use bkswitch_bk_client::{LedgerConfig, MemoryBookKeeper};
use bkswitch_ledger_copy::{
    copy_ledger_preserving_ids, verify_dst_matches_src, CopyOptions, Verification,
};
use bytes::Bytes;
use common::{dump, write_ledger};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn copy_is_byte_identical(
        entries in prop::collection::vec(prop::collection::vec(any::<u8>(), 0..2048), 0..48),
        window in 1usize..12,
        close in any::<bool>(),
        first_id in 0i64..1_000_000,
    ) {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let src = MemoryBookKeeper::new("bk-old");
            src.cluster().advance_ledger_id_to(first_id).unwrap();
            let dst = MemoryBookKeeper::new("bk-new");
            let payloads: Vec<Bytes> = entries.iter().cloned().map(Bytes::from).collect();
            let w = write_ledger(&src, &LedgerConfig::default(), &payloads, close).await;
            let options = CopyOptions::default().with_window(window);
            let report = copy_ledger_preserving_ids(w.id(), &src, &dst, &options).await.unwrap();
            let total: u64 = payloads.iter().map(|p| p.len() as u64).sum();
            prop_assert_eq!(report.entries, payloads.len() as u64);
            prop_assert_eq!(report.bytes, total);
            let (meta, copied) = dump(&dst, w.id()).await;
            prop_assert_eq!(meta.ledger_id, w.id());
            prop_assert_eq!(meta.length, total);
            prop_assert_eq!(meta.last_entry_id, payloads.len() as i64 - 1);
            let (_, original) = dump(&src, w.id()).await;
            prop_assert_eq!(&copied, &original);
            prop_assert_eq!(
                verify_dst_matches_src(w.id(), &src, &dst, &options).await.unwrap(),
                Verification::Identical { last_entry_id: payloads.len() as i64 - 1, length: total }
            );
            Ok(())
        })?;
    }
}
