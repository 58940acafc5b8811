//! Persisting a cursor: positions appended to its cursor ledger, rollover onto
//! a new cursor ledger created through S1 and recorded with its S4 properties
//! in one compare-and-set ([I1](bkswitch_docs::invariants::I1)), the
//! compare-and-set itself, and closing and deleting the cursor.

use bkswitch_metadata_store::{ErrorKind, ExpectedVersion};
use bkswitch_mledger_spi::LedgerPurpose;
use bkswitch_proto::codec::decode_managed_cursor_info;
use bkswitch_proto::ml::{ManagedCursorInfo, PositionInfo};
use bkswitch_proto::{Message, Stamped};

use super::state::{CursorInner, CursorLedger, CursorMeta, Unsettled};
use crate::ctx::Unrecorded;
use crate::error::{FenceCause, ManagedLedgerError, ManagedLedgerErrorKind, Result};
use crate::fence::{fence, Fence};
use crate::props::merge_properties;

impl CursorInner {
    /// Persists `pi`: appended to the cursor ledger, or written to a new cursor
    /// ledger (rollover) recorded in one CAS with its S4 properties.
    pub(super) async fn persist(&self, meta: &mut CursorMeta, pi: PositionInfo) -> Result<()> {
        let cfg = &self.ctx.config;
        if let Some(l) = meta.ledger.as_mut() {
            let age = self.ctx.now().saturating_sub(l.created_ms).max(0) as u128;
            // A full or old cursor ledger is kept while the metadata session
            // is lost (the rollover is deferred, as Pulsar's
            // `shouldCloseLedger` does); a failed one is not.
            if (l.entries < cfg.cursor_max_entries_per_ledger
                && age < cfg.cursor_ledger_rollover_time.as_millis())
                || !self.ctx.rollover_may_run()
            {
                match l.handle.add_entry(pi.encode_to_vec().into()).await {
                    Ok(_) => {
                        l.entries += 1;
                        return Ok(());
                    }
                    Err(e) => {
                        tracing::warn!(managed_ledger = %self.ctx.name, cursor = %self.name,
                            ledger_id = l.id, error = %e,
                            "cursor ledger append failed; switching to a new cursor ledger");
                    }
                }
            }
        }
        self.roll(meta, pi).await
    }

    /// Rolls onto a new cursor ledger now (see
    /// [`ManagedCursor::roll_cursor_ledger`](super::ManagedCursor::roll_cursor_ledger)).
    pub(super) async fn force_roll(&self) -> Result<()> {
        let mut meta = self.meta.lock().await;
        self.check_open(&meta)?;
        let pi = self.pos.lock().position_info();
        self.roll(&mut meta, pi).await
    }

    /// Writes `pi` as entry 0 of a new cursor ledger, records that ledger in
    /// one compare-and-set, then deletes the previous cursor ledger through
    /// the cursor resolver ([I15](bkswitch_docs::invariants::I15)).
    pub(super) async fn roll(&self, meta: &mut CursorMeta, pi: PositionInfo) -> Result<()> {
        self.settle_unknown_write(meta).await?;
        let ctx = &self.ctx;
        let what = || format!("cursor '{}' of managed ledger '{}'", self.name, ctx.name);
        let (client, handle) = ctx
            .create_ledger(&ctx.cursor_ledger_config(&self.name), &what())
            .await?;
        let id = handle.id();
        let props = ctx
            .properties_or_discard(
                LedgerPurpose::Cursor { cursor: &self.name },
                handle.as_ref(),
                client.as_ref(),
            )
            .await?;
        let build = |base: &ManagedCursorInfo| {
            let mut info = base.clone();
            info.cursors_ledger_id = id;
            info.mark_delete_ledger_id = Some(pi.ledger_id);
            info.mark_delete_entry_id = Some(pi.entry_id);
            info.individual_deleted_messages = pi.individual_deleted_messages.clone();
            merge_properties(&mut info.cursor_properties, props.clone());
            info
        };
        let mut info = build(&meta.info);
        let result = match handle.add_entry(pi.encode_to_vec().into()).await {
            Err(e) => Err(ManagedLedgerError::client(
                format!("writing the position of {} to cursor ledger {id}", what()),
                e,
            )),
            Ok(_) => match self.encode(&info) {
                Ok(bytes) => match self.cas(&bytes, meta.version, true).await {
                    // A coordinator promoted this cursor's ledger (changing
                    // only its stamp) while no node owned the topic, just
                    // before this owner loaded it: adopt that write and go on
                    // rather than giving the topic up.
                    Err(e)
                        if e.kind() == ManagedLedgerErrorKind::Fenced
                            && self.adopt_stamp_only_change(meta).await =>
                    {
                        info = build(&meta.info);
                        match self.encode(&info) {
                            Ok(bytes) => self.cas(&bytes, meta.version, true).await,
                            Err(e) => Err(e),
                        }
                    }
                    other => other,
                },
                Err(e) => Err(e),
            },
        };
        let new_version = match result {
            Ok(v) => v,
            Err(e) => {
                let kept = ctx
                    .discard_unless_recorded(
                        &self.path,
                        meta.version,
                        handle.as_ref(),
                        client.as_ref(),
                        || ctx.resolve_cursor(&self.name, &info),
                        |stored| {
                            decode_managed_cursor_info(stored)
                                .map_or(true, |stored| stored.cursors_ledger_id == id)
                        },
                    )
                    .await;
                if let Unrecorded::Fenced(v) = kept {
                    meta.version = v;
                }
                if matches!(kept, Unrecorded::Recorded | Unrecorded::Unknown) {
                    if let Ok(bytes) = self.encode(&info) {
                        self.leave_unsettled(meta, bytes, info).await;
                    }
                }
                return Err(e);
            }
        };
        let old_info = std::mem::replace(&mut meta.info, info);
        meta.version = new_version;
        let old = meta.ledger.replace(CursorLedger {
            handle,
            id,
            created_ms: ctx.now(),
            entries: 1,
        });
        self.pos.lock().cursors_ledger_id = id;
        if let Some(old) = old {
            let _ = old.handle.close().await;
        }
        if old_info.cursors_ledger_id >= 0 {
            if let Err(e) = ctx.delete_cursor_ledger(&self.name, &old_info).await {
                tracing::warn!(managed_ledger = %ctx.name, cursor = %self.name,
                    ledger_id = old_info.cursors_ledger_id, error = %e,
                    why = "after cursor-ledger rollover",
                    "cursor ledger could not be deleted; it is orphaned");
            }
        }
        tracing::info!(managed_ledger = %ctx.name, cursor = %self.name,
            old_ledger = old_info.cursors_ledger_id, new_ledger = id, "cursor ledger rolled over");
        Ok(())
    }

    /// After a lost compare-and-set: when the stored metadata differs from
    /// ours only in the cluster stamp (a promotion written by a coordinator),
    /// takes the stored metadata and version as ours and answers true.
    async fn adopt_stamp_only_change(&self, meta: &mut CursorMeta) -> bool {
        let Ok(Some(r)) = self.ctx.store.get(&self.path).await else {
            return false;
        };
        let Ok(stored) = decode_managed_cursor_info(&r.value) else {
            return false;
        };
        let stamp_changed = stored.cluster_stamp().ok() != meta.info.cluster_stamp().ok();
        if !stamp_changed
            || r.stat.version == meta.version
            || without_stamp(&stored) != without_stamp(&meta.info)
        {
            return false;
        }
        tracing::info!(managed_ledger = %self.ctx.name, cursor = %self.name,
            stamp = ?stored.cluster_stamp().ok().flatten(),
            "cursor metadata was promoted concurrently; adopting the new stamp");
        meta.info = stored;
        meta.version = r.stat.version;
        true
    }

    /// Records that the write of `bytes` (`info`) on `meta.version` has an
    /// unknown outcome, and stops appending to the current cursor ledger: the
    /// stored metadata may already name another ledger or another cluster for
    /// it, so a position appended there could be lost on recovery.
    pub(super) async fn leave_unsettled(
        &self,
        meta: &mut CursorMeta,
        bytes: Vec<u8>,
        info: ManagedCursorInfo,
    ) {
        meta.unsettled = Some(Unsettled {
            bytes,
            version: meta.version,
            info,
            previous: meta.info.clone(),
        });
        self.seal_current(meta).await;
    }

    /// Closes the cursor ledger this instance appends to, remembering what it
    /// holds (`meta.sealed`); the next position rolls onto a new one.
    pub(super) async fn seal_current(&self, meta: &mut CursorMeta) {
        if let Some(l) = meta.ledger.take() {
            let _ = l.handle.close().await;
            meta.sealed = Some((l.id, l.handle.last_add_confirmed()));
        }
    }

    /// Settles a write whose outcome was unknown (see [`Unsettled`]) before
    /// the next metadata write of the cursor, under the cursor lock. Reads the
    /// metadata back and
    /// - when it holds what was written (possibly with a stamp a coordinator
    ///   changed since), adopts it; after a rollover the previous cursor
    ///   ledger is deleted, as the rollover would have done;
    /// - when it does not, keeps the metadata it holds (adopting a stamp-only
    ///   change) and deletes the new cursor ledger the write was to record;
    /// - when another writer changed more, leaves it to the next
    ///   compare-and-set, which finds this owner fenced.
    ///
    /// A failing read leaves it unsettled and fails (retryable): nothing is
    /// written on a guess.
    pub(super) async fn settle_unknown_write(&self, meta: &mut CursorMeta) -> Result<()> {
        let Some(u) = meta.unsettled.take() else {
            return Ok(());
        };
        let ctx = &self.ctx;
        let stored = match ctx.store.get(&self.path).await {
            Ok(stored) => stored,
            Err(e) => {
                meta.unsettled = Some(u);
                return Err(ManagedLedgerError::metadata(
                    format!(
                        "reading back cursor '{}' of managed ledger '{}' to learn whether its \
                         last metadata write was applied (its answer was lost); retry once the \
                         metadata store answers",
                        self.name, ctx.name
                    ),
                    e,
                ));
            }
        };
        let Some(r) = stored else {
            return Ok(());
        };
        let Ok(stored) = decode_managed_cursor_info(&r.value) else {
            return Ok(());
        };
        let applied = if r.stat.version == u.version + 1 && r.value == u.bytes {
            Some(true)
        } else if r.stat.version == u.version {
            // Not applied yet: fence it so that it never lands.
            match fence(ctx.store.as_ref(), &self.path, &r.value, u.version).await {
                Fence::Fenced(v) => {
                    meta.info = stored;
                    meta.version = v;
                    self.pos.lock().cursors_ledger_id = meta.info.cursors_ledger_id;
                    if u.info.cursors_ledger_id != u.previous.cursors_ledger_id {
                        let id = u.info.cursors_ledger_id;
                        match ctx.resolve_cursor(&self.name, &u.info) {
                            Ok(client) => ctx.delete_orphan(client.as_ref(), id).await,
                            Err(e) => tracing::warn!(managed_ledger = %ctx.name,
                                cursor = %self.name, ledger_id = id, error = %e,
                                "cannot resolve the unrecorded cursor ledger; it is orphaned"),
                        }
                    }
                    return Ok(());
                }
                Fence::Moved => return Ok(()),
                Fence::Failed(e) => {
                    meta.unsettled = Some(u);
                    return Err(ManagedLedgerError::metadata(
                        format!(
                            "fencing the lost metadata write of cursor '{}' of managed ledger \
                             '{}'; retry once the metadata store answers",
                            self.name, ctx.name
                        ),
                        e,
                    ));
                }
            }
        } else if without_stamp(&stored) == without_stamp(&u.info) {
            Some(true)
        } else if without_stamp(&stored) == without_stamp(&meta.info) {
            Some(false)
        } else {
            None
        };
        let Some(applied) = applied else {
            return Ok(());
        };
        tracing::info!(managed_ledger = %ctx.name, cursor = %self.name, applied,
            version = r.stat.version, "settled a cursor metadata write whose answer was lost");
        let rolled = u.info.cursors_ledger_id != u.previous.cursors_ledger_id;
        meta.info = stored;
        meta.version = r.stat.version;
        self.pos.lock().cursors_ledger_id = meta.info.cursors_ledger_id;
        if applied && rolled && u.previous.cursors_ledger_id >= 0 {
            if let Err(e) = ctx.delete_cursor_ledger(&self.name, &u.previous).await {
                tracing::warn!(managed_ledger = %ctx.name, cursor = %self.name,
                    ledger_id = u.previous.cursors_ledger_id, error = %e,
                    "cursor ledger could not be deleted; it is orphaned");
            }
        } else if !applied && rolled {
            let id = u.info.cursors_ledger_id;
            match ctx.resolve_cursor(&self.name, &u.info) {
                Ok(client) => ctx.delete_orphan(client.as_ref(), id).await,
                Err(e) => tracing::warn!(managed_ledger = %ctx.name, cursor = %self.name,
                    ledger_id = id, error = %e,
                    "cannot resolve the unrecorded cursor ledger; it is orphaned"),
            }
        }
        Ok(())
    }

    /// Writes encoded cursor metadata with a compare-and-set on `version`
    /// ([I3](bkswitch_docs::invariants::I3)). A conflict is
    /// [`ManagedLedgerError::Fenced`] for the owner's own writes
    /// (`fence_on_conflict`), [`ManagedLedgerError::MetadataConflict`]
    /// otherwise.
    pub(super) async fn cas(
        &self,
        bytes: &[u8],
        version: i64,
        fence_on_conflict: bool,
    ) -> Result<i64> {
        let ctx = &self.ctx;
        match ctx.cas(&self.path, bytes, version).await {
            Ok(version) => Ok(version),
            Err(e) if e.is_conflict() => {
                if fence_on_conflict {
                    tracing::warn!(managed_ledger = %ctx.name, cursor = %self.name,
                        "cursor metadata changed under this owner: fenced");
                    Err(ManagedLedgerError::fenced_by(
                        &ctx.name,
                        format!(
                            "the metadata of cursor '{}' moved past version {version} ({e})",
                            self.name
                        ),
                        FenceCause::Metadata(e),
                    ))
                } else {
                    Err(ManagedLedgerError::MetadataConflict {
                        what: format!("cursor '{}' of managed ledger '{}'", self.name, ctx.name),
                        path: self.path.clone(),
                        source: e,
                    })
                }
            }
            Err(e) => Err(ManagedLedgerError::metadata(
                format!(
                    "updating cursor '{}' of managed ledger '{}'",
                    self.name, ctx.name
                ),
                e,
            )),
        }
    }

    /// Closes the cursor's ledger handle; the cursor stays recorded.
    pub(crate) async fn close(&self) {
        let mut meta = self.meta.lock().await;
        self.seal_current(&mut meta).await;
        meta.closed = true;
    }

    /// Deletes the cursor ledger (through the cursor resolver) and the
    /// cursor's metadata.
    pub(crate) async fn delete(&self) -> Result<()> {
        let mut meta = self.meta.lock().await;
        if let Some(l) = meta.ledger.take() {
            let _ = l.handle.close().await;
        }
        if meta.info.cursors_ledger_id >= 0 {
            self.ctx
                .delete_cursor_ledger(&self.name, &meta.info)
                .await?;
        }
        match self
            .ctx
            .store
            .delete(&self.path, ExpectedVersion::Exactly(meta.version))
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) => {
                return Err(ManagedLedgerError::metadata(
                    format!(
                        "deleting cursor '{}' of managed ledger '{}'",
                        self.name, self.ctx.name
                    ),
                    e,
                ))
            }
        }
        meta.closed = true;
        tracing::info!(managed_ledger = %self.ctx.name, cursor = %self.name, "cursor deleted");
        Ok(())
    }
}

/// `info` without its cluster stamp: two cursor metadata values that differ
/// only in the stamp are equal so (a stamp-only change is a coordinator's).
fn without_stamp(info: &ManagedCursorInfo) -> ManagedCursorInfo {
    let mut i = info.clone();
    i.cursor_properties
        .retain(|p| p.name != bkswitch_proto::ATTR_KEY);
    i
}
