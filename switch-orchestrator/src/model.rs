//! The persisted records of a switch and the status returned to operators.

use serde::{Deserialize, Serialize};

/// The phase of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    /// Copying schema and cursor ledgers to the target.
    Build,
    /// Flipping stamps to the target.
    Promote,
    /// Every ledger moved (or failed); the rollback window is open until
    /// `rollbackDeadline`; cleanup has not deleted anything.
    Switched,
    /// Cleanup is deleting old-cluster copies (can be resumed).
    Cleanup,
    /// Cleanup finished and the statuses flipped (old DEPRECATED, new ACTIVE).
    Done,
    /// As [`Done`](Self::Done), but some ledgers failed and stay on the old cluster.
    DoneWithFailures,
    /// A rollback is in progress.
    RollingBack,
    /// Rolled back: stamps name the source again; the target copies await
    /// deletion by `cleanup` after the window.
    RolledBack,
}

impl Phase {
    /// The name as stored (`SWITCHED`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Build => "BUILD",
            Phase::Promote => "PROMOTE",
            Phase::Switched => "SWITCHED",
            Phase::Cleanup => "CLEANUP",
            Phase::Done => "DONE",
            Phase::DoneWithFailures => "DONE_WITH_FAILURES",
            Phase::RollingBack => "ROLLING_BACK",
            Phase::RolledBack => "ROLLED_BACK",
        }
    }

    /// Whether the switch needs nothing more from `run` (it may still need cleanup).
    pub fn is_built(self) -> bool {
        !matches!(self, Phase::Build | Phase::Promote)
    }

    /// Whether nothing at all remains to be done.
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Done | Phase::DoneWithFailures)
    }
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which metadata owns a copied ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum LedgerKind {
    /// A schema ledger, located by `/schemas/<id>`.
    Schema,
    /// A cursor ledger, named by a `ManagedCursorInfo`.
    Cursor,
}

impl LedgerKind {
    /// `schema` or `cursor`.
    pub fn as_str(self) -> &'static str {
        match self {
            LedgerKind::Schema => "schema",
            LedgerKind::Cursor => "cursor",
        }
    }
}

/// The state of one copied ledger in a switch (not to be confused with a
/// ledger's own open/closed state, `bkswitch_bk_client::LedgerState`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SwitchLedgerState {
    /// Copied to the target (same id, same entries); stamp still names the source.
    Built,
    /// Could not be copied or promoted; the stamp names the source, see `reason`.
    Failed,
    /// The stamp names the target; the source copy awaits cleanup.
    Promoted,
    /// The live cursor moved past the copy and rolled over onto a new ledger on
    /// the target (`promotedViaRolloverFallback`); the copy was deleted.
    RolledOver,
    /// The owning metadata went away (schema or cursor deleted) before PROMOTE.
    Obsolete,
    /// Cleanup deleted the copy that is no longer used.
    Deleted,
    /// Rolled back: the stamp names the source again; the target copy awaits
    /// deletion.
    RolledBack,
}

/// The record of one schema or cursor ledger in a switch:
/// `<root>/orchestrator/<switchId>/ledgers/<bucket>/<kind>-<ledgerId>` (not
/// BookKeeper's ledger metadata, `bkswitch_bookkeeper::LedgerRecord`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchLedgerRecord {
    /// Schema or cursor ledger.
    pub kind: LedgerKind,
    /// The ledger id (the same on both clusters, [I8](bkswitch_docs::invariants::I8)).
    pub ledger_id: i64,
    /// The node that records the ledger: `/schemas/<id>` or the cursor node.
    pub owner_path: String,
    /// The managed ledger of a cursor ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub managed_ledger: Option<String>,
    /// The cursor name of a cursor ledger.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cursor: Option<String>,
    /// The last entry id of the copy on the target.
    pub copied_last_entry_id: i64,
    /// Payload bytes of the copy on the target (`None` in records written
    /// by earlier versions, and for ledgers not copied).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub copied_bytes: Option<u64>,
    /// Whether the ledger had no stamp before the switch (legacy,
    /// [I17](bkswitch_docs::invariants::I17)).
    #[serde(default)]
    pub was_unstamped: bool,
    /// Whether a copy made by this switch exists on the target.
    #[serde(default)]
    pub target_copy: bool,
    /// Whether the copy found an identical ledger already on the target.
    #[serde(default)]
    pub already_present: bool,
    /// The state.
    pub state: SwitchLedgerState,
    /// Whether the stamp was flipped to the target (kept once deleted from the
    /// source; cleared by a rollback).
    #[serde(default)]
    pub was_promoted: bool,
    /// The new cursor ledger of a [`SwitchLedgerState::RolledOver`] cursor.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollover_ledger_id: Option<i64>,
    /// The cluster cleanup deleted the copy from ([`SwitchLedgerState::Deleted`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deleted_from: Option<String>,
    /// Why the ledger failed (or other notes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Last change, milliseconds since the Unix epoch.
    pub updated_at: i64,
}

impl SwitchLedgerRecord {
    /// The record's node name: `<kind>-<ledgerId>`.
    pub fn key(&self) -> String {
        record_key(self.kind, self.ledger_id)
    }
}

pub(crate) fn record_key(kind: LedgerKind, ledger_id: i64) -> String {
    format!("{}-{ledger_id}", kind.as_str())
}

/// How many ledgers are in each state.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Counts {
    /// Ledgers recorded by BUILD (every state).
    pub to_build: u64,
    /// Copied (whatever happened next).
    pub built: u64,
    /// Failed.
    pub failed: u64,
    /// Promoted (including those later deleted from the old cluster).
    pub promoted: u64,
    /// Cursors moved by rollover instead (`promotedViaRolloverFallback`).
    pub rollover_fallback: u64,
    /// Copies deleted by cleanup.
    pub deleted: u64,
    /// Rolled back.
    pub rolled_back: u64,
    /// Owner went away before PROMOTE.
    pub obsolete: u64,
}

/// One failed ledger, as reported.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// Schema or cursor ledger.
    pub kind: LedgerKind,
    /// The ledger id.
    pub ledger_id: i64,
    /// The metadata path of what owns the ledger (the managed ledger of a cursor,
    /// the schema locator of a schema ledger). Serialized as `path`, as the
    /// admin API names it; records written as `ownerPath` by earlier versions
    /// still read.
    #[serde(rename = "path", alias = "ownerPath")]
    pub owner_path: String,
    /// What went wrong and what to do.
    pub reason: String,
}

/// `<root>/orchestrator/<switchId>`: the switch record (CAS-written).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchRecord {
    /// The switch id (the directive's epoch).
    pub switch_id: String,
    /// The directive epoch.
    pub epoch: i64,
    /// The cluster ledgers move from.
    pub source: String,
    /// The cluster ledgers move to.
    pub target: String,
    /// The node that asked for the switch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// The phase.
    pub phase: Phase,
    /// Creation time, ms since the Unix epoch.
    pub created_at: i64,
    /// Last change, ms.
    pub updated_at: i64,
    /// When PROMOTE finished (the switch reached SWITCHED), ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub switched_at: Option<i64>,
    /// End of the rollback window, ms (set when SWITCHED is reached).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_deadline: Option<i64>,
    /// The epoch of the directive written back to the source by a rollback.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rollback_epoch: Option<i64>,
    /// Whether the idgen precheck passed: ids of copied ledgers are then never
    /// handed out by the target itself, so a ledger found there under such an id
    /// is a (stale or partial) copy of ours and may be replaced.
    #[serde(default)]
    pub precheck_passed: bool,
    /// Whether cleanup has started deleting copies (rollback is then refused).
    #[serde(default)]
    pub cleanup_started: bool,
    /// When cleanup finished, ms.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at: Option<i64>,
    /// Counts as of the last phase change.
    #[serde(default)]
    pub counts: Counts,
    /// Failed ledgers (at most [`MAX_FAILURES_LISTED`](crate::MAX_FAILURES_LISTED)).
    #[serde(default)]
    pub failures: Vec<Failure>,
}

/// What `status` reports (serde camelCase, as the REST API returns it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchStatus {
    /// The switch id.
    pub switch_id: String,
    /// The directive epoch.
    pub epoch: i64,
    /// Source cluster.
    pub source: String,
    /// Target cluster.
    pub target: String,
    /// The phase.
    pub phase: Phase,
    /// Counts, computed from the ledger records.
    pub counts: Counts,
    /// Creation time, ms.
    pub created_at: i64,
    /// Last change, ms.
    pub updated_at: i64,
    /// When SWITCHED was reached, ms.
    pub switched_at: Option<i64>,
    /// End of the rollback window, ms.
    pub rollback_deadline: Option<i64>,
    /// When cleanup finished, ms.
    pub finished_at: Option<i64>,
    /// Failed ledgers (bounded).
    pub failures: Vec<Failure>,
}

/// Options of [`Orchestrator::cleanup`](crate::Orchestrator::cleanup).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CleanupOptions {
    /// Only list what would be deleted (the default).
    pub dry_run: bool,
    /// Only delete copies on this cluster.
    pub src_cluster_filter: Option<String>,
    /// Stop after this many deletions (a later call continues).
    pub max_deletions: Option<usize>,
    /// Clean up inside the rollback window (rollback becomes impossible).
    pub force: bool,
}

impl Default for CleanupOptions {
    fn default() -> Self {
        CleanupOptions {
            dry_run: true,
            src_cluster_filter: None,
            max_deletions: None,
            force: false,
        }
    }
}

impl CleanupOptions {
    /// Really delete (not a dry run).
    pub fn execute() -> Self {
        CleanupOptions {
            dry_run: false,
            ..Default::default()
        }
    }

    /// Sets `force`.
    pub fn with_force(mut self, force: bool) -> Self {
        self.force = force;
        self
    }

    /// Sets `max_deletions`.
    pub fn with_max_deletions(mut self, n: usize) -> Self {
        self.max_deletions = Some(n);
        self
    }

    /// Sets `src_cluster_filter`.
    pub fn with_src_cluster(mut self, cluster: &str) -> Self {
        self.src_cluster_filter = Some(cluster.to_owned());
        self
    }
}

/// A copy cleanup deletes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupTarget {
    /// The cluster the copy is deleted from.
    pub cluster: String,
    /// The ledger id.
    pub ledger_id: i64,
    /// Schema or cursor ledger.
    pub kind: LedgerKind,
    /// The node that recorded the ledger.
    pub path: String,
}

/// What a cleanup did (or would do).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupReport {
    /// Whether nothing was changed.
    pub dry_run: bool,
    /// Deleted (or, in a dry run, to be deleted) copies.
    pub targets: Vec<CleanupTarget>,
    /// Copies left for a later call (max_deletions reached or filtered out).
    pub remaining: usize,
    /// Copies that could not be deleted (cluster, ledger id, reason).
    pub errors: Vec<(String, i64, String)>,
    /// The phase after the call.
    pub phase: Phase,
}
