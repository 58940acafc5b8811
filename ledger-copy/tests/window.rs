//! The copy never has more than `window` entries in flight (read from the source
//! and not yet acknowledged by the destination), so its memory does not depend on
//! the ledger's size.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{LedgerConfig, MemoryBookKeeper, OpKind};
use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyOptions};
use bytes::Bytes;
use common::{dump, payload, write_ledger, Probe, Probed};

#[tokio::test(start_paused = true)]
async fn entries_in_flight_never_exceed_the_window() {
    let src = MemoryBookKeeper::new("bk-old");
    let payloads: Vec<Bytes> = (0..200).map(|i| payload(i, 32)).collect();
    let w = write_ledger(&src, &LedgerConfig::default(), &payloads, true).await;
    for window in [1usize, 2, 3, 16, 64] {
        let dst = MemoryBookKeeper::new("bk-new");
        // Slow adds keep entries in flight, so the window is actually filled.
        dst.cluster()
            .set_latency(OpKind::Add, Duration::from_millis(2));
        let probe = Arc::new(Probe::default());
        let psrc = Probed::new(Arc::new(src.clone()), probe.clone());
        let pdst = Probed::new(Arc::new(dst.clone()), probe.clone());
        let report = copy_ledger_preserving_ids(
            w.id(),
            &psrc,
            &pdst,
            &CopyOptions::default().with_window(window),
        )
        .await
        .unwrap();
        assert_eq!(report.entries, 200);
        let (max_in_flight, max_adds) = (probe.max_in_flight(), probe.max_adds());
        assert!(
            max_in_flight <= window as i64,
            "window {window}: {max_in_flight} entries in flight"
        );
        assert!(
            max_adds <= window as i64,
            "window {window}: {max_adds} adds"
        );
        // The adds are pipelined: a window of w keeps more than half of it busy.
        assert!(
            max_adds >= window.div_ceil(2) as i64,
            "window {window}: only {max_adds} adds in flight"
        );
        assert_eq!(dump(&dst, w.id()).await.1, dump(&src, w.id()).await.1);
    }
}
