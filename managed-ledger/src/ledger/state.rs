//! The state of an open managed ledger ([`MlInner`]): its status, the writer
//! (current ledger and pending adds), the metadata last written and its
//! version, the read-handle cache and the cursors; and the status checks.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use bkswitch_bk_client::{BkError, EntryId, LedgerId, ReadHandle, WriteHandle};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedLedgerInfo;
use futures::future::{BoxFuture, Shared};

use crate::ctx::Ctx;
use crate::cursor::CursorInner;
use crate::error::{ManagedLedgerError, Result};
use crate::position::Position;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Status {
    Open,
    Fenced,
    Closed,
    Terminated(Position),
    Deleted,
}

pub(super) type AddFuture = Shared<BoxFuture<'static, std::result::Result<EntryId, BkError>>>;

/// The ledger appends go to.
#[derive(Debug)]
pub(super) struct Current {
    pub(super) handle: Arc<dyn WriteHandle>,
    pub(super) id: LedgerId,
    pub(super) created_ms: i64,
    pub(super) entries: u64,
    pub(super) bytes: u64,
    pub(super) last_add: Option<AddFuture>,
    pub(super) broken: Arc<AtomicBool>,
}

/// What the writer lock guards.
#[derive(Debug, Default)]
pub(super) struct Writer {
    pub(super) current: Option<Current>,
    /// Final entries/size of a closed ledger whose recording failed.
    pub(super) closed_unrecorded: Option<LedgerInfo>,
}

/// A metadata write recording a new ledger whose outcome is unknown: it
/// failed, and reading the metadata back failed too or showed the new ledger
/// named (the write applied, or applied and followed by another writer's).
/// The new ledger is kept
/// (closed, without entries) until the next metadata write of this owner
/// settles it ([`MlInner::settle_unknown_write`]).
#[derive(Debug)]
pub(super) struct Unsettled {
    /// The bytes written.
    pub(super) bytes: Vec<u8>,
    /// The version they were written on.
    pub(super) version: i64,
    /// The metadata they encode.
    pub(super) info: ManagedLedgerInfo,
    /// The new ledger's `LedgerInfo` in it.
    pub(super) ledger: LedgerInfo,
}

#[derive(Debug)]
pub(super) struct MlState {
    pub(super) info: ManagedLedgerInfo,
    pub(super) version: i64,
    pub(super) current: Option<(LedgerId, Arc<dyn WriteHandle>)>,
    pub(super) last_confirmed: Position,
    pub(super) status: Status,
    /// A write whose outcome is unknown, settled before the next one.
    pub(super) unsettled: Option<Unsettled>,
}

/// The shared state of a [`ManagedLedger`](super::ManagedLedger).
#[derive(Debug)]
pub(super) struct MlInner {
    pub(super) ctx: Arc<Ctx>,
    pub(super) writer: tokio::sync::Mutex<Writer>,
    pub(super) state: parking_lot::Mutex<MlState>,
    pub(super) read_handles: parking_lot::Mutex<HashMap<LedgerId, Arc<dyn ReadHandle>>>,
    pub(super) cursors: parking_lot::Mutex<BTreeMap<String, Arc<CursorInner>>>,
}

/// The last entry recorded in `info` (the current ledger, or the first one,
/// at entry -1 when none holds entries).
pub(super) fn last_confirmed_of(info: &ManagedLedgerInfo, current: Option<LedgerId>) -> Position {
    for li in info.ledger_info.iter().rev() {
        if let Some(n) = li.entries {
            if n > 0 {
                return Position::new(li.ledger_id, n - 1);
            }
        }
    }
    match current.or_else(|| info.ledger_info.first().map(|l| l.ledger_id)) {
        Some(id) => Position::new(id, -1),
        None => Position::new(-1, -1),
    }
}

impl MlInner {
    /// The state of a managed ledger whose metadata `info` was just loaded at
    /// `version`: open, or terminated when the metadata says so.
    pub(super) fn new(ctx: Arc<Ctx>, info: ManagedLedgerInfo, version: i64) -> MlInner {
        let last_confirmed = last_confirmed_of(&info, None);
        let terminated = info.terminated_position.as_ref().map(Position::from_nested);
        MlInner {
            ctx,
            writer: tokio::sync::Mutex::new(Writer::default()),
            state: parking_lot::Mutex::new(MlState {
                info,
                version,
                current: None,
                last_confirmed,
                status: match terminated {
                    Some(p) => Status::Terminated(p),
                    None => Status::Open,
                },
                unsettled: None,
            }),
            read_handles: parking_lot::Mutex::new(HashMap::new()),
            cursors: parking_lot::Mutex::new(BTreeMap::new()),
        }
    }

    pub(super) fn closed_error(&self) -> ManagedLedgerError {
        ManagedLedgerError::Closed {
            what: format!("managed ledger '{}'", self.ctx.name),
        }
    }

    pub(super) fn fenced_error(&self, reason: &str) -> ManagedLedgerError {
        ManagedLedgerError::fenced(&self.ctx.name, reason)
    }

    pub(super) fn mark_fenced(&self, during: &str) {
        let mut s = self.state.lock();
        if s.status == Status::Open {
            s.status = Status::Fenced;
            tracing::warn!(managed_ledger = %self.ctx.name, during, "fenced by another owner");
        }
    }

    pub(super) fn check_writable(&self) -> Result<()> {
        match self.state.lock().status {
            Status::Open => Ok(()),
            Status::Fenced => Err(self.fenced_error("an earlier operation found it fenced")),
            Status::Terminated(p) => Err(ManagedLedgerError::Terminated {
                name: self.ctx.name.clone(),
                position: p,
            }),
            Status::Closed | Status::Deleted => Err(self.closed_error()),
        }
    }

    /// Trimming is allowed while open or terminated.
    pub(super) fn check_trimmable(&self) -> Result<()> {
        match self.state.lock().status {
            Status::Open | Status::Terminated(_) => Ok(()),
            Status::Fenced => Err(self.fenced_error("trim refused")),
            Status::Closed | Status::Deleted => Err(self.closed_error()),
        }
    }

    pub(super) fn check_open_for_cursor(&self) -> Result<()> {
        match self.state.lock().status {
            Status::Closed | Status::Deleted => Err(self.closed_error()),
            _ => Ok(()),
        }
    }
}
