//! The managed ledger's metadata: loading (or creating) its
//! `ManagedLedgerInfo`, encoding it, and writing it by compare-and-set
//! ([I3](bkswitch_docs::invariants::I3)); a lost compare-and-set fences this
//! owner.

use bkswitch_metadata_store::{ErrorKind, ExpectedVersion};
use bkswitch_proto::codec::{decode_managed_ledger_info, encode_managed_ledger_info};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedLedgerInfo;

use super::state::{MlInner, Writer};
use crate::ctx::Ctx;
use crate::error::{FenceCause, ManagedLedgerError, Result};
use crate::fence::{fence, Fence};

/// Replaces the `LedgerInfo` of `li`'s ledger in `info` (nothing when absent).
pub(super) fn replace_ledger_info(info: &mut ManagedLedgerInfo, li: LedgerInfo) {
    if let Some(slot) = info
        .ledger_info
        .iter_mut()
        .find(|l| l.ledger_id == li.ledger_id)
    {
        *slot = li;
    }
}

/// Reads the managed ledger's metadata and its version, creating an empty
/// `ManagedLedgerInfo` when there is none.
pub(super) async fn load_or_create(ctx: &Ctx) -> Result<(ManagedLedgerInfo, i64)> {
    for _ in 0..3 {
        let got = ctx.store.get(&ctx.path).await.map_err(|e| {
            ManagedLedgerError::metadata(
                format!("reading the metadata of managed ledger '{}'", ctx.name),
                e,
            )
        })?;
        if let Some(r) = got {
            let info = decode_managed_ledger_info(&r.value).map_err(|e| {
                ManagedLedgerError::corrupt(format!("managed ledger '{}'", ctx.name), &ctx.path, e)
            })?;
            return Ok((info, r.stat.version));
        }
        let info = ManagedLedgerInfo::default();
        let bytes = encode_info(ctx, &info)?;
        match ctx
            .store
            .put(&ctx.path, &bytes, ExpectedVersion::NotExists)
            .await
        {
            Ok(stat) => return Ok((info, stat.version)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(ManagedLedgerError::metadata(
                    format!("creating the metadata of managed ledger '{}'", ctx.name),
                    e,
                ))
            }
        }
    }
    Err(ManagedLedgerError::fenced(
        &ctx.name,
        "its metadata kept changing while it was being created",
    ))
}

/// Whether the encoded `ManagedLedgerInfo` `stored` names ledger `id`; an
/// undecodable value counts as naming it (nothing is deleted on a guess).
pub(super) fn names_ledger(stored: &[u8], id: bkswitch_bk_client::LedgerId) -> bool {
    decode_managed_ledger_info(stored)
        .map(|info| info.ledger_info.iter().any(|l| l.ledger_id == id))
        .unwrap_or(true)
}

/// Encodes `info` with the configured compression.
pub(super) fn encode_info(ctx: &Ctx, info: &ManagedLedgerInfo) -> Result<Vec<u8>> {
    encode_managed_ledger_info(info, ctx.config.ledger_info_compression).map_err(|e| {
        ManagedLedgerError::InvalidArgument {
            name: ctx.name.clone(),
            reason: format!("cannot encode its ManagedLedgerInfo: {e}"),
        }
    })
}

impl MlInner {
    /// Writes `info` with a compare-and-set on `version`; a conflict means
    /// another owner took over (fenced). Returns the new version.
    pub(super) async fn write_info(&self, info: &ManagedLedgerInfo, version: i64) -> Result<i64> {
        let bytes = encode_info(&self.ctx, info)?;
        self.cas(&bytes, version).await
    }

    /// Settles a write whose outcome was unknown (see
    /// [`Unsettled`](super::state::Unsettled)) before the next metadata write,
    /// under the writer lock: reads the metadata back and
    /// - when it holds exactly what was written, adopts it; the new ledger it
    ///   records was closed without entries, and is recorded so by the next
    ///   write (`w.closed_unrecorded`);
    /// - when it is unchanged, the write was not applied: the kept ledger is an
    ///   orphan and is deleted through the S2 resolver;
    /// - otherwise another writer moved on: the next compare-and-set finds
    ///   this owner fenced.
    ///
    /// A failing read leaves it unsettled and fails (retryable): nothing is
    /// written on a guess.
    pub(super) async fn settle_unknown_write(&self, w: &mut Writer) -> Result<()> {
        let Some(u) = self.state.lock().unsettled.take() else {
            return Ok(());
        };
        let ctx = &self.ctx;
        let stored = match ctx.store.get(&ctx.path).await {
            Ok(stored) => stored,
            Err(e) => {
                let id = u.ledger.ledger_id;
                self.state.lock().unsettled = Some(u);
                return Err(ManagedLedgerError::metadata(
                    format!(
                        "reading back the metadata of managed ledger '{}' to learn whether \
                         ledger {id} was recorded (the answer to that write was lost); retry \
                         once the metadata store answers",
                        ctx.name
                    ),
                    e,
                ));
            }
        };
        match stored {
            Some(r) if r.stat.version == u.version + 1 && r.value == u.bytes => {
                let mut li = u.ledger;
                li.entries = Some(0);
                li.size = Some(0);
                li.timestamp = Some(ctx.now());
                tracing::info!(managed_ledger = %ctx.name, ledger_id = li.ledger_id,
                    "the metadata write whose answer was lost was applied; adopting it");
                let mut s = self.state.lock();
                s.info = u.info;
                s.version = r.stat.version;
                w.closed_unrecorded = Some(li);
            }
            Some(r) if r.stat.version == u.version => {
                // Not applied yet: fence it so that it never lands, then
                // delete its ledger.
                match fence(ctx.store.as_ref(), &ctx.path, &r.value, u.version).await {
                    Fence::Fenced(v) => self.state.lock().version = v,
                    // Changed meanwhile: the next compare-and-set tells.
                    Fence::Moved => return Ok(()),
                    Fence::Failed(e) => {
                        let id = u.ledger.ledger_id;
                        self.state.lock().unsettled = Some(u);
                        return Err(ManagedLedgerError::metadata(
                            format!(
                                "fencing the lost metadata write of managed ledger '{}' that \
                                 recorded ledger {id}; retry once the metadata store answers",
                                ctx.name
                            ),
                            e,
                        ));
                    }
                }
                tracing::info!(managed_ledger = %ctx.name, ledger_id = u.ledger.ledger_id,
                    "the metadata write whose answer was lost was not applied and is fenced; \
                     deleting its ledger");
                match ctx.resolve_ledger(&u.ledger) {
                    Ok(client) => ctx.delete_orphan(client.as_ref(), u.ledger.ledger_id).await,
                    Err(e) => tracing::warn!(managed_ledger = %ctx.name,
                        ledger_id = u.ledger.ledger_id, error = %e,
                        "cannot resolve the unrecorded ledger; it is orphaned"),
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// Writes encoded metadata with a compare-and-set on `version`.
    pub(super) async fn cas(&self, bytes: &[u8], version: i64) -> Result<i64> {
        let ctx = &self.ctx;
        match ctx.cas(&ctx.path, bytes, version).await {
            Ok(version) => Ok(version),
            Err(e) if e.is_conflict() => {
                self.mark_fenced("metadata update");
                Err(ManagedLedgerError::fenced_by(
                    &ctx.name,
                    format!("its metadata version moved past {version} ({e})"),
                    FenceCause::Metadata(e),
                ))
            }
            Err(e) => Err(ManagedLedgerError::metadata(
                format!("updating the metadata of managed ledger '{}'", ctx.name),
                e,
            )),
        }
    }
}
