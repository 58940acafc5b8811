//! Read and write handles of the in-memory cluster.

use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::{self, BoxFuture, FutureExt};
use parking_lot::Mutex;
use tokio::sync::oneshot;

use super::cluster::{AddPlan, ClusterInner, OpKind};
use super::ledger::{Completions, LedgerCell, LedgerData, WriterStatus};
use super::replicas::{corrupt_metadata_error, lost_error};
use crate::api::{ReadHandle, WriteHandle};
use crate::error::{BkError, BkErrorKind, Result};
use crate::types::{EntryId, LedgerEntry, LedgerId, LedgerMetadata};

/// Per-client state shared with the handles the client returned.
#[derive(Debug, Default)]
pub(crate) struct ClientState {
    closed: AtomicBool,
}

impl ClientState {
    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Marks the client closed; returns whether it already was.
    pub(crate) fn close(&self) -> bool {
        self.closed.swap(true, Ordering::AcqRel)
    }
}

/// What every handle needs: its cluster and the client that opened it.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(crate) cluster: Arc<ClusterInner>,
    pub(crate) client: Arc<ClientState>,
}

impl Ctx {
    fn err(&self, kind: BkErrorKind, ledger: LedgerId, message: impl Into<String>) -> BkError {
        self.cluster.err(kind, Some(ledger), message)
    }

    fn check_client(&self, what: &str, ledger: LedgerId) -> Result<()> {
        if self.client.is_closed() {
            return Err(self.err(
                BkErrorKind::ClientClosed,
                ledger,
                format!("{what} failed: the client that opened this handle was closed"),
            ));
        }
        Ok(())
    }

    fn check_range(
        &self,
        what: &str,
        ledger: LedgerId,
        first: EntryId,
        last: EntryId,
    ) -> Result<()> {
        if first < 0 || first > last {
            return Err(self.err(
                BkErrorKind::InvalidArgument,
                ledger,
                format!(
                    "{what} of entries {first}..={last} failed: the range must satisfy 0 <= first <= last"
                ),
            ));
        }
        Ok(())
    }

    fn beyond_lac(&self, ledger: LedgerId, first: EntryId, last: EntryId, lac: EntryId) -> BkError {
        self.err(
            BkErrorKind::ReadBeyondLac,
            ledger,
            format!(
                "read of entries {first}..={last} failed: entry {last} is beyond the last add confirmed {lac}"
            ),
        )
    }

    fn deleted(&self, what: &str, ledger: LedgerId) -> BkError {
        self.err(
            BkErrorKind::NoSuchLedger,
            ledger,
            format!("{what} failed: the ledger was deleted"),
        )
    }

    /// Read confirmed entries `first..=last` (caller checked `last <= lac`).
    async fn read_confirmed(
        &self,
        cell: &LedgerCell,
        first: EntryId,
        last: EntryId,
    ) -> Result<Vec<LedgerEntry>> {
        self.cluster.gate(OpKind::Read, Some(cell.id)).await?;
        let d = cell.data.lock();
        if d.deleted {
            return Err(self.deleted("read", cell.id));
        }
        if let Some((entry, bookies)) = d.first_lost(first, last) {
            return Err(lost_error(
                &self.cluster.name,
                cell.id,
                "read",
                entry,
                &bookies,
            ));
        }
        Ok(d.confirmed_range(first, last))
    }

    async fn read_unconfirmed(
        &self,
        cell: &LedgerCell,
        first: EntryId,
        last: EntryId,
    ) -> Result<Vec<LedgerEntry>> {
        const WHAT: &str = "read_unconfirmed";
        self.check_client(WHAT, cell.id)?;
        self.check_range(WHAT, cell.id, first, last)?;
        self.cluster.gate(OpKind::Read, Some(cell.id)).await?;
        let d = cell.data.lock();
        if d.deleted {
            return Err(self.deleted(WHAT, cell.id));
        }
        if let Some((entry, bookies)) = d.first_lost(first, last) {
            return Err(lost_error(
                &self.cluster.name,
                cell.id,
                WHAT,
                entry,
                &bookies,
            ));
        }
        d.stored_range(first, last).ok_or_else(|| {
            self.err(
                BkErrorKind::NoSuchEntry,
                cell.id,
                format!("{WHAT} of entries {first}..={last} failed: not every entry of the range is stored"),
            )
        })
    }
}

/// A handle's view of a ledger it does not write.
#[derive(Debug)]
pub(crate) struct View {
    pub(crate) lac: EntryId,
    pub(crate) length: u64,
    pub(crate) metadata: LedgerMetadata,
}

/// Handle from `open_ledger` / `open_ledger_no_recovery`: a snapshot of the ledger
/// refreshed by `read_last_add_confirmed`.
pub(crate) struct MemoryReadHandle {
    ctx: Ctx,
    cell: Arc<LedgerCell>,
    view: Mutex<View>,
}

impl MemoryReadHandle {
    pub(crate) fn new(ctx: Ctx, cell: Arc<LedgerCell>, view: View) -> MemoryReadHandle {
        MemoryReadHandle {
            ctx,
            cell,
            view: Mutex::new(view),
        }
    }
}

impl fmt::Debug for MemoryReadHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let view = self.view.lock();
        f.debug_struct("MemoryReadHandle")
            .field("cluster", &self.ctx.cluster.name)
            .field("ledger_id", &self.cell.id)
            .field("lac", &view.lac)
            .field("state", &view.metadata.state)
            .finish()
    }
}

#[async_trait]
impl ReadHandle for MemoryReadHandle {
    fn id(&self) -> LedgerId {
        self.cell.id
    }

    fn metadata(&self) -> LedgerMetadata {
        self.view.lock().metadata.clone()
    }

    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        let id = self.cell.id;
        self.ctx.check_client("read", id)?;
        self.ctx.check_range("read", id, first, last)?;
        let lac = self.view.lock().lac;
        if last > lac {
            return Err(self.ctx.beyond_lac(id, first, last, lac));
        }
        self.ctx.read_confirmed(&self.cell, first, last).await
    }

    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        self.ctx.read_unconfirmed(&self.cell, first, last).await
    }

    fn last_add_confirmed(&self) -> EntryId {
        self.view.lock().lac
    }

    async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        const WHAT: &str = "read_last_add_confirmed";
        let id = self.cell.id;
        self.ctx.check_client(WHAT, id)?;
        self.ctx.cluster.gate(OpKind::ReadLac, Some(id)).await?;
        let (lac, length, metadata) = {
            let d = self.cell.data.lock();
            if d.deleted {
                return Err(self.ctx.deleted(WHAT, id));
            }
            let (lac, length) = if d.metadata.is_closed() {
                (d.metadata.last_entry_id, d.metadata.length)
            } else {
                (d.lac, d.length)
            };
            (lac, length, d.metadata.clone())
        };
        let mut view = self.view.lock();
        if lac >= view.lac {
            view.lac = lac;
            view.length = length;
            view.metadata = metadata;
        }
        Ok(view.lac)
    }

    fn length(&self) -> u64 {
        self.view.lock().length
    }

    fn is_closed(&self) -> bool {
        self.view.lock().metadata.is_closed()
    }

    async fn close(&self) -> Result<()> {
        Ok(())
    }
}

/// Handle from `create_ledger` / `create_ledger_adv`: the ledger's single writer.
pub(crate) struct MemoryWriteHandle {
    ctx: Ctx,
    cell: Arc<LedgerCell>,
}

impl fmt::Debug for MemoryWriteHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let d = self.cell.data.lock();
        f.debug_struct("MemoryWriteHandle")
            .field("cluster", &self.ctx.cluster.name)
            .field("ledger_id", &self.cell.id)
            .field("adv", &d.writer.adv)
            .field("lac", &d.lac)
            .field("status", &d.writer.status)
            .finish()
    }
}

/// How an add proceeds once validated.
enum AddStart {
    /// Finished at call time.
    Done(Result<EntryId>),
    /// Stored; waiting for lower entries.
    Wait(oneshot::Receiver<Result<EntryId>>),
    /// Waiting on faults or latency before reaching the bookies.
    Deferred(EntryId, Bytes, Duration, oneshot::Receiver<Result<EntryId>>),
}

impl MemoryWriteHandle {
    pub(crate) fn new(ctx: Ctx, cell: Arc<LedgerCell>) -> MemoryWriteHandle {
        MemoryWriteHandle { ctx, cell }
    }

    fn add(&self, requested: Option<EntryId>, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        let plan = self.ctx.cluster.add_plan();
        let mut done = Completions::default();
        let start = {
            let mut d = self.cell.data.lock();
            self.start_add(&mut d, requested, data, plan, &mut done)
        };
        done.fire();
        match start {
            AddStart::Done(r) => future::ready(r).boxed(),
            AddStart::Wait(rx) => wait_completion(rx, self.ctx.clone(), self.cell.id).boxed(),
            AddStart::Deferred(entry_id, data, latency, rx) => {
                let write =
                    deferred_add(self.ctx.clone(), self.cell.clone(), entry_id, data, latency);
                let wait = wait_completion(rx, self.ctx.clone(), self.cell.id);
                match tokio::runtime::Handle::try_current() {
                    Ok(rt) => {
                        // The write proceeds even if the returned future is dropped.
                        drop(rt.spawn(write));
                        wait.boxed()
                    }
                    Err(_) => async move {
                        write.await;
                        wait.await
                    }
                    .boxed(),
                }
            }
        }
    }

    fn start_add(
        &self,
        d: &mut LedgerData,
        requested: Option<EntryId>,
        data: Bytes,
        plan: AddPlan,
        done: &mut Completions,
    ) -> AddStart {
        let id = self.cell.id;
        let ctx = &self.ctx;
        let fail = |kind, msg: String| AddStart::Done(Err(ctx.err(kind, id, msg)));
        match (d.writer.adv, requested) {
            (true, None) => {
                return fail(
                    BkErrorKind::IllegalOp,
                    "add_entry failed: this handle comes from create_ledger_adv and needs explicit entry ids (add_entry_at)".into(),
                )
            }
            (false, Some(e)) => {
                return fail(
                    BkErrorKind::IllegalOp,
                    format!("add_entry_at({e}) failed: this handle comes from create_ledger and assigns entry ids itself (add_entry)"),
                )
            }
            _ => {}
        }
        if let Err(e) = ctx.check_client("add", id) {
            return AddStart::Done(Err(e));
        }
        let entry_id = match requested {
            Some(e) => {
                if e <= d.lac || d.writer.pending.contains_key(&e) {
                    return fail(
                        BkErrorKind::DuplicateEntryId,
                        format!(
                            "add of entry {e} failed: it is at or below the last add confirmed {} or already pending",
                            d.lac
                        ),
                    );
                }
                e
            }
            None => d.writer.next_entry_id,
        };
        if d.writer.status != WriterStatus::Open {
            return fail(
                BkErrorKind::LedgerClosed,
                format!("add of entry {entry_id} failed: the handle is closed"),
            );
        }
        if d.deleted {
            return AddStart::Done(Err(ctx.deleted(&format!("add of entry {entry_id}"), id)));
        }
        if d.fenced {
            return fail(
                BkErrorKind::LedgerFenced,
                format!("add of entry {entry_id} failed: a recovery open fenced the ledger"),
            );
        }
        let unrecoverable = if d.writer.fail_adds_fenced {
            Some(ctx.err(
                BkErrorKind::LedgerFenced,
                id,
                format!(
                    "add of entry {entry_id} failed: the bookies still hold a fence from an earlier ledger with this id"
                ),
            ))
        } else if plan == AddPlan::FailFast {
            Some(ctx.cluster.unavailable_error(OpKind::Add, Some(id)))
        } else {
            None
        };
        if let Some(err) = unrecoverable {
            fail_writer(d, done, &err);
            return AddStart::Done(Err(err));
        }
        if requested.is_none() {
            d.writer.next_entry_id += 1;
        }
        match plan {
            AddPlan::Deferred(latency) => {
                let (tx, rx) = oneshot::channel();
                d.writer.pending.insert(entry_id, tx);
                AddStart::Deferred(entry_id, data, latency, rx)
            }
            AddPlan::Immediate | AddPlan::FailFast => {
                d.store(entry_id, data, done);
                if entry_id <= d.lac {
                    return AddStart::Done(Ok(entry_id));
                }
                let (tx, rx) = oneshot::channel();
                d.writer.pending.insert(entry_id, tx);
                AddStart::Wait(rx)
            }
        }
    }
}

/// An unrecoverable add error closes the writer for adds (as BookKeeper's handle
/// does) and fails every pending add with the same error.
fn fail_writer(d: &mut LedgerData, done: &mut Completions, err: &BkError) {
    d.writer.status = WriterStatus::Failed;
    d.fail_pending(done, |_| err.clone());
}

async fn wait_completion(
    rx: oneshot::Receiver<Result<EntryId>>,
    ctx: Ctx,
    ledger: LedgerId,
) -> Result<EntryId> {
    match rx.await {
        Ok(r) => r,
        Err(_) => Err(ctx.err(
            BkErrorKind::LedgerClosed,
            ledger,
            "add failed: the ledger was dropped before the add completed",
        )),
    }
}

/// The part of an add that waits on faults/latency, then reaches the bookies.
async fn deferred_add(
    ctx: Ctx,
    cell: Arc<LedgerCell>,
    entry_id: EntryId,
    data: Bytes,
    latency: Duration,
) {
    let gate = ctx
        .cluster
        .gate_with_latency(OpKind::Add, Some(cell.id), latency)
        .await;
    let mut done = Completions::default();
    {
        let mut d = cell.data.lock();
        // Gone from pending: a close, fence, delete or earlier failure already
        // completed this add.
        if d.writer.pending.contains_key(&entry_id) {
            match gate {
                Ok(()) => d.store(entry_id, data, &mut done),
                Err(err) => fail_writer(&mut d, &mut done, &err),
            }
        }
    }
    done.fire();
}

#[async_trait]
impl ReadHandle for MemoryWriteHandle {
    fn id(&self) -> LedgerId {
        self.cell.id
    }

    fn metadata(&self) -> LedgerMetadata {
        self.cell.data.lock().metadata.clone()
    }

    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        let id = self.cell.id;
        self.ctx.check_client("read", id)?;
        self.ctx.check_range("read", id, first, last)?;
        let lac = self.cell.data.lock().lac;
        if last > lac {
            return Err(self.ctx.beyond_lac(id, first, last, lac));
        }
        self.ctx.read_confirmed(&self.cell, first, last).await
    }

    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        self.ctx.read_unconfirmed(&self.cell, first, last).await
    }

    fn last_add_confirmed(&self) -> EntryId {
        self.cell.data.lock().lac
    }

    async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        const WHAT: &str = "read_last_add_confirmed";
        let id = self.cell.id;
        self.ctx.check_client(WHAT, id)?;
        self.ctx.cluster.gate(OpKind::ReadLac, Some(id)).await?;
        let d = self.cell.data.lock();
        if d.deleted {
            return Err(self.ctx.deleted(WHAT, id));
        }
        Ok(d.lac)
    }

    fn length(&self) -> u64 {
        self.cell.data.lock().length
    }

    fn is_closed(&self) -> bool {
        self.cell.data.lock().metadata.is_closed()
    }

    async fn close(&self) -> Result<()> {
        const WHAT: &str = "close";
        let id = self.cell.id;
        let ctx = &self.ctx;
        // Like BookKeeper, the handle stops accepting adds at once and fails the
        // pending ones, then seals the metadata.
        let mut done = Completions::default();
        {
            let mut d = self.cell.data.lock();
            if d.writer.status == WriterStatus::Open {
                d.writer.status = WriterStatus::Closed;
            }
            let cluster = ctx.cluster.name.clone();
            d.fail_pending(&mut done, |entry_id| {
                BkError::new(
                    BkErrorKind::LedgerClosed,
                    format!(
                        "add of entry {entry_id} failed: the handle was closed before it completed"
                    ),
                )
                .with_cluster(cluster.clone())
                .with_ledger(id)
            });
        }
        done.fire();
        ctx.check_client(WHAT, id)?;
        ctx.cluster.gate(OpKind::Close, Some(id)).await?;
        let mut d = self.cell.data.lock();
        if d.writer.sealed_by_writer {
            return Ok(());
        }
        if d.metadata_corrupt && !d.deleted {
            // The seal's compare-and-set finds another version, and the
            // metadata read back does not decode.
            return Err(corrupt_metadata_error(&ctx.cluster.name, id, WHAT));
        }
        if d.deleted {
            return Err(ctx.err(
                BkErrorKind::NoSuchLedgerOnMetadataServer,
                id,
                "close failed: the ledger was deleted before it could be sealed",
            ));
        }
        if !d.metadata.is_closed() {
            d.seal();
            d.writer.sealed_by_writer = true;
            return Ok(());
        }
        if d.metadata.last_entry_id == d.lac && d.metadata.length == d.length {
            return Ok(());
        }
        Err(ctx.err(
            BkErrorKind::LedgerFenced,
            id,
            format!(
                "close failed: a recovery open sealed the ledger at entry {} (length {}) while this writer \
                 confirmed up to {} (length {})",
                d.metadata.last_entry_id, d.metadata.length, d.lac, d.length
            ),
        ))
    }
}

impl WriteHandle for MemoryWriteHandle {
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        self.add(None, data)
    }

    fn add_entry_at(&self, entry_id: EntryId, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        self.add(Some(entry_id), data)
    }
}
