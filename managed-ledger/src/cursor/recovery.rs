//! Creating a cursor and recovering one: from its metadata and the last
//! position in its cursor ledger, opened with recovery through the cursor
//! resolver ([I15](bkswitch_docs::invariants::I15)).

use std::sync::{Arc, Weak};

use bkswitch_metadata_store::{ErrorKind, ExpectedVersion};
use bkswitch_proto::codec::decode_managed_cursor_info;
use bkswitch_proto::ml::{ManagedCursorInfo, PositionInfo};
use bkswitch_proto::Message;

use super::positions::{ranges_of, CursorPos};
use super::state::{cursor_path, encode_cursor_info, CursorInner};
use crate::ctx::Ctx;
use crate::error::{ManagedLedgerError, Result};
use crate::ledger_view::LedgerView;
use crate::position::Position;

impl CursorInner {
    /// Creates cursor `name` at `mark_delete` (its metadata node, no cursor
    /// ledger yet), or recovers it when its node already exists.
    pub(crate) async fn create(
        ml: Weak<dyn LedgerView>,
        ctx: Arc<Ctx>,
        name: &str,
        mark_delete: Position,
    ) -> Result<Arc<CursorInner>> {
        let path = cursor_path(&ctx, name);
        let info = ManagedCursorInfo {
            cursors_ledger_id: -1,
            mark_delete_ledger_id: Some(mark_delete.ledger_id),
            mark_delete_entry_id: Some(mark_delete.entry_id),
            ..Default::default()
        };
        let bytes = encode_cursor_info(&ctx, name, &info)?;
        match ctx
            .store
            .put(&path, &bytes, ExpectedVersion::NotExists)
            .await
        {
            Ok(stat) => {
                let mut pos = CursorPos::new(mark_delete, Vec::new(), -1);
                if let Some(ml) = ml.upgrade() {
                    pos.read = ml.next_position(mark_delete);
                }
                let inner = Arc::new(CursorInner::new(
                    ml,
                    ctx.clone(),
                    name,
                    (info, stat.version),
                    pos,
                    None,
                ));
                tracing::info!(managed_ledger = %ctx.name, cursor = name, mark_delete = %mark_delete, "cursor created");
                Ok(inner)
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                CursorInner::recover(ml, ctx.clone(), name)
                    .await?
                    .ok_or_else(|| ManagedLedgerError::MetadataConflict {
                        what: format!("cursor '{name}' of managed ledger '{}'", ctx.name),
                        path: path.clone(),
                        source: e,
                    })
            }
            Err(e) => Err(ManagedLedgerError::metadata(
                format!("creating cursor '{name}' of managed ledger '{}'", ctx.name),
                e,
            )),
        }
    }

    /// Recovers a cursor from its metadata and its cursor ledger's last entry
    /// (opened with recovery through the cursor resolver,
    /// [I15](bkswitch_docs::invariants::I15)). `None` when the
    /// node does not exist.
    pub(crate) async fn recover(
        ml: Weak<dyn LedgerView>,
        ctx: Arc<Ctx>,
        name: &str,
    ) -> Result<Option<Arc<CursorInner>>> {
        let path = cursor_path(&ctx, name);
        let Some(r) = ctx.store.get(&path).await.map_err(|e| {
            ManagedLedgerError::metadata(
                format!("reading cursor '{name}' of managed ledger '{}'", ctx.name),
                e,
            )
        })?
        else {
            return Ok(None);
        };
        let info = decode_managed_cursor_info(&r.value).map_err(|e| {
            ManagedLedgerError::corrupt(
                format!("cursor '{name}' of managed ledger '{}'", ctx.name),
                &path,
                e,
            )
        })?;
        let snapshot = (
            Position::new(
                info.mark_delete_ledger_id.unwrap_or(-1),
                info.mark_delete_entry_id.unwrap_or(-1),
            ),
            ranges_of(&info.individual_deleted_messages),
        );
        // The recorded cursor ledger's last entry id, as the recovery open
        // sealed it: a promotion or rollback decision needs no read later.
        let mut sealed = None;
        let (mark_delete, ranges) = if info.cursors_ledger_id < 0 {
            snapshot
        } else {
            let client = ctx.resolve_cursor(name, &info)?;
            let cfg = &ctx.config;
            match client
                .open_ledger(info.cursors_ledger_id, cfg.digest_type, &cfg.password)
                .await
            {
                Ok(h) => {
                    let lac = h.last_add_confirmed();
                    sealed = Some((info.cursors_ledger_id, lac));
                    if lac < 0 {
                        snapshot
                    } else {
                        let entries = h.read_entries(lac, lac).await.map_err(|e| {
                            ManagedLedgerError::client(
                                format!(
                                    "reading the last position of cursor '{name}' of managed \
                                     ledger '{}' from cursor ledger {}",
                                    ctx.name, info.cursors_ledger_id
                                ),
                                e,
                            )
                        })?;
                        let data = entries
                            .into_iter()
                            .next()
                            .map(|e| e.data)
                            .unwrap_or_default();
                        let pi = PositionInfo::decode(data).map_err(|e| {
                            ManagedLedgerError::CorruptMetadata {
                                what: format!(
                                    "cursor ledger {} of cursor '{name}' of managed ledger '{}'",
                                    info.cursors_ledger_id, ctx.name
                                ),
                                path: path.clone(),
                                reason: format!("entry {lac} is not a PositionInfo: {e}"),
                            }
                        })?;
                        let _ = h.close().await;
                        (
                            Position::new(pi.ledger_id, pi.entry_id),
                            ranges_of(&pi.individual_deleted_messages),
                        )
                    }
                }
                Err(e) if e.is_already_deleted() => {
                    tracing::warn!(managed_ledger = %ctx.name, cursor = name,
                        ledger_id = info.cursors_ledger_id, error = %e,
                        "cursor ledger missing; recovering from the metadata snapshot");
                    snapshot
                }
                Err(e) => {
                    return Err(ManagedLedgerError::client(
                        format!(
                            "recovering cursor '{name}' of managed ledger '{}' from cursor \
                             ledger {}",
                            ctx.name, info.cursors_ledger_id
                        ),
                        e,
                    ))
                }
            }
        };
        let mut pos = CursorPos::new(mark_delete, ranges, info.cursors_ledger_id);
        if let Some(ml) = ml.upgrade() {
            pos.settle(ml.as_ref());
        }
        let inner = Arc::new(CursorInner::new(
            ml,
            ctx.clone(),
            name,
            (info, r.stat.version),
            pos,
            sealed,
        ));
        tracing::info!(managed_ledger = %ctx.name, cursor = name, mark_delete = %mark_delete, "cursor recovered");
        Ok(Some(inner))
    }
}
