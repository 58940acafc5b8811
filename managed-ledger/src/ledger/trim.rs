//! Trim: deleting the ledgers every cursor has consumed that retention no
//! longer keeps. The metadata is updated first (one compare-and-set), then each
//! ledger is deleted through the S2 resolver
//! ([I15](bkswitch_docs::invariants::I15)).

use bkswitch_bk_client::LedgerId;

use super::state::MlInner;
use crate::error::Result;

impl MlInner {
    /// Trims consumed ledgers (see
    /// [`ManagedLedger::trim_consumed_ledgers`](super::ManagedLedger::trim_consumed_ledgers)).
    pub(super) async fn trim_consumed_ledgers(&self) -> Result<Vec<LedgerId>> {
        let mut w = self.writer.lock().await;
        self.check_trimmable()?;
        self.ctx.check_session("trimming consumed ledgers", true)?;
        self.settle_unknown_write(&mut w).await?;
        let slowest = self.slowest_mark_delete();
        let ctx = &self.ctx;
        let now = ctx.now();
        let (info, version, current) = {
            let s = self.state.lock();
            (
                s.info.clone(),
                s.version,
                s.current.as_ref().map(|(id, _)| *id),
            )
        };
        let mut remaining: u64 = info
            .ledger_info
            .iter()
            .map(|l| l.size.unwrap_or(0).max(0) as u64)
            .sum();
        let rt = ctx.config.retention_time;
        let rs = ctx.config.retention_size_bytes;
        let mut doomed = Vec::new();
        for li in &info.ledger_info {
            if Some(li.ledger_id) == current || li.entries.is_none() {
                break;
            }
            let entries = li.entries.unwrap_or(0);
            let consumed = li.ledger_id < slowest.ledger_id
                || (li.ledger_id == slowest.ledger_id && slowest.entry_id >= entries - 1);
            if !consumed {
                break;
            }
            let expired = match rt {
                None => rs.is_none(),
                Some(t) => {
                    let ts = li.timestamp.unwrap_or(0);
                    ts > 0 && now.saturating_sub(ts) > t.as_millis() as i64
                }
            };
            let over_size = match rs {
                None => rt.is_none(),
                Some(limit) => remaining > limit,
            };
            if !(expired || over_size) {
                break;
            }
            remaining = remaining.saturating_sub(li.size.unwrap_or(0).max(0) as u64);
            doomed.push(li.clone());
        }
        if doomed.is_empty() {
            return Ok(Vec::new());
        }
        let mut new_info = info;
        new_info
            .ledger_info
            .retain(|l| !doomed.iter().any(|d| d.ledger_id == l.ledger_id));
        let new_version = self.write_info(&new_info, version).await?;
        {
            let mut s = self.state.lock();
            s.info = new_info;
            s.version = new_version;
        }
        let mut ids = Vec::with_capacity(doomed.len());
        for li in &doomed {
            if let Some(h) = self.read_handles.lock().remove(&li.ledger_id) {
                drop(h);
            }
            if let Err(e) = ctx.delete_ledger(li, "trim").await {
                tracing::warn!(managed_ledger = %ctx.name, ledger_id = li.ledger_id, error = %e,
                    "trimmed ledger could not be deleted from its cluster");
            }
            ids.push(li.ledger_id);
        }
        tracing::info!(managed_ledger = %ctx.name, ledgers = ?ids, slowest = %slowest, "trimmed consumed ledgers");
        Ok(ids)
    }
}
