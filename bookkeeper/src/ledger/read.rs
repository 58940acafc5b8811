//! The read path (BookKeeper's `PendingReadOp`, `ReadLastConfirmedOp`) and read
//! handles.
//!
//! - **Entries** are read from their write set one replica after the other: a
//!   replica that does not answer, answers with an error or returns bytes that
//!   fail the digest check is skipped for the next one.
//! - **The last add confirmed** of a ledger still being written is learned by
//!   reading entry `-1` from every bookie of the current ensemble: each returns
//!   its last stored entry, whose header carries the writer's last add confirmed
//!   when it was sent. The read completes once the answers *cover* the ensemble
//!   ([`quorum::covered`](crate::quorum::covered)). A reader therefore lags a
//!   writer by at least one entry (more while the writer pipelines adds).

use std::sync::Arc;

use bkswitch_bk_client::{
    BkError, BkErrorKind, EntryId, LedgerEntry, LedgerMetadata, LedgerState, ReadHandle,
};
use futures::stream::{FuturesUnordered, StreamExt};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::{LedgerCtx, Op};
use crate::digest::MASTER_KEY_LEN;
use crate::meta::format::LedgerRecord;
use crate::quorum::{covered, write_set};
use crate::wire::codec::{
    encode_read, rc, verify_entry, VerifiedEntry, FLAG_DO_FENCING, FLAG_HIGH_PRIORITY, OP_READ,
};
use crate::wire::conn::{Completion, ConnError};

/// Checks a read range: `first < 0 || first > last` → -14; with `lac`, `last >
/// lac` → -1.
pub(crate) fn check_range(
    ctx: &LedgerCtx,
    first: EntryId,
    last: EntryId,
    lac: Option<EntryId>,
) -> Result<(), BkError> {
    ctx.check_open()?;
    if first < 0 || first > last {
        return Err(ctx.error(
            BkErrorKind::InvalidArgument,
            format!("bad read range {first}..={last}: first must be >= 0 and <= last"),
        ));
    }
    if let Some(lac) = lac {
        if last > lac {
            return Err(ctx.error(
                BkErrorKind::ReadBeyondLac,
                format!("read of {first}..={last} goes past the last add confirmed {lac}"),
            ));
        }
    }
    Ok(())
}

/// One answer of one bookie to one read.
pub(crate) enum ReadAnswer {
    /// The entry, checked.
    Entry(VerifiedEntry),
    /// "No such entry" (`missing_ledger` when the bookie said "no such ledger").
    Missing { missing_ledger: bool },
    /// Any other failure.
    Error(BkError),
}

/// Sends one READ to `bookie` and checks the answer.
pub(crate) async fn read_from(
    ctx: &LedgerCtx,
    bookie: &str,
    entry_id: EntryId,
    flags: u16,
) -> ReadAnswer {
    let key: Option<&[u8; MASTER_KEY_LEN]> = Some(&ctx.master_key);
    let frame = encode_read(ctx.ledger_id, entry_id, flags, key);
    let (tx, rx) = oneshot::channel();
    ctx.client.conn(bookie).send(
        (OP_READ, ctx.ledger_id, entry_id),
        frame,
        ctx.client.config.read_timeout,
        Completion::Channel(tx),
    );
    let answer: Result<_, ConnError> = match rx.await {
        Ok(a) => a,
        Err(_) => {
            return ReadAnswer::Error(ctx.error(BkErrorKind::Other, "read dropped without answer"))
        }
    };
    match answer {
        Err(e) => ReadAnswer::Error(ctx.conn_error(Op::Read, entry_id, &e)),
        Ok(r) if r.rc == rc::EOK => {
            let expected = (entry_id >= 0).then_some(entry_id);
            match verify_entry(&ctx.digest, ctx.ledger_id, expected, r.body) {
                Ok(v) => ReadAnswer::Entry(v),
                Err(e) => ReadAnswer::Error(ctx.error(
                    BkErrorKind::DigestMismatch,
                    format!("entry {entry_id} from bookie {bookie} was refused: {e}"),
                )),
            }
        }
        Ok(r) if r.rc == rc::ENOENTRY => ReadAnswer::Missing {
            missing_ledger: false,
        },
        Ok(r) if r.rc == rc::ENOLEDGER => ReadAnswer::Missing {
            missing_ledger: true,
        },
        Ok(r) => ReadAnswer::Error(ctx.status_error(Op::Read, entry_id, bookie, r.rc)),
    }
}

/// Reads one entry from its write set, one replica after another: the next
/// replica is asked when one fails or says it lacks the entry, or, with
/// [`ClientConfig::speculative_read_timeout`](crate::ClientConfig::speculative_read_timeout),
/// when one has not answered in that time (the first good answer wins). With
/// sticky reads (Java's `stickyReadsEnabled`) and a write quorum equal to the
/// ensemble, every read of the handle asks the same bookie first.
pub(crate) async fn read_entry(
    ctx: &LedgerCtx,
    record: &LedgerRecord,
    entry_id: EntryId,
) -> Result<LedgerEntry, BkError> {
    let ensemble = &record.ensemble_for(entry_id).bookies;
    let mut missing = 0usize;
    let mut missing_ledger = 0usize;
    let mut last_error: Option<BkError> = None;
    let mut replicas = write_set(entry_id, record.ensemble_size, record.write_quorum_size);
    let sticky = ctx.client.config.sticky_reads
        && record.write_quorum_size == record.ensemble_size
        && !replicas.is_empty();
    if sticky {
        let first = ctx.sticky.load(std::sync::atomic::Ordering::Relaxed) % replicas.len();
        if let Some(at) = replicas.iter().position(|i| *i == first) {
            replicas.rotate_left(at);
        }
    }
    let speculative = ctx.client.config.speculative_read_timeout;
    let ask =
        |index: usize| async move { (index, read_from(ctx, &ensemble[index], entry_id, 0).await) };
    let mut asks = FuturesUnordered::new();
    asks.push(ask(replicas[0]));
    let mut next = 1;
    loop {
        let speculate = !speculative.is_zero() && next < replicas.len();
        let timer = async {
            if speculate {
                tokio::time::sleep(speculative).await;
            } else {
                futures::future::pending::<()>().await;
            }
        };
        tokio::select! {
            Some((index, answer)) = asks.next() => {
                match answer {
                    ReadAnswer::Entry(v) => {
                        return Ok(LedgerEntry {
                            entry_id,
                            data: v.payload,
                        })
                    }
                    ReadAnswer::Missing { missing_ledger: l } => {
                        missing += 1;
                        missing_ledger += usize::from(l);
                    }
                    ReadAnswer::Error(e) => {
                        if e.kind() == BkErrorKind::ClientClosed {
                            return Err(e);
                        }
                        if sticky {
                            // Stick to another bookie from now on.
                            ctx.sticky.store(
                                (index + 1) % record.ensemble_size as usize,
                                std::sync::atomic::Ordering::Relaxed,
                            );
                        }
                        last_error = Some(e);
                    }
                }
                if next < replicas.len() {
                    asks.push(ask(replicas[next]));
                    next += 1;
                } else if asks.is_empty() {
                    break;
                }
            }
            () = timer => {
                asks.push(ask(replicas[next]));
                next += 1;
            }
        }
    }
    Err(match last_error {
        Some(e) if missing == 0 => e,
        _ if missing_ledger == replicas.len() => ctx.error(
            BkErrorKind::NoSuchLedger,
            format!(
                "no bookie of {ensemble:?} knows the ledger (entry {entry_id}); it was deleted, \
                 or never written there"
            ),
        ),
        _ => ctx.error(
            BkErrorKind::NoSuchEntry,
            format!(
                "entry {entry_id} is on none of its bookies {:?} ({missing} said no such entry{})",
                replicas.iter().map(|i| &ensemble[*i]).collect::<Vec<_>>(),
                last_error
                    .map(|e| format!(", last other error: {e}"))
                    .unwrap_or_default()
            ),
        ),
    })
}

/// Reads `first..=last` (checked by the caller) through a window: at most
/// [`ClientConfig::read_window`](crate::ClientConfig::read_window) entries are
/// asked for at once, the next one as soon as one arrives, in order; in
/// batched reads when the ledger's layout allows
/// ([`ClientConfig::batch_reads`](crate::ClientConfig::batch_reads)).
pub(crate) async fn read_range(
    ctx: &LedgerCtx,
    record: &LedgerRecord,
    first: EntryId,
    last: EntryId,
) -> Result<Vec<LedgerEntry>, BkError> {
    if last > first
        && super::batch::batchable(
            ctx.client.config.batch_reads,
            record.ensemble_size,
            record.write_quorum_size,
        )
    {
        return super::batch::read_range_batched(ctx, record, first, last).await;
    }
    let window = ctx.client.config.read_window.max(1);
    let mut out = Vec::with_capacity(usize::try_from(last - first + 1).unwrap_or(0).min(1 << 16));
    let mut reads =
        futures::stream::iter((first..=last).map(|e| read_entry(ctx, record, e))).buffered(window);
    while let Some(entry) = reads.next().await {
        out.push(entry?);
    }
    Ok(out)
}

/// What a last-add-confirmed read found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LacRead {
    /// The largest last add confirmed piggybacked on a stored entry (`-1` when
    /// no bookie has an entry).
    pub(crate) lac: EntryId,
    /// The length recorded in the entry that carried it.
    pub(crate) length: u64,
    /// The id of that entry.
    pub(crate) entry_id: EntryId,
    /// Its payload length.
    pub(crate) payload_len: u64,
}

/// Reads the last add confirmed from the current ensemble (with `fence`, also
/// fences the ledger on every bookie that answers, as a recovery open does).
pub(crate) async fn read_lac(
    ctx: &LedgerCtx,
    record: &LedgerRecord,
    fence: bool,
) -> Result<LacRead, BkError> {
    let ensemble = record.last_ensemble().bookies.clone();
    let flags = if fence { FLAG_DO_FENCING } else { 0 };
    let mut asks: FuturesUnordered<_> = ensemble
        .iter()
        .enumerate()
        .map(|(i, b)| async move { (i, read_from(ctx, b, -1, flags).await) })
        .collect();
    let mut unknown = vec![true; ensemble.len()];
    let mut best: Option<LacRead> = None;
    let mut errors = Vec::new();
    while let Some((i, answer)) = asks.next().await {
        match answer {
            ReadAnswer::Entry(v) => {
                unknown[i] = false;
                let found = LacRead {
                    lac: v.header.last_add_confirmed,
                    length: v.header.length.max(0) as u64,
                    entry_id: v.header.entry_id,
                    payload_len: v.payload.len() as u64,
                };
                if best.is_none_or(|b| found.lac > b.lac) {
                    best = Some(found);
                }
            }
            ReadAnswer::Missing { .. } => unknown[i] = false,
            ReadAnswer::Error(e) => {
                if matches!(
                    e.kind(),
                    BkErrorKind::UnauthorizedAccess | BkErrorKind::ClientClosed
                ) {
                    return Err(e);
                }
                errors.push(format!("{}: {e}", ensemble[i]));
            }
        }
        if covered(&unknown, record.write_quorum_size, record.ack_quorum_size) {
            return Ok(best.unwrap_or(LacRead {
                lac: -1,
                length: 0,
                entry_id: -1,
                payload_len: 0,
            }));
        }
    }
    let all_timeouts = !errors.is_empty() && errors.iter().all(|e| e.contains("timed out"));
    let kind = if all_timeouts {
        BkErrorKind::Timeout
    } else {
        BkErrorKind::Unavailable
    };
    Err(ctx.error(
        kind,
        format!(
            "{} the last add confirmed: too few bookies of the ensemble {ensemble:?} answered \
             (write quorum {}, ack quorum {}): {}",
            if fence {
                "fencing the ledger and reading"
            } else {
                "reading"
            },
            record.write_quorum_size,
            record.ack_quorum_size,
            errors.join("; ")
        ),
    ))
}

/// The exact length up to `lac`, from a LAC read: the carrier's length minus its
/// own payload when it is entry `lac + 1`, else the length stored in entry `lac`.
pub(crate) async fn length_at_lac(
    ctx: &LedgerCtx,
    record: &LedgerRecord,
    found: LacRead,
) -> Result<u64, BkError> {
    if found.lac < 0 {
        return Ok(0);
    }
    if found.entry_id == found.lac + 1 {
        return Ok(found.length.saturating_sub(found.payload_len));
    }
    let ensemble = &record.ensemble_for(found.lac).bookies;
    for index in write_set(found.lac, record.ensemble_size, record.write_quorum_size) {
        if let ReadAnswer::Entry(v) = read_from(ctx, &ensemble[index], found.lac, 0).await {
            return Ok(v.header.length.max(0) as u64);
        }
    }
    Err(ctx.error(
        BkErrorKind::ReadBeyondLac,
        format!(
            "entry {} (the last add confirmed) could not be read to learn the length",
            found.lac
        ),
    ))
}

#[derive(Debug)]
struct ReadState {
    record: LedgerRecord,
    lac: EntryId,
    length: u64,
}

/// A handle from `open_ledger` or `open_ledger_no_recovery`.
pub(crate) struct LedgerReader {
    ctx: Arc<LedgerCtx>,
    state: Mutex<ReadState>,
}

impl std::fmt::Debug for LedgerReader {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerReader")
            .field("ledger_id", &self.ctx.ledger_id)
            .field("state", &*self.state.lock())
            .finish()
    }
}

impl LedgerReader {
    pub(crate) fn new(
        ctx: Arc<LedgerCtx>,
        record: LedgerRecord,
        lac: EntryId,
        length: u64,
    ) -> LedgerReader {
        LedgerReader {
            ctx,
            state: Mutex::new(ReadState {
                record,
                lac,
                length,
            }),
        }
    }

    /// A handle of a closed ledger: LAC and length from the metadata.
    pub(crate) fn closed(ctx: Arc<LedgerCtx>, record: LedgerRecord) -> LedgerReader {
        let (lac, length) = (record.last_entry_id, record.length);
        Self::new(ctx, record, lac, length)
    }

    fn snapshot(&self) -> (LedgerRecord, EntryId) {
        let st = self.state.lock();
        (st.record.clone(), st.lac)
    }

    async fn read(
        &self,
        first: EntryId,
        last: EntryId,
        confirmed: bool,
    ) -> Result<Vec<LedgerEntry>, BkError> {
        let (record, lac) = self.snapshot();
        check_range(&self.ctx, first, last, confirmed.then_some(lac))?;
        match read_range(&self.ctx, &record, first, last).await {
            Err(e)
                if e.kind() == BkErrorKind::NoSuchEntry && record.state != LedgerState::Closed =>
            {
                // The writer may have changed its ensemble since this handle read
                // the metadata: read with the current ensembles once more.
                let fresh = self.refresh_metadata().await?;
                read_range(&self.ctx, &fresh, first, last).await
            }
            other => other,
        }
    }

    /// Re-reads the metadata: a ledger sealed meanwhile is adopted (its LAC and
    /// length become final), otherwise only the ensembles are taken.
    async fn refresh_metadata(&self) -> Result<LedgerRecord, BkError> {
        let (fresh, _) = self
            .ctx
            .client
            .meta
            .read_existing(self.ctx.ledger_id)
            .await?;
        let mut st = self.state.lock();
        if st.record.state != LedgerState::Closed {
            if fresh.state == LedgerState::Closed {
                st.lac = fresh.last_entry_id;
                st.length = fresh.length;
                st.record = fresh;
            } else {
                st.record.ensembles = fresh.ensembles;
            }
        }
        Ok(st.record.clone())
    }
}

#[async_trait::async_trait]
impl ReadHandle for LedgerReader {
    fn id(&self) -> bkswitch_bk_client::LedgerId {
        self.ctx.ledger_id
    }

    fn metadata(&self) -> LedgerMetadata {
        self.state
            .lock()
            .record
            .to_metadata(self.ctx.digest.digest_type())
    }

    async fn read_entries(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> bkswitch_bk_client::Result<Vec<LedgerEntry>> {
        self.read(first, last, true).await
    }

    async fn read_unconfirmed(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> bkswitch_bk_client::Result<Vec<LedgerEntry>> {
        self.read(first, last, false).await
    }

    fn last_add_confirmed(&self) -> EntryId {
        self.state.lock().lac
    }

    async fn read_last_add_confirmed(&self) -> bkswitch_bk_client::Result<EntryId> {
        self.ctx.check_open()?;
        let (record, lac) = self.snapshot();
        if record.state == LedgerState::Closed {
            return Ok(lac);
        }
        let record = self.refresh_metadata().await?;
        if record.state == LedgerState::Closed {
            return Ok(self.state.lock().lac);
        }
        let found = read_lac(&self.ctx, &record, false).await?;
        if found.lac <= lac {
            return Ok(lac);
        }
        let length = length_at_lac(&self.ctx, &record, found).await?;
        let mut st = self.state.lock();
        if found.lac > st.lac {
            st.lac = found.lac;
            st.length = length;
        }
        Ok(st.lac)
    }

    fn length(&self) -> u64 {
        self.state.lock().length
    }

    fn is_closed(&self) -> bool {
        self.state.lock().record.state == LedgerState::Closed
    }

    async fn close(&self) -> bkswitch_bk_client::Result<()> {
        Ok(())
    }
}

/// Flags of a recovery read: fence and high priority, with the master key.
pub(crate) const RECOVERY_READ_FLAGS: u16 = FLAG_DO_FENCING | FLAG_HIGH_PRIORITY;
