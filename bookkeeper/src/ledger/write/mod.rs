//! The write path, as BookKeeper's `LedgerHandle`, `LedgerHandleAdv` and
//! `PendingAddOp` do it.
//!
//! - **Striping.** Entry `e` goes to the bookies `(e + i) % E`, `i < WQ`, of the
//!   ledger's current ensemble; the frame is built once (header with the
//!   writer's last add confirmed piggybacked, digest, payload) and sent to each.
//! - **Ack quorum and order.** An entry is acknowledged once `AQ` of its bookies
//!   stored it; the last add confirmed then advances over acknowledged entries
//!   only contiguously, and completions are delivered in entry-id order.
//! - **Ensemble change.** A bookie that fails or times out an add is replaced by
//!   a writable bookie outside the ensemble: a new ensemble starting at `LAC + 1`
//!   is recorded by compare-and-set on the metadata, and every pending entry is
//!   re-sent to the replacement. Adds made meanwhile wait. With no spare bookie
//!   the handle fails its pending adds and refuses new ones; nothing it
//!   acknowledged is lost, and `close` seals the ledger at its LAC.
//! - **Fencing.** A bookie answering "fenced" (a recovery open sealed the ledger)
//!   or "unauthorized" fails the handle at once.
//! - **Close** fails pending adds with `LedgerClosed` (-11), then seals the
//!   metadata at the last add confirmed by compare-and-set.
//!
//! A recovery open uses the same machinery in *recovery mode*: adds carry the
//! recovery flag (allowed on a fenced ledger), keep the length of the entry they
//! re-write, and an ensemble change stays local until recovery closes the
//! ledger (BookKeeper's `newEnsemblesFromRecovery`).

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_bk_client::{
    BkError, BkErrorKind, Ensemble, EntryId, LedgerEntry, LedgerMetadata, LedgerState, ReadHandle,
    WriteHandle,
};
use bytes::Bytes;
// An add's answer reaches its caller through `futures`' oneshot, not tokio's.
// Tokio's spends the awaiting task's cooperative budget (128 polls per turn):
// a task that keeps a window of adds in flight could take only 128 answers
// per turn, then wait behind the connections' tasks for its next turn while
// the rest sat answered. On Pulsar's bookies at 1,024 adds in flight that wait
// set the p99 (RESULTS, bookkeeper_real). A dropped sender still reads as
// "dropped without an answer"; the caller's own I/O still spends its budget.
use futures::channel::oneshot;
use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use tokio::sync::OwnedSemaphorePermit;
use tracing::{debug, info};

use super::read::{check_range, read_range};
use super::{LedgerCtx, Op};
use crate::meta::format::LedgerRecord;
use crate::meta::WriteError;
use crate::quorum::write_set;
use crate::wire::codec::{
    add_frame_len, encode_add, rc, EntryHeader, Response, FLAG_HIGH_PRIORITY, FLAG_RECOVERY_ADD,
    MAX_FRAME_LEN, OP_ADD,
};
use crate::wire::conn::{Completion, ConnError};

mod admission;
mod completion;
mod handle;

use admission::RateLimiter;
pub(crate) use handle::LedgerWriter;

/// How a writer came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Mode {
    /// `create_ledger`: ids assigned in call order.
    Normal,
    /// `create_ledger_adv`: the caller gives each entry id.
    Adv,
    /// A recovery open re-writing the tail of a ledger.
    Recovery,
}

pub(super) enum Status {
    Open,
    Closed,
    Failed(BkError),
}

pub(super) struct PendingAdd {
    pub(super) frame: Bytes,
    pub(super) payload_len: u64,
    pub(super) header_length: u64,
    /// Ensemble indexes (of the current ensemble) that stored the entry.
    pub(super) acked: u64,
    pub(super) sent: bool,
    /// Waiting for the client's budget of add bytes in flight, with the
    /// caller's payload (the frame is built when it is let through): not sent
    /// yet, not even after an ensemble change.
    pub(super) held: Option<Bytes>,
    /// This entry's share of the client's budget, given back when the ack
    /// quorum has it or it leaves `pending`.
    pub(super) permit: Option<OwnedSemaphorePermit>,
    /// Its shares of the budgets of the connections of its write set, each
    /// moved into the request to that bookie when it is sent (and given back
    /// when that bookie answers, fails or times out).
    pub(super) conn_permits: Vec<(String, OwnedSemaphorePermit)>,
    pub(super) waiter: Option<oneshot::Sender<Result<EntryId, BkError>>>,
}

pub(super) struct WriteState {
    pub(super) record: LedgerRecord,
    pub(super) version: i64,
    pub(super) lac: EntryId,
    pub(super) length: u64,
    pub(super) pushed_length: u64,
    pub(super) next_entry: EntryId,
    pub(super) pending: BTreeMap<EntryId, PendingAdd>,
    pub(super) status: Status,
    pub(super) changing: bool,
    pub(super) failed: BTreeMap<usize, String>,
    pub(super) ensemble_changes: u32,
    pub(super) sealed: bool,
    /// Entries waiting for admission (budgets of bytes in flight, throttle),
    /// in call order; one task per writer lets them through.
    pub(super) held_queue: VecDeque<EntryId>,
    /// Whether that task runs.
    pub(super) releasing: bool,
}

/// One request to send, gathered under the lock and sent after it.
pub(super) struct Send {
    pub(super) entry: EntryId,
    pub(super) index: usize,
    pub(super) bookie: String,
    pub(super) frame: Bytes,
    /// The entry's share of this bookie's connection budget (first send only).
    pub(super) permit: Option<OwnedSemaphorePermit>,
}

/// What lets an entry be sent: its shares of the client's and of its write
/// set's connections' budgets of add bytes in flight.
pub(super) struct Admission {
    client: OwnedSemaphorePermit,
    conns: Vec<(String, OwnedSemaphorePermit)>,
}

/// The shared state of a writer (callbacks of bookie answers hold it too).
pub(crate) struct WriterShared {
    pub(super) ctx: Arc<LedgerCtx>,
    pub(super) mode: Mode,
    pub(super) state: Mutex<WriteState>,
    /// Adds per second (Java's `throttle`), when set.
    throttle: Option<Mutex<RateLimiter>>,
}

impl WriterShared {
    fn new(
        ctx: Arc<LedgerCtx>,
        mode: Mode,
        record: LedgerRecord,
        version: i64,
        lac: EntryId,
        length: u64,
    ) -> Arc<WriterShared> {
        Arc::new(WriterShared {
            mode,
            state: Mutex::new(WriteState {
                record,
                version,
                lac,
                length,
                pushed_length: length,
                next_entry: lac + 1,
                pending: BTreeMap::new(),
                status: Status::Open,
                changing: false,
                failed: BTreeMap::new(),
                ensemble_changes: 0,
                sealed: false,
                held_queue: VecDeque::new(),
                releasing: false,
            }),
            throttle: match (mode, ctx.client.config.throttle) {
                (Mode::Recovery, _) | (_, 0) => None,
                (_, rate) => Some(Mutex::new(RateLimiter::new(rate))),
            },
            ctx,
        })
    }

    /// A writer in recovery mode, continuing after `lac` (of `length` bytes).
    pub(crate) fn recovery(
        ctx: Arc<LedgerCtx>,
        record: LedgerRecord,
        version: i64,
        lac: EntryId,
        length: u64,
    ) -> Arc<WriterShared> {
        Self::new(ctx, Mode::Recovery, record, version, lac, length)
    }

    /// The last add confirmed, the length and the (possibly locally changed)
    /// ensembles.
    pub(crate) fn progress(&self) -> (EntryId, u64, Vec<Ensemble>) {
        let st = self.state.lock();
        (st.lac, st.length, st.record.ensembles.clone())
    }

    fn too_large(&self, len: usize) -> Option<BkError> {
        (add_frame_len(self.ctx.digest.len(), len) > MAX_FRAME_LEN).then(|| {
            self.ctx.error(
                BkErrorKind::InvalidArgument,
                format!(
                    "an entry of {len} bytes does not fit in a bookie frame of at most {MAX_FRAME_LEN} bytes; split it"
                ),
            )
        })
    }

    fn status_error(st: &WriteState, ctx: &LedgerCtx) -> Option<BkError> {
        match &st.status {
            Status::Open => None,
            Status::Closed => {
                Some(ctx.error(BkErrorKind::LedgerClosed, "the write handle is closed"))
            }
            Status::Failed(e) => Some(e.clone()),
        }
    }

    /// The frame of entry `entry`, with the last add confirmed piggybacked.
    fn frame(&self, lac: EntryId, entry: EntryId, payload: &[u8], header_length: u64) -> Bytes {
        let flags = if self.mode == Mode::Recovery {
            FLAG_RECOVERY_ADD | FLAG_HIGH_PRIORITY
        } else {
            0
        };
        encode_add(
            &self.ctx.master_key,
            &self.ctx.digest,
            EntryHeader {
                ledger_id: self.ctx.ledger_id,
                entry_id: entry,
                last_add_confirmed: lac,
                length: header_length as i64,
            },
            payload,
            flags,
        )
    }

    /// Queues entry `entry` (checks done by the caller) and returns its sends.
    /// An entry without `admission` waits for it in `held_queue` with the
    /// caller's payload, and is framed when it is let through.
    fn enqueue(
        &self,
        st: &mut WriteState,
        entry: EntryId,
        payload: Bytes,
        header_length: u64,
        waiter: Option<oneshot::Sender<Result<EntryId, BkError>>>,
        admission: Option<Admission>,
    ) -> Vec<Send> {
        let payload_len = payload.len() as u64;
        let held = admission.is_none() && self.mode != Mode::Recovery;
        let (frame, held) = if held {
            (Bytes::new(), Some(payload))
        } else {
            (self.frame(st.lac, entry, &payload, header_length), None)
        };
        let (permit, conn_permits) = match admission {
            Some(a) => (Some(a.client), a.conns),
            None => (None, Vec::new()),
        };
        let mut pending = PendingAdd {
            frame,
            payload_len,
            header_length,
            acked: 0,
            sent: false,
            held,
            permit,
            conn_permits,
            waiter,
        };
        let sends = if st.changing || pending.held.is_some() {
            Vec::new()
        } else {
            pending.sent = true;
            sends_for(&st.record, entry, &mut pending, None)
        };
        if pending.held.is_some() {
            st.held_queue.push_back(entry);
        }
        st.pending.insert(entry, pending);
        sends
    }

    pub(super) fn dispatch(self: &Arc<Self>, sends: Vec<Send>) {
        let timeout = self.ctx.client.config.add_timeout;
        for s in sends {
            let conn = self.ctx.client.conn(&s.bookie);
            let this = self.clone();
            let (entry, index, bookie, permit) = (s.entry, s.index, s.bookie, s.permit);
            conn.send(
                (OP_ADD, self.ctx.ledger_id, entry),
                s.frame,
                timeout,
                Completion::Callback(Box::new(move |result| {
                    // The connection's share goes back with the answer.
                    drop(permit);
                    this.on_answer(entry, index, bookie, result)
                })),
            );
        }
    }
}

/// The requests that send entry `entry` to its write set, skipping the bookies
/// that already stored it (or, with `only`, all but those indexes).
pub(super) fn sends_for(
    record: &LedgerRecord,
    entry: EntryId,
    p: &mut PendingAdd,
    only: Option<&[usize]>,
) -> Vec<Send> {
    let ensemble = &record.last_ensemble().bookies;
    write_set(entry, record.ensemble_size, record.write_quorum_size)
        .into_iter()
        .filter(|i| p.acked & (1 << i) == 0)
        .filter(|i| only.is_none_or(|o| o.contains(i)))
        .map(|index| {
            let bookie = ensemble[index].clone();
            let permit = p
                .conn_permits
                .iter()
                .position(|(b, _)| *b == bookie)
                .map(|at| p.conn_permits.swap_remove(at).1);
            Send {
                entry,
                index,
                bookie,
                frame: p.frame.clone(),
                permit,
            }
        })
        .collect()
}

type Completed = Vec<(Option<oneshot::Sender<Result<EntryId, BkError>>>, EntryId)>;

/// Advances the last add confirmed over acknowledged entries, in order.
fn drain(st: &mut WriteState, mode: Mode, ack_quorum: u32) -> Completed {
    let mut out = Vec::new();
    while let Some((&id, p)) = st.pending.first_key_value() {
        if id != st.lac + 1 || p.acked.count_ones() < ack_quorum {
            break;
        }
        let (_, p) = st.pending.pop_first().expect("checked");
        st.lac = id;
        st.length = match mode {
            Mode::Recovery => p.header_length,
            Mode::Normal | Mode::Adv => st.length + p.payload_len,
        };
        out.push((p.waiter, id));
    }
    out
}
