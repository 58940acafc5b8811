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
use futures::future::BoxFuture;
use futures::FutureExt;
use parking_lot::Mutex;
use tokio::sync::{oneshot, OwnedSemaphorePermit};
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

    /// The bytes entry `entry` of `len` payload bytes takes from the budgets,
    /// and the bookies of its write set in the current ensemble (sorted, the
    /// order their budgets are taken in).
    fn admission_needs(&self, st: &WriteState, entry: EntryId, len: usize) -> (u32, Vec<String>) {
        let ensemble = &st.record.last_ensemble().bookies;
        let mut bookies: Vec<String> =
            write_set(entry, st.record.ensemble_size, st.record.write_quorum_size)
                .into_iter()
                .map(|i| ensemble[i].clone())
                .collect();
        bookies.sort();
        bookies.dedup();
        (self.ctx.client.add_budget.cost(len), bookies)
    }

    /// Takes the budgets at once, or nothing.
    fn try_admit(&self, cost: u32, bookies: &[String]) -> Option<Admission> {
        let client = self
            .ctx
            .client
            .add_budget
            .semaphore
            .clone()
            .try_acquire_many_owned(cost)
            .ok()?;
        let mut conns = Vec::with_capacity(bookies.len());
        for b in bookies {
            let budget = self.ctx.client.conn_budget(b);
            let permit = budget
                .semaphore
                .clone()
                .try_acquire_many_owned(budget.clamp(cost))
                .ok()?;
            conns.push((b.clone(), permit));
        }
        Some(Admission { client, conns })
    }

    fn add(
        self: &Arc<Self>,
        entry: Option<EntryId>,
        data: Bytes,
    ) -> BoxFuture<'static, Result<EntryId, BkError>> {
        let ready = |r| futures::future::ready(r).boxed();
        if let Err(e) = self.ctx.check_open() {
            return ready(Err(e));
        }
        match (self.mode, entry) {
            (Mode::Adv, None) => {
                return ready(Err(self.ctx.error(
                    BkErrorKind::IllegalOp,
                    "add_entry on a handle from create_ledger_adv; use add_entry_at",
                )))
            }
            (Mode::Normal, Some(_)) => {
                return ready(Err(self.ctx.error(
                    BkErrorKind::IllegalOp,
                    "add_entry_at on a handle from create_ledger; use add_entry",
                )))
            }
            _ => {}
        }
        if let Some(e) = self.too_large(data.len()) {
            return ready(Err(e));
        }
        let (tx, rx) = oneshot::channel();
        let (sends, start_release) = {
            let mut st = self.state.lock();
            let entry = match entry {
                Some(id) => {
                    // A negative id is at or below any LAC: -22, as LedgerHandleAdv.
                    if id <= st.lac || st.pending.contains_key(&id) {
                        return ready(Err(self.ctx.error(
                            BkErrorKind::DuplicateEntryId,
                            format!(
                                "entry {id} is at or below the last add confirmed {} or already pending",
                                st.lac
                            ),
                        )));
                    }
                    if let Some(e) = Self::status_error(&st, &self.ctx) {
                        return ready(Err(e));
                    }
                    id
                }
                None => {
                    if let Some(e) = Self::status_error(&st, &self.ctx) {
                        return ready(Err(e));
                    }
                    let id = st.next_entry;
                    st.next_entry += 1;
                    id
                }
            };
            // Admission: the throttle's next slot and the budgets of bytes in
            // flight (the client's and its write set's connections'), taken
            // now when they are free and nothing waits before this entry; else
            // the entry waits in `held_queue` (its id taken, in order) for the
            // writer's release task.
            let admission = if st.held_queue.is_empty() && self.throttle_ready() {
                let (cost, bookies) = self.admission_needs(&st, entry, data.len());
                let admission = self.try_admit(cost, &bookies);
                if admission.is_some() {
                    self.throttle_take();
                }
                admission
            } else {
                None
            };
            st.pushed_length += data.len() as u64;
            let header_length = st.pushed_length;
            let sends = self.enqueue(&mut st, entry, data, header_length, Some(tx), admission);
            let start_release = !st.held_queue.is_empty() && !st.releasing;
            if start_release {
                st.releasing = true;
            }
            (sends, start_release)
        };
        self.dispatch(sends);
        if start_release {
            let this = self.clone();
            self.ctx
                .client
                .runtime
                .spawn(async move { this.release_task().await });
        }
        let ctx = self.ctx.clone();
        async move {
            rx.await.unwrap_or_else(|_| {
                Err(ctx.error(BkErrorKind::Other, "the add was dropped without an answer"))
            })
        }
        .boxed()
    }

    fn throttle_ready(&self) -> bool {
        self.throttle
            .as_ref()
            .is_none_or(|t| t.lock().wait(Instant::now()).is_zero())
    }

    fn throttle_take(&self) {
        if let Some(t) = &self.throttle {
            t.lock().take(Instant::now());
        }
    }

    /// Lets the held entries through, in call order, as the throttle and the
    /// budgets allow; ends when none is left (or the handle failed or closed).
    async fn release_task(self: Arc<Self>) {
        loop {
            let next = {
                let mut st = self.state.lock();
                loop {
                    match st.held_queue.front().copied() {
                        None => {
                            st.releasing = false;
                            break None;
                        }
                        Some(entry) => match st.pending.get(&entry).and_then(|p| p.held.as_ref()) {
                            Some(payload) => {
                                let len = payload.len();
                                break Some((entry, self.admission_needs(&st, entry, len)));
                            }
                            // Failed or closed meanwhile.
                            None => {
                                st.held_queue.pop_front();
                            }
                        },
                    }
                }
            };
            let Some((entry, (cost, bookies))) = next else {
                return;
            };
            if let Some(t) = &self.throttle {
                let wait = t.lock().take(Instant::now());
                if !wait.is_zero() {
                    tokio::time::sleep(wait).await;
                }
            }
            let client = match self
                .ctx
                .client
                .add_budget
                .semaphore
                .clone()
                .acquire_many_owned(cost)
                .await
            {
                Ok(p) => p,
                Err(_) => {
                    // Closed with the client.
                    self.state.lock().releasing = false;
                    self.fail(
                        self.ctx
                            .error(BkErrorKind::ClientClosed, "the client was closed"),
                    );
                    return;
                }
            };
            let mut conns = Vec::with_capacity(bookies.len());
            for b in &bookies {
                let budget = self.ctx.client.conn_budget(b);
                let Ok(p) = budget
                    .semaphore
                    .clone()
                    .acquire_many_owned(budget.clamp(cost))
                    .await
                else {
                    self.state.lock().releasing = false;
                    return;
                };
                conns.push((b.clone(), p));
            }
            self.release_held(entry, Admission { client, conns });
        }
    }

    /// Re-writes a recovered entry (recovery mode), keeping its length.
    pub(crate) fn add_recovered(
        self: &Arc<Self>,
        entry: EntryId,
        payload: Bytes,
        header_length: u64,
    ) -> BoxFuture<'static, Result<EntryId, BkError>> {
        debug_assert_eq!(self.mode, Mode::Recovery);
        let (tx, rx) = oneshot::channel();
        let sends = {
            let mut st = self.state.lock();
            if let Some(e) = Self::status_error(&st, &self.ctx) {
                return futures::future::ready(Err(e)).boxed();
            }
            self.enqueue(&mut st, entry, payload, header_length, Some(tx), None)
        };
        self.dispatch(sends);
        let ctx = self.ctx.clone();
        async move {
            rx.await.unwrap_or_else(|_| {
                Err(ctx.error(BkErrorKind::Other, "the recovery add was dropped"))
            })
        }
        .boxed()
    }

    /// Sends the first held entry, now admitted (unless it was failed, closed
    /// or an ensemble change will send it).
    fn release_held(self: &Arc<Self>, entry: EntryId, admission: Admission) {
        let sends = {
            let mut st = self.state.lock();
            if st.held_queue.front() == Some(&entry) {
                st.held_queue.pop_front();
            }
            let (lac, changing) = (st.lac, st.changing);
            let Some(p) = st.pending.get(&entry) else {
                return;
            };
            let frame = match &p.held {
                Some(payload) => self.frame(lac, entry, payload, p.header_length),
                None => return,
            };
            let st = &mut *st;
            let p = st.pending.get_mut(&entry).expect("just seen");
            p.permit = Some(admission.client);
            p.conn_permits = admission.conns;
            p.held = None;
            p.frame = frame;
            if changing || p.sent {
                return;
            }
            p.sent = true;
            sends_for(&st.record, entry, p, None)
        };
        self.dispatch(sends);
    }
    fn on_answer(
        self: &Arc<Self>,
        entry: EntryId,
        index: usize,
        bookie: String,
        result: Result<Response, ConnError>,
    ) {
        let mut fail = None;
        let mut start_change = false;
        let completed = {
            let mut st = self.state.lock();
            let aq = st.record.ack_quorum_size;
            let member = st
                .record
                .last_ensemble()
                .bookies
                .get(index)
                .is_some_and(|b| *b == bookie);
            let Some(p) = st.pending.get_mut(&entry) else {
                return;
            };
            match result {
                Ok(r) if r.rc == rc::EOK => {
                    if member {
                        p.acked |= 1 << index;
                        if p.acked.count_ones() >= aq {
                            // Acknowledged: its share of the budget goes back now,
                            // not when the entries before it are acknowledged too
                            // (a held earlier entry may be waiting for it).
                            p.permit = None;
                        }
                    }
                }
                Ok(r) if r.rc == rc::EFENCED || r.rc == rc::EUA => {
                    fail = Some(self.ctx.status_error(Op::Add, entry, &bookie, r.rc));
                }
                other => {
                    let error = match &other {
                        Ok(r) => self.ctx.status_error(Op::Add, entry, &bookie, r.rc),
                        Err(e) => self.ctx.conn_error(Op::Add, entry, e),
                    };
                    if member && matches!(st.status, Status::Open) {
                        debug!(error = %error, "bookie failed an add; changing the ensemble");
                        if self.ctx.client.is_closed() {
                            fail = Some(error);
                        } else {
                            st.failed.insert(index, bookie);
                            if !st.changing {
                                st.changing = true;
                                start_change = true;
                            }
                        }
                    }
                }
            }
            drain(&mut st, self.mode, aq)
        };
        for (waiter, id) in completed {
            if let Some(w) = waiter {
                let _ = w.send(Ok(id));
            }
        }
        if let Some(e) = fail {
            self.fail(e);
        } else if start_change {
            let this = self.clone();
            self.ctx
                .client
                .runtime
                .spawn(async move { this.change_ensemble().await });
        }
    }

    /// Fails the handle: pending adds get `error`, later adds too.
    pub(crate) fn fail(&self, error: BkError) {
        let waiters: Vec<_> = {
            let mut st = self.state.lock();
            if matches!(st.status, Status::Open) {
                st.status = Status::Failed(error.clone());
            }
            st.changing = false;
            st.held_queue.clear();
            std::mem::take(&mut st.pending)
                .into_values()
                .filter_map(|p| p.waiter)
                .collect()
        };
        if !waiters.is_empty() {
            info!(error = %error, pending = waiters.len(), "write handle failed");
        }
        for w in waiters {
            let _ = w.send(Err(error.clone()));
        }
    }

    /// Seals the ledger at the last add confirmed (BookKeeper's writer close).
    pub(crate) async fn close(&self) -> Result<(), BkError> {
        let (waiters, lac, length) = {
            let mut st = self.state.lock();
            if st.sealed {
                return Ok(());
            }
            if matches!(st.status, Status::Open) {
                st.status = Status::Closed;
            }
            st.changing = false;
            st.held_queue.clear();
            let waiters: Vec<_> = std::mem::take(&mut st.pending)
                .into_values()
                .filter_map(|p| p.waiter)
                .collect();
            (waiters, st.lac, st.length)
        };
        for w in waiters {
            let _ = w.send(Err(self.ctx.error(
                BkErrorKind::LedgerClosed,
                "the handle was closed before this add was acknowledged",
            )));
        }
        self.ctx.check_open()?;
        let (mut record, mut version) = {
            let st = self.state.lock();
            (st.record.clone(), st.version)
        };
        loop {
            match record.state {
                LedgerState::Closed => {
                    if record.last_entry_id == lac && record.length == length {
                        let mut st = self.state.lock();
                        st.record = record;
                        st.version = version;
                        st.sealed = true;
                        return Ok(());
                    }
                    return Err(self.ctx.error(
                        BkErrorKind::LedgerFenced,
                        format!(
                            "the ledger was sealed by another client at entry {} ({} bytes), \
                             not at this writer's last add confirmed {lac} ({length} bytes)",
                            record.last_entry_id, record.length
                        ),
                    ));
                }
                LedgerState::InRecovery => {
                    return Err(self.ctx.error(
                        BkErrorKind::LedgerFenced,
                        "another client is recovering the ledger; it decides where the ledger ends",
                    ))
                }
                LedgerState::Open => {
                    let mut sealed = record.clone();
                    sealed.state = LedgerState::Closed;
                    sealed.last_entry_id = lac;
                    sealed.length = length;
                    match self.ctx.client.meta.write(&sealed, version).await {
                        Ok(v) => {
                            let mut st = self.state.lock();
                            st.record = sealed;
                            st.version = v;
                            st.sealed = true;
                            return Ok(());
                        }
                        Err(WriteError::Conflict) => {
                            (record, version) = self
                                .ctx
                                .client
                                .meta
                                .read_existing(self.ctx.ledger_id)
                                .await?;
                        }
                        Err(WriteError::Failed(e)) => return Err(e),
                    }
                }
            }
        }
    }

    fn metadata(&self) -> LedgerMetadata {
        self.state
            .lock()
            .record
            .to_metadata(self.ctx.digest.digest_type())
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

/// A handle from `create_ledger` or `create_ledger_adv`.
pub(crate) struct LedgerWriter {
    shared: Arc<WriterShared>,
}

impl std::fmt::Debug for LedgerWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let st = self.shared.state.lock();
        f.debug_struct("LedgerWriter")
            .field("ledger_id", &self.shared.ctx.ledger_id)
            .field("mode", &self.shared.mode)
            .field("lac", &st.lac)
            .field("pending", &st.pending.len())
            .finish()
    }
}

impl LedgerWriter {
    pub(crate) fn new(
        ctx: Arc<LedgerCtx>,
        adv: bool,
        record: LedgerRecord,
        version: i64,
    ) -> LedgerWriter {
        let mode = if adv { Mode::Adv } else { Mode::Normal };
        LedgerWriter {
            shared: WriterShared::new(ctx, mode, record, version, -1, 0),
        }
    }
}

#[async_trait::async_trait]
impl ReadHandle for LedgerWriter {
    fn id(&self) -> bkswitch_bk_client::LedgerId {
        self.shared.ctx.ledger_id
    }

    fn metadata(&self) -> LedgerMetadata {
        self.shared.metadata()
    }

    async fn read_entries(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> bkswitch_bk_client::Result<Vec<LedgerEntry>> {
        let (record, lac) = {
            let st = self.shared.state.lock();
            (st.record.clone(), st.lac)
        };
        check_range(&self.shared.ctx, first, last, Some(lac))?;
        read_range(&self.shared.ctx, &record, first, last).await
    }

    async fn read_unconfirmed(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> bkswitch_bk_client::Result<Vec<LedgerEntry>> {
        let record = self.shared.state.lock().record.clone();
        check_range(&self.shared.ctx, first, last, None)?;
        read_range(&self.shared.ctx, &record, first, last).await
    }

    fn last_add_confirmed(&self) -> EntryId {
        self.shared.state.lock().lac
    }

    async fn read_last_add_confirmed(&self) -> bkswitch_bk_client::Result<EntryId> {
        self.shared.ctx.check_open()?;
        Ok(self.shared.state.lock().lac)
    }

    fn length(&self) -> u64 {
        self.shared.state.lock().length
    }

    fn is_closed(&self) -> bool {
        let st = self.shared.state.lock();
        !matches!(st.status, Status::Open) || st.record.state == LedgerState::Closed
    }

    async fn close(&self) -> bkswitch_bk_client::Result<()> {
        self.shared.close().await
    }
}

impl WriteHandle for LedgerWriter {
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, bkswitch_bk_client::Result<EntryId>> {
        self.shared.add(None, data)
    }

    fn add_entry_at(
        &self,
        entry_id: EntryId,
        data: Bytes,
    ) -> BoxFuture<'static, bkswitch_bk_client::Result<EntryId>> {
        self.shared.add(Some(entry_id), data)
    }
}

/// Java's `throttle` (Guava's `RateLimiter` in `LedgerHandle`): adds per second
/// of one handle, with up to one second of unused slots saved for a burst.
pub(super) struct RateLimiter {
    interval: Duration,
    /// When the next slot is free.
    next_free: Instant,
    /// Slots saved while idle, at most `max_stored`.
    stored: f64,
    max_stored: f64,
}

impl RateLimiter {
    pub(super) fn new(per_second: u32) -> RateLimiter {
        RateLimiter {
            interval: Duration::from_secs(1) / per_second.max(1),
            next_free: Instant::now(),
            stored: 0.0,
            max_stored: f64::from(per_second.max(1)),
        }
    }

    fn resync(&mut self, now: Instant) {
        if now > self.next_free {
            let idle = (now - self.next_free).as_secs_f64() / self.interval.as_secs_f64();
            self.stored = (self.stored + idle).min(self.max_stored);
            self.next_free = now;
        }
    }

    /// How long an add asked for `now` would wait.
    pub(super) fn wait(&mut self, now: Instant) -> Duration {
        self.resync(now);
        if self.stored >= 1.0 {
            Duration::ZERO
        } else {
            self.next_free.saturating_duration_since(now)
        }
    }

    /// Takes the next slot: how long to wait for it.
    pub(super) fn take(&mut self, now: Instant) -> Duration {
        self.resync(now);
        let wait = self.next_free.saturating_duration_since(now);
        if self.stored >= 1.0 {
            self.stored -= 1.0;
        } else {
            self.next_free += self.interval;
        }
        wait
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_rate_limiter_spaces_slots_and_saves_at_most_a_second() {
        let mut r = RateLimiter::new(10);
        let t0 = r.next_free;
        // Fresh: the first slot is free, the next ones 100 ms apart.
        assert_eq!(r.take(t0), Duration::ZERO);
        assert_eq!(r.take(t0), Duration::from_millis(100));
        assert_eq!(r.take(t0), Duration::from_millis(200));
        assert!(!r.wait(t0).is_zero());
        // Ten idle seconds save one second (10 slots), not ten.
        let later = t0 + Duration::from_secs(10);
        for _ in 0..10 {
            assert_eq!(r.take(later), Duration::ZERO);
        }
        assert_eq!(r.take(later), Duration::ZERO);
        assert_eq!(r.take(later), Duration::from_millis(100));
    }
}
