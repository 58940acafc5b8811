//! The copy loop as it was before reads were pipelined (for the same-run
//! comparison only; BUILD runs `copy_ledger_preserving_ids`): one read in
//! flight per copy, of up to the free part of the window, issued once half
//! the window is free; its entries added as the read completes.

use std::collections::VecDeque;
use std::time::Instant;

use bkswitch_bk_client::{BookKeeper, DigestType, EntryId, LedgerConfig, LedgerId, Result};
use bkswitch_ledger_copy::{CopyOutcome, CopyReport};
use futures::future::BoxFuture;

/// Copies `id` as the earlier loop did, window `window`.
pub(crate) async fn serial_copy(
    id: LedgerId,
    src: &dyn BookKeeper,
    dst: &dyn BookKeeper,
    window: usize,
) -> Result<CopyReport> {
    let started = Instant::now();
    let source = src
        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
        .await?;
    let meta = source.metadata();
    let lac = meta.last_entry_id;
    let dest = dst
        .create_ledger_adv(id, &LedgerConfig::from_metadata(&meta))
        .await?;
    let half = window.div_ceil(2).max(1);
    let mut pending: VecDeque<(u64, BoxFuture<'static, Result<EntryId>>)> = VecDeque::new();
    let (mut entries, mut bytes) = (0u64, 0u64);
    let mut next: EntryId = 0;
    while next <= lac {
        let remaining = (lac - next + 1) as u64;
        let wanted = (half as u64).min(remaining) as usize;
        while window - pending.len() < wanted {
            let (len, ack) = pending.pop_front().expect("window full");
            ack.await?;
            entries += 1;
            bytes += len;
        }
        let n = ((window - pending.len()) as u64).min(remaining) as EntryId;
        let last = next + n - 1;
        for e in source.read_entries(next, last).await? {
            pending.push_back((e.data.len() as u64, dest.add_entry_at(e.entry_id, e.data)));
        }
        next = last + 1;
    }
    while let Some((len, ack)) = pending.pop_front() {
        ack.await?;
        entries += 1;
        bytes += len;
    }
    dest.close().await?;
    Ok(CopyReport {
        ledger_id: id,
        outcome: CopyOutcome::Copied,
        entries,
        bytes,
        last_entry_id: lac,
        duration: started.elapsed(),
    })
}
