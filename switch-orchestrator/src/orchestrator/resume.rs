//! Running a switch: the BUILD/PROMOTE passes of [`Orchestrator::run`], and
//! resuming recorded switches where they stopped
//! ([I6](bkswitch_docs::invariants::I6)).

use super::records::tally;
use super::{window_end, Ctx, Orchestrator};
use crate::error::{OrchestratorError, Result};
use crate::model::{Counts, Phase, SwitchLedgerState, SwitchStatus};
use crate::scan::Pages;

/// Schema and cursor ledgers read from the metadata per BUILD page.
const BUILD_PAGE: usize = 1024;

impl Orchestrator {
    /// [`Orchestrator::resume_all`].
    pub(super) async fn resume_unfinished(&self) -> Result<Vec<SwitchStatus>> {
        let mut out = Vec::new();
        for id in self.switch_ids().await? {
            let (rec, _) = self.records().load(&id).await?;
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
        let (rec, _) = self.records().load(switch_id).await?;
        if rec.phase == Phase::RollingBack {
            return self.rollback(switch_id).await;
        }
        self.run(switch_id).await
    }

    /// [`Orchestrator::run`], holding the lease: passes of BUILD (the ledgers
    /// the source holds that no record names yet) then PROMOTE (every BUILT
    /// record), until nothing is left on the source.
    pub(super) async fn run_passes(&self, switch_id: &str) -> Result<SwitchStatus> {
        let (rec, _) = self.records().load(switch_id).await?;
        match rec.phase {
            Phase::Build | Phase::Promote => {}
            Phase::RollingBack => {
                return Err(OrchestratorError::WrongPhase {
                    switch_id: switch_id.to_owned(),
                    phase: rec.phase,
                    reason: "a rollback is in progress; call rollback to finish it".to_owned(),
                })
            }
            _ => return self.status(switch_id).await,
        }
        let ctx = self.ctx(&rec).await?;
        let cfg = &self.inner.config;
        let mut phase = rec.phase;
        for pass in 0..=cfg.max_passes {
            // The last pass only checks: it builds and promotes nothing.
            let act = pass < cfg.max_passes;
            if pass > 1 && act {
                // Owners were unavailable or ledgers kept appearing.
                tokio::time::sleep(cfg.promote_retry_delay).await;
            }
            let pending = self.build_pages(&ctx, &mut phase, act).await?;
            let built = self.promote_pages(&ctx, &mut phase, act).await?;
            if pending == 0 && built == 0 {
                let mut counts = Counts::default();
                let mut failures = Vec::new();
                self.records()
                    .for_each_record_page(switch_id, |page| {
                        tally(&mut counts, &mut failures, &page)
                    })
                    .await?;
                let window = cfg.rollback_window;
                self.records()
                    .update_switch(switch_id, |r| {
                        let now = self.now_ms();
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
        }
        let mut waiting = 0usize;
        self.records()
            .for_each_record_page(switch_id, |page| {
                waiting += page
                    .values()
                    .filter(|r| r.state == SwitchLedgerState::Built)
                    .count();
            })
            .await?;
        Err(OrchestratorError::NotConverged {
            switch_id: switch_id.to_owned(),
            phase,
            reason: format!(
                "{waiting} ledger(s) still wait for PROMOTE, or new ledgers keep appearing on \
                 `{}` (a node has not applied the switch directive yet)",
                ctx.source
            ),
        })
    }

    /// One BUILD pass, a page of the metadata at a time
    /// ([`BUILD_PAGE`] ledgers): the ledgers the source holds that no record
    /// names yet are copied (when `act`) and counted. Memory holds one page.
    async fn build_pages(&self, ctx: &Ctx, phase: &mut Phase, act: bool) -> Result<usize> {
        let store = self.inner.store.as_ref();
        let mut pending_total = 0;
        let mut pages = Pages::new();
        while let Some(page) = pages.next(store, BUILD_PAGE).await? {
            let mut pending = Vec::new();
            for f in page {
                if f.cluster(ctx.bootstrap.as_deref()) != Some(ctx.source.as_str())
                    || !self.in_scope(&f)
                {
                    continue;
                }
                if !self
                    .records()
                    .has_ledger_record(&ctx.id, f.kind, f.ledger_id)
                    .await?
                {
                    pending.push(f);
                }
            }
            pending_total += pending.len();
            if pending.is_empty() || !act {
                continue;
            }
            if *phase != Phase::Build {
                *phase = Phase::Build;
                self.records()
                    .update_switch(&ctx.id, |r| r.phase = Phase::Build)
                    .await?;
            }
            self.build(ctx, pending).await?;
        }
        Ok(pending_total)
    }
}
