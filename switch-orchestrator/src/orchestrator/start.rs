//! Starting a switch: validating the target, the idgen precheck
//! ([I11](bkswitch_docs::invariants::I11)), a probe of the target's client,
//! the switch directive (read and written through the registry's directive
//! API) and the first switch record.

use bkswitch_metadata_store::ExpectedVersion;
use bkswitch_registry::{
    ClusterStatus, ClusterUri, PrecheckResult, RegistryError, SwitchDirective,
};

use super::Orchestrator;
use crate::error::{OrchestratorError, Result};
use crate::model::{Counts, Phase, SwitchRecord, SwitchStatus};
use crate::scan::Pages;

/// How often, and how long each time, a start waits for another
/// coordinator's lease (about 5 s in all) before answering `Locked`.
const START_WAITS: usize = 100;
const START_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

impl Orchestrator {
    /// [`Orchestrator::start_switch`].
    ///
    /// Runs as coordinator work (see `Orchestrator::exclusive`): its checks
    /// and writes cannot interleave with any other coordinator's.
    pub(super) async fn start(&self, target: &str, origin: Option<&str>) -> Result<SwitchStatus> {
        // Asked again for a switch already started: its status, without
        // waiting for the lease (its run may hold it for long).
        if let Some(st) = self.started_to(target).await? {
            return Ok(st);
        }
        let what = format!("starting a switch to `{target}`");
        let mut waited = 0;
        loop {
            let started = match self.inner.scope.clone() {
                Some(prefix) => {
                    self.records()
                        .exclusive(&what, self.start_canary(&prefix, target, origin))
                        .await
                }
                None => {
                    self.records()
                        .exclusive(&what, self.start_cluster_wide(target, origin))
                        .await
                }
            };
            match started {
                // Another coordinator works: when it is (or was) a start, the
                // switch it recorded is what the operator must hear about.
                // Starts are short: wait for them a little.
                Err(OrchestratorError::Locked { .. }) if waited < START_WAITS => {
                    if let Some(st) = self.started_to(target).await? {
                        return Ok(st);
                    }
                    self.refuse_unfinished_work().await?;
                    waited += 1;
                    tokio::time::sleep(START_WAIT).await;
                }
                other => return other,
            }
        }
    }

    /// Refuses (read only) when a switch or canary this start would race
    /// is unfinished: the cluster-wide switch and every canary for a
    /// cluster-wide start (a directive no record accounts for yet counts);
    /// for a canary, its own prefix's, the cluster-wide one and the
    /// overlapping canaries.
    async fn refuse_unfinished_work(&self) -> Result<()> {
        let unfinished = |phase: Phase| !phase.is_final() && phase != Phase::RolledBack;
        match self.scope() {
            Some(prefix) => {
                if let Some(id) = self.switch_ids().await?.pop() {
                    let (rec, _) = self.records().load(&id).await?;
                    if unfinished(rec.phase) {
                        return Err(OrchestratorError::SwitchInProgress {
                            switch_id: id,
                            target: rec.target,
                            phase: Some(rec.phase),
                        });
                    }
                }
                self.refuse_overlapping_work(prefix).await
            }
            None => {
                let latest = match self.switch_ids().await?.pop() {
                    Some(id) => Some(self.records().load(&id).await?.0),
                    None => None,
                };
                if let Some(rec) = &latest {
                    if unfinished(rec.phase) {
                        return Err(OrchestratorError::SwitchInProgress {
                            switch_id: rec.switch_id.clone(),
                            target: rec.target.clone(),
                            phase: Some(rec.phase),
                        });
                    }
                }
                if let Some(d) = self.inner.registry.switch_directive().await? {
                    let recorded = latest
                        .as_ref()
                        .is_some_and(|r| r.epoch >= d.epoch || r.rollback_epoch == Some(d.epoch));
                    if !recorded {
                        return Err(starting(&d));
                    }
                }
                Ok(())
            }
        }
    }

    /// The status of the switch (or this canary) to `target` when it is
    /// already started and recorded (read only).
    async fn started_to(&self, target: &str) -> Result<Option<SwitchStatus>> {
        let registry = &self.inner.registry;
        let epoch = match self.scope() {
            None => match registry.switch_directive().await? {
                Some(d) if d.target == target => d.epoch,
                _ => return Ok(None),
            },
            Some(prefix) => {
                let (overrides, _) = registry.prefix_overrides().await?;
                match overrides.get(prefix) {
                    Some(o) if o.cluster == target => o.epoch,
                    _ => return Ok(None),
                }
            }
        };
        let Some(latest) = self.switch_ids().await?.pop() else {
            return Ok(None);
        };
        let (rec, _) = self.records().load(&latest).await?;
        if rec.epoch != epoch {
            return Ok(None);
        }
        Ok(Some(self.status(&latest).await?))
    }

    /// A cluster-wide switch's start (holding the coordinator lease).
    async fn start_cluster_wide(&self, target: &str, origin: Option<&str>) -> Result<SwitchStatus> {
        let registry = &self.inner.registry;
        let Some(record) = registry.get(target).await? else {
            return Err(OrchestratorError::UnknownCluster {
                name: target.to_owned(),
            });
        };
        // Canaries: a cluster-wide switch to the cluster every override
        // names finishes them (their prefixes are already there; the
        // overrides are removed once the directive is written). Any other
        // cluster-wide switch would leave an override pointing elsewhere.
        let (overrides, _) = registry.prefix_overrides().await?;
        let elsewhere: Vec<String> = overrides
            .iter()
            .filter(|(_, o)| o.cluster != target)
            .map(|(p, o)| format!("{p} → {}", o.cluster))
            .collect();
        if !elsewhere.is_empty() {
            return Err(OrchestratorError::OverridesExist {
                prefixes: elsewhere.join(", "),
            });
        }
        // A canary still copying, promoting, rolling back or cleaning up
        // would race this switch over the same ledgers (every recorded
        // canary, also those whose override a rollback already removed).
        for prefix in self.canary_prefixes().await? {
            let canary = self.for_prefix(&prefix);
            let Some(id) = canary.switch_ids().await?.pop() else {
                continue;
            };
            let (rec, _) = canary.records().load(&id).await?;
            if !rec.phase.is_built() || matches!(rec.phase, Phase::RollingBack | Phase::Cleanup) {
                return Err(OrchestratorError::SwitchInProgress {
                    switch_id: format!("canary {id} of `{prefix}`"),
                    target: rec.target,
                    phase: Some(rec.phase),
                });
            }
        }
        // The directive as validated: the directive write below is a CAS
        // against this version, so two nodes starting switches at once cannot
        // both write one (the loser's CAS fails and nothing is written).
        let seen = registry.switch_directive_versioned().await?;
        if let Some((d, _)) = &seen {
            if d.target == target {
                match self.records().load(&d.epoch.to_string()).await {
                    Ok(_) => return self.status(&d.epoch.to_string()).await,
                    Err(OrchestratorError::NoSuchSwitch { .. }) => {}
                    Err(e) => return Err(e),
                }
            }
        }
        if record.status == ClusterStatus::Deprecated {
            return Err(OrchestratorError::ClusterDeprecated {
                name: target.to_owned(),
            });
        }
        let source = self.active_cluster().await?;
        let latest = match self.switch_ids().await?.pop() {
            Some(id) => Some(self.records().load(&id).await?.0),
            None => None,
        };
        // Checked before "already ACTIVE": during CLEANUP the source still is
        // the ACTIVE cluster, and the running switch is what the operator
        // must hear about.
        if let Some(rec) = &latest {
            if !rec.phase.is_final() && rec.phase != Phase::RolledBack {
                return Err(OrchestratorError::SwitchInProgress {
                    switch_id: rec.switch_id.clone(),
                    target: rec.target.clone(),
                    phase: Some(rec.phase),
                });
            }
        }
        if source == target {
            return Err(OrchestratorError::AlreadyActive {
                name: target.to_owned(),
            });
        }
        // A directive to another cluster than the ACTIVE one that no switch
        // record accounts for (neither a switch's epoch nor its rollback
        // epoch): another node wrote it and is about to record its switch.
        // Re-issuing the switch to that directive's target records it.
        if let Some((d, _)) = &seen {
            let recorded = latest
                .as_ref()
                .is_some_and(|r| r.epoch >= d.epoch || r.rollback_epoch == Some(d.epoch));
            if d.target != source && d.target != target && !recorded {
                return Err(starting(d));
            }
        }
        let precheck = self.precheck_from(&source, target).await?;
        let precheck_ready = match precheck {
            Ok(p) if p.ready => true,
            Ok(p) if !self.inner.config.skip_idgen_precheck => {
                return Err(OrchestratorError::PrecheckFailed(Box::new(p)))
            }
            Ok(_) => false,
            Err(e) if !self.inner.config.skip_idgen_precheck => return Err(e.into()),
            Err(_) => false,
        };
        // A target whose client does not start would leave the switch stuck
        // in BUILD with the directive written (every node creating ledgers
        // on a cluster it cannot reach): refuse it now, with nothing written.
        if let Err(e) = self
            .inner
            .clients
            .probe(target, &record.metadata_service_uri)
            .await
        {
            return Err(OrchestratorError::Client {
                cluster: target.to_owned(),
                reason: format!(
                    "the switch target's client does not start, so nothing was written: {e}"
                ),
                source: match e {
                    OrchestratorError::Client { source, .. } => source,
                    _ => None,
                },
            });
        }
        fail_point!("orchestrator::directive");
        let directive = match seen {
            // Written by a start that did not record its switch (or is
            // recording it right now): record that directive's switch.
            Some((d, _)) if d.target == target => d,
            seen => self.put_directive(seen, target, origin).await?,
        };
        // Every node now creates new ledgers on `target`: the canaries'
        // overrides (all naming it) have nothing left to route.
        for prefix in overrides.keys() {
            registry.remove_prefix_override(prefix).await?;
            tracing::info!(prefix, target, "canary absorbed by the cluster-wide switch");
        }
        let id = directive.epoch.to_string();
        let now = self.now_ms();
        let rec = SwitchRecord {
            switch_id: id.clone(),
            epoch: directive.epoch,
            source,
            target: target.to_owned(),
            origin: directive.origin.clone(),
            phase: Phase::Build,
            created_at: now,
            updated_at: now,
            switched_at: None,
            rollback_deadline: None,
            rollback_epoch: None,
            cleanup_started: false,
            finished_at: None,
            precheck_passed: precheck_ready,
            counts: Counts::default(),
            failures: Vec::new(),
        };
        self.records().create_switch(&rec).await?;
        tracing::info!(switch_id = %id, source = %rec.source, target, "switch started");
        self.status(&id).await
    }

    /// A canary's start: the same checks as a cluster-wide switch (target
    /// registered and not DEPRECATED, not the active cluster, nothing in
    /// progress for this prefix, the idgen precheck over the prefix's ledgers,
    /// the target's client starts), then the per-prefix override instead of
    /// the directive, and the switch record.
    async fn start_canary(
        &self,
        prefix: &str,
        target: &str,
        origin: Option<&str>,
    ) -> Result<SwitchStatus> {
        let registry = &self.inner.registry;
        bkswitch_registry::validate_prefix(prefix)?;
        let Some(record) = registry.get(target).await? else {
            return Err(OrchestratorError::UnknownCluster {
                name: target.to_owned(),
            });
        };
        if record.status == ClusterStatus::Deprecated {
            return Err(OrchestratorError::ClusterDeprecated {
                name: target.to_owned(),
            });
        }
        let latest = match self.switch_ids().await?.pop() {
            Some(id) => Some(self.records().load(&id).await?.0),
            None => None,
        };
        let (overrides, _) = registry.prefix_overrides().await?;
        if let (Some(o), Some(rec)) = (overrides.get(prefix), &latest) {
            if o.cluster == target && rec.epoch == o.epoch {
                return self.status(&rec.switch_id).await;
            }
        }
        if let Some(rec) = &latest {
            if !rec.phase.is_final() && rec.phase != Phase::RolledBack {
                return Err(OrchestratorError::SwitchInProgress {
                    switch_id: rec.switch_id.clone(),
                    target: rec.target.clone(),
                    phase: Some(rec.phase),
                });
            }
        }
        self.refuse_overlapping_work(prefix).await?;
        let source = self.active_cluster().await?;
        if source == target {
            return Err(OrchestratorError::AlreadyActive {
                name: target.to_owned(),
            });
        }
        // The ids the prefix's ledgers use come from the active cluster and,
        // when an enclosing canary moved the prefix's new ledgers elsewhere,
        // from that cluster too: the target's generator must be past both,
        // or the prefix's next ledger on the target would go below its last
        // one (found by the nemesis: a nested canary accepted on a cluster
        // whose ids were past the active cluster's only; its topics could no
        // longer roll over).
        let mut sources = vec![source.clone()];
        if let Some(enclosing) = enclosing_cluster(&overrides, prefix) {
            if enclosing != source && enclosing != target {
                sources.push(enclosing);
            }
        }
        for from in &sources {
            match self.precheck_from(from, target).await? {
                Ok(p) if p.ready => {}
                Ok(p) if !self.inner.config.skip_idgen_precheck => {
                    return Err(OrchestratorError::PrecheckFailed(Box::new(p)))
                }
                Err(e) if !self.inner.config.skip_idgen_precheck => return Err(e.into()),
                _ => {}
            }
        }
        self.inner
            .clients
            .probe(target, &record.metadata_service_uri)
            .await?;
        let after = latest.as_ref().map_or(0, |r| r.epoch);
        let o = registry
            .set_prefix_override(prefix, target, origin, after)
            .await?;
        let now = self.now_ms();
        let rec = SwitchRecord {
            switch_id: o.epoch.to_string(),
            epoch: o.epoch,
            source,
            target: target.to_owned(),
            origin: o.origin.clone(),
            phase: Phase::Build,
            created_at: now,
            updated_at: now,
            switched_at: None,
            rollback_deadline: None,
            rollback_epoch: None,
            cleanup_started: false,
            finished_at: None,
            precheck_passed: true,
            counts: Counts::default(),
            failures: Vec::new(),
        };
        self.records().create_switch(&rec).await?;
        tracing::info!(prefix, switch_id = %rec.switch_id, target, "canary started");
        self.status(&rec.switch_id).await
    }

    /// A canary of `prefix` works on ledgers a cluster-wide switch, and a
    /// canary of an overlapping prefix (one a prefix of the other, as
    /// managed-ledger or as schema prefixes), work on too: refused while
    /// the cluster-wide switch has not finished (DONE) or been rolled back,
    /// and while such a canary has not.
    async fn refuse_overlapping_work(&self, prefix: &str) -> Result<()> {
        let unfinished = |phase: Phase| !phase.is_final() && phase != Phase::RolledBack;
        let overlap = |a: &str, b: &str| a.starts_with(b) || b.starts_with(a);
        let schemas = super::schema_prefix(prefix);
        for other in self.coordinators().await? {
            let name = match other.scope() {
                None => None,
                Some(p) if p == prefix => continue,
                Some(p) if overlap(p, prefix) || overlap(&super::schema_prefix(p), &schemas) => {
                    Some(p.to_owned())
                }
                Some(_) => continue,
            };
            // The switch record only: no need for the counts.
            let Some(id) = other.switch_ids().await?.pop() else {
                continue;
            };
            let (rec, _) = other.records().load(&id).await?;
            if unfinished(rec.phase) {
                return Err(OrchestratorError::SwitchInProgress {
                    switch_id: match name {
                        Some(p) => format!("canary {id} of `{p}`"),
                        None => id,
                    },
                    target: rec.target,
                    phase: Some(rec.phase),
                });
            }
        }
        Ok(())
    }

    /// Writes the directive to switch to `target` that follows `seen` (the
    /// directive and version validated against, if any) with one
    /// compare-and-set: [`Registry::write_directive`] re-reads the directive,
    /// and this write must fail when anything changed since the validation.
    ///
    /// [`Registry::write_directive`]: bkswitch_registry::Registry::write_directive
    async fn put_directive(
        &self,
        seen: Option<(SwitchDirective, i64)>,
        target: &str,
        origin: Option<&str>,
    ) -> Result<SwitchDirective> {
        let registry = &self.inner.registry;
        let (epoch, expected, extra) = match seen {
            Some((d, v)) => (d.epoch + 1, ExpectedVersion::Exactly(v), d.extra),
            None => (1, ExpectedVersion::NotExists, Default::default()),
        };
        let directive = SwitchDirective {
            target: target.to_owned(),
            origin: origin.map(str::to_owned),
            epoch,
            ts: self.now_ms(),
            extra,
        };
        match registry.put_directive(&directive, expected).await {
            Ok(_) => Ok(directive),
            // Another node wrote a directive since: name it.
            Err(RegistryError::Metadata(e)) if e.is_conflict() => {
                match registry.switch_directive().await? {
                    // The same switch, asked for on two nodes at once.
                    Some(d) if d.target == target => Ok(d),
                    Some(d) => Err(starting(&d)),
                    None => Err(OrchestratorError::metadata(
                        format!("writing `{}`", e.path()),
                        e,
                    )),
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// [`Orchestrator::precheck`].
    pub(super) async fn precheck_to(&self, target: &str) -> Result<PrecheckResult> {
        let registry = &self.inner.registry;
        if registry.get(target).await?.is_none() {
            return Err(OrchestratorError::UnknownCluster {
                name: target.to_owned(),
            });
        }
        let latest = match self.switch_ids().await?.pop() {
            Some(id) => Some(self.records().load(&id).await?.0),
            None => None,
        };
        let mut source = self.active_cluster().await?;
        if let Some(sw) = latest.filter(|sw| {
            !sw.phase.is_final() && sw.phase != Phase::RolledBack && !sw.cleanup_started
        }) {
            if target == sw.source {
                // Back to the switch's source: the precheck of its rollback,
                // from the cluster new ledgers go to now.
                return self.rollback_precheck(&sw.target, &sw.source).await;
            }
            if target != sw.target {
                // A switch after this one would start from its target.
                source = sw.target;
            }
        }
        if source == target {
            return Err(OrchestratorError::AlreadyActive {
                name: target.to_owned(),
            });
        }
        Ok(self.precheck_from(&source, target).await??)
    }

    /// The idgen precheck of a rollback from `from` (a switch's target) back
    /// to `to` (its source): ledgers created on `from` since the switch have
    /// ids up to its next id, and a managed ledger's positions must keep
    /// increasing once its next ledger is created on `to` again (I11 in
    /// docs/INVARIANTS.md, ordering), so `to`'s generator must be beyond
    /// `from`'s, by the safety margin.
    pub(super) async fn rollback_precheck(&self, from: &str, to: &str) -> Result<PrecheckResult> {
        let p = self
            .inner
            .registry
            .precheck(from, to, &[], self.inner.idgen.as_ref())
            .await?;
        let mut p = self.advise(p).await;
        p.rollback = true;
        Ok(p)
    }

    /// The ACTIVE cluster: the source of a switch.
    async fn active_cluster(&self) -> Result<String> {
        self.inner
            .registry
            .active()
            .await?
            .ok_or(OrchestratorError::NoActiveCluster)
    }

    /// The idgen precheck from `source` to `target` over every schema and
    /// cursor ledger that `source` holds; the outer error is the scan's, the
    /// inner one the precheck's.
    ///
    /// The precheck only needs the highest id and the ids at risk (at or
    /// above the target's next id), so the metadata is streamed a page at a
    /// time and only those are kept: memory does not grow with the number of
    /// topics unless ids are at risk (the precheck then fails and lists them).
    async fn precheck_from(
        &self,
        source: &str,
        target: &str,
    ) -> Result<std::result::Result<PrecheckResult, RegistryError>> {
        let registry = &self.inner.registry;
        let target_next = match registry.get(target).await? {
            Some(rec) => match ClusterUri::parse(&rec.metadata_service_uri) {
                Ok(uri) => self.inner.idgen.next_ledger_id(&uri).await.ok(),
                Err(_) => None,
            },
            None => None,
        };
        let bootstrap = self.bootstrap_cluster().await?;
        let store = self.inner.store.as_ref();
        let mut max: Option<i64> = None;
        let mut kept: Vec<i64> = Vec::new();
        let mut pages = Pages::new();
        while let Some(page) = pages.next(store, 1024).await? {
            for f in page {
                if f.cluster(bootstrap.as_deref()) != Some(source) || !self.in_scope(&f) {
                    continue;
                }
                max = max.max(Some(f.ledger_id));
                // Unknown target next id: keep them all (the precheck reads
                // it again and reports why it could not).
                if target_next.is_none_or(|next| f.ledger_id >= next) {
                    kept.push(f.ledger_id);
                }
            }
        }
        kept.extend(max);
        Ok(
            match registry
                .precheck(source, target, &kept, self.inner.idgen.as_ref())
                .await
            {
                Ok(p) => Ok(self.advise(p).await),
                Err(e) => Err(e),
            },
        )
    }

    /// The registry's precheck made stricter by the safety margin
    /// ([`with_margin`](Self::with_margin)) and, when it is not ready, the
    /// exact bound to advance the target's generator beyond and the command
    /// that does it (`advanceBeyond`, `advanceCommand`).
    pub(super) async fn advise(&self, p: PrecheckResult) -> PrecheckResult {
        let mut p = self.with_margin(p);
        if p.ready {
            return p;
        }
        let Some(next) = p.source_next_ledger_id else {
            // The source's generator cannot be read: no number to give
            // (`sourceIdgenError` says what to fix).
            return p;
        };
        let margin = self.inner.config.idgen_safety_margin.max(1);
        // `--advance-beyond N` makes the target's next id at least N + 1;
        // ready needs it above the highest copied id and at least the margin
        // beyond the source's next id.
        let beyond = p
            .source_max_ledger_id
            .unwrap_or(i64::MIN)
            .max(next.saturating_add(margin - 1))
            .max(next);
        let uri = match self.inner.registry.get(&p.target_cluster_name).await {
            Ok(Some(rec)) => rec.metadata_service_uri,
            _ => "<its metadata-service URI>".to_owned(),
        };
        p.advance_beyond = Some(beyond);
        p.advance_command = Some(format!(
            "bookie-switch idgen --metadata-service-uri {uri} --advance-beyond {beyond}"
        ));
        p
    }

    /// The registry's precheck made stricter by the idgen safety margin
    /// ([`OrchestratorConfig::idgen_safety_margin`]): the target's next id
    /// must be at least the margin beyond the source's next id, since nodes
    /// keep creating ledgers on the source until they applied the switch.
    ///
    /// [`OrchestratorConfig::idgen_safety_margin`]: super::OrchestratorConfig::idgen_safety_margin
    pub(super) fn with_margin(&self, mut p: PrecheckResult) -> PrecheckResult {
        let margin = self.inner.config.idgen_safety_margin.max(1);
        if let Some(next) = p.source_next_ledger_id {
            if p.target_next_ledger_id.saturating_sub(next) < margin {
                p.ready = false;
            }
        }
        p
    }
}

/// A directive that no switch record accounts for yet: its switch is starting.
fn starting(d: &SwitchDirective) -> OrchestratorError {
    OrchestratorError::SwitchInProgress {
        switch_id: d.epoch.to_string(),
        target: d.target.clone(),
        phase: None,
    }
}

/// The cluster of the longest override that encloses `prefix` (not
/// `prefix`'s own): where the prefix's new ledgers go before its canary.
fn enclosing_cluster(
    overrides: &bkswitch_registry::PrefixOverrides,
    prefix: &str,
) -> Option<String> {
    overrides
        .iter()
        .filter(|(p, _)| p.as_str() != prefix && prefix.starts_with(p.as_str()))
        .max_by_key(|(p, _)| p.len())
        .map(|(_, o)| o.cluster.clone())
}
