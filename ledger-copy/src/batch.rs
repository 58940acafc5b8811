//! What the copy and the verification share: argument checks and reading a
//! batch of entries checked for completeness and order.

use bkswitch_bk_client::{BkError, BkErrorKind, EntryId, LedgerEntry, LedgerId, ReadHandle};

use crate::{CopyError, CopyOptions};

/// Checks the arguments of a copy: a non-negative id and a window of at least
/// one entry.
pub(crate) fn check_args(ledger_id: LedgerId, options: &CopyOptions) -> Result<(), CopyError> {
    if ledger_id < 0 {
        return Err(CopyError::InvalidArgument {
            ledger_id,
            reason: format!("ledger id {ledger_id} is negative; ledger ids are >= 0"),
        });
    }
    if options.window == 0 {
        return Err(CopyError::InvalidArgument {
            ledger_id,
            reason: "the window is 0; allow at least one entry in flight".to_string(),
        });
    }
    Ok(())
}

/// Read `first..=last` and check that exactly those entries came back, in order.
pub(crate) async fn read_batch(
    handle: &dyn ReadHandle,
    first: EntryId,
    last: EntryId,
) -> Result<Vec<LedgerEntry>, BkError> {
    let entries = handle.read_entries(first, last).await?;
    let expected = (last - first + 1) as usize;
    let in_order = entries.iter().zip(first..).all(|(e, id)| e.entry_id == id);
    if entries.len() != expected || !in_order {
        return Err(BkError::new(
            BkErrorKind::Other,
            format!(
                "read of entries {first}..={last} returned {} entries, not the {expected} \
                 requested in id order",
                entries.len()
            ),
        )
        .with_ledger(handle.id()));
    }
    Ok(entries)
}
