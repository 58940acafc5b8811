//! A cursor's `cursorProperties`: the user's properties, the update primitive
//! that changes nothing else ([I9](bkswitch_docs::invariants::I9),
//! [I13](bkswitch_docs::invariants::I13)), and the owner side of a cursor
//! PROMOTE built on it.

use bkswitch_bk_client::{EntryId, LedgerId};
use bkswitch_proto::attribution::is_reserved_key;
use bkswitch_proto::ml::{ManagedCursorInfo, StringProperty};
use bkswitch_proto::{Stamped, RESERVED_PREFIX};

use super::state::{CursorInner, CursorMeta};
use crate::error::{ManagedLedgerError, ManagedLedgerErrorKind, Result};
use crate::props::merge_properties;

/// What [`ManagedCursor::promote_cursor_ledger`](super::ManagedCursor::promote_cursor_ledger) did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CursorPromotion {
    /// The cursor ledger was already stamped with the target cluster.
    AlreadyOnTarget,
    /// The stamp now names the target cluster; nothing else changed.
    Promoted {
        /// The cursor metadata version written.
        version: i64,
    },
    /// The cursor had advanced past the copy and rolled over onto a new ledger
    /// on the target cluster.
    RolledOver {
        /// The new cursor ledger.
        new_ledger_id: LedgerId,
    },
}

impl CursorInner {
    /// Refuses when the recorded cursor ledger is not `expected`.
    fn expect_cursor_ledger(&self, meta: &CursorMeta, expected: LedgerId) -> Result<()> {
        if meta.info.cursors_ledger_id != expected {
            return Err(ManagedLedgerError::CursorRolledOver {
                name: self.ctx.name.clone(),
                cursor: self.name.clone(),
                expected,
                actual: meta.info.cursors_ledger_id,
            });
        }
        Ok(())
    }

    /// Changes `cursorProperties` only (see
    /// [`ManagedCursor::update_cursor_properties`](super::ManagedCursor::update_cursor_properties)).
    pub(super) async fn update_properties(
        &self,
        expected: LedgerId,
        f: impl FnOnce(&mut Vec<StringProperty>),
    ) -> Result<(ManagedCursorInfo, i64)> {
        let mut meta = self.meta.lock().await;
        self.check_open(&meta)?;
        self.settle_unknown_write(&mut meta).await?;
        self.expect_cursor_ledger(&meta, expected)?;
        let mut info = meta.info.clone();
        f(&mut info.cursor_properties);
        let version = self.write_properties(&mut meta, info).await?;
        Ok((meta.info.clone(), version))
    }

    /// Writes `info`, which changes only `cursorProperties`, with one
    /// compare-and-set. When the outcome is unknown (the answer was lost and
    /// reading back failed) the write is left to be settled before the next
    /// one and the cursor stops appending to its ledger, whose stamp may have
    /// changed.
    async fn write_properties(
        &self,
        meta: &mut CursorMeta,
        info: ManagedCursorInfo,
    ) -> Result<i64> {
        let bytes = self.encode(&info)?;
        match self.cas(&bytes, meta.version, false).await {
            Ok(version) => {
                meta.info = info;
                meta.version = version;
                Ok(version)
            }
            Err(e) if e.kind() == ManagedLedgerErrorKind::MetadataConflict => Err(e),
            Err(e) => {
                self.leave_unsettled(meta, bytes, info).await;
                Err(e)
            }
        }
    }

    /// The user-visible cursor properties (reserved `_pulsar.` keys excluded).
    pub(super) async fn user_properties(&self) -> Vec<(String, String)> {
        let meta = self.meta.lock().await;
        meta.info
            .cursor_properties
            .iter()
            .filter(|p| !is_reserved_key(&p.name))
            .map(|p| (p.name.clone(), p.value.clone()))
            .collect()
    }

    /// Sets user cursor properties (see
    /// [`ManagedCursor::set_cursor_properties`](super::ManagedCursor::set_cursor_properties)).
    pub(super) async fn set_user_properties(&self, props: &[(String, String)]) -> Result<()> {
        if let Some((k, _)) = props.iter().find(|(k, _)| is_reserved_key(k)) {
            return Err(ManagedLedgerError::InvalidArgument {
                name: self.ctx.name.clone(),
                reason: format!(
                    "cursor property key '{k}' uses the reserved prefix '{RESERVED_PREFIX}'; \
                     pick another key"
                ),
            });
        }
        let expected = self.meta.lock().await.info.cursors_ledger_id;
        let props = props.to_vec();
        self.update_properties(expected, move |list| merge_properties(list, props))
            .await
            .map(|_| ())
    }

    /// Promotes the cursor ledger (see
    /// [`ManagedCursor::promote_cursor_ledger`](super::ManagedCursor::promote_cursor_ledger)).
    pub(super) async fn promote(
        &self,
        expected_cursors_ledger_id: LedgerId,
        copied_last_entry_id: EntryId,
        target_cluster: &str,
    ) -> Result<CursorPromotion> {
        let mut meta = self.meta.lock().await;
        self.settle_unknown_write(&mut meta).await?;
        // A closed cursor (its ledger sealed, the cursor still recorded) can
        // still be promoted when the copy is exact: the flip is one CAS on its
        // metadata and writes no ledger. Refusing it would stall PROMOTE for
        // as long as the cursor stays closed. Only the rollover path, which
        // would write a new cursor ledger, needs an open cursor.
        self.expect_cursor_ledger(&meta, expected_cursors_ledger_id)?;
        let corrupt = |e: bkswitch_proto::StampError| ManagedLedgerError::CorruptMetadata {
            what: format!(
                "cursor '{}' of managed ledger '{}'",
                self.name, self.ctx.name
            ),
            path: self.path.clone(),
            reason: e.to_string(),
        };
        if meta.info.cluster_stamp().map_err(corrupt)? == Some(target_cluster) {
            return Ok(CursorPromotion::AlreadyOnTarget);
        }
        let id = meta.info.cursors_ledger_id;
        // What the recorded ledger holds: from the handle this cursor appends
        // to, or from when this instance sealed it (at recovery, or when it
        // promoted or closed it: a ledger nobody appends to any more, whose
        // copies hold the same). Only a ledger this instance never saw is
        // read, on the cluster its stamp names. So the rollback of a promoted
        // cursor is a metadata-only flip: it never needs the target cluster,
        // which may be dead.
        let current_lac = match meta.ledger.as_ref().filter(|l| l.id == id) {
            Some(l) => l.handle.last_add_confirmed(),
            None if id < 0 => -1,
            None if meta.sealed.is_some_and(|(sealed, _)| sealed == id) => {
                meta.sealed.map_or(-1, |(_, lac)| lac)
            }
            None => {
                let client = self.ctx.resolve_cursor(&self.name, &meta.info)?;
                let cfg = &self.ctx.config;
                let h = client
                    .open_ledger_no_recovery(id, cfg.digest_type, &cfg.password)
                    .await
                    .map_err(|e| {
                        ManagedLedgerError::client(
                            format!(
                                "reading cursor ledger {id} of cursor '{}' of managed ledger '{}' \
                                 to promote it",
                                self.name, self.ctx.name
                            ),
                            e,
                        )
                    })?;
                let lac = h.last_add_confirmed();
                let _ = h.close().await;
                lac
            }
        };
        if id >= 0 && current_lac == copied_last_entry_id {
            let mut info = meta.info.clone();
            info.set_cluster_stamp(target_cluster).map_err(corrupt)?;
            let version = self.write_properties(&mut meta, info).await?;
            self.seal_current(&mut meta).await;
            tracing::info!(managed_ledger = %self.ctx.name, cursor = %self.name,
                ledger_id = id, cluster = target_cluster, "cursor ledger promoted");
            return Ok(CursorPromotion::Promoted { version });
        }
        self.check_open(&meta)?;
        let active = self.ctx.creation_client();
        if active.cluster_name() != target_cluster {
            return Err(ManagedLedgerError::NotOnActiveCluster {
                name: self.ctx.name.clone(),
                cursor: self.name.clone(),
                target: target_cluster.to_owned(),
                active: active.cluster_name().to_owned(),
            });
        }
        let pi = self.pos.lock().position_info();
        self.roll(&mut meta, pi).await?;
        let new_ledger_id = meta.info.cursors_ledger_id;
        tracing::info!(managed_ledger = %self.ctx.name, cursor = %self.name,
            old_ledger = id, new_ledger = new_ledger_id, copied_last_entry_id, current_lac,
            cluster = target_cluster, "cursor moved by rollover: it advanced past the copy");
        Ok(CursorPromotion::RolledOver { new_ledger_id })
    }
}
