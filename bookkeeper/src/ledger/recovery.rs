//! Open with recovery (BookKeeper's `LedgerRecoveryOp` and
//! `ReadOnlyLedgerHandle.recover`):
//!
//! 1. the metadata goes from OPEN to IN_RECOVERY by compare-and-set;
//! 2. every bookie of the last ensemble is fenced (a read of entry `-1` with the
//!    fence flag and the master key) and the last add confirmed is read from
//!    their answers; a writer's next add then fails with `LedgerFenced`;
//! 3. from there, entries are read with the recovery flags from their whole
//!    write set; an entry that `WQ − AQ + 1` bookies do not have was never
//!    acknowledged and ends the ledger; each entry found is written back (a
//!    recovery add, replacing dead bookies locally if needed) so that it is on a
//!    full write quorum. Reads run ahead and write-backs follow through one
//!    window of `ClientConfig::recovery_window` entries, so a recovery's
//!    memory does not grow with the length of the tail it recovers;
//! 4. the metadata is closed at the last entry recovered, with its length and
//!    any new ensemble, by compare-and-set. A concurrent recovery that closed it
//!    first wins, and its result is adopted.
//!
//! The length when no entry is recovered is the exact length up to the last add
//! confirmed (BookKeeper's client takes the length stored in the entry that
//! carried that LAC, which counts one entry more when entries are missing after
//! it); in every other case both give the same result.

use std::sync::Arc;

use bkswitch_bk_client::{BkError, BkErrorKind, EntryId, LedgerState};
use futures::stream::{FuturesOrdered, FuturesUnordered, StreamExt};

use super::read::{
    length_at_lac, read_from, read_lac, LacRead, LedgerReader, ReadAnswer, RECOVERY_READ_FLAGS,
};
use super::write::WriterShared;
use super::LedgerCtx;
use crate::meta::format::LedgerRecord;
use crate::meta::WriteError;
use crate::quorum::{absence_threshold, write_set};
use crate::wire::codec::VerifiedEntry;

enum Recovered {
    Found(VerifiedEntry),
    Absent,
}

/// Reads `entry_id` from its whole write set with the recovery flags.
async fn recovery_read(
    ctx: &LedgerCtx,
    record: &LedgerRecord,
    entry_id: EntryId,
) -> Result<Recovered, BkError> {
    let ensemble = &record.ensemble_for(entry_id).bookies;
    let ws = write_set(entry_id, record.ensemble_size, record.write_quorum_size);
    let threshold = absence_threshold(record.write_quorum_size, record.ack_quorum_size);
    let mut asks: FuturesUnordered<_> = ws
        .iter()
        .map(|i| read_from(ctx, &ensemble[*i], entry_id, RECOVERY_READ_FLAGS))
        .collect();
    let mut missing = 0;
    let mut errors = Vec::new();
    while let Some(answer) = asks.next().await {
        match answer {
            ReadAnswer::Entry(v) => return Ok(Recovered::Found(v)),
            ReadAnswer::Missing { .. } => {
                missing += 1;
                if missing >= threshold {
                    return Ok(Recovered::Absent);
                }
            }
            ReadAnswer::Error(e) => {
                if matches!(
                    e.kind(),
                    BkErrorKind::UnauthorizedAccess | BkErrorKind::ClientClosed
                ) {
                    return Err(e);
                }
                errors.push(e.to_string());
            }
        }
    }
    Err(ctx.error(
        BkErrorKind::Unavailable,
        format!(
            "recovery cannot tell whether entry {entry_id} was acknowledged: {missing} of its \
             bookies lack it (needed {threshold}) and the others failed: {}",
            errors.join("; ")
        ),
    ))
}

/// Recovers and seals an OPEN ledger, or returns the sealed one.
pub(crate) async fn recover(
    ctx: Arc<LedgerCtx>,
    mut record: LedgerRecord,
    mut version: i64,
) -> Result<LedgerReader, BkError> {
    let meta = &ctx.client.meta;
    loop {
        match record.state {
            LedgerState::Closed => return Ok(LedgerReader::closed(ctx, record)),
            LedgerState::InRecovery => break,
            LedgerState::Open => {
                let mut marked = record.clone();
                marked.state = LedgerState::InRecovery;
                match meta.write(&marked, version).await {
                    Ok(v) => {
                        record = marked;
                        version = v;
                        break;
                    }
                    Err(WriteError::Conflict) => {
                        (record, version) = meta.read_existing(ctx.ledger_id).await?;
                    }
                    Err(WriteError::Failed(e)) => return Err(e),
                }
            }
        }
    }

    let found = read_lac(&ctx, &record, true).await?;
    let floor = record.last_ensemble().first_entry_id - 1;
    let start = if found.lac >= floor {
        found
    } else {
        LacRead {
            lac: floor,
            length: 0,
            entry_id: -1,
            payload_len: 0,
        }
    };
    let length = length_at_lac(&ctx, &record, start).await?;
    let writer = WriterShared::recovery(ctx.clone(), record.clone(), version, start.lac, length);

    // Read ahead and write back through one window: at most `recovery_window`
    // entries are being read or written back at once, so that memory does not
    // grow with the ledger's length. Entries are taken in order; the first one
    // proven absent ends the ledger and the reads beyond it are dropped.
    let window = ctx.client.config.recovery_window.max(1);
    let mut reads = FuturesOrdered::new();
    let mut adds = FuturesOrdered::new();
    let mut next_read = start.lac + 1;
    let mut next = start.lac + 1;
    let mut ended = false;
    loop {
        while !ended && reads.len() + adds.len() < window {
            reads.push_back(recovery_read(&ctx, &record, next_read));
            next_read += 1;
        }
        tokio::select! {
            Some(read) = reads.next(), if !reads.is_empty() => match read {
                Ok(Recovered::Found(v)) => {
                    adds.push_back(writer.add_recovered(
                        next,
                        v.payload,
                        v.header.length.max(0) as u64,
                    ));
                    next += 1;
                }
                Ok(Recovered::Absent) => {
                    ended = true;
                    reads.clear();
                }
                Err(e) => {
                    writer.fail(e.clone());
                    return Err(e);
                }
            },
            Some(add) = adds.next(), if !adds.is_empty() => {
                if let Err(e) = add {
                    writer.fail(e.clone());
                    // The add's own code, as BookKeeper's Java client
                    // returns it: too few bookies now is retryable, an
                    // unexpected condition is not.
                    return Err(ctx.code_error(
                        e.code(),
                        format!("recovery could not write back a recovered entry: {e}"),
                    ));
                }
            }
            else => break,
        }
    }
    drop(reads);
    drop(adds);
    let (lac, length, ensembles) = writer.progress();

    loop {
        let mut closed = record.clone();
        closed.state = LedgerState::Closed;
        closed.last_entry_id = lac;
        closed.length = length;
        closed.ensembles = ensembles.clone();
        match meta.write(&closed, version).await {
            Ok(_) => return Ok(LedgerReader::closed(ctx, closed)),
            Err(WriteError::Conflict) => {
                let (fresh, fresh_version) = meta.read_existing(ctx.ledger_id).await?;
                if fresh.state == LedgerState::Closed {
                    return Ok(LedgerReader::closed(ctx, fresh));
                }
                record = fresh;
                version = fresh_version;
            }
            Err(WriteError::Failed(e)) => return Err(e),
        }
    }
}
