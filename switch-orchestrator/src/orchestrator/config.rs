//! The orchestrator's settings and counters: [`OrchestratorConfig`] with its
//! defaults, the limits it names, and [`CopyStats`].

use std::time::Duration;

use bkswitch_bk_client::{DigestType, LedgerConfig};
use bkswitch_mledger_spi::ManagedLedgerConfig;

/// The default [`OrchestratorConfig::idgen_safety_margin`].
pub const DEFAULT_IDGEN_SAFETY_MARGIN: i64 = 1_000;

/// At most this many failures are listed in a switch record and a status.
pub const MAX_FAILURES_LISTED: usize = 100;

/// Settings of an [`Orchestrator`](crate::Orchestrator) ([design §3](bkswitch_docs::design) defaults).
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
    /// Compare-and-set attempts per schema locator or cursor node (5,
    /// [I10](bkswitch_docs::invariants::I10)).
    pub max_schema_cas_attempts: usize,
    /// Skip the idgen precheck (lab only, [I11](bkswitch_docs::invariants::I11)).
    pub skip_idgen_precheck: bool,
    /// Ledger ids the idgen precheck requires between the source's next id
    /// and the target's (`idgenSafetyMargin`, 1,000): nodes apply a
    /// directive asynchronously and keep creating ledgers on the source
    /// until they have, and each of those ids must stay below every id the
    /// target hands out ([I11](bkswitch_docs::invariants::I11)). Cover the
    /// ledgers the source creates in the longest time a node takes to apply
    /// a directive (registry watch delay plus a broker's rollover), with room
    /// to spare: ids are 64-bit, skipping them costs nothing. The default
    /// covers about 1,000 ledger creations; raise it on clusters that create
    /// more in a few seconds.
    pub idgen_safety_margin: i64,
    /// Entries in flight per copied ledger.
    pub copy_window: usize,
    /// Attempts per cursor owner call that answers "unavailable".
    pub promote_attempts: usize,
    /// Pause between those attempts.
    pub promote_retry_delay: Duration,
    /// BUILD/PROMOTE passes per run before giving up with
    /// [`OrchestratorError::NotConverged`](crate::OrchestratorError::NotConverged) (ledgers keep appearing on the source
    /// until every node applied the switch).
    pub max_passes: usize,
    /// How long after SWITCHED (or after a rollback) the old copies stay
    /// before [`Orchestrator::auto_cleanup`](crate::Orchestrator::auto_cleanup) deletes them
    /// (`bookieClusterDualReadTimeoutDays`, 15 days; `None`: never). Separate
    /// from, and never shorter in effect than, the rollback window.
    pub dual_read_timeout: Option<Duration>,
    /// Deletions per [`Orchestrator::auto_cleanup`](crate::Orchestrator::auto_cleanup) pass (100).
    pub auto_cleanup_max_deletions: usize,
    /// How often a coordinator looks for a switch to clean up by itself (60 s).
    pub auto_cleanup_interval: Duration,
}

impl Default for OrchestratorConfig {
    fn default() -> Self {
        let ml = ManagedLedgerConfig::default();
        // The schema storage's default ledger settings (its
        // `SchemaStorageOptions` default to the client's).
        let schema = LedgerConfig::default();
        OrchestratorConfig {
            migration_concurrency: 16,
            rollback_window: Duration::from_secs(24 * 3600),
            cursor_digest_type: ml.digest_type,
            cursor_password: ml.password,
            schema_digest_type: schema.digest_type,
            schema_password: schema.password,
            max_schema_cas_attempts: 5,
            skip_idgen_precheck: false,
            idgen_safety_margin: DEFAULT_IDGEN_SAFETY_MARGIN,
            copy_window: 64,
            promote_attempts: 10,
            promote_retry_delay: Duration::from_millis(200),
            max_passes: 10,
            dual_read_timeout: Some(Duration::from_secs(15 * 24 * 3600)),
            auto_cleanup_max_deletions: 100,
            auto_cleanup_interval: Duration::from_secs(60),
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

    /// Sets the idgen safety margin (at least 1).
    pub fn with_idgen_safety_margin(mut self, margin: i64) -> Self {
        self.idgen_safety_margin = margin.max(1);
        self
    }

    /// Skips the idgen precheck (lab only).
    pub fn with_skip_idgen_precheck(mut self, skip: bool) -> Self {
        self.skip_idgen_precheck = skip;
        self
    }

    /// Sets the dual-read timeout after which CLEANUP runs by itself
    /// (`None`: never).
    pub fn with_dual_read_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.dual_read_timeout = timeout;
        self
    }

    /// Sets how often, and how much per pass, the automatic cleanup works.
    pub fn with_auto_cleanup(mut self, interval: Duration, max_deletions: usize) -> Self {
        self.auto_cleanup_interval = interval;
        self.auto_cleanup_max_deletions = max_deletions.max(1);
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
