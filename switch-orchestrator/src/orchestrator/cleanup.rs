//! CLEANUP: deleting the copies nothing routes to any more, then (after a
//! forward switch) the status flip old → DEPRECATED, new → ACTIVE
//! ([I12](bkswitch_docs::invariants::I12)).

use std::collections::{BTreeMap, BTreeSet};

use bkswitch_bk_client::BookKeeperExt;

use super::records::summarize;
use super::Orchestrator;
use crate::error::{OrchestratorError, Result};
use crate::model::{
    CleanupOptions, CleanupReport, CleanupTarget, LedgerKind, Phase, SwitchLedgerRecord,
    SwitchLedgerState, SwitchRecord,
};
use crate::scan::scan;
use bkswitch_bk_client::BookKeeper as _;

/// A copy to delete and the key of its ledger record.
type Target = (CleanupTarget, String);
/// A copy not deleted: cluster, ledger id, why.
type Skipped = (String, i64, String);

impl Orchestrator {
    /// [`Orchestrator::cleanup_targets`].
    pub(super) async fn unused_copies(&self, switch_id: &str) -> Result<Vec<CleanupTarget>> {
        let (sw, _) = self.records().load(switch_id).await?;
        let records = self.records().list_ledgers(switch_id).await?;
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
        let (sw, _) = self.records().load(switch_id).await?;
        match sw.phase {
            Phase::Build | Phase::Promote | Phase::RollingBack => {
                return Err(OrchestratorError::WrongPhase {
                    switch_id: switch_id.to_owned(),
                    phase: sw.phase,
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
            if !opts.dry_run && !sw.cleanup_started && !opts.force && self.now_ms() < deadline {
                return Err(OrchestratorError::InsideRollbackWindow {
                    switch_id: switch_id.to_owned(),
                    deadline_ms: deadline,
                });
            }
        }
        let records = self.records().list_ledgers(switch_id).await?;
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
            self.records()
                .update_switch(switch_id, |r| {
                    r.cleanup_started = true;
                    r.phase = Phase::Cleanup;
                })
                .await?;
        }
        let mut errors = skipped;
        let mut done = Vec::new();
        // Skipped because in use: not waited for (as those the pass found
        // referenced). Held source copies stay remaining.
        let mut in_use = 0usize;
        // Other coordinators' switches that may still use a copy. Their
        // records only change under the coordinator lease this cleanup
        // holds, so they are read once.
        let others = self.live_switches_of_others(switch_id).await?;
        let bootstrap = self.bootstrap_cluster().await?;
        for (t, key) in &selected {
            let rec = &records[key];
            let client = self.inner.clients.client(&t.cluster).await?;
            fail_point!("orchestrator::cleanup_delete");
            // Right before the deletion: still the only coordinator, with a
            // live metadata session; nothing references the ledger on this
            // cluster; another switch does not use the copy; and a source
            // copy goes only once the target's copy is verified.
            self.records().check_may_delete(switch_id).await?;
            match self
                .keep_reason(&sw, rec, &t.cluster, bootstrap.as_deref(), &others)
                .await?
            {
                Some(Keep::Skip(why)) => {
                    tracing::warn!(switch_id, ledger_id = t.ledger_id, cluster = %t.cluster,
                        reason = %why, "copy not deleted");
                    errors.push((t.cluster.clone(), t.ledger_id, why));
                    in_use += 1;
                    continue;
                }
                Some(Keep::Hold(why)) => {
                    tracing::error!(switch_id, ledger_id = t.ledger_id, cluster = %t.cluster,
                        reason = %why, "source copy kept");
                    errors.push((t.cluster.clone(), t.ledger_id, why));
                    continue;
                }
                None => {}
            }
            match client.delete_ledger_if_exists(t.ledger_id).await {
                Ok(_) => {
                    let mut rec = records[key].clone();
                    if t.cluster == sw.target {
                        rec.target_copy = false;
                    }
                    rec.deleted_from = Some(t.cluster.clone());
                    self.records()
                        .set_state(switch_id, &mut rec, SwitchLedgerState::Deleted, None)
                        .await?;
                    done.push(t.clone());
                }
                Err(e) => errors.push((t.cluster.clone(), t.ledger_id, e.to_string())),
            }
        }
        let remaining = all.len() - done.len() - in_use;
        let mut phase = Phase::Cleanup;
        if remaining == 0 {
            let records = self.records().list_ledgers(switch_id).await?;
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
            self.records()
                .update_switch(switch_id, |r| {
                    r.phase = phase;
                    r.finished_at = Some(self.now_ms());
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
        records: &BTreeMap<String, SwitchLedgerRecord>,
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
            if cluster == sw.target && !self.made_by_this_switch(&sw.switch_id, rec).await? {
                skipped.push((cluster, rec.ledger_id, not_created(sw, rec.ledger_id)));
                continue;
            }
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

/// Why a copy listed for deletion is not deleted now.
enum Keep {
    /// In use (referenced, or another switch's copy): skipped, not waited for.
    Skip(String),
    /// A source copy whose target copy cannot be verified: kept, and the
    /// cleanup does not finish while it is.
    Hold(String),
}

/// Another coordinator's switch that has not finished: its latest switch id.
type Live = (Orchestrator, String);

impl Orchestrator {
    /// Whether the target ledger of `rec` is one this switch created: a copy
    /// it made (`Copied`), or one it found already there (`AlreadyPresent`)
    /// that its `created/` record shows it created in an earlier attempt.
    /// Anything else on the target is never deleted by this switch.
    pub(super) async fn made_by_this_switch(
        &self,
        id: &str,
        rec: &SwitchLedgerRecord,
    ) -> Result<bool> {
        if !rec.already_present {
            return Ok(true);
        }
        let path = format!("{}/{}", self.records().created_path(id), rec.ledger_id);
        Ok(self.records().read_node(&path).await?.is_some())
    }

    /// The latest switch of every other coordinator of this registry (the
    /// cluster-wide one, each canary) that has not finished.
    async fn live_switches_of_others(&self, switch_id: &str) -> Result<Vec<Live>> {
        let mut out = Vec::new();
        for c in self.coordinators().await? {
            let Some(id) = c.switch_ids().await?.pop() else {
                continue;
            };
            if c.scope() == self.scope() && id == switch_id {
                continue;
            }
            if !c.records().load(&id).await?.0.phase.is_final() {
                out.push((c, id));
            }
        }
        Ok(out)
    }

    /// The clusters on which the metadata node `owner_path` references
    /// ledger `ledger_id` now (one read). An unstamped reference with no
    /// bootstrap cluster recorded counts for every cluster (`"*"`).
    async fn referenced_on(
        &self,
        kind: LedgerKind,
        owner_path: &str,
        ledger_id: i64,
        bootstrap: Option<&str>,
    ) -> Result<Vec<String>> {
        let Some(r) = self.records().read_node(owner_path).await? else {
            return Ok(Vec::new());
        };
        let mut found = Vec::new();
        match kind {
            LedgerKind::Schema => crate::scan::schema_ledgers(owner_path, &r.value, &mut found)?,
            LedgerKind::Cursor => found.extend(crate::scan::cursor_ledger(owner_path, &r.value)?),
        }
        Ok(found
            .iter()
            .filter(|f| f.ledger_id == ledger_id)
            .map(|f| f.cluster(bootstrap).unwrap_or("*").to_owned())
            .collect())
    }

    /// Whether the copy of `rec` on `cluster` must stay now (re-checked right
    /// before its deletion).
    async fn keep_reason(
        &self,
        sw: &SwitchRecord,
        rec: &SwitchLedgerRecord,
        cluster: &str,
        bootstrap: Option<&str>,
        others: &[Live],
    ) -> Result<Option<Keep>> {
        let refs = self
            .referenced_on(rec.kind, &rec.owner_path, rec.ledger_id, bootstrap)
            .await?;
        if refs.iter().any(|c| c == cluster || c == "*") {
            return Ok(Some(Keep::Skip(format!(
                "`{}` references ledger {} on `{cluster}` now; not deleted",
                rec.owner_path, rec.ledger_id
            ))));
        }
        for (other, id) in others {
            let Some(theirs) = other
                .records()
                .read_ledger_record(id, rec.kind, rec.ledger_id)
                .await?
            else {
                continue;
            };
            if matches!(
                theirs.state,
                SwitchLedgerState::Built | SwitchLedgerState::Promoted
            ) {
                let who = match other.scope() {
                    Some(p) => format!("canary {id} of `{p}`"),
                    None => format!("switch {id}"),
                };
                return Ok(Some(Keep::Skip(format!(
                    "{who} uses ledger {} (its record is {:?}); not deleted",
                    rec.ledger_id, theirs.state
                ))));
            }
        }
        // A source copy goes only once the copy the metadata names is
        // verified on the target.
        if cluster == sw.source && refs.contains(&sw.target) {
            if let Some(why) = self.unverified_copy(&sw.target, rec).await? {
                return Ok(Some(Keep::Hold(format!(
                    "`{}` names ledger {} on `{}`, but {why}; the source copy on `{}` is kept \
                     (copy it back to `{}` with the ledger-copy tool, then clean up again)",
                    rec.owner_path, rec.ledger_id, sw.target, sw.source, sw.target
                ))));
            }
        }
        Ok(None)
    }

    /// Why the copy of `rec` on `cluster` cannot be trusted, if it cannot:
    /// missing, unreadable, or shorter than what was copied.
    async fn unverified_copy(
        &self,
        cluster: &str,
        rec: &SwitchLedgerRecord,
    ) -> Result<Option<String>> {
        let client = self.inner.clients.client(cluster).await?;
        let opts = self.copy_options(rec.kind);
        match client
            .open_ledger_no_recovery(rec.ledger_id, opts.digest_type, &opts.password)
            .await
        {
            Ok(h) => {
                let lac = h.last_add_confirmed();
                let _ = h.close().await;
                Ok((lac < rec.copied_last_entry_id).then(|| {
                    format!(
                        "its copy there ends at entry {lac}, before the copied {}",
                        rec.copied_last_entry_id
                    )
                }))
            }
            Err(e) => Ok(Some(format!("its copy there cannot be opened ({e})"))),
        }
    }
}

/// Why cleanup leaves a target ledger this switch did not create.
fn not_created(sw: &SwitchRecord, ledger_id: i64) -> String {
    format!(
        "ledger {ledger_id} on `{}` was already there when switch `{}` copied it (identical, \
         adopted) and was not created by this switch, so it is never deleted by it",
        sw.target, sw.switch_id
    )
}

/// Which cluster cleanup deletes a record's copy from, if any.
fn cleanup_cluster(rec: &SwitchLedgerRecord, sw: &SwitchRecord) -> Option<String> {
    let rolled_back = sw.rollback_epoch.is_some();
    match rec.state {
        SwitchLedgerState::Promoted if !rolled_back => Some(sw.source.clone()),
        SwitchLedgerState::RolledOver => Some(sw.source.clone()),
        SwitchLedgerState::RolledBack | SwitchLedgerState::Failed | SwitchLedgerState::Obsolete
            if rec.target_copy =>
        {
            Some(sw.target.clone())
        }
        _ => None,
    }
}
