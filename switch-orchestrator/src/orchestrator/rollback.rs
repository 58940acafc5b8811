//! ROLLBACK: the reverse idgen precheck, the directive back to the source, and
//! the flip back of every promoted stamp (see `flip.rs`), with what it records.

use std::collections::BTreeMap;

use super::flip::{CursorFlip, Direction};
use super::{window_end, Ctx, Orchestrator};
use crate::error::{OrchestratorError, Result};
use crate::model::{LedgerKind, Phase, SwitchLedgerRecord, SwitchLedgerState, SwitchStatus};

impl Orchestrator {
    /// [`Orchestrator::rollback`], holding the lease.
    pub(super) async fn roll_back(&self, switch_id: &str) -> Result<SwitchStatus> {
        let (sw, _) = self.records().load(switch_id).await?;
        if sw.cleanup_started
            || matches!(
                sw.phase,
                Phase::Cleanup | Phase::Done | Phase::DoneWithFailures
            )
        {
            return Err(OrchestratorError::CleanupStarted {
                switch_id: switch_id.to_owned(),
            });
        }
        if sw.phase == Phase::RolledBack {
            return self.status(switch_id).await;
        }
        if let (Some(prefix), None) = (self.scope(), sw.rollback_epoch) {
            let (overrides, _) = self.inner.registry.prefix_overrides().await?;
            if !overrides.contains_key(prefix) {
                return Err(OrchestratorError::WrongPhase {
                    switch_id: switch_id.to_owned(),
                    phase: sw.phase,
                    reason: format!(
                        "the canary of `{prefix}` was absorbed by a cluster-wide switch to \
                         `{}`; roll that switch back instead",
                        sw.target
                    ),
                });
            }
        }
        if sw.phase == Phase::Switched {
            if let Some(deadline) = sw.rollback_deadline {
                if self.now_ms() >= deadline {
                    return Err(OrchestratorError::RollbackWindowClosed {
                        switch_id: switch_id.to_owned(),
                        deadline_ms: deadline,
                    });
                }
            }
        }
        if sw.phase != Phase::RollingBack && !self.inner.config.skip_idgen_precheck {
            // Going back is a switch too: ledgers created on the target since
            // the switch have ids up to the target's next id, and a managed
            // ledger's positions must keep increasing once its next ledger is
            // created on the source again (I11 in docs/INVARIANTS.md,
            // ordering). So the source's id generator must be beyond the
            // target's.
            let check = self.rollback_precheck(&sw.target, &sw.source).await?;
            if !check.ready {
                return Err(OrchestratorError::PrecheckFailed(Box::new(check)));
            }
        }
        let mut sw = self
            .records()
            .update_switch(switch_id, |r| r.phase = Phase::RollingBack)
            .await?;
        if sw.rollback_epoch.is_none() {
            fail_point!("orchestrator::rollback_directive");
            let epoch = match self.scope() {
                // A canary goes back by removing its override.
                Some(prefix) => {
                    self.inner.registry.remove_prefix_override(prefix).await?;
                    sw.epoch
                }
                None => {
                    self.inner
                        .registry
                        .write_directive(&sw.source, sw.origin.as_deref())
                        .await?
                        .epoch
                }
            };
            sw = self
                .records()
                .update_switch(switch_id, |r| r.rollback_epoch = Some(epoch))
                .await?;
        }
        // No client: flipping back touches the metadata only, so a target
        // whose client no longer starts does not keep the rollback from
        // completing (the copies it holds are deleted by a later cleanup).
        let ctx = self.flip_ctx(&sw).await?;
        // One bucket of records at a time (see `records.rs`).
        let mut waiting = 0usize;
        for dir in self.records().record_dirs(switch_id).await? {
            let records = self.records().read_record_dir(&dir).await?;
            waiting += self.roll_back_page(&ctx, records).await?;
        }
        if waiting > 0 {
            return Err(OrchestratorError::NotConverged {
                switch_id: switch_id.to_owned(),
                phase: Phase::RollingBack,
                reason: format!("{waiting} ledger(s) could not be flipped back yet"),
            });
        }
        let window = self.inner.config.rollback_window;
        self.records()
            .update_switch(switch_id, |r| {
                r.phase = Phase::RolledBack;
                if r.rollback_deadline.is_none() {
                    r.rollback_deadline = Some(window_end(self.now_ms(), window));
                }
            })
            .await?;
        tracing::info!(switch_id, "switch rolled back");
        self.status(switch_id).await
    }

    /// Flips back the promoted ledgers of one page of records; returns how
    /// many must be retried.
    async fn roll_back_page(
        &self,
        ctx: &Ctx,
        records: BTreeMap<String, SwitchLedgerRecord>,
    ) -> Result<usize> {
        let switch_id = ctx.id.as_str();
        let mut by_locator: BTreeMap<String, Vec<SwitchLedgerRecord>> = BTreeMap::new();
        let mut cursors = Vec::new();
        for mut rec in records.into_values() {
            match (rec.state, rec.kind) {
                (SwitchLedgerState::Built, _) => {
                    self.records()
                        .set_state(switch_id, &mut rec, SwitchLedgerState::RolledBack, None)
                        .await?;
                }
                (SwitchLedgerState::Promoted, LedgerKind::Schema) => {
                    by_locator
                        .entry(rec.owner_path.clone())
                        .or_default()
                        .push(rec);
                }
                (SwitchLedgerState::Promoted, LedgerKind::Cursor) => cursors.push(rec),
                _ => {}
            }
        }
        let mut waiting = 0usize;
        for mut rec in cursors {
            if !self.roll_back_cursor(ctx, &mut rec).await? {
                waiting += 1;
            }
        }
        for (path, mut recs) in by_locator {
            fail_point!("orchestrator::rollback_schema");
            let Some(on_source) = self
                .flip_locator(ctx, Direction::Rollback, &path, &recs)
                .await?
            else {
                waiting += recs.len();
                continue;
            };
            for rec in &mut recs {
                let state = if on_source.contains(&rec.ledger_id) {
                    SwitchLedgerState::RolledBack
                } else {
                    SwitchLedgerState::Obsolete
                };
                self.records()
                    .set_state(switch_id, rec, state, None)
                    .await?;
            }
        }
        Ok(waiting)
    }

    /// Flips one promoted cursor back to the source and records it; `false`
    /// when it must be retried.
    async fn roll_back_cursor(&self, ctx: &Ctx, rec: &mut SwitchLedgerRecord) -> Result<bool> {
        let moved_on = |actual: i64| {
            format!("the cursor moved on to ledger {actual} after PROMOTE; it stays where it is")
        };
        let (state, reason) = match self.flip_cursor(ctx, Direction::Rollback, rec).await? {
            // A stamp that names neither cluster any more has nothing to go
            // back to.
            CursorFlip::Done | CursorFlip::Elsewhere(_) => (SwitchLedgerState::RolledBack, None),
            CursorFlip::RolledOverByOwner(new_id) => (
                SwitchLedgerState::RolledBack,
                Some(format!("the cursor rolled over onto ledger {new_id}")),
            ),
            CursorFlip::MovedOn(actual) => {
                rec.rollover_ledger_id = Some(actual);
                (SwitchLedgerState::RolledOver, Some(moved_on(actual)))
            }
            CursorFlip::Gone => (SwitchLedgerState::Obsolete, None),
            CursorFlip::Failed(reason) => (SwitchLedgerState::Failed, Some(reason)),
            CursorFlip::Refused(e) => {
                let ml = rec.managed_ledger.as_deref().unwrap_or_default();
                tracing::warn!(managed_ledger = %ml, error = %e, "cursor rollback refused");
                return Ok(false);
            }
            CursorFlip::Waiting => return Ok(false),
        };
        self.records()
            .set_state(&ctx.id, rec, state, reason)
            .await?;
        Ok(true)
    }
}
