//! Property tests of the Adv add state machine: any arrival order of entry ids
//! yields a contiguous LAC, in-order completions and exact length accounting.

use bkswitch_bk_client::{BookKeeper, LedgerConfig, MemoryBookKeeper, ReadHandle, WriteHandle};
use bytes::Bytes;
use futures::FutureExt;
use proptest::prelude::*;

fn payload(entry: i64, size: usize) -> Bytes {
    Bytes::from(vec![entry as u8; size])
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn any_arrival_order_keeps_the_lac_contiguous(
        order in (1usize..24).prop_flat_map(|n| Just((0..n as i64).collect::<Vec<_>>()).prop_shuffle()),
        sizes in proptest::collection::vec(0usize..40, 24),
        close_after in proptest::option::of(0usize..24),
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        rt.block_on(async {
            let bk = MemoryBookKeeper::new("prop");
            let w = bk.create_ledger_adv(5, &LedgerConfig::default()).await.unwrap();
            let mut futures = Vec::new();
            let mut written = std::collections::BTreeSet::new();
            let mut closed = false;
            for (step, &entry) in order.iter().enumerate() {
                if close_after == Some(step) {
                    w.close().await.unwrap();
                    closed = true;
                }
                let f = w.add_entry_at(entry, payload(entry, sizes[entry as usize]));
                if closed {
                    let e = f.await.unwrap_err();
                    prop_assert_eq!(e.code(), -11);
                    continue;
                }
                written.insert(entry);
                futures.push((entry, f));
                // LAC = largest k with 0..=k written.
                let mut expected = -1;
                while written.contains(&(expected + 1)) {
                    expected += 1;
                }
                prop_assert_eq!(w.last_add_confirmed(), expected);
                let bytes: u64 = (0..=expected).map(|e| sizes[e as usize] as u64).sum();
                prop_assert_eq!(w.length(), bytes);
                // Every future at or below the LAC is done, every one above is not.
                for (k, f) in futures.iter_mut() {
                    let ready = f.now_or_never();
                    prop_assert_eq!(ready.is_some(), *k <= expected);
                    if let Some(r) = ready {
                        prop_assert_eq!(r.unwrap(), *k);
                    }
                }
                futures.retain(|(k, _)| *k > expected);
            }
            if !closed {
                w.close().await.unwrap();
            }
            let m = w.metadata();
            prop_assert_eq!(m.last_entry_id, w.last_add_confirmed());
            let bytes: u64 = (0..=m.last_entry_id).map(|e| sizes[e as usize] as u64).sum();
            prop_assert_eq!(m.length, bytes);
            for (_, f) in futures {
                prop_assert_eq!(f.await.unwrap_err().code(), -11);
            }
            Ok(())
        })?;
    }
}
