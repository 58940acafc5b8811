//! The state of an open cursor ([`CursorInner`]): its metadata and version
//! and the cursor ledger it appends to (under the async cursor lock), and its
//! positions (under a sync lock); the checks every operation shares.

use std::sync::{Arc, Weak};

use bkswitch_bk_client::{EntryId, LedgerId, WriteHandle};
use bkswitch_proto::codec::encode_managed_cursor_info;
use bkswitch_proto::ml::ManagedCursorInfo;

use super::positions::CursorPos;
use crate::ctx::Ctx;
use crate::error::{ManagedLedgerError, Result};
use crate::ledger_view::LedgerView;
use crate::position::Position;

/// The cursor ledger positions are appended to.
#[derive(Debug)]
pub(super) struct CursorLedger {
    pub(super) handle: Arc<dyn WriteHandle>,
    pub(super) id: LedgerId,
    pub(super) created_ms: i64,
    pub(super) entries: u64,
}

/// A metadata write of the owner whose outcome is unknown: it failed and
/// reading the metadata back failed too (or showed another writer). Settled
/// before the next metadata write of the cursor
/// ([`CursorInner::settle_unknown_write`]).
#[derive(Debug)]
pub(super) struct Unsettled {
    /// The bytes written.
    pub(super) bytes: Vec<u8>,
    /// The version they were written on.
    pub(super) version: i64,
    /// The metadata they encode.
    pub(super) info: ManagedCursorInfo,
    /// The metadata they were to replace (its cursor ledger is deleted once
    /// a rollover is known to be applied).
    pub(super) previous: ManagedCursorInfo,
}

/// What the cursor lock guards.
#[derive(Debug)]
pub(super) struct CursorMeta {
    pub(super) info: ManagedCursorInfo,
    pub(super) version: i64,
    pub(super) ledger: Option<CursorLedger>,
    pub(super) closed: bool,
    /// The last entry id of a cursor ledger this instance no longer appends
    /// to (sealed when it was recovered, promoted or closed): what the ledger
    /// holds on every cluster that has it, known without reading it.
    pub(super) sealed: Option<(LedgerId, EntryId)>,
    /// A write whose outcome is unknown, settled before the next one.
    pub(super) unsettled: Option<Unsettled>,
}

/// The shared state of a [`ManagedCursor`](super::ManagedCursor).
#[derive(Debug)]
pub(crate) struct CursorInner {
    pub(super) name: String,
    pub(super) path: String,
    pub(super) ctx: Arc<Ctx>,
    pub(super) ml: Weak<dyn LedgerView>,
    pub(super) meta: tokio::sync::Mutex<CursorMeta>,
    pub(super) pos: parking_lot::Mutex<CursorPos>,
}

/// The metadata path of cursor `name` of the managed ledger `ctx` names.
pub(super) fn cursor_path(ctx: &Ctx, name: &str) -> String {
    format!("{}/{name}", ctx.path)
}

/// Encodes the metadata of cursor `name` with the configured compression.
pub(super) fn encode_cursor_info(
    ctx: &Ctx,
    name: &str,
    info: &ManagedCursorInfo,
) -> Result<Vec<u8>> {
    encode_managed_cursor_info(info, ctx.config.cursor_info_compression).map_err(|e| {
        ManagedLedgerError::InvalidArgument {
            name: ctx.name.clone(),
            reason: format!("cannot encode cursor '{name}': {e}"),
        }
    })
}

impl CursorInner {
    /// A cursor whose metadata `info` is at `version`, with no open cursor
    /// ledger yet; `sealed` is the recorded cursor ledger's last entry id when
    /// recovery read it.
    pub(super) fn new(
        ml: Weak<dyn LedgerView>,
        ctx: Arc<Ctx>,
        name: &str,
        (info, version): (ManagedCursorInfo, i64),
        pos: CursorPos,
        sealed: Option<(LedgerId, EntryId)>,
    ) -> CursorInner {
        CursorInner {
            name: name.to_owned(),
            path: cursor_path(&ctx, name),
            ctx,
            ml,
            meta: tokio::sync::Mutex::new(CursorMeta {
                info,
                version,
                ledger: None,
                closed: false,
                sealed,
                unsettled: None,
            }),
            pos: parking_lot::Mutex::new(pos),
        }
    }

    pub(super) fn closed_error(&self) -> ManagedLedgerError {
        ManagedLedgerError::Closed {
            what: format!(
                "cursor '{}' of managed ledger '{}'",
                self.name, self.ctx.name
            ),
        }
    }

    /// The managed ledger, unless it is gone.
    pub(super) fn ml(&self) -> Result<Arc<dyn LedgerView>> {
        self.ml.upgrade().ok_or_else(|| self.closed_error())
    }

    pub(super) fn encode(&self, info: &ManagedCursorInfo) -> Result<Vec<u8>> {
        encode_cursor_info(&self.ctx, &self.name, info)
    }

    pub(super) fn check_open(&self, meta: &CursorMeta) -> Result<()> {
        if meta.closed {
            Err(self.closed_error())
        } else {
            Ok(())
        }
    }

    pub(crate) fn mark_delete_position(&self) -> Position {
        self.pos.lock().mark_delete
    }
}
