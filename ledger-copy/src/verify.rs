//! [`verify_dst_matches_src`]: streamed comparison of a destination ledger with its
//! source.

use std::sync::Arc;

use bkswitch_bk_client::{
    BkErrorKind, BookKeeper, EntryId, LedgerEntry, LedgerId, LedgerMetadata, ReadHandle,
};

use crate::batch::{check_args, read_batch};
use crate::{CopyError, CopyOptions, Verification};

/// Compare the ledger `ledger_id` on `dst` with the one on `src`: configuration
/// (quorum sizes, digest type, custom metadata), last entry id, length and the
/// bytes of every entry.
///
/// Both ledgers are opened **without recovery**, so neither a live source writer
/// nor a copy still writing the destination is fenced. The source is opened with
/// `options.digest_type` and `options.password`, the destination with the digest
/// and password found in the source's metadata. Entries are streamed in batches of
/// at most `options.window / 2` entries per side, so memory does not depend on the
/// ledger's size.
///
/// A destination that does not exist, or whose password or digest differ, is
/// reported as [`Verification::Different`].
///
/// # Errors
/// - [`CopyError::InvalidArgument`]: negative ledger id or zero window.
/// - [`CopyError::SourceRead`]: the source cannot be opened (including a missing
///   source) or read.
/// - [`CopyError::DestinationRead`]: the destination cannot be read for another
///   reason (e.g. its cluster is unavailable: retryable).
pub async fn verify_dst_matches_src(
    ledger_id: LedgerId,
    src: &dyn BookKeeper,
    dst: &dyn BookKeeper,
    options: &CopyOptions,
) -> Result<Verification, CopyError> {
    check_args(ledger_id, options)?;
    let source = src
        .open_ledger_no_recovery(ledger_id, options.digest_type, &options.password)
        .await
        .map_err(|source| CopyError::SourceRead {
            ledger_id,
            cluster: src.cluster_name().to_string(),
            source,
        })?;
    let meta = source.metadata();
    let lac = snapshot_lac(source.as_ref(), &meta);
    let length = snapshot_length(source.as_ref(), &meta);
    verify_against(
        ledger_id,
        src.cluster_name(),
        source.as_ref(),
        &meta,
        lac,
        length,
        dst,
        options.window,
    )
    .await
}

/// The last entry id of an opened source snapshot: `last_entry_id` once closed,
/// the handle's last add confirmed otherwise.
pub(crate) fn snapshot_lac(handle: &dyn ReadHandle, meta: &LedgerMetadata) -> EntryId {
    if meta.is_closed() {
        meta.last_entry_id
    } else {
        handle.last_add_confirmed()
    }
}

/// The payload length of an opened snapshot.
pub(crate) fn snapshot_length(handle: &dyn ReadHandle, meta: &LedgerMetadata) -> u64 {
    if meta.is_closed() {
        meta.length
    } else {
        handle.length()
    }
}

/// Compare `dst`'s ledger with an already opened source snapshot (`0..=src_lac`).
#[allow(clippy::too_many_arguments)]
pub(crate) async fn verify_against(
    ledger_id: LedgerId,
    src_cluster: &str,
    source: &dyn ReadHandle,
    src_meta: &LedgerMetadata,
    src_lac: EntryId,
    src_length: u64,
    dst: &dyn BookKeeper,
    window: usize,
) -> Result<Verification, CopyError> {
    let dst_cluster = dst.cluster_name();
    let different = |reason: String| Ok(Verification::Different { reason });
    let dst_err = |source| CopyError::DestinationRead {
        ledger_id,
        cluster: dst_cluster.to_string(),
        source,
    };
    let dest: Arc<dyn ReadHandle> = match dst
        .open_ledger_no_recovery(ledger_id, src_meta.digest_type, &src_meta.password)
        .await
    {
        Ok(h) => h,
        Err(e) if e.is_already_deleted() => {
            return different(format!(
                "the destination cluster '{dst_cluster}' has no ledger {ledger_id}"
            ))
        }
        Err(e) if e.kind() == BkErrorKind::UnauthorizedAccess => {
            return different(
                "the destination ledger does not accept the source's password".to_string(),
            )
        }
        Err(e) if e.kind() == BkErrorKind::DigestMismatch => {
            return different(format!(
                "the destination ledger does not use the source's digest type {:?}",
                src_meta.digest_type
            ))
        }
        Err(e) => return Err(dst_err(e)),
    };
    let dst_meta = dest.metadata();
    if let Some(reason) = config_difference(src_meta, &dst_meta) {
        return different(reason);
    }
    let dst_lac = snapshot_lac(dest.as_ref(), &dst_meta);
    if dst_lac != src_lac {
        let hint = if dst_meta.is_closed() {
            ""
        } else {
            " (the destination is not sealed: a copy of it may still be running, or an \
             earlier copy was interrupted)"
        };
        return different(format!(
            "the destination's last entry is {dst_lac}, the source's {src_lac}{hint}"
        ));
    }
    let dst_length = snapshot_length(dest.as_ref(), &dst_meta);
    if dst_length != src_length {
        return different(format!(
            "the destination holds {dst_length} bytes, the source {src_length}"
        ));
    }
    let batch = window.div_ceil(2).max(1) as u64;
    let mut next: EntryId = 0;
    while next <= src_lac {
        let n = batch.min((src_lac - next + 1) as u64) as EntryId;
        let last = next + n - 1;
        let a = read_batch(source, next, last)
            .await
            .map_err(|source| CopyError::SourceRead {
                ledger_id,
                cluster: src_cluster.to_string(),
                source,
            })?;
        let b = read_batch(dest.as_ref(), next, last)
            .await
            .map_err(dst_err)?;
        if let Some(reason) = first_entry_difference(&a, &b) {
            return different(reason);
        }
        next = last + 1;
    }
    Ok(Verification::Identical {
        last_entry_id: src_lac,
        length: src_length,
    })
}

fn config_difference(src: &LedgerMetadata, dst: &LedgerMetadata) -> Option<String> {
    let quorums = |m: &LedgerMetadata| (m.ensemble_size, m.write_quorum_size, m.ack_quorum_size);
    if quorums(src) != quorums(dst) {
        let (se, sw, sa) = quorums(src);
        let (de, dw, da) = quorums(dst);
        return Some(format!(
            "quorums differ: destination ensemble/write/ack {de}/{dw}/{da}, source {se}/{sw}/{sa}"
        ));
    }
    if src.digest_type != dst.digest_type {
        return Some(format!(
            "digest types differ: destination {:?}, source {:?}",
            dst.digest_type, src.digest_type
        ));
    }
    if src.custom_metadata != dst.custom_metadata {
        let keys = |m: &LedgerMetadata| m.custom_metadata.keys().cloned().collect::<Vec<_>>();
        return Some(format!(
            "custom metadata differs: destination keys {:?}, source keys {:?}",
            keys(dst),
            keys(src)
        ));
    }
    None
}

fn first_entry_difference(src: &[LedgerEntry], dst: &[LedgerEntry]) -> Option<String> {
    for (s, d) in src.iter().zip(dst) {
        if s.data != d.data {
            let at = s
                .data
                .iter()
                .zip(d.data.iter())
                .position(|(x, y)| x != y)
                .unwrap_or(s.data.len().min(d.data.len()));
            return Some(format!(
                "entry {} differs at byte {at} (destination {} bytes, source {} bytes)",
                s.entry_id,
                d.data.len(),
                s.data.len()
            ));
        }
    }
    None
}
