//! The coordinator: BUILD → PROMOTE → CLEANUP, ROLLBACK, resume.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bkswitch_bk_client::{BookKeeper, BookKeeperExt, DigestType};
use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyError, CopyOptions, CopyOutcome};
use bkswitch_managed_ledger::schema::SchemaStorageOptions;
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::codec::encode_managed_cursor_info;
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::{
    ClusterStatus, IdgenSource, PrecheckResult, Registry, RegistryError, SwitchDirective,
    ZkIdgenSource,
};
use futures::stream::{self, StreamExt};

use crate::error::{OrchestratorError, Result};
use crate::model::{
    record_key, CleanupOptions, CleanupReport, CleanupTarget, Counts, Failure, LedgerKind,
    LedgerRecord, LedgerState, Phase, SwitchRecord, SwitchStatus,
};
use crate::owners::{
    ClusterClients, CursorPromoteOutcome, CursorPromoteRequest, PromoteError, TopicOwners,
};
use crate::scan::{cursor_compression, decode_cursor, scan, Found};

/// At most this many failures are listed in a switch record and a status.
pub const MAX_FAILURES_LISTED: usize = 100;

macro_rules! fail_point {
    ($name:literal) => {
        fail::fail_point!($name, |_| Err(OrchestratorError::Injected { point: $name }))
    };
}

/// Settings of an [`Orchestrator`] (SPEC §3 defaults).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OrchestratorConfig {
    /// Ledgers copied at once per stage (`migrationConcurrency`, 16).
    pub migration_concurrency: usize,
    /// How long a switch can be rolled back after SWITCHED (`rollbackWindowHours`, 24 h).
    pub rollback_window: Duration,
    /// Digest type of cursor ledgers (as the managed ledgers are configured).
    pub cursor_digest_type: DigestType,
    /// Password of cursor ledgers.
    pub cursor_password: Vec<u8>,
    /// Digest type of schema ledgers (as the schema storage is configured).
    pub schema_digest_type: DigestType,
    /// Password of schema ledgers.
    pub schema_password: Vec<u8>,
    /// Compare-and-set attempts per schema locator or cursor node (5, I10).
    pub max_schema_cas_attempts: usize,
    /// Skip the idgen precheck (lab only, I11).
    pub skip_idgen_precheck: bool,
    /// Entries in flight per copied ledger.
    pub copy_window: usize,
    /// Attempts per cursor owner call that answers "unavailable".
    pub promote_attempts: usize,
    /// Pause between those attempts.
    pub promote_retry_delay: Duration,
    /// BUILD/PROMOTE passes per run before giving up with
    /// [`OrchestratorError::NotConverged`] (ledgers keep appearing on the source
    /// until every node applied the switch).
    pub max_passes: usize,
}

impl Default for OrchestratorConfig {
    fn default() -> Self {
        let ml = ManagedLedgerConfig::default();
        let schema = SchemaStorageOptions::default().ledger_config;
        OrchestratorConfig {
            migration_concurrency: 16,
            rollback_window: Duration::from_secs(24 * 3600),
            cursor_digest_type: ml.digest_type,
            cursor_password: ml.password,
            schema_digest_type: schema.digest_type,
            schema_password: schema.password,
            max_schema_cas_attempts: 5,
            skip_idgen_precheck: false,
            copy_window: 64,
            promote_attempts: 10,
            promote_retry_delay: Duration::from_millis(200),
            max_passes: 10,
        }
    }
}

impl OrchestratorConfig {
    /// Sets the rollback window.
    pub fn with_rollback_window(mut self, window: Duration) -> Self {
        self.rollback_window = window;
        self
    }

    /// Sets the copy concurrency (at least 1).
    pub fn with_migration_concurrency(mut self, n: usize) -> Self {
        self.migration_concurrency = n.max(1);
        self
    }

    /// Skips the idgen precheck (lab only).
    pub fn with_skip_idgen_precheck(mut self, skip: bool) -> Self {
        self.skip_idgen_precheck = skip;
        self
    }

    /// Sets the cursor-owner retry policy.
    pub fn with_promote_retry(mut self, attempts: usize, delay: Duration) -> Self {
        self.promote_attempts = attempts.max(1);
        self.promote_retry_delay = delay;
        self
    }
}

/// Copy outcomes of one orchestrator instance (the ledger records keep them too).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyStats {
    /// Ledgers copied.
    pub copied: u64,
    /// Copies that found an identical ledger on the target.
    pub already_present: u64,
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

struct Inner {
    store: Arc<dyn MetadataStore>,
    registry: Registry,
    clients: Arc<dyn ClusterClients>,
    owners: Arc<dyn TopicOwners>,
    config: OrchestratorConfig,
    idgen: Arc<dyn IdgenSource>,
    lock: tokio::sync::Mutex<()>,
    copied: AtomicU64,
    already_present: AtomicU64,
    /// This coordinator's identity in switch leases.
    instance: String,
}

/// Releases a switch lease when a leased operation is dropped before it ends.
struct LeaseGuard {
    orchestrator: Option<Orchestrator>,
    id: String,
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        let Some(o) = self.orchestrator.take() else {
            return;
        };
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            let id = std::mem::take(&mut self.id);
            rt.spawn(async move { o.release_lease(&id).await });
        }
    }
}

/// A process-unique identity for an orchestrator's leases.
fn new_instance_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        now_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

/// The switch coordinator; see the [crate docs](crate). Cheap to clone.
#[derive(Clone)]
pub struct Orchestrator {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Orchestrator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Orchestrator")
            .field("root", &self.inner.registry.root())
            .field("config", &self.inner.config)
            .finish_non_exhaustive()
    }
}

/// What one run knows about the switch.
struct Ctx {
    id: String,
    source: String,
    target: String,
    bootstrap: Option<String>,
    src: Arc<dyn BookKeeper>,
    dst: Arc<dyn BookKeeper>,
    /// Whether a ledger found on the target under a copied id can only be a
    /// leftover copy of ours (the idgen precheck passed).
    own_target_ids: bool,
}

impl Orchestrator {
    /// A coordinator on `store` (the broker metadata store), the cluster
    /// `registry`, the clusters' `clients` and the topic `owners`. Reads next
    /// ledger ids for the precheck from ZooKeeper ([`ZkIdgenSource`]); see
    /// [`with_idgen`](Self::with_idgen).
    pub fn new(
        store: Arc<dyn MetadataStore>,
        registry: Registry,
        clients: Arc<dyn ClusterClients>,
        owners: Arc<dyn TopicOwners>,
        config: OrchestratorConfig,
    ) -> Orchestrator {
        Orchestrator {
            inner: Arc::new(Inner {
                store,
                registry,
                clients,
                owners,
                config,
                idgen: Arc::new(ZkIdgenSource::default()),
                lock: tokio::sync::Mutex::new(()),
                copied: AtomicU64::new(0),
                already_present: AtomicU64::new(0),
                instance: new_instance_id(),
            }),
        }
    }

    /// Uses `idgen` to read next ledger ids for the precheck.
    pub fn with_idgen(self, idgen: Arc<dyn IdgenSource>) -> Orchestrator {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            store: shared.store.clone(),
            registry: shared.registry.clone(),
            clients: shared.clients.clone(),
            owners: shared.owners.clone(),
            config: shared.config.clone(),
            idgen: shared.idgen.clone(),
            lock: tokio::sync::Mutex::new(()),
            copied: AtomicU64::new(shared.copied.load(Ordering::Relaxed)),
            already_present: AtomicU64::new(shared.already_present.load(Ordering::Relaxed)),
            instance: shared.instance.clone(),
        });
        Orchestrator {
            inner: Arc::new(Inner { idgen, ..inner }),
        }
    }

    /// The configuration.
    pub fn config(&self) -> &OrchestratorConfig {
        &self.inner.config
    }

    /// Copy outcomes of this instance.
    pub fn copy_stats(&self) -> CopyStats {
        CopyStats {
            copied: self.inner.copied.load(Ordering::Relaxed),
            already_present: self.inner.already_present.load(Ordering::Relaxed),
        }
    }

    /// `<registry root>/orchestrator`.
    pub fn records_root(&self) -> String {
        format!("{}/orchestrator", self.inner.registry.root())
    }

    fn switch_path(&self, id: &str) -> String {
        format!("{}/{id}", self.records_root())
    }

    fn ledgers_path(&self, id: &str) -> String {
        format!("{}/{id}/ledgers", self.records_root())
    }

    // ---------------------------------------------------------------- records

    async fn load(&self, id: &str) -> Result<(SwitchRecord, i64)> {
        let path = self.switch_path(id);
        let r = self
            .inner
            .store
            .get(&path)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?
            .ok_or_else(|| OrchestratorError::NoSuchSwitch {
                switch_id: id.to_owned(),
            })?;
        let rec = serde_json::from_slice(&r.value).map_err(|e| OrchestratorError::Corrupt {
            path,
            reason: e.to_string(),
        })?;
        Ok((rec, r.stat.version))
    }

    /// CAS-writes the switch record after `f` changed it (re-read on conflict).
    async fn update_switch(
        &self,
        id: &str,
        mut f: impl FnMut(&mut SwitchRecord),
    ) -> Result<SwitchRecord> {
        let path = self.switch_path(id);
        for _ in 0..16 {
            let (mut rec, v) = self.load(id).await?;
            f(&mut rec);
            rec.updated_at = now_ms();
            self.check_lease(id).await?;
            fail_point!("orchestrator::switch_record");
            let bytes = serde_json::to_vec(&rec).map_err(|e| OrchestratorError::Corrupt {
                path: path.clone(),
                reason: e.to_string(),
            })?;
            match self
                .inner
                .store
                .put(&path, &bytes, ExpectedVersion::Exactly(v))
                .await
            {
                Ok(_) => return Ok(rec),
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(OrchestratorError::metadata(format!("writing `{path}`"), e)),
            }
        }
        Err(OrchestratorError::NotConverged {
            switch_id: id.to_owned(),
            phase: "record update".to_owned(),
            reason: format!("`{path}` kept changing concurrently"),
        })
    }

    fn lease_path(&self, id: &str) -> String {
        format!("{}/lease", self.switch_path(id))
    }

    /// Runs `body` holding the switch's lease: an ephemeral node naming this
    /// coordinator, so that two coordinators never work on one switch at once
    /// (e.g. a leader whose session expired mid-BUILD and the leader elected
    /// after it). The lease disappears with the holder's metadata session; it
    /// is released when `body` returns.
    async fn leased<T>(
        &self,
        id: &str,
        body: impl std::future::Future<Output = Result<T>>,
    ) -> Result<T> {
        self.acquire_lease(id).await?;
        // Released in the background if this future is dropped mid-way (the
        // caller was cancelled): otherwise the lease would last as long as the
        // metadata session.
        let mut guard = LeaseGuard {
            orchestrator: Some(self.clone()),
            id: id.to_owned(),
        };
        let result = body.await;
        guard.orchestrator = None;
        self.release_lease(id).await;
        result
    }

    async fn acquire_lease(&self, id: &str) -> Result<()> {
        // The switch must exist (its record is the lease's parent).
        self.load(id).await?;
        let path = self.lease_path(id);
        let me = self.inner.instance.as_bytes();
        match self
            .inner
            .store
            .create(&path, me, bkswitch_metadata_store::CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == bkswitch_metadata_store::ErrorKind::AlreadyExists => {
                match self.inner.store.get(&path).await {
                    Ok(Some(r)) if r.value == me => Ok(()),
                    Ok(Some(r)) => Err(OrchestratorError::Locked {
                        switch_id: id.to_owned(),
                        holder: String::from_utf8_lossy(&r.value).into_owned(),
                    }),
                    // Released meanwhile: let the caller retry.
                    Ok(None) => Err(OrchestratorError::Locked {
                        switch_id: id.to_owned(),
                        holder: "(released)".to_owned(),
                    }),
                    Err(e) => Err(OrchestratorError::metadata(format!("reading `{path}`"), e)),
                }
            }
            Err(e) => Err(OrchestratorError::metadata(format!("creating `{path}`"), e)),
        }
    }

    async fn release_lease(&self, id: &str) {
        let path = self.lease_path(id);
        if let Ok(Some(r)) = self.inner.store.get(&path).await {
            if r.value == self.inner.instance.as_bytes() {
                let _ = self
                    .inner
                    .store
                    .delete(&path, ExpectedVersion::Exactly(r.stat.version))
                    .await;
            }
        }
    }

    /// Fails when this coordinator no longer holds the switch's lease (its
    /// session expired and another coordinator may have taken over).
    async fn check_lease(&self, id: &str) -> Result<()> {
        let path = self.lease_path(id);
        match self.inner.store.get(&path).await {
            Ok(Some(r)) if r.value == self.inner.instance.as_bytes() => Ok(()),
            Ok(Some(r)) => Err(OrchestratorError::Locked {
                switch_id: id.to_owned(),
                holder: String::from_utf8_lossy(&r.value).into_owned(),
            }),
            Ok(None) => Err(OrchestratorError::Locked {
                switch_id: id.to_owned(),
                holder: "(none: this coordinator lost its lease)".to_owned(),
            }),
            Err(e) => Err(OrchestratorError::metadata(format!("reading `{path}`"), e)),
        }
    }

    async fn list_ledgers(&self, id: &str) -> Result<BTreeMap<String, LedgerRecord>> {
        let base = self.ledgers_path(id);
        let store = &self.inner.store;
        let mut out = BTreeMap::new();
        let names = store
            .children(&base)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("listing `{base}`"), e))?;
        for name in names {
            let path = format!("{base}/{name}");
            let Some(r) = store
                .get(&path)
                .await
                .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?
            else {
                continue;
            };
            let rec: LedgerRecord =
                serde_json::from_slice(&r.value).map_err(|e| OrchestratorError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            out.insert(name, rec);
        }
        Ok(out)
    }

    /// Writes a ledger record with a compare-and-set against the version read.
    async fn put_ledger(&self, id: &str, rec: &mut LedgerRecord) -> Result<()> {
        rec.updated_at = now_ms();
        self.check_lease(id).await?;
        fail_point!("orchestrator::ledger_record");
        let path = format!("{}/{}", self.ledgers_path(id), rec.key());
        let bytes = serde_json::to_vec(&*rec).map_err(|e| OrchestratorError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        for _ in 0..16 {
            let expected = match self
                .inner
                .store
                .exists(&path)
                .await
                .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?
            {
                Some(s) => ExpectedVersion::Exactly(s.version),
                None => ExpectedVersion::NotExists,
            };
            match self.inner.store.put(&path, &bytes, expected).await {
                Ok(_) => return Ok(()),
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(OrchestratorError::metadata(format!("writing `{path}`"), e)),
            }
        }
        Err(OrchestratorError::NotConverged {
            switch_id: id.to_owned(),
            phase: "ledger record".to_owned(),
            reason: format!("`{path}` kept changing concurrently"),
        })
    }

    async fn set_state(
        &self,
        id: &str,
        rec: &mut LedgerRecord,
        state: LedgerState,
        reason: Option<String>,
    ) -> Result<()> {
        rec.state = state;
        match state {
            LedgerState::Promoted => rec.was_promoted = true,
            LedgerState::RolledBack => rec.was_promoted = false,
            _ => {}
        }
        if reason.is_some() {
            rec.reason = reason;
        }
        self.put_ledger(id, rec).await
    }

    /// Every recorded switch id, by ascending epoch.
    pub async fn switch_ids(&self) -> Result<Vec<String>> {
        let root = self.records_root();
        let mut ids: Vec<(i64, String)> = self
            .inner
            .store
            .children(&root)
            .await
            .map_err(|e| OrchestratorError::metadata(format!("listing `{root}`"), e))?
            .into_iter()
            .filter_map(|c| c.parse::<i64>().ok().map(|e| (e, c)))
            .collect();
        ids.sort();
        Ok(ids.into_iter().map(|(_, c)| c).collect())
    }

    // ----------------------------------------------------------------- status

    /// The status of a switch, with counts computed from its ledger records.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::NoSuchSwitch`], [`OrchestratorError::Corrupt`],
    /// [`OrchestratorError::Metadata`].
    pub async fn status(&self, switch_id: &str) -> Result<SwitchStatus> {
        let (rec, _) = self.load(switch_id).await?;
        let ledgers = self.list_ledgers(switch_id).await?;
        let (counts, failures) = summarize(&ledgers);
        Ok(SwitchStatus {
            switch_id: rec.switch_id,
            epoch: rec.epoch,
            source: rec.source,
            target: rec.target,
            phase: rec.phase,
            counts,
            created_at: rec.created_at,
            updated_at: rec.updated_at,
            switched_at: rec.switched_at,
            rollback_deadline: rec.rollback_deadline,
            finished_at: rec.finished_at,
            failures,
        })
    }

    /// The status of the latest switch, if any.
    ///
    /// # Errors
    ///
    /// As [`status`](Self::status).
    pub async fn current_status(&self) -> Result<Option<SwitchStatus>> {
        match self.switch_ids().await?.pop() {
            Some(id) => Ok(Some(self.status(&id).await?)),
            None => Ok(None),
        }
    }

    /// Every ledger record of a switch, by key (`<kind>-<ledgerId>`).
    ///
    /// # Errors
    ///
    /// As [`status`](Self::status).
    pub async fn ledger_records(&self, switch_id: &str) -> Result<Vec<LedgerRecord>> {
        self.load(switch_id).await?;
        Ok(self.list_ledgers(switch_id).await?.into_values().collect())
    }

    // ------------------------------------------------------------------ start

    /// Starts a switch to `target`: validates it, runs the idgen precheck
    /// (I11), writes the switch directive (every node then creates new ledgers
    /// on `target`) and records the switch (phase BUILD). Idempotent: a switch
    /// to the directive's current target returns the recorded switch.
    /// Call [`run`](Self::run) next.
    ///
    /// Two starts at once (on different nodes) cannot both win: the directive
    /// is written with a CAS against the version read while validating, and a
    /// directive that no switch record accounts for yet counts as a switch in
    /// progress. The loser gets [`OrchestratorError::SwitchInProgress`] naming
    /// the winner's epoch and target, and writes nothing.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::UnknownCluster`], [`OrchestratorError::ClusterDeprecated`],
    /// [`OrchestratorError::AlreadyActive`], [`OrchestratorError::NoActiveCluster`],
    /// [`OrchestratorError::SwitchInProgress`], [`OrchestratorError::PrecheckFailed`]
    /// (nothing written in all these cases); registry and store errors.
    pub async fn start_switch(&self, target: &str, origin: Option<&str>) -> Result<SwitchStatus> {
        let _guard = self.inner.lock.lock().await;
        let registry = &self.inner.registry;
        let Some(record) = registry.get(target).await? else {
            return Err(OrchestratorError::UnknownCluster {
                name: target.to_owned(),
            });
        };
        // The directive as validated: the directive write below is a CAS
        // against this version, so two nodes starting switches at once cannot
        // both write one (the loser's CAS fails and nothing is written).
        let directive_path = format!("{}/switch-target", registry.root());
        let decode_directive = |r: &bkswitch_metadata_store::GetResult| {
            serde_json::from_slice::<SwitchDirective>(&r.value).map_err(|e| {
                OrchestratorError::Corrupt {
                    path: directive_path.clone(),
                    reason: format!("not a switch directive: {e}"),
                }
            })
        };
        let seen =
            match self.inner.store.get(&directive_path).await.map_err(|e| {
                OrchestratorError::metadata(format!("reading `{directive_path}`"), e)
            })? {
                Some(r) => Some((decode_directive(&r)?, r.stat.version)),
                None => None,
            };
        if let Some((d, _)) = &seen {
            if d.target == target {
                match self.load(&d.epoch.to_string()).await {
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
        let source = registry
            .active()
            .await?
            .ok_or(OrchestratorError::NoActiveCluster)?;
        let latest = match self.switch_ids().await?.pop() {
            Some(id) => Some(self.load(&id).await?.0),
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
                    phase: rec.phase.to_string(),
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
                return Err(OrchestratorError::SwitchInProgress {
                    switch_id: d.epoch.to_string(),
                    target: d.target.clone(),
                    phase: "STARTING".to_owned(),
                });
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
        fail_point!("orchestrator::directive");
        let directive = match seen {
            // Written by a start that did not record its switch (or is
            // recording it right now): record that directive's switch.
            Some((d, _)) if d.target == target => d,
            seen => {
                // Registry::write_directive re-reads the directive; this write
                // must fail when anything changed since the validation above.
                let (epoch, expected, extra) = match seen {
                    Some((d, v)) => (d.epoch + 1, ExpectedVersion::Exactly(v), d.extra),
                    None => (1, ExpectedVersion::NotExists, Default::default()),
                };
                let directive = SwitchDirective {
                    target: target.to_owned(),
                    origin: origin.map(str::to_owned),
                    epoch,
                    ts: now_ms(),
                    extra,
                };
                match registry.put_directive(&directive, expected).await {
                    Ok(_) => directive,
                    Err(RegistryError::Metadata(e)) if e.is_conflict() => {
                        // Another node wrote a directive since: name it.
                        let now = self.inner.store.get(&directive_path).await.map_err(|e| {
                            OrchestratorError::metadata(format!("reading `{directive_path}`"), e)
                        })?;
                        let now = match now {
                            Some(r) => Some(decode_directive(&r)?),
                            None => None,
                        };
                        match now {
                            // The same switch, asked for on two nodes at once.
                            Some(d) if d.target == target => d,
                            Some(d) => {
                                return Err(OrchestratorError::SwitchInProgress {
                                    switch_id: d.epoch.to_string(),
                                    target: d.target,
                                    phase: "STARTING".to_owned(),
                                })
                            }
                            None => {
                                return Err(OrchestratorError::metadata(
                                    format!("writing `{directive_path}`"),
                                    e,
                                ))
                            }
                        }
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        };
        let id = directive.epoch.to_string();
        let now = now_ms();
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
        fail_point!("orchestrator::switch_record");
        let path = self.switch_path(&id);
        let bytes = serde_json::to_vec(&rec).map_err(|e| OrchestratorError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        match self
            .inner
            .store
            .put(&path, &bytes, ExpectedVersion::NotExists)
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_conflict() => {}
            Err(e) => return Err(OrchestratorError::metadata(format!("creating `{path}`"), e)),
        }
        tracing::info!(switch_id = %id, source = %rec.source, target, "switch started");
        self.status(&id).await
    }

    /// Runs the idgen precheck (I11) for a switch from the ACTIVE cluster to
    /// `target`, over every schema and cursor ledger the switch would copy
    /// (those stamped to the ACTIVE cluster; unstamped ones count for the
    /// bootstrap cluster). Writes nothing; `ready` may be false.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::UnknownCluster`], [`OrchestratorError::NoActiveCluster`],
    /// registry errors of the precheck, store errors of the scan.
    pub async fn precheck(&self, target: &str) -> Result<PrecheckResult> {
        let registry = &self.inner.registry;
        if registry.get(target).await?.is_none() {
            return Err(OrchestratorError::UnknownCluster {
                name: target.to_owned(),
            });
        }
        let source = registry
            .active()
            .await?
            .ok_or(OrchestratorError::NoActiveCluster)?;
        Ok(self.precheck_from(&source, target).await??)
    }

    async fn precheck_from(
        &self,
        source: &str,
        target: &str,
    ) -> Result<std::result::Result<PrecheckResult, RegistryError>> {
        let registry = &self.inner.registry;
        let bootstrap = registry
            .bootstrap()
            .await?
            .map(|b| b.bootstrap_cluster_name);
        let ids: Vec<i64> = scan(self.inner.store.as_ref())
            .await?
            .into_iter()
            .filter(|f| f.cluster(bootstrap.as_deref()) == Some(source))
            .map(|f| f.ledger_id)
            .collect();
        Ok(registry
            .precheck(source, target, &ids, self.inner.idgen.as_ref())
            .await)
    }

    async fn ctx(&self, rec: &SwitchRecord) -> Result<Ctx> {
        let bootstrap = self
            .inner
            .registry
            .bootstrap()
            .await?
            .map(|b| b.bootstrap_cluster_name);
        Ok(Ctx {
            id: rec.switch_id.clone(),
            source: rec.source.clone(),
            target: rec.target.clone(),
            bootstrap,
            src: self.inner.clients.client(&rec.source).await?,
            dst: self.inner.clients.client(&rec.target).await?,
            own_target_ids: rec.precheck_passed,
        })
    }

    // -------------------------------------------------------------------- run

    /// Resumes every switch that still needs BUILD/PROMOTE (or a rollback that
    /// was interrupted); returns their statuses.
    ///
    /// # Errors
    ///
    /// The first error of [`run`](Self::run) / [`rollback`](Self::rollback).
    pub async fn resume_all(&self) -> Result<Vec<SwitchStatus>> {
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

    /// Continues a switch where it stopped (I6): the same as [`run`](Self::run),
    /// or finishes an interrupted rollback.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub async fn resume(&self, switch_id: &str) -> Result<SwitchStatus> {
        let (rec, _) = self.load(switch_id).await?;
        if rec.phase == Phase::RollingBack {
            return self.rollback(switch_id).await;
        }
        self.run(switch_id).await
    }

    /// BUILD then PROMOTE, until no schema or cursor ledger is stamped to the
    /// source except failed ones; the switch then is SWITCHED with its rollback
    /// window open. Every step is recorded before the next, so a crash at any
    /// point is resumed by calling `run` again (no ledger is copied twice). A
    /// switch already SWITCHED (or later) returns its status.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::NotConverged`] when ledgers are still waiting (cursor
    /// owners unavailable, contended locators): call again;
    /// [`OrchestratorError::WrongPhase`] during a rollback; store, registry and
    /// client errors.
    pub async fn run(&self, switch_id: &str) -> Result<SwitchStatus> {
        self.leased(switch_id, self.run_leased(switch_id)).await
    }

    async fn run_leased(&self, switch_id: &str) -> Result<SwitchStatus> {
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
                    r.rollback_deadline =
                        Some(now.saturating_add(window.as_millis().min(i64::MAX as u128) as i64));
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

    // ------------------------------------------------------------------ BUILD

    async fn build(&self, ctx: &Ctx, found: Vec<Found>) -> Result<()> {
        let n = self.inner.config.migration_concurrency.max(1);
        let (schemas, cursors): (Vec<Found>, Vec<Found>) = found
            .into_iter()
            .partition(|f| f.kind == LedgerKind::Schema);
        let stage = |items: Vec<Found>| async move {
            let results: Vec<Result<()>> = stream::iter(items)
                .map(|f| self.build_one(ctx, f))
                .buffer_unordered(n)
                .collect()
                .await;
            results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
        };
        let (a, b) = futures::join!(stage(schemas), stage(cursors));
        a.and(b)
    }

    fn copy_options(&self, kind: LedgerKind) -> CopyOptions {
        let cfg = &self.inner.config;
        let opts = match kind {
            LedgerKind::Schema => {
                CopyOptions::new(cfg.schema_digest_type, cfg.schema_password.clone())
            }
            LedgerKind::Cursor => {
                CopyOptions::new(cfg.cursor_digest_type, cfg.cursor_password.clone())
            }
        };
        opts.with_window(cfg.copy_window.max(1))
    }

    /// Copies one ledger; a copy whose destination holds a leftover of ours
    /// (interrupted or stale copy) is deleted and copied again once.
    async fn copy(
        &self,
        ctx: &Ctx,
        kind: LedgerKind,
        ledger_id: i64,
    ) -> Result<std::result::Result<bkswitch_ledger_copy::CopyReport, CopyError>> {
        let opts = self.copy_options(kind);
        fail_point!("orchestrator::copy");
        let mut result =
            copy_ledger_preserving_ids(ledger_id, ctx.src.as_ref(), ctx.dst.as_ref(), &opts).await;
        if matches!(result, Err(CopyError::Mismatch { .. })) && ctx.own_target_ids {
            // The precheck proved the target never hands out this id itself, so
            // the ledger there is a copy of ours that is stale or partial.
            tracing::warn!(ledger_id, cluster = %ctx.target,
                "replacing a stale or partial copy on the target");
            fail_point!("orchestrator::delete_target_copy");
            if ctx.dst.delete_ledger_if_exists(ledger_id).await.is_ok() {
                fail_point!("orchestrator::copy");
                result = copy_ledger_preserving_ids(
                    ledger_id,
                    ctx.src.as_ref(),
                    ctx.dst.as_ref(),
                    &opts,
                )
                .await;
            }
        }
        if let Ok(report) = &result {
            match report.outcome {
                CopyOutcome::Copied => self.inner.copied.fetch_add(1, Ordering::Relaxed),
                CopyOutcome::AlreadyPresent => {
                    self.inner.already_present.fetch_add(1, Ordering::Relaxed)
                }
            };
        }
        Ok(result)
    }

    async fn build_one(&self, ctx: &Ctx, f: Found) -> Result<()> {
        let copied = self.copy(ctx, f.kind, f.ledger_id).await?;
        let mut rec = LedgerRecord {
            kind: f.kind,
            ledger_id: f.ledger_id,
            owner_path: f.owner_path.clone(),
            managed_ledger: f.managed_ledger.clone(),
            cursor: f.cursor.clone(),
            copied_last_entry_id: -1,
            was_unstamped: f.stamp.is_none(),
            target_copy: false,
            already_present: false,
            state: LedgerState::Built,
            was_promoted: false,
            rollover_ledger_id: None,
            deleted_from: None,
            reason: None,
            updated_at: 0,
        };
        match copied {
            Ok(report) => {
                rec.copied_last_entry_id = report.last_entry_id;
                rec.target_copy = true;
                rec.already_present = report.outcome == CopyOutcome::AlreadyPresent;
            }
            Err(e) if !self.still_referenced(&f).await? => {
                // A live cursor rolled over (or the schema/cursor was deleted)
                // between the scan and the copy: the ledger is gone and nothing
                // points to it any more. Nothing to move.
                tracing::info!(ledger_id = f.ledger_id, path = %f.owner_path, error = %e,
                    "ledger no longer referenced; nothing to copy");
                rec.state = LedgerState::Obsolete;
                rec.reason = Some(format!(
                    "`{}` no longer references ledger {} (rolled over or deleted before the copy)",
                    f.owner_path, f.ledger_id
                ));
            }
            Err(e) => {
                tracing::warn!(ledger_id = f.ledger_id, path = %f.owner_path, error = %e,
                    "ledger copy failed; it stays on the source");
                rec.state = LedgerState::Failed;
                rec.reason = Some(format!(
                    "{e}{}",
                    if e.is_retryable() {
                        " (retryable: start a new switch later to move it)"
                    } else {
                        ""
                    }
                ));
            }
        }
        self.put_ledger(&ctx.id, &mut rec).await
    }

    /// Whether the metadata that named `f`'s ledger at scan time still names it.
    async fn still_referenced(&self, f: &Found) -> Result<bool> {
        let r =
            self.inner.store.get(&f.owner_path).await.map_err(|e| {
                OrchestratorError::metadata(format!("reading `{}`", f.owner_path), e)
            })?;
        let Some(r) = r else {
            return Ok(false);
        };
        Ok(match f.kind {
            LedgerKind::Cursor => {
                decode_cursor(&r.value).is_some_and(|info| info.cursors_ledger_id == f.ledger_id)
            }
            LedgerKind::Schema => SchemaLocator::decode(r.value.as_slice()).map_or(true, |loc| {
                std::iter::once(&loc.info)
                    .chain(loc.index.iter())
                    .any(|e| e.position.ledger_id == f.ledger_id)
            }),
        })
    }

    // ---------------------------------------------------------------- PROMOTE

    async fn promote(&self, ctx: &Ctx) -> Result<()> {
        let records = self.list_ledgers(&ctx.id).await?;
        let mut by_locator: BTreeMap<String, Vec<LedgerRecord>> = BTreeMap::new();
        let mut cursors = Vec::new();
        for r in records
            .into_values()
            .filter(|r| r.state == LedgerState::Built)
        {
            match r.kind {
                LedgerKind::Schema => by_locator.entry(r.owner_path.clone()).or_default().push(r),
                LedgerKind::Cursor => cursors.push(r),
            }
        }
        let n = self.inner.config.migration_concurrency.max(1);
        let schema_stage = async {
            let results: Vec<Result<()>> = stream::iter(by_locator)
                .map(|(path, recs)| self.promote_schema(ctx, path, recs))
                .buffer_unordered(n)
                .collect()
                .await;
            results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
        };
        let cursor_stage = async {
            let results: Vec<Result<()>> = stream::iter(cursors)
                .map(|r| self.promote_cursor(ctx, r))
                .buffer_unordered(n)
                .collect()
                .await;
            results.into_iter().collect::<Result<Vec<()>>>().map(|_| ())
        };
        let (a, b) = futures::join!(schema_stage, cursor_stage);
        a.and(b)
    }

    async fn delete_target_copy(&self, ctx: &Ctx, rec: &mut LedgerRecord) -> Result<()> {
        if !rec.target_copy {
            return Ok(());
        }
        fail_point!("orchestrator::delete_target_copy");
        match ctx.dst.delete_ledger_if_exists(rec.ledger_id).await {
            Ok(_) => rec.target_copy = false,
            Err(e) => {
                tracing::warn!(ledger_id = rec.ledger_id, error = %e,
                    "unreferenced copy not deleted from the target; cleanup retries");
            }
        }
        Ok(())
    }

    /// Flips the stamps of one locator's BUILT ledgers from `from` to `to`
    /// (changing nothing else, I10); returns the ledger ids that now name `to`
    /// and whether the locator still exists. `None` when the CAS kept losing.
    async fn flip_locator(
        &self,
        path: &str,
        ids: &BTreeSet<i64>,
        from: &str,
        to: &str,
        bootstrap: Option<&str>,
        unstamp: &BTreeSet<i64>,
    ) -> Result<Option<(bool, BTreeSet<i64>)>> {
        let store = &self.inner.store;
        for _ in 0..self.inner.config.max_schema_cas_attempts.max(1) {
            let Some(r) = store
                .get(path)
                .await
                .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?
            else {
                return Ok(Some((false, BTreeSet::new())));
            };
            let mut locator = SchemaLocator::decode(r.value.as_slice()).map_err(|e| {
                OrchestratorError::Corrupt {
                    path: path.to_owned(),
                    reason: format!("not a SchemaLocator: {e}"),
                }
            })?;
            let mut changed = false;
            let mut on_to = BTreeSet::new();
            for entry in std::iter::once(&mut locator.info).chain(locator.index.iter_mut()) {
                let pos = &mut entry.position;
                if !ids.contains(&pos.ledger_id) {
                    continue;
                }
                let stamp = pos
                    .cluster_stamp()
                    .map_err(|e| OrchestratorError::Corrupt {
                        path: path.to_owned(),
                        reason: e.to_string(),
                    })?;
                let effective = stamp.or(bootstrap);
                if stamp == Some(to) || (stamp.is_none() && effective == Some(to)) {
                    on_to.insert(pos.ledger_id);
                } else if effective == Some(from) {
                    if unstamp.contains(&pos.ledger_id) && bootstrap == Some(to) {
                        let _ = pos.remove_cluster_stamp();
                    } else {
                        pos.set_cluster_stamp(to)
                            .map_err(|e| OrchestratorError::Corrupt {
                                path: path.to_owned(),
                                reason: e.to_string(),
                            })?;
                    }
                    on_to.insert(pos.ledger_id);
                    changed = true;
                }
            }
            if !changed {
                return Ok(Some((true, on_to)));
            }
            fail_point!("orchestrator::schema_cas");
            match store
                .put(
                    path,
                    &locator.encode_to_vec(),
                    ExpectedVersion::Exactly(r.stat.version),
                )
                .await
            {
                Ok(_) => return Ok(Some((true, on_to))),
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(OrchestratorError::metadata(format!("writing `{path}`"), e)),
            }
        }
        tracing::warn!(
            path,
            "schema locator kept changing; retried in the next pass"
        );
        Ok(None)
    }

    /// Schema PROMOTE, centrally (I10, I14).
    async fn promote_schema(
        &self,
        ctx: &Ctx,
        path: String,
        mut recs: Vec<LedgerRecord>,
    ) -> Result<()> {
        let ids: BTreeSet<i64> = recs.iter().map(|r| r.ledger_id).collect();
        let Some((exists, on_target)) = self
            .flip_locator(
                &path,
                &ids,
                &ctx.source,
                &ctx.target,
                ctx.bootstrap.as_deref(),
                &BTreeSet::new(),
            )
            .await?
        else {
            return Ok(());
        };
        for rec in &mut recs {
            if on_target.contains(&rec.ledger_id) {
                self.set_state(&ctx.id, rec, LedgerState::Promoted, None)
                    .await?;
            } else if !exists || !on_target.contains(&rec.ledger_id) {
                self.delete_target_copy(ctx, rec).await?;
                self.set_state(
                    &ctx.id,
                    rec,
                    LedgerState::Obsolete,
                    Some("the schema version was deleted before PROMOTE".to_owned()),
                )
                .await?;
            }
        }
        Ok(())
    }

    /// Cursor PROMOTE: on the owner (I13), or by the coordinator when no node
    /// owns the topic.
    async fn promote_cursor(&self, ctx: &Ctx, mut rec: LedgerRecord) -> Result<()> {
        let ml = rec.managed_ledger.clone().unwrap_or_default();
        let req = CursorPromoteRequest {
            managed_ledger: ml.clone(),
            cursor_name: rec.cursor.clone().unwrap_or_default(),
            target_cluster_name: ctx.target.clone(),
            expected_cursors_ledger_id: rec.ledger_id,
            copied_last_entry_id: rec.copied_last_entry_id,
        };
        let cfg = &self.inner.config;
        if let Some(owner) = self.inner.owners.owner(&ml).await? {
            for attempt in 0..cfg.promote_attempts.max(1) {
                if attempt > 0 {
                    tokio::time::sleep(cfg.promote_retry_delay).await;
                }
                fail_point!("orchestrator::cursor_promote");
                match owner.promote_cursor(&req).await {
                    Ok(CursorPromoteOutcome::Promoted | CursorPromoteOutcome::AlreadyOnTarget) => {
                        return self
                            .set_state(&ctx.id, &mut rec, LedgerState::Promoted, None)
                            .await;
                    }
                    Ok(CursorPromoteOutcome::RolledOver { new_ledger_id }) => {
                        return self.rolled_over(ctx, &mut rec, new_ledger_id).await;
                    }
                    Err(PromoteError::RolledOver { actual, .. }) => {
                        return self.rolled_over(ctx, &mut rec, actual).await;
                    }
                    Err(PromoteError::NotOwner { .. }) => break,
                    Err(e @ PromoteError::Unavailable { .. }) => {
                        tracing::info!(managed_ledger = %ml, error = %e, "cursor owner busy; retrying");
                        if attempt + 1 == cfg.promote_attempts.max(1) {
                            return Ok(());
                        }
                    }
                    Err(e) => {
                        return self
                            .set_state(
                                &ctx.id,
                                &mut rec,
                                LedgerState::Failed,
                                Some(format!("the owner of `{ml}` refused: {e}")),
                            )
                            .await;
                    }
                }
            }
            if self.inner.owners.owner(&ml).await?.is_some() {
                // Ownership moved meanwhile: the next pass asks the new owner.
                return Ok(());
            }
        }
        self.promote_cursor_unowned(ctx, rec).await
    }

    async fn rolled_over(&self, ctx: &Ctx, rec: &mut LedgerRecord, new_id: i64) -> Result<()> {
        self.delete_target_copy(ctx, rec).await?;
        rec.rollover_ledger_id = Some(new_id);
        self.set_state(
            &ctx.id,
            rec,
            LedgerState::RolledOver,
            Some(format!(
                "promotedViaRolloverFallback: the cursor moved on to ledger {new_id}"
            )),
        )
        .await
    }

    /// The coordinator promotes a cursor no node owns: the cursor node must
    /// still name the copied ledger, stamped to the source; the source ledger is
    /// sealed (recovery-open fences a dead writer, there is no live one) and a
    /// stale copy is replaced before the stamp-only compare-and-set.
    async fn promote_cursor_unowned(&self, ctx: &Ctx, mut rec: LedgerRecord) -> Result<()> {
        let store = &self.inner.store;
        let cfg = &self.inner.config;
        let path = rec.owner_path.clone();
        for _ in 0..cfg.max_schema_cas_attempts.max(1) {
            let Some(r) = store
                .get(&path)
                .await
                .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?
            else {
                self.delete_target_copy(ctx, &mut rec).await?;
                return self
                    .set_state(
                        &ctx.id,
                        &mut rec,
                        LedgerState::Obsolete,
                        Some("the cursor was deleted before PROMOTE".to_owned()),
                    )
                    .await;
            };
            let Some(mut info) = decode_cursor(&r.value) else {
                return Err(OrchestratorError::Corrupt {
                    path,
                    reason: "not a ManagedCursorInfo".to_owned(),
                });
            };
            if info.cursors_ledger_id != rec.ledger_id {
                return self
                    .rolled_over(ctx, &mut rec, info.cursors_ledger_id)
                    .await;
            }
            let stamp = info
                .cluster_stamp()
                .map_err(|e| OrchestratorError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?
                .map(str::to_owned);
            if stamp.as_deref() == Some(ctx.target.as_str()) {
                return self
                    .set_state(&ctx.id, &mut rec, LedgerState::Promoted, None)
                    .await;
            }
            if stamp.as_deref().or(ctx.bootstrap.as_deref()) != Some(ctx.source.as_str()) {
                return self
                    .set_state(
                        &ctx.id,
                        &mut rec,
                        LedgerState::Failed,
                        Some(format!(
                            "the cursor ledger is stamped to {stamp:?}, neither `{}` nor `{}`",
                            ctx.source, ctx.target
                        )),
                    )
                    .await;
            }
            let lac = match self.sealed_lac(ctx, rec.ledger_id).await {
                Ok(lac) => lac,
                Err(reason) => {
                    return self
                        .set_state(&ctx.id, &mut rec, LedgerState::Failed, Some(reason))
                        .await
                }
            };
            if lac != rec.copied_last_entry_id {
                // The copy is stale: replace it with one of the sealed ledger.
                self.delete_target_copy(ctx, &mut rec).await?;
                match self.copy(ctx, LedgerKind::Cursor, rec.ledger_id).await? {
                    Ok(report) => {
                        rec.copied_last_entry_id = report.last_entry_id;
                        rec.target_copy = true;
                        self.put_ledger(&ctx.id, &mut rec).await?;
                    }
                    Err(e) => {
                        return self
                            .set_state(
                                &ctx.id,
                                &mut rec,
                                LedgerState::Failed,
                                Some(format!("re-copying the sealed cursor ledger failed: {e}")),
                            )
                            .await
                    }
                }
                continue;
            }
            info.set_cluster_stamp(&ctx.target)
                .map_err(|e| OrchestratorError::Corrupt {
                    path: path.clone(),
                    reason: e.to_string(),
                })?;
            let bytes =
                encode_managed_cursor_info(&info, cursor_compression(&r.value)).map_err(|e| {
                    OrchestratorError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    }
                })?;
            fail_point!("orchestrator::cursor_promote");
            match store
                .put(&path, &bytes, ExpectedVersion::Exactly(r.stat.version))
                .await
            {
                Ok(_) => {
                    return self
                        .set_state(&ctx.id, &mut rec, LedgerState::Promoted, None)
                        .await
                }
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(OrchestratorError::metadata(format!("writing `{path}`"), e)),
            }
        }
        Ok(())
    }

    /// The last entry of the source ledger once sealed (recovery-open when it
    /// is still open: there is no live writer, the topic has no owner).
    async fn sealed_lac(&self, ctx: &Ctx, ledger_id: i64) -> std::result::Result<i64, String> {
        let cfg = &self.inner.config;
        let h = ctx
            .src
            .open_ledger_no_recovery(ledger_id, cfg.cursor_digest_type, &cfg.cursor_password)
            .await
            .map_err(|e| format!("cannot open the source cursor ledger: {e}"))?;
        let lac = if h.is_closed() {
            h.last_add_confirmed()
        } else {
            let _ = h.close().await;
            let h = ctx
                .src
                .open_ledger(ledger_id, cfg.cursor_digest_type, &cfg.cursor_password)
                .await
                .map_err(|e| format!("cannot recover the source cursor ledger: {e}"))?;
            let lac = h.last_add_confirmed();
            let _ = h.close().await;
            return Ok(lac);
        };
        let _ = h.close().await;
        Ok(lac)
    }

    // ---------------------------------------------------------------- CLEANUP

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

    async fn targets(
        &self,
        sw: &SwitchRecord,
        records: &BTreeMap<String, LedgerRecord>,
    ) -> Result<(Vec<(CleanupTarget, String)>, Vec<(String, i64, String)>)> {
        // Safety net: never delete a copy the metadata still routes to.
        let bootstrap = self
            .inner
            .registry
            .bootstrap()
            .await?
            .map(|b| b.bootstrap_cluster_name);
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
            let Some(cluster) = Self::cleanup_cluster(rec, sw) else {
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

    /// The copies [`cleanup`](Self::cleanup) would delete now.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::NoSuchSwitch`]; store errors.
    pub async fn cleanup_targets(&self, switch_id: &str) -> Result<Vec<CleanupTarget>> {
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

    /// Deletes the copies that are no longer used: after a switch the old
    /// cluster's copies of promoted ledgers, after a rollback the target's
    /// copies. A dry run (the default) only lists them. When everything is
    /// deleted, a forward switch flips the statuses (old → DEPRECATED, then
    /// new → ACTIVE, two CAS through [`Registry::promote_active`], I12) and ends
    /// DONE or DONE_WITH_FAILURES.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::InsideRollbackWindow`] without `force` inside the
    /// window (a dry run is always allowed), [`OrchestratorError::WrongPhase`] before SWITCHED (nothing
    /// written); store, registry and client errors.
    pub async fn cleanup(&self, switch_id: &str, opts: CleanupOptions) -> Result<CleanupReport> {
        if opts.dry_run {
            return self.cleanup_leased(switch_id, opts).await;
        }
        self.leased(switch_id, self.cleanup_leased(switch_id, opts))
            .await
    }

    async fn cleanup_leased(&self, switch_id: &str, opts: CleanupOptions) -> Result<CleanupReport> {
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
        let selected: Vec<(CleanupTarget, String)> = all
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
            if sw.rollback_epoch.is_none() {
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

    // --------------------------------------------------------------- ROLLBACK

    /// Rolls a switch back inside its window and before cleanup deleted
    /// anything: writes a directive back to the source (every node creates new
    /// ledgers there again), flips every promoted stamp back (schema centrally,
    /// cursors through their owners with the same primitive, or by the
    /// coordinator), and records the target copies for deletion by a later
    /// [`cleanup`](Self::cleanup). Ledgers created on the target after the
    /// switch stay there (they route by their stamp). Resumable and idempotent.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::RollbackWindowClosed`], [`OrchestratorError::CleanupStarted`]
    /// (nothing written); [`OrchestratorError::NotConverged`] when some stamps
    /// could not be flipped yet (call again); store, registry and client errors.
    pub async fn rollback(&self, switch_id: &str) -> Result<SwitchStatus> {
        self.leased(switch_id, self.rollback_leased(switch_id))
            .await
    }

    async fn rollback_leased(&self, switch_id: &str) -> Result<SwitchStatus> {
        let _guard = self.inner.lock.lock().await;
        let (sw, _) = self.load(switch_id).await?;
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
        if sw.phase == Phase::Switched {
            if let Some(deadline) = sw.rollback_deadline {
                if now_ms() >= deadline {
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
            // created on the source again (I11, ordering). So the source's id
            // generator must be beyond the target's.
            let check = self
                .inner
                .registry
                .precheck(&sw.target, &sw.source, &[], self.inner.idgen.as_ref())
                .await?;
            if !check.ready {
                return Err(OrchestratorError::PrecheckFailed(Box::new(check)));
            }
        }
        let mut sw = self
            .update_switch(switch_id, |r| r.phase = Phase::RollingBack)
            .await?;
        if sw.rollback_epoch.is_none() {
            fail_point!("orchestrator::rollback_directive");
            let d = self
                .inner
                .registry
                .write_directive(&sw.source, sw.origin.as_deref())
                .await?;
            sw = self
                .update_switch(switch_id, |r| r.rollback_epoch = Some(d.epoch))
                .await?;
        }
        // The flip back: from target to source.
        let ctx = self.ctx(&sw).await?;
        let back = Ctx {
            id: ctx.id.clone(),
            source: ctx.target.clone(),
            target: ctx.source.clone(),
            bootstrap: ctx.bootstrap.clone(),
            src: ctx.dst.clone(),
            dst: ctx.src.clone(),
            own_target_ids: false,
        };
        let records = self.list_ledgers(switch_id).await?;
        let mut by_locator: BTreeMap<String, Vec<LedgerRecord>> = BTreeMap::new();
        let mut waiting = 0usize;
        let mut cursors = Vec::new();
        for mut rec in records.into_values() {
            match (rec.state, rec.kind) {
                (LedgerState::Built, _) => {
                    self.set_state(switch_id, &mut rec, LedgerState::RolledBack, None)
                        .await?;
                }
                (LedgerState::Promoted, LedgerKind::Schema) => {
                    by_locator
                        .entry(rec.owner_path.clone())
                        .or_default()
                        .push(rec);
                }
                (LedgerState::Promoted, LedgerKind::Cursor) => cursors.push(rec),
                _ => {}
            }
        }
        for rec in cursors {
            if !self.rollback_cursor(&back, rec).await? {
                waiting += 1;
            }
        }
        for (path, mut recs) in by_locator {
            let ids: BTreeSet<i64> = recs.iter().map(|r| r.ledger_id).collect();
            let unstamp: BTreeSet<i64> = recs
                .iter()
                .filter(|r| r.was_unstamped)
                .map(|r| r.ledger_id)
                .collect();
            fail_point!("orchestrator::rollback_schema");
            match self
                .flip_locator(
                    &path,
                    &ids,
                    &back.source,
                    &back.target,
                    back.bootstrap.as_deref(),
                    &unstamp,
                )
                .await?
            {
                None => waiting += recs.len(),
                Some((_, on_source)) => {
                    for rec in &mut recs {
                        let state = if on_source.contains(&rec.ledger_id) {
                            LedgerState::RolledBack
                        } else {
                            LedgerState::Obsolete
                        };
                        self.set_state(switch_id, rec, state, None).await?;
                    }
                }
            }
        }
        if waiting > 0 {
            return Err(OrchestratorError::NotConverged {
                switch_id: switch_id.to_owned(),
                phase: Phase::RollingBack.to_string(),
                reason: format!("{waiting} ledger(s) could not be flipped back yet"),
            });
        }
        let window = self.inner.config.rollback_window;
        self.update_switch(switch_id, |r| {
            r.phase = Phase::RolledBack;
            if r.rollback_deadline.is_none() {
                r.rollback_deadline =
                    Some(now_ms().saturating_add(window.as_millis().min(i64::MAX as u128) as i64));
            }
        })
        .await?;
        tracing::info!(switch_id, "switch rolled back");
        self.status(switch_id).await
    }

    /// Flips one promoted cursor back to the source; `false` when it must be
    /// retried.
    async fn rollback_cursor(&self, back: &Ctx, mut rec: LedgerRecord) -> Result<bool> {
        let ml = rec.managed_ledger.clone().unwrap_or_default();
        let cfg = &self.inner.config;
        let req = CursorPromoteRequest {
            managed_ledger: ml.clone(),
            cursor_name: rec.cursor.clone().unwrap_or_default(),
            target_cluster_name: back.target.clone(),
            expected_cursors_ledger_id: rec.ledger_id,
            copied_last_entry_id: rec.copied_last_entry_id,
        };
        let moved_on = |actual: i64| {
            format!("the cursor moved on to ledger {actual} after PROMOTE; it stays where it is")
        };
        if let Some(owner) = self.inner.owners.owner(&ml).await? {
            for attempt in 0..cfg.promote_attempts.max(1) {
                if attempt > 0 {
                    tokio::time::sleep(cfg.promote_retry_delay).await;
                }
                fail_point!("orchestrator::rollback_cursor");
                match owner.promote_cursor(&req).await {
                    Ok(CursorPromoteOutcome::Promoted | CursorPromoteOutcome::AlreadyOnTarget) => {
                        self.set_state(&back.id, &mut rec, LedgerState::RolledBack, None)
                            .await?;
                        return Ok(true);
                    }
                    Ok(CursorPromoteOutcome::RolledOver { new_ledger_id }) => {
                        self.set_state(
                            &back.id,
                            &mut rec,
                            LedgerState::RolledBack,
                            Some(format!(
                                "the cursor rolled over onto ledger {new_ledger_id}"
                            )),
                        )
                        .await?;
                        return Ok(true);
                    }
                    Err(PromoteError::RolledOver { actual, .. }) => {
                        rec.rollover_ledger_id = Some(actual);
                        self.set_state(
                            &back.id,
                            &mut rec,
                            LedgerState::RolledOver,
                            Some(moved_on(actual)),
                        )
                        .await?;
                        return Ok(true);
                    }
                    Err(PromoteError::NotOwner { .. }) => break,
                    Err(PromoteError::Unavailable { .. }) => continue,
                    Err(e) => {
                        tracing::warn!(managed_ledger = %ml, error = %e, "cursor rollback refused");
                        return Ok(false);
                    }
                }
            }
            if self.inner.owners.owner(&ml).await?.is_some() {
                return Ok(false);
            }
        }
        // No owner: flip the stamp back with a compare-and-set.
        let store = &self.inner.store;
        let path = rec.owner_path.clone();
        for _ in 0..cfg.max_schema_cas_attempts.max(1) {
            let Some(r) = store
                .get(&path)
                .await
                .map_err(|e| OrchestratorError::metadata(format!("reading `{path}`"), e))?
            else {
                self.set_state(&back.id, &mut rec, LedgerState::Obsolete, None)
                    .await?;
                return Ok(true);
            };
            let Some(mut info) = decode_cursor(&r.value) else {
                return Err(OrchestratorError::Corrupt {
                    path,
                    reason: "not a ManagedCursorInfo".to_owned(),
                });
            };
            if info.cursors_ledger_id != rec.ledger_id {
                rec.rollover_ledger_id = Some(info.cursors_ledger_id);
                self.set_state(
                    &back.id,
                    &mut rec,
                    LedgerState::RolledOver,
                    Some(moved_on(info.cursors_ledger_id)),
                )
                .await?;
                return Ok(true);
            }
            let stamp = info.cluster_stamp().ok().flatten().map(str::to_owned);
            if stamp.as_deref() != Some(back.source.as_str()) {
                self.set_state(&back.id, &mut rec, LedgerState::RolledBack, None)
                    .await?;
                return Ok(true);
            }
            if rec.was_unstamped && back.bootstrap.as_deref() == Some(back.target.as_str()) {
                let _ = info.remove_cluster_stamp();
            } else {
                let _ = info.set_cluster_stamp(&back.target);
            }
            let bytes =
                encode_managed_cursor_info(&info, cursor_compression(&r.value)).map_err(|e| {
                    OrchestratorError::Corrupt {
                        path: path.clone(),
                        reason: e.to_string(),
                    }
                })?;
            fail_point!("orchestrator::rollback_cursor");
            match store
                .put(&path, &bytes, ExpectedVersion::Exactly(r.stat.version))
                .await
            {
                Ok(_) => {
                    self.set_state(&back.id, &mut rec, LedgerState::RolledBack, None)
                        .await?;
                    return Ok(true);
                }
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(OrchestratorError::metadata(format!("writing `{path}`"), e)),
            }
        }
        Ok(false)
    }
}

fn summarize(records: &BTreeMap<String, LedgerRecord>) -> (Counts, Vec<Failure>) {
    let mut c = Counts::default();
    let mut failures = Vec::new();
    for r in records.values() {
        c.to_build += 1;
        // Built = copied to the target; a ledger found obsolete before its copy
        // (rolled over or deleted since the scan) never was.
        let never_copied = r.state == LedgerState::Obsolete && !r.target_copy;
        if r.state != LedgerState::Failed && !never_copied {
            c.built += 1;
        }
        match r.state {
            LedgerState::Failed => {
                c.failed += 1;
                if failures.len() < MAX_FAILURES_LISTED {
                    failures.push(Failure {
                        kind: r.kind,
                        ledger_id: r.ledger_id,
                        owner_path: r.owner_path.clone(),
                        reason: r.reason.clone().unwrap_or_default(),
                    });
                }
            }
            LedgerState::Obsolete => c.obsolete += 1,
            LedgerState::RolledBack => c.rolled_back += 1,
            LedgerState::Deleted => c.deleted += 1,
            LedgerState::Built | LedgerState::Promoted | LedgerState::RolledOver => {}
        }
        if r.was_promoted && matches!(r.state, LedgerState::Promoted | LedgerState::Deleted) {
            c.promoted += 1;
        }
        if r.rollover_ledger_id.is_some()
            && matches!(r.state, LedgerState::RolledOver | LedgerState::Deleted)
        {
            c.rollover_fallback += 1;
        }
    }
    (c, failures)
}
