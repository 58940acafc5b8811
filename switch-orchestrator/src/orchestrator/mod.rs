//! The coordinator: BUILD → PROMOTE → CLEANUP, ROLLBACK, resume.
//!
//! [`Orchestrator`] is the whole public surface; each of its steps lives in a
//! file of its own:
//!
//! | file | concern |
//! | --- | --- |
//! | `mod.rs` | the type, its construction and public methods |
//! | `config.rs` | `OrchestratorConfig`, its defaults and limits, `CopyStats` |
//! | `scope.rs` | canaries: the coordinator of a prefix, taking over unfinished canaries, what a scope holds |
//! | `records.rs` | `Records`, which every phase receives: the switch record, the per-ledger records, the leases, status counts |
//! | `start.rs` | `start_switch` and the idgen precheck; the directive goes through the registry |
//! | `resume.rs` | the BUILD/PROMOTE passes of `run`, `resume`, `resume_all` |
//! | `build.rs` | BUILD: copies on the target (made, refreshed, deleted) |
//! | `flip.rs` | the stamp flip, one routine for PROMOTE and ROLLBACK |
//! | `promote.rs` | PROMOTE: the forward flip and what it records |
//! | `rollback.rs` | ROLLBACK: the flip back and what it records |
//! | `cleanup.rs` | CLEANUP: deleting unused copies, the status flip |
//! | `stage.rs` | running a stage with at most `migration_concurrency` steps in flight |
//! | `progress.rs` | the live copy progress: started from the records, read, dropped |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bkswitch_bk_client::BookKeeper;
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{Clock, SystemClock};
use bkswitch_registry::{IdgenSource, PrecheckResult, Registry};

use crate::error::{OrchestratorError, Result};
use crate::model::{
    CleanupOptions, CleanupReport, CleanupTarget, Phase, SwitchLedgerRecord, SwitchRecord,
    SwitchStatus,
};
use crate::owners::{ClusterClients, TopicOwners};
use crate::usage::{usage, ClusterUsage};
use records::Records;

pub use config::{CopyStats, OrchestratorConfig, DEFAULT_IDGEN_SAFETY_MARGIN, MAX_FAILURES_LISTED};

/// A failpoint of the switch path: with the `failpoints` feature, configuring
/// `name` makes the enclosing step return [`OrchestratorError::Injected`]. The
/// names are listed in [`FAILPOINTS`](crate::FAILPOINTS).
macro_rules! fail_point {
    ($name:expr) => {{
        // Names the point even when failpoints are compiled out.
        let _: &'static str = $name;
        fail::fail_point!($name, |_| Err($crate::OrchestratorError::Injected {
            point: $name
        }))
    }};
}

mod build;
mod cleanup;
mod config;
mod flip;
mod progress;
mod promote;
mod records;
mod resume;
mod rollback;
mod scope;
mod stage;
mod start;

/// The [`IdgenSource`] of an orchestrator built without
/// [`Orchestrator::with_idgen`]: refuses every cluster, naming the call.
struct NoIdgenSource;

#[async_trait::async_trait]
impl IdgenSource for NoIdgenSource {
    async fn next_ledger_id(
        &self,
        uri: &bkswitch_bk_client::ClusterUri,
    ) -> Result<i64, bkswitch_bk_client::BkError> {
        Err(bkswitch_bk_client::BkError::new(
            bkswitch_bk_client::BkErrorKind::InvalidArgument,
            format!(
                "cannot read the ledger id generator of `{uri}`: this orchestrator has no \
                 IdgenSource; build it with Orchestrator::with_idgen (MemoryClusters for \
                 memory:// clusters, bkswitch_bookkeeper::ZkIdgenSource for BookKeeper)"
            ),
        ))
    }
}

struct Inner {
    store: Arc<dyn MetadataStore>,
    registry: Registry,
    clients: Arc<dyn ClusterClients>,
    owners: Arc<dyn TopicOwners>,
    config: OrchestratorConfig,
    idgen: Arc<dyn IdgenSource>,
    /// The switch and ledger records, the leases, the clock of records,
    /// rollback windows and the dual-read timeout, and this coordinator's
    /// identity in leases.
    records: Arc<Records>,
    copied: AtomicU64,
    already_present: AtomicU64,
    /// Live copy progress, shared with the canary views.
    progress: Arc<crate::progress::ProgressRegistry>,
    /// A canary: the managed-ledger (and schema id) prefix this coordinator
    /// moves; `None` for cluster-wide switches.
    scope: Option<String>,
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

/// What one run knows about the switch. The clusters are named as the switch
/// goes (`source` → `target`); a rollback flips the other way with the same
/// context (see `flip::Direction`).
struct Ctx {
    id: String,
    source: String,
    target: String,
    bootstrap: Option<String>,
    /// The clusters' clients: `None` in a rollback, which flips stamps in
    /// the metadata only and so completes even when the target's client
    /// cannot start (a target that died after the switch).
    clients: Option<(Arc<dyn BookKeeper>, Arc<dyn BookKeeper>)>,
}

impl Ctx {
    /// The source's and the target's clients.
    fn clients(&self) -> Result<(&dyn BookKeeper, &dyn BookKeeper)> {
        match &self.clients {
            Some((src, dst)) => Ok((src.as_ref(), dst.as_ref())),
            None => Err(OrchestratorError::Client {
                cluster: self.target.clone(),
                reason: "a rollback works without the clusters' clients; nothing was copied"
                    .to_owned(),
                source: None,
            }),
        }
    }
}

impl Orchestrator {
    /// A coordinator on `store` (the broker metadata store), the cluster
    /// `registry`, the clusters' `clients` and the topic `owners`. Reads next
    /// ledger ids for the precheck through the [`IdgenSource`] given to
    /// [`with_idgen`](Self::with_idgen) (`MemoryClusters` for `memory://`
    /// clusters, `bkswitch_bookkeeper::ZkIdgenSource` for BookKeeper's
    /// ZooKeeper layout); without one every precheck fails, naming the call
    /// to make.
    pub fn new(
        store: Arc<dyn MetadataStore>,
        registry: Registry,
        clients: Arc<dyn ClusterClients>,
        owners: Arc<dyn TopicOwners>,
        config: OrchestratorConfig,
    ) -> Orchestrator {
        let records = Records::new(
            store.clone(),
            registry.root(),
            None,
            new_instance_id(),
            Arc::new(SystemClock),
        );
        Orchestrator {
            inner: Arc::new(Inner {
                store,
                registry,
                clients,
                owners,
                config,
                idgen: Arc::new(NoIdgenSource),
                records: Arc::new(records),
                copied: AtomicU64::new(0),
                already_present: AtomicU64::new(0),
                progress: Arc::default(),
                scope: None,
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
            records: shared.records.clone(),
            copied: AtomicU64::new(shared.copied.load(Ordering::Relaxed)),
            already_present: AtomicU64::new(shared.already_present.load(Ordering::Relaxed)),
            progress: shared.progress.clone(),
            scope: shared.scope.clone(),
        });
        Orchestrator {
            inner: Arc::new(Inner { idgen, ..inner }),
        }
    }

    /// Uses `clock` for the times it records (switch and ledger records, the
    /// rollback deadline) and the windows it checks (the rollback window, the
    /// dual-read timeout of the automatic cleanup). The default is the system
    /// clock; a test moves a manual clock past the windows instead of waiting.
    pub fn with_clock(self, clock: Arc<dyn Clock>) -> Orchestrator {
        let inner = Arc::try_unwrap(self.inner).unwrap_or_else(|shared| Inner {
            store: shared.store.clone(),
            registry: shared.registry.clone(),
            clients: shared.clients.clone(),
            owners: shared.owners.clone(),
            config: shared.config.clone(),
            idgen: shared.idgen.clone(),
            records: shared.records.clone(),
            copied: AtomicU64::new(shared.copied.load(Ordering::Relaxed)),
            already_present: AtomicU64::new(shared.already_present.load(Ordering::Relaxed)),
            progress: shared.progress.clone(),
            scope: shared.scope.clone(),
        });
        let records = Arc::new(inner.records.with_clock(clock));
        Orchestrator {
            inner: Arc::new(Inner { records, ..inner }),
        }
    }

    /// Now, in milliseconds since the Unix epoch, by this coordinator's clock.
    fn now_ms(&self) -> i64 {
        self.inner.records.now_ms()
    }

    /// The records and leases every phase works with.
    fn records(&self) -> &Arc<Records> {
        &self.inner.records
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
        self.records().root().to_owned()
    }

    /// Every recorded switch id, by ascending epoch.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::Metadata`].
    pub async fn switch_ids(&self) -> Result<Vec<String>> {
        self.records().recorded_switch_ids().await
    }

    /// The status of a switch, with counts computed from its ledger records.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::NoSuchSwitch`], [`OrchestratorError::CorruptRecord`],
    /// [`OrchestratorError::Metadata`].
    pub async fn status(&self, switch_id: &str) -> Result<SwitchStatus> {
        self.records().read_status(switch_id).await
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
    pub async fn ledger_records(&self, switch_id: &str) -> Result<Vec<SwitchLedgerRecord>> {
        self.records().load(switch_id).await?;
        Ok(self
            .records()
            .list_ledgers(switch_id)
            .await?
            .into_values()
            .collect())
    }

    /// Starts a switch to `target`: validates it, runs the idgen precheck
    /// ([I11](bkswitch_docs::invariants::I11)), writes the switch directive
    /// (every node then creates new ledgers on `target`) and records the
    /// switch (phase BUILD). Idempotent: a switch to the directive's current
    /// target returns the recorded switch. Call [`run`](Self::run) next.
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
        self.start(target, origin).await
    }

    /// Runs the idgen precheck ([I11](bkswitch_docs::invariants::I11)) for a
    /// switch from the ACTIVE cluster to `target`, over every schema and
    /// cursor ledger the switch would copy (those stamped to the ACTIVE
    /// cluster; unstamped ones count for the bootstrap cluster). Writes
    /// nothing; `ready` may be false.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::UnknownCluster`], [`OrchestratorError::NoActiveCluster`],
    /// registry errors of the precheck, store errors of the scan.
    pub async fn precheck(&self, target: &str) -> Result<PrecheckResult> {
        self.precheck_to(target).await
    }

    /// Resumes every switch that still needs BUILD/PROMOTE (or a rollback that
    /// was interrupted), and on the cluster-wide coordinator every canary
    /// that does ([`resume_canaries`](Self::resume_canaries)); returns their
    /// statuses.
    ///
    /// # Errors
    ///
    /// The first error of [`run`](Self::run) / [`rollback`](Self::rollback).
    pub async fn resume_all(&self) -> Result<Vec<SwitchStatus>> {
        let mut out = self.resume_unfinished().await?;
        if self.scope().is_none() {
            out.extend(self.resume_canaries().await?);
        }
        Ok(out)
    }

    /// The switch a directive of `epoch` belongs to: the switch it started
    /// (its id is the epoch), or the latest switch when the directive is that
    /// switch's rollback. `None` while no switch record accounts for it (the
    /// origin writes the directive first, then the record).
    ///
    /// # Errors
    ///
    /// Store errors.
    pub async fn switch_for_epoch(&self, epoch: i64) -> Result<Option<String>> {
        let id = epoch.to_string();
        match self.records().load(&id).await {
            Ok(_) => return Ok(Some(id)),
            Err(OrchestratorError::NoSuchSwitch { .. }) => {}
            Err(e) => return Err(e),
        }
        let Some(latest) = self.switch_ids().await?.pop() else {
            return Ok(None);
        };
        let (rec, _) = self.records().load(&latest).await?;
        Ok((rec.rollback_epoch == Some(epoch)).then_some(latest))
    }

    /// Continues a switch where it stopped
    /// ([I6](bkswitch_docs::invariants::I6)): the same as [`run`](Self::run),
    /// or finishes an interrupted rollback.
    ///
    /// # Errors
    ///
    /// As [`run`](Self::run).
    pub async fn resume(&self, switch_id: &str) -> Result<SwitchStatus> {
        self.resume_one(switch_id).await
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
        let progress = self.run_progress(switch_id);
        let result = progress
            .scope(self.records().leased(switch_id, self.run_passes(switch_id)))
            .await;
        if result.is_ok() {
            progress.kept();
        }
        result
    }

    /// The copies [`cleanup`](Self::cleanup) would delete now.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::NoSuchSwitch`]; store errors.
    pub async fn cleanup_targets(&self, switch_id: &str) -> Result<Vec<CleanupTarget>> {
        self.unused_copies(switch_id).await
    }

    /// Deletes the copies that are no longer used: after a switch the old
    /// cluster's copies of promoted ledgers, after a rollback the target's
    /// copies. A dry run (the default) only lists them. When everything is
    /// deleted, a forward switch flips the statuses (old → DEPRECATED, then
    /// new → ACTIVE, two CAS through [`Registry::promote_active`],
    /// [I12](bkswitch_docs::invariants::I12)) and ends DONE or
    /// DONE_WITH_FAILURES. A real cleanup holds the switch's lease.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::InsideRollbackWindow`] without `force` inside the
    /// window (a dry run is always allowed), [`OrchestratorError::WrongPhase`]
    /// before SWITCHED (nothing written); store, registry and client errors.
    pub async fn cleanup(&self, switch_id: &str, opts: CleanupOptions) -> Result<CleanupReport> {
        if opts.dry_run {
            return self.clean_up(switch_id, opts).await;
        }
        self.records()
            .leased(switch_id, self.clean_up(switch_id, opts))
            .await
    }

    /// The automatic CLEANUP ([design §3](bkswitch_docs::design),
    /// `bookieClusterDualReadTimeoutDays`): when the latest switch is
    /// SWITCHED and its dual-read timeout has passed since SWITCHED — or it is
    /// ROLLED_BACK and the timeout has passed since the rollback, or a
    /// cleanup already started (CLEANUP) — runs one [`cleanup`](Self::cleanup) pass of at most
    /// `auto_cleanup_max_deletions` deletions, with the manual cleanup's
    /// guards: never inside the rollback window (it never forces), and every
    /// copy re-checked as unreferenced before it is deleted. A coordinator
    /// calls it every `auto_cleanup_interval`; later passes continue.
    /// `Ok(None)` when there is nothing to do yet.
    ///
    /// # Errors
    ///
    /// As [`cleanup`](Self::cleanup).
    pub async fn auto_cleanup(&self) -> Result<Option<CleanupReport>> {
        let Some(timeout) = self.inner.config.dual_read_timeout else {
            return Ok(None);
        };
        let Some(id) = self.switch_ids().await?.pop() else {
            return Ok(None);
        };
        let (rec, _) = self.records().load(&id).await?;
        let now = self.now_ms();
        let due = match rec.phase {
            // A cleanup already started (by hand or by an earlier pass)
            // continues.
            Phase::Cleanup => true,
            Phase::Switched => rec
                .switched_at
                .is_some_and(|at| now >= window_end(at, timeout)),
            // The rollback's completion is the record's last update.
            Phase::RolledBack => now >= window_end(rec.updated_at, timeout),
            _ => false,
        };
        let window_open = rec
            .rollback_deadline
            .is_some_and(|deadline| now < deadline && !rec.cleanup_started);
        if !due || window_open {
            return Ok(None);
        }
        tracing::info!(switch_id = %id, phase = %rec.phase,
            "dual-read timeout passed: cleaning up by itself");
        let report = self
            .cleanup(
                &id,
                CleanupOptions {
                    dry_run: false,
                    src_cluster_filter: None,
                    max_deletions: Some(self.inner.config.auto_cleanup_max_deletions),
                    force: false,
                },
            )
            .await?;
        Ok(Some(report))
    }

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
    /// [`OrchestratorError::RollbackWindowClosed`], [`OrchestratorError::CleanupStarted`],
    /// [`OrchestratorError::PrecheckFailed`] (nothing written);
    /// [`OrchestratorError::NotConverged`] when some stamps could not be
    /// flipped yet (call again); store, registry and client errors.
    pub async fn rollback(&self, switch_id: &str) -> Result<SwitchStatus> {
        self.records()
            .leased(switch_id, self.roll_back(switch_id))
            .await
    }

    /// What a run of the switch `rec` works with: its clusters' clients and the
    /// bootstrap cluster.
    async fn ctx(&self, rec: &SwitchRecord) -> Result<Ctx> {
        let mut ctx = self.flip_ctx(rec).await?;
        ctx.clients = Some((
            self.inner.clients.client(&rec.source).await?,
            self.inner.clients.client(&rec.target).await?,
        ));
        Ok(ctx)
    }

    /// What a rollback works with: no client, since flipping stamps back
    /// touches the metadata only.
    async fn flip_ctx(&self, rec: &SwitchRecord) -> Result<Ctx> {
        Ok(Ctx {
            id: rec.switch_id.clone(),
            source: rec.source.clone(),
            target: rec.target.clone(),
            bootstrap: self.bootstrap_cluster().await?,
            clients: None,
        })
    }

    /// The recorded ledgers (data, cursor and schema) that the bookie
    /// cluster `name` holds: stamped with its name, or unstamped when it is
    /// the bootstrap cluster ([I17](bkswitch_docs::invariants::I17)). Exact:
    /// every managed-ledger, cursor and schema record is read, one node at a
    /// time, so memory stays bounded by the counts and samples (plus one
    /// level's children names) however large the metadata is.
    ///
    /// # Errors
    ///
    /// Metadata read errors.
    pub async fn cluster_usage(&self, name: &str) -> Result<ClusterUsage> {
        // No bootstrap marker recorded: the cluster of an unstamped ledger
        // cannot be told, so every cluster may hold it.
        let bootstrap = self.bootstrap_cluster().await?;
        let holds_unstamped = bootstrap.as_deref().is_none_or(|b| b == name);
        usage(self.inner.store.as_ref(), name, holds_unstamped).await
    }

    /// The bootstrap cluster: the one unstamped ledgers belong to
    /// ([I17](bkswitch_docs::invariants::I17)).
    async fn bootstrap_cluster(&self) -> Result<Option<String>> {
        Ok(self
            .inner
            .registry
            .bootstrap()
            .await?
            .map(|b| b.bootstrap_cluster_name))
    }
}

/// The schema-id prefix of a managed-ledger prefix (the registry's one
/// rule, [`bkswitch_registry::schema_id_prefix`]).
fn schema_prefix(prefix: &str) -> String {
    bkswitch_registry::schema_id_prefix(prefix)
}

/// Milliseconds since the Unix epoch.
fn system_now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// The end of a rollback window of `window` opened at `from_ms`.
fn window_end(from_ms: i64, window: Duration) -> i64 {
    from_ms.saturating_add(window.as_millis().min(i64::MAX as u128) as i64)
}

/// A process-unique identity for an orchestrator's leases.
fn new_instance_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!(
        "{}-{}-{}",
        std::process::id(),
        system_now_ms(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    )
}

#[cfg(test)]
mod scope_tests {
    use super::{schema_prefix, OrchestratorConfig};

    /// The coordinator no longer reads the schema storage's options (it does
    /// not depend on the managed ledger): its defaults must stay theirs.
    #[test]
    fn schema_ledger_defaults_are_the_schema_storages() {
        let schema = bkswitch_managed_ledger::schema::SchemaStorageOptions::default().ledger_config;
        let ml = bkswitch_mledger_spi::ManagedLedgerConfig::default();
        let c = OrchestratorConfig::default();
        assert_eq!(c.schema_digest_type, schema.digest_type);
        assert_eq!(c.schema_password, schema.password);
        assert_eq!(c.cursor_digest_type, ml.digest_type);
        assert_eq!(c.cursor_password, ml.password);
    }

    #[test]
    fn schema_ids_have_no_domain_segment() {
        assert_eq!(schema_prefix("tenant/ns/"), "tenant/ns/");
        assert_eq!(
            schema_prefix("tenant/ns/persistent/orders-"),
            "tenant/ns/orders-"
        );
        assert_eq!(schema_prefix("tenant/ns/persistent/"), "tenant/ns/");
        assert_eq!(schema_prefix("tenant/ns/non-persistent/x"), "tenant/ns/x");
        assert_eq!(schema_prefix("tenant/ns/orders-"), "tenant/ns/orders-");
    }
}
