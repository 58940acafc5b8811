//! Running a switch: the BUILD/PROMOTE passes of [`Orchestrator::run`], and
//! resuming recorded switches where they stopped
//! ([I6](bkswitch_docs::invariants::I6)).

use std::collections::BTreeMap;

use super::records::summarize;
use super::{now_ms, window_end, Orchestrator};
use crate::error::{OrchestratorError, Result};
use crate::model::{record_key, LedgerRecord, LedgerState, Phase, SwitchStatus};
use crate::scan::{scan, Found};

impl Orchestrator {
    /// [`Orchestrator::resume_all`].
    pub(super) async fn resume_unfinished(&self) -> Result<Vec<SwitchStatus>> {
        let mut out = Vec::new();
        for id in self.switch_ids().await? {
            let (rec, _) = self.load(&id).await?;
            match rec.phase {
                Phase::Build | Phase::Promote => out.push(self.run(&id).await?),
                Phase::RollingBack => out.push(self.rollback(&id).await?),
                _ => {}
            }
        }
        Ok(out)
    }

    /// [`Orchestrator::resume`].
    pub(super) async fn resume_one(&self, switch_id: &str) -> Result<SwitchStatus> {
        let (rec, _) = self.load(switch_id).await?;
        if rec.phase == Phase::RollingBack {
            return self.rollback(switch_id).await;
        }
        self.run(switch_id).await
    }

    /// [`Orchestrator::run`], holding the lease: passes of BUILD (the ledgers
    /// the source holds that no record names yet) then PROMOTE (every BUILT
    /// record), until nothing is left on the source.
    pub(super) async fn run_passes(&self, switch_id: &str) -> Result<SwitchStatus> {
        let _guard = self.inner.lock.lock().await;
        let (rec, _) = self.load(switch_id).await?;
        match rec.phase {
            Phase::Build | Phase::Promote => {}
            Phase::RollingBack => {
                return Err(OrchestratorError::WrongPhase {
                    switch_id: switch_id.to_owned(),
                    phase: rec.phase.to_string(),
                    reason: "a rollback is in progress; call rollback to finish it".to_owned(),
                })
            }
            _ => return self.status(switch_id).await,
        }
        let ctx = self.ctx(&rec).await?;
        let cfg = &self.inner.config;
        let mut phase = rec.phase;
        for pass in 0..=cfg.max_passes {
            let records = self.list_ledgers(switch_id).await?;
            let found = scan(self.inner.store.as_ref()).await?;
            let mut pending: BTreeMap<String, Found> = BTreeMap::new();
            for f in found {
                if f.cluster(ctx.bootstrap.as_deref()) != Some(ctx.source.as_str()) {
                    continue;
                }
                let key = record_key(f.kind, f.ledger_id);
                if !records.contains_key(&key) {
                    pending.insert(key, f);
                }
            }
            let built: Vec<LedgerRecord> = records
                .values()
                .filter(|r| r.state == LedgerState::Built)
                .cloned()
                .collect();
            if pending.is_empty() && built.is_empty() {
                let (counts, failures) = summarize(&records);
                let window = cfg.rollback_window;
                self.update_switch(switch_id, |r| {
                    let now = now_ms();
                    r.phase = Phase::Switched;
                    r.switched_at = Some(now);
                    r.rollback_deadline = Some(window_end(now, window));
                    r.counts = counts;
                    r.failures = failures.clone();
                })
                .await?;
                tracing::info!(switch_id, "switch reached SWITCHED");
                return self.status(switch_id).await;
            }
            if pass == cfg.max_passes {
                break;
            }
            if pass > 0 {
                tokio::time::sleep(cfg.promote_retry_delay).await;
            }
            if !pending.is_empty() {
                if phase != Phase::Build {
                    self.update_switch(switch_id, |r| r.phase = Phase::Build)
                        .await?;
                }
                self.build(&ctx, pending.into_values().collect()).await?;
            }
            phase = Phase::Promote;
            self.update_switch(switch_id, |r| r.phase = Phase::Promote)
                .await?;
            self.promote(&ctx).await?;
        }
        let records = self.list_ledgers(switch_id).await?;
        let waiting = records
            .values()
            .filter(|r| r.state == LedgerState::Built)
            .count();
        Err(OrchestratorError::NotConverged {
            switch_id: switch_id.to_owned(),
            phase: phase.to_string(),
            reason: format!(
                "{waiting} ledger(s) still wait for PROMOTE, or new ledgers keep appearing on \
                 `{}` (a node has not applied the switch directive yet)",
                ctx.source
            ),
        })
    }
}
