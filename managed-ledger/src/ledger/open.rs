//! Opening a managed ledger: load its metadata, recovery-open its last ledger
//! through the S2 resolver (fencing a previous owner,
//! [I15](bkswitch_docs::invariants::I15)), record that ledger's entries and
//! size (or drop it when empty), start a new ledger, and recover every cursor.

use std::sync::Arc;

use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedLedgerInfo;

use super::metadata::load_or_create;
use super::state::{last_confirmed_of, MlInner};
use crate::ctx::Ctx;
use crate::error::{ManagedLedgerError, Result};
use crate::position::Position;

/// Opens the managed ledger `ctx` names (see
/// [`ManagedLedgerFactory::open`](super::ManagedLedgerFactory::open)).
pub(super) async fn open(ctx: Arc<Ctx>) -> Result<Arc<MlInner>> {
    let (info, version) = load_or_create(&ctx).await?;
    let terminated = info.terminated_position.is_some();
    let inner = Arc::new(MlInner::new(ctx, info.clone(), version));
    if !terminated {
        inner.recover_and_start(info, version).await?;
    }
    inner.recover_cursors().await?;
    Ok(inner)
}

impl MlInner {
    /// Recovers the last ledger of `info` (when it was not closed) and records
    /// it together with a new current ledger.
    async fn recover_and_start(&self, mut info: ManagedLedgerInfo, version: i64) -> Result<()> {
        let ctx = &self.ctx;
        let mut w = self.writer.lock().await;
        let now = ctx.now();
        let mut dropped: Option<LedgerInfo> = None;
        if let Some(last) = info.ledger_info.last_mut() {
            if last.entries.is_none() {
                let client = ctx.resolve_ledger_to_open(last).await?;
                let cfg = &ctx.config;
                let h = match client
                    .open_ledger(last.ledger_id, cfg.digest_type, &cfg.password)
                    .await
                {
                    Ok(h) => Some(h),
                    // As Pulsar's ManagedLedgerImpl does when it initializes:
                    // an unclosed last ledger that its cluster does not hold
                    // is dropped from the list, so that the topic loads (see
                    // "A missing last ledger" in the crate documentation).
                    Err(e) if e.is_already_deleted() => {
                        tracing::error!(managed_ledger = %ctx.name, ledger_id = last.ledger_id,
                            cluster = client.cluster_name(), error = %e,
                            "the unclosed last ledger does not exist on its cluster; dropping it \
                             from the managed ledger (entries written to it, if any, are lost)");
                        None
                    }
                    Err(e) => {
                        return Err(ManagedLedgerError::client(
                            format!(
                                "recovering the last ledger {} of managed ledger '{}'",
                                last.ledger_id, ctx.name
                            ),
                            e,
                        ))
                    }
                };
                match h {
                    None => {
                        info.ledger_info.pop();
                    }
                    Some(h) if h.last_add_confirmed() < 0 => {
                        dropped = info.ledger_info.pop();
                    }
                    Some(h) => {
                        last.entries = Some(h.last_add_confirmed() + 1);
                        last.size = Some(i64::try_from(h.length()).unwrap_or(i64::MAX));
                        last.timestamp = Some(now);
                        self.read_handles.lock().insert(last.ledger_id, h);
                    }
                }
            }
        }
        {
            let mut s = self.state.lock();
            s.last_confirmed = last_confirmed_of(&info, None);
        }
        let (current, info, new_version) = self.create_and_record(info, version, now).await?;
        {
            let mut s = self.state.lock();
            if s.last_confirmed.ledger_id < 0
                || !info.ledger_info.iter().any(|l| l.entries.unwrap_or(0) > 0)
            {
                s.last_confirmed = Position::new(current.id, -1);
            }
        }
        self.install(&mut w, current, info, new_version);
        if let Some(li) = dropped {
            if let Err(e) = ctx
                .delete_ledger(&li, "dropping the empty last ledger")
                .await
            {
                tracing::warn!(managed_ledger = %ctx.name, ledger_id = li.ledger_id, error = %e,
                    "empty last ledger could not be deleted");
            }
        }
        Ok(())
    }
}
