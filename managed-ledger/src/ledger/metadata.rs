//! The managed ledger's metadata: loading (or creating) its
//! `ManagedLedgerInfo`, encoding it, and writing it by compare-and-set
//! ([I3](bkswitch_docs::invariants::I3)); a lost compare-and-set fences this
//! owner.

use bkswitch_metadata_store::{ErrorKind, ExpectedVersion};
use bkswitch_proto::codec::{decode_managed_ledger_info, encode_managed_ledger_info};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedLedgerInfo;

use super::state::MlInner;
use crate::ctx::Ctx;
use crate::error::{FenceCause, ManagedLedgerError, Result};

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
