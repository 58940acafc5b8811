//! [`copy_ledger_preserving_ids`]: the streaming copy.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::Poll;
use std::time::Instant;

use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, BookKeeperExt, EntryId, LedgerConfig, LedgerId, ReadHandle,
    WriteHandle, NO_ENTRY,
};
use futures::future::BoxFuture;
use futures::FutureExt;
use tracing::Instrument;

use crate::batch::check_args;
use crate::reads::SourceReads;
use crate::verify::{snapshot_lac, snapshot_length, verify_against};
use crate::{CopyError, CopyOptions, CopyOutcome, CopyProgress, CopyReport, Verification};

static LEDGER_ID_CONFLICTS: AtomicU64 = AtomicU64::new(0);

/// How many copies in this process found the destination ledger id already taken
/// by an identical ledger ([`CopyOutcome::AlreadyPresent`]); exported as the metric
/// `migration_ledger_id_conflict_total`.
pub fn migration_ledger_id_conflict_total() -> u64 {
    LEDGER_ID_CONFLICTS.load(Ordering::Relaxed)
}

/// Copy the ledger `ledger_id` from `src` to `dst`, keeping its ledger id, entry
/// ids, quorum sizes, digest type, password and custom metadata (invariant [I8](bkswitch_docs::invariants::I8)).
///
/// # Steps
/// 1. Open the source **without recovery** (a recovery open would fence a live
///    writer) and take the snapshot `0..=LAC`: the metadata's `last_entry_id` when
///    the source is closed, the handle's last add confirmed otherwise. Entries the
///    writer adds later are not copied.
/// 2. `create_ledger_adv(ledger_id, LedgerConfig::from_metadata(source))` on `dst`,
///    then `options.on_created`, if set (a refusal deletes the new ledger and
///    fails the copy with [`CopyError::NotRecorded`]). The first reads of
///    step 3 (a window's worth) are already under way meanwhile; nothing is
///    added before the destination exists and `on_created` accepted it.
/// 3. Stream: read the source in batches of a quarter of the window, several
///    reads in flight, and write each entry with `add_entry_at(same entry id)`
///    as soon as its read completes, keeping at most `options.window` entries
///    in flight (read requested and not yet handed to the destination, plus
///    adds not yet acknowledged). Memory is bounded by `window` × the largest entry, whatever the
///    ledger's size. `options.progress` is called before the first batch (nothing
///    copied, the snapshot's entries and bytes as totals) and after every batch.
/// 4. Close (seal) the destination.
///
/// # Existing destination
/// When `create_ledger_adv` reports `LedgerExists` (-20) and
/// `options.verify_existing` is set, the existing ledger is compared with the source
/// snapshot ([`verify_dst_matches_src`](crate::verify_dst_matches_src) rules). If it
/// is identical the call succeeds with [`CopyOutcome::AlreadyPresent`] and
/// increments [`migration_ledger_id_conflict_total`]; otherwise it fails with
/// [`CopyError::Mismatch`]. The existing ledger is never modified.
///
/// # Failure midway
/// When a read or write fails after the destination was created, the destination
/// handle is closed and the partial destination ledger — created by this call, so
/// no one else writes it — is deleted, so the copy can simply be retried. When the
/// destination cluster is unreachable the delete fails too (logged as a warning);
/// a retry then finds `LedgerExists` with fewer entries and fails with
/// [`CopyError::Mismatch`]: delete the ledger on the destination, then retry.
///
/// # Errors
/// - [`CopyError::InvalidArgument`]: negative ledger id or zero window.
/// - [`CopyError::SourceRead`]: the source cannot be opened (missing: not
///   retryable; unavailable: retryable) or read.
/// - [`CopyError::DestinationWrite`]: create, add or close on the destination
///   failed (also `LedgerExists` when `verify_existing` is off).
/// - [`CopyError::DestinationRead`]: verifying an existing destination could not
///   read it.
/// - [`CopyError::Mismatch`]: the destination already holds different content.
pub async fn copy_ledger_preserving_ids(
    ledger_id: LedgerId,
    src: &dyn BookKeeper,
    dst: &dyn BookKeeper,
    options: &CopyOptions,
) -> Result<CopyReport, CopyError> {
    let span = tracing::info_span!(
        "copy_ledger",
        ledger_id,
        src_cluster = src.cluster_name(),
        dst_cluster = dst.cluster_name()
    );
    copy_inner(ledger_id, src, dst, options)
        .instrument(span)
        .await
}

async fn copy_inner(
    ledger_id: LedgerId,
    src: &dyn BookKeeper,
    dst: &dyn BookKeeper,
    options: &CopyOptions,
) -> Result<CopyReport, CopyError> {
    let started = Instant::now();
    check_args(ledger_id, options)?;
    let src_err = |source| CopyError::SourceRead {
        ledger_id,
        cluster: src.cluster_name().to_string(),
        source,
    };
    let dst_err = |source| CopyError::DestinationWrite {
        ledger_id,
        cluster: dst.cluster_name().to_string(),
        source,
    };

    let source = src
        .open_ledger_no_recovery(ledger_id, options.digest_type, &options.password)
        .await
        .map_err(src_err)?;
    let meta = source.metadata();
    let lac = snapshot_lac(source.as_ref(), &meta);
    let length = snapshot_length(source.as_ref(), &meta);
    tracing::debug!(
        lac,
        length,
        closed = meta.is_closed(),
        "source snapshot opened"
    );

    let config = LedgerConfig::from_metadata(&meta);
    // The first reads go out now and proceed while the destination is
    // created: a copy's latency does not pay for both in turn.
    let mut reads = SourceReads::new(source.as_ref(), lac, options.window);
    reads.fill(0);
    let dest = match reads
        .meanwhile(dst.create_ledger_adv(ledger_id, &config))
        .await
    {
        Ok(h) => h,
        Err(e) if e.kind() == BkErrorKind::LedgerExists && options.verify_existing => {
            drop(reads);
            return already_exists(
                ledger_id,
                src.cluster_name(),
                source.as_ref(),
                &meta,
                lac,
                length,
                dst,
                options,
                started,
            )
            .await;
        }
        Err(e) => return Err(dst_err(e)),
    };
    if let Some(on_created) = &options.on_created {
        if let Err(reason) = reads.meanwhile(on_created(ledger_id)).await {
            drop(reads);
            abandon(ledger_id, dst, dest.as_ref()).await;
            return Err(CopyError::NotRecorded { ledger_id, reason });
        }
    }

    match stream_entries(ledger_id, reads, dest.as_ref(), (lac, length), options).await {
        Ok((entries, bytes)) => {
            dest.close().await.map_err(|e| {
                // Unsealed but complete: leave it, a retry verifies it as identical.
                tracing::warn!(error = %e, "closing the destination ledger failed");
                dst_err(e)
            })?;
            tracing::info!(entries, bytes, "ledger copied");
            Ok(CopyReport {
                ledger_id,
                outcome: crate::CopyOutcome::Copied,
                entries,
                bytes,
                last_entry_id: lac,
                duration: started.elapsed(),
            })
        }
        Err(failure) => {
            abandon(ledger_id, dst, dest.as_ref()).await;
            Err(match failure {
                Failure::Read(e) => src_err(e),
                Failure::Write(e) => dst_err(e),
            })
        }
    }
}

#[allow(clippy::too_many_arguments)]
async fn already_exists(
    ledger_id: LedgerId,
    src_cluster: &str,
    source: &dyn ReadHandle,
    meta: &bkswitch_bk_client::LedgerMetadata,
    lac: EntryId,
    length: u64,
    dst: &dyn BookKeeper,
    options: &CopyOptions,
    started: Instant,
) -> Result<CopyReport, CopyError> {
    match verify_against(
        ledger_id,
        src_cluster,
        source,
        meta,
        lac,
        length,
        dst,
        options.window,
    )
    .await?
    {
        Verification::Identical {
            last_entry_id,
            length,
        } => {
            LEDGER_ID_CONFLICTS.fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                last_entry_id,
                length,
                "destination already holds an identical ledger"
            );
            Ok(CopyReport {
                ledger_id,
                outcome: CopyOutcome::AlreadyPresent,
                entries: (last_entry_id + 1) as u64,
                bytes: length,
                last_entry_id,
                duration: started.elapsed(),
            })
        }
        Verification::Different { reason } => {
            tracing::warn!(%reason, "destination already holds a different ledger");
            Err(CopyError::Mismatch { ledger_id, reason })
        }
    }
}

enum Failure {
    Read(BkError),
    Write(BkError),
}

struct InFlight {
    entry_id: EntryId,
    bytes: u64,
    ack: BoxFuture<'static, bkswitch_bk_client::Result<EntryId>>,
}

/// What the stream waits for next.
enum Event {
    /// The oldest pending add was answered.
    Ack(bkswitch_bk_client::Result<EntryId>),
    /// The oldest pending read was answered.
    Read(bkswitch_bk_client::Result<Vec<bkswitch_bk_client::LedgerEntry>>),
}

/// Copy `0..=lac` (`length` bytes), at most `options.window` entries in
/// flight (read requested and not yet acknowledged by the destination);
/// returns the entries and bytes acknowledged.
///
/// Reads of a quarter of the window are issued whenever the window has room
/// for one, several at once ([`SourceReads`]); each read's entries are handed
/// to the destination as soon as it completes (reads complete in order), so
/// reads and adds overlap all along the ledger.
async fn stream_entries(
    ledger_id: LedgerId,
    mut reads: SourceReads<'_>,
    dest: &dyn WriteHandle,
    (lac, length): (EntryId, u64),
    options: &CopyOptions,
) -> Result<(u64, u64), Failure> {
    let mut pending: VecDeque<InFlight> = VecDeque::with_capacity(options.window);
    let mut acked = Acked {
        ledger_id,
        entries: 0,
        bytes: 0,
        last_entry_id: NO_ENTRY,
        reported: None,
        progress: options.progress.clone(),
        entries_total: (lac + 1).max(0) as u64,
        bytes_total: length,
    };
    // Nothing copied yet: the totals are known.
    acked.report();
    loop {
        reads.fill(pending.len());
        if pending.is_empty() && reads.is_empty() {
            break;
        }
        let event = std::future::poll_fn(|cx| {
            if let Some(oldest) = pending.front_mut() {
                if let Poll::Ready(r) = oldest.ack.poll_unpin(cx) {
                    return Poll::Ready(Event::Ack(r));
                }
            }
            match reads.poll_next(cx) {
                Poll::Ready(Some(r)) => Poll::Ready(Event::Read(r)),
                _ => Poll::Pending,
            }
        })
        .await;
        match event {
            Event::Ack(r) => {
                let add = pending.pop_front().expect("polled");
                acked.acknowledged(add, r)?;
                acked.report();
            }
            Event::Read(r) => {
                for entry in r.map_err(Failure::Read)? {
                    pending.push_back(InFlight {
                        entry_id: entry.entry_id,
                        bytes: entry.data.len() as u64,
                        ack: dest.add_entry_at(entry.entry_id, entry.data),
                    });
                }
            }
        }
    }
    acked.report();
    Ok((acked.entries, acked.bytes))
}

struct Acked {
    ledger_id: LedgerId,
    entries: u64,
    bytes: u64,
    last_entry_id: EntryId,
    reported: Option<u64>,
    progress: Option<crate::options::ProgressFn>,
    entries_total: u64,
    bytes_total: u64,
}

impl Acked {
    /// Counts the answer `r` to the oldest pending add `add` (completions
    /// come in entry-id order).
    fn acknowledged(
        &mut self,
        add: InFlight,
        r: bkswitch_bk_client::Result<EntryId>,
    ) -> Result<(), Failure> {
        let id = r.map_err(Failure::Write)?;
        if id != add.entry_id {
            return Err(Failure::Write(
                BkError::new(
                    BkErrorKind::Other,
                    format!(
                        "add_entry_at({}) was acknowledged as entry {id}",
                        add.entry_id
                    ),
                )
                .with_ledger(self.ledger_id),
            ));
        }
        self.entries += 1;
        self.bytes += add.bytes;
        self.last_entry_id = id;
        Ok(())
    }

    /// Call the progress callback unless it was already called with this count
    /// (the first call reports nothing copied, with the totals).
    fn report(&mut self) {
        if self.reported == Some(self.entries) {
            return;
        }
        self.reported = Some(self.entries);
        if let Some(cb) = &self.progress {
            cb(&CopyProgress {
                ledger_id: self.ledger_id,
                entries_copied: self.entries,
                bytes_copied: self.bytes,
                last_entry_id: self.last_entry_id,
                entries_total: self.entries_total,
                bytes_total: self.bytes_total,
            });
        }
    }
}

/// After a failure midway: close the destination handle (fails its pending adds)
/// and delete the partial ledger this call created.
async fn abandon(ledger_id: LedgerId, dst: &dyn BookKeeper, dest: &dyn WriteHandle) {
    if let Err(e) = dest.close().await {
        tracing::debug!(error = %e, "closing the partial destination ledger failed");
    }
    match dst.delete_ledger_if_exists(ledger_id).await {
        Ok(_) => tracing::info!("deleted the partial destination ledger"),
        Err(e) => tracing::warn!(
            error = %e,
            "could not delete the partial destination ledger; delete it before copying again"
        ),
    }
}
