//! The coordinator's side of the live copy progress ([`crate::progress`]):
//! where a switch's progress starts (from its ledger records), how a reader
//! gets it, and when it is dropped.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use super::{Ctx, Orchestrator};
use crate::error::Result;
use crate::model::Phase;
use crate::progress::{Baseline, BuildProgress, CopyCounters, SwitchProgress};

impl Orchestrator {
    /// The live progress of `ctx`'s switch, started from its ledger records
    /// the first time this coordinator copies for it.
    pub(super) async fn switch_progress(&self, ctx: &Ctx) -> Result<Arc<SwitchProgress>> {
        let key = self.records().switch_path(&ctx.id);
        let p = match self.inner.progress.get(&key) {
            Some(p) => p,
            None => {
                let base = self.recorded_baseline(&ctx.id).await?;
                let now = self.now_ms();
                self.inner.progress.get_or_insert(&key, || {
                    SwitchProgress::new(&ctx.id, &ctx.source, &ctx.target, now, base)
                })
            }
        };
        if let Ok(run) = RUN.try_with(|r| *r) {
            p.set_run(run);
        }
        Ok(p)
    }

    /// What the ledger records of `switch_id` say was copied.
    async fn recorded_baseline(&self, switch_id: &str) -> Result<Baseline> {
        let mut base = Baseline::default();
        self.records()
            .for_each_record_page(switch_id, |page| {
                for rec in page.values() {
                    base.add(rec);
                }
            })
            .await?;
        Ok(base)
    }

    /// Held by a run of `switch_id` (its body runs in
    /// [`RunProgress::scope`]): unless [`kept`](RunProgress::kept) (the run
    /// succeeded), the switch's live progress is dropped when the run ends —
    /// on an error (it may have lost the switch to another coordinator) or
    /// cancelled — and the next run starts from the records again. A run
    /// that never copied (refused with the switch locked by another
    /// coordinator, or a view of this one) leaves the progress alone.
    pub(super) fn run_progress(&self, switch_id: &str) -> RunProgress {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        RunProgress {
            orchestrator: Some(self.clone()),
            key: self.records().switch_path(switch_id),
            run: NEXT.fetch_add(1, Ordering::Relaxed),
        }
    }

    /// The live copy progress of `switch_id` on this coordinator: `Some`
    /// once it has copied for the switch (it stays after BUILD, with the
    /// final totals), `None` on a node that has not, or whose run ended on
    /// an error. Reads a few atomics; nothing from the metadata.
    pub fn live_copy_progress(&self, switch_id: &str) -> Option<BuildProgress> {
        self.inner
            .progress
            .get(&self.records().switch_path(switch_id))
            .map(|p| p.snapshot())
    }

    /// The copy progress of `switch_id`: the [live one](Self::live_copy_progress)
    /// when this coordinator copies it; else, while the switch is in BUILD or
    /// PROMOTE, what its ledger records say (`live: false`: the recorded
    /// ledgers as done with their entries and bytes, nothing in flight; one
    /// pass over the records); else `None`.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::NoSuchSwitch`](crate::OrchestratorError::NoSuchSwitch),
    /// [`OrchestratorError::CorruptRecord`](crate::OrchestratorError::CorruptRecord),
    /// [`OrchestratorError::Metadata`](crate::OrchestratorError::Metadata).
    pub async fn copy_progress(&self, switch_id: &str) -> Result<Option<BuildProgress>> {
        if let Some(p) = self.live_copy_progress(switch_id) {
            return Ok(Some(p));
        }
        let (rec, _) = self.records().load(switch_id).await?;
        if !matches!(rec.phase, Phase::Build | Phase::Promote) {
            return Ok(None);
        }
        let base = self.recorded_baseline(switch_id).await?;
        Ok(Some(BuildProgress {
            switch_id: rec.switch_id,
            source: rec.source,
            target: rec.target,
            live: false,
            ledgers_total: base.ledgers,
            ledgers_done: base.ledgers,
            ledgers_failed: base.failed,
            entries_copied: base.entries,
            entries_total: base.entries,
            bytes_copied: base.bytes,
            bytes_total: base.bytes,
            started_at: None,
            copying: Vec::new(),
        }))
    }

    /// Entries and bytes this coordinator (and its canary views) wrote to
    /// targets since it started.
    pub fn copy_counters(&self) -> CopyCounters {
        self.inner.progress.counters()
    }
}

tokio::task_local! {
    /// The run whose body is executing (see [`RunProgress::scope`]).
    static RUN: u64;
}

/// See [`Orchestrator::run_progress`].
pub(super) struct RunProgress {
    orchestrator: Option<Orchestrator>,
    key: String,
    run: u64,
}

impl RunProgress {
    /// Runs `body` as this run: the progress it copies into is marked as
    /// this run's.
    pub(super) async fn scope<T>(&self, body: impl Future<Output = T>) -> T {
        RUN.scope(self.run, body).await
    }

    /// The run succeeded: its progress stays, with the final totals.
    pub(super) fn kept(mut self) {
        self.orchestrator = None;
    }
}

impl Drop for RunProgress {
    fn drop(&mut self) {
        if let Some(o) = self.orchestrator.take() {
            o.inner.progress.remove_if_run(&self.key, self.run);
        }
    }
}
