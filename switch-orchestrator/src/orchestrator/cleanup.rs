//! CLEANUP: deleting the copies nothing routes to any more, then (after a
//! forward switch) the status flip old → DEPRECATED, new → ACTIVE
//! ([I12](bkswitch_docs::invariants::I12)).

use std::collections::{BTreeMap, BTreeSet};

use bkswitch_bk_client::BookKeeperExt;

use super::records::summarize;
use super::{now_ms, Orchestrator};
use crate::error::{OrchestratorError, Result};
use crate::model::{
    CleanupOptions, CleanupReport, CleanupTarget, LedgerRecord, LedgerState, Phase, SwitchRecord,
};
use crate::scan::scan;

/// A copy to delete and the key of its ledger record.
type Target = (CleanupTarget, String);
/// A copy not deleted: cluster, ledger id, why.
type Skipped = (String, i64, String);

impl Orchestrator {
    /// [`Orchestrator::cleanup_targets`].
    pub(super) async fn unused_copies(&self, switch_id: &str) -> Result<Vec<CleanupTarget>> {
        let (sw, _) = self.load(switch_id).await?;
        let records = self.list_ledgers(switch_id).await?;
        Ok(self
            .targets(&sw, &records)
            .await?
            .0
            .into_iter()
            .map(|(t, _)| t)
            .collect())
    }

    /// [`Orchestrator::cleanup`] (holding the lease unless it is a dry run).
    pub(super) async fn clean_up(
        &self,
        switch_id: &str,
        opts: CleanupOptions,
    ) -> Result<CleanupReport> {
        let _guard = self.inner.lock.lock().await;
        let (sw, _) = self.load(switch_id).await?;
        match sw.phase {
            Phase::Build | Phase::Promote | Phase::RollingBack => {
                return Err(OrchestratorError::WrongPhase {
                    switch_id: switch_id.to_owned(),
                    phase: sw.phase.to_string(),
                    reason: "cleanup needs a switch that reached SWITCHED or ROLLED_BACK; run \
                             or resume it first"
                        .to_owned(),
                })
            }
            Phase::Done | Phase::DoneWithFailures => {
                return Ok(CleanupReport {
                    dry_run: opts.dry_run,
                    targets: Vec::new(),
                    remaining: 0,
                    errors: Vec::new(),
                    phase: sw.phase,
                })
            }
            Phase::Switched | Phase::RolledBack | Phase::Cleanup => {}
        }
        if let Some(deadline) = sw.rollback_deadline {
            // A dry run changes nothing, so it may look inside the window.
            if !opts.dry_run && !sw.cleanup_started && !opts.force && now_ms() < deadline {
                return Err(OrchestratorError::InsideRollbackWindow {
                    switch_id: switch_id.to_owned(),
                    deadline_ms: deadline,
                });
            }
        }
        let records = self.list_ledgers(switch_id).await?;
        let (all, skipped) = self.targets(&sw, &records).await?;
        let selected: Vec<Target> = all
            .iter()
            .filter(|(t, _)| {
                opts.src_cluster_filter
                    .as_deref()
                    .is_none_or(|c| c == t.cluster)
            })
            .take(opts.max_deletions.unwrap_or(usize::MAX))
            .cloned()
            .collect();
        if opts.dry_run {
            return Ok(CleanupReport {
                dry_run: true,
                remaining: all.len() - selected.len(),
                targets: selected.into_iter().map(|(t, _)| t).collect(),
                errors: skipped,
                phase: sw.phase,
            });
        }
        if !sw.cleanup_started {
            self.update_switch(switch_id, |r| {
                r.cleanup_started = true;
                r.phase = Phase::Cleanup;
            })
            .await?;
        }
        let mut errors = skipped;
        let mut done = Vec::new();
        for (t, key) in &selected {
            let client = self.inner.clients.client(&t.cluster).await?;
            fail_point!("orchestrator::cleanup_delete");
            match client.delete_ledger_if_exists(t.ledger_id).await {
                Ok(_) => {
                    let mut rec = records[key].clone();
                    if t.cluster == sw.target {
                        rec.target_copy = false;
                    }
                    rec.deleted_from = Some(t.cluster.clone());
                    self.set_state(switch_id, &mut rec, LedgerState::Deleted, None)
                        .await?;
                    done.push(t.clone());
                }
                Err(e) => errors.push((t.cluster.clone(), t.ledger_id, e.to_string())),
            }
        }
        let remaining = all.len() - done.len();
        let mut phase = Phase::Cleanup;
        if remaining == 0 {
            let records = self.list_ledgers(switch_id).await?;
            let (counts, failures) = summarize(&records);
            // A canary moves a prefix, not the cluster: statuses stay.
            if sw.rollback_epoch.is_none() && self.scope().is_none() {
                fail_point!("orchestrator::status_flip");
                self.inner.registry.promote_active(&sw.target).await?;
            }
            phase = if counts.failed > 0 {
                Phase::DoneWithFailures
            } else {
                Phase::Done
            };
            self.update_switch(switch_id, |r| {
                r.phase = phase;
                r.finished_at = Some(now_ms());
                r.counts = counts;
                r.failures = failures.clone();
            })
            .await?;
            tracing::info!(switch_id, %phase, "cleanup finished");
        }
        Ok(CleanupReport {
            dry_run: false,
            targets: done,
            remaining,
            errors,
            phase,
        })
    }

    /// The copies cleanup deletes now, and those it must not delete because
    /// the metadata still routes to them.
    async fn targets(
        &self,
        sw: &SwitchRecord,
        records: &BTreeMap<String, LedgerRecord>,
    ) -> Result<(Vec<Target>, Vec<Skipped>)> {
        // Safety net: never delete a copy the metadata still routes to.
        let bootstrap = self.bootstrap_cluster().await?;
        let referenced: BTreeSet<(String, i64)> = scan(self.inner.store.as_ref())
            .await?
            .into_iter()
            .filter_map(|f| {
                f.cluster(bootstrap.as_deref())
                    .map(|c| (c.to_owned(), f.ledger_id))
            })
            .collect();
        let mut out = Vec::new();
        let mut skipped = Vec::new();
        for (key, rec) in records {
            let Some(cluster) = cleanup_cluster(rec, sw) else {
                continue;
            };
            if referenced.contains(&(cluster.clone(), rec.ledger_id)) {
                skipped.push((
                    cluster,
                    rec.ledger_id,
                    "still referenced by the metadata on this cluster; not deleted".to_owned(),
                ));
                continue;
            }
            out.push((
                CleanupTarget {
                    cluster,
                    ledger_id: rec.ledger_id,
                    kind: rec.kind,
                    path: rec.owner_path.clone(),
                },
                key.clone(),
            ));
        }
        Ok((out, skipped))
    }
}

/// Which cluster cleanup deletes a record's copy from, if any.
fn cleanup_cluster(rec: &LedgerRecord, sw: &SwitchRecord) -> Option<String> {
    let rolled_back = sw.rollback_epoch.is_some();
    match rec.state {
        LedgerState::Promoted if !rolled_back => Some(sw.source.clone()),
        LedgerState::RolledOver => Some(sw.source.clone()),
        LedgerState::RolledBack | LedgerState::Failed | LedgerState::Obsolete
            if rec.target_copy =>
        {
            Some(sw.target.clone())
        }
        _ => None,
    }
}
