//! The persisted state of a topic move: one record, `<routes root>/switch`,
//! written only with compare-and-set, and the coordinator's lease,
//! `<routes root>/switch-lease` (ephemeral).

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::admin::TopicStats;

/// Where a batch is. The forward phases run in order; a rollback runs the
/// `Rollback*` phases in order; every phase can be run again after a crash
/// (each one checks what is already done).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    /// Not started: the precheck runs first.
    Pending,
    /// The routes are changed and every live proxy must acknowledge them.
    Redirect,
    /// The topics are unloaded on their old cluster until no producer or
    /// consumer but the replicators is left there.
    Evict,
    /// Replication from the old cluster drains; the evidence is recorded.
    Settle,
    /// The batch runs on its new cluster for the soak time, watched.
    Soak,
    /// Moved.
    Done,
    /// Rolling back: the routes are restored and acknowledged.
    RollbackRedirect,
    /// Rolling back: the topics are unloaded on the new cluster.
    RollbackEvict,
    /// Rolling back: replication back to the old cluster drains.
    RollbackSettle,
    /// Rolled back: the topics are where they were.
    RolledBack,
    /// Aborted before any client moved: the routes are restored.
    Aborted,
}

impl Phase {
    /// Whether clients may have been moved (an abort is no longer possible).
    pub fn clients_moved(self) -> bool {
        !matches!(self, Phase::Pending | Phase::Redirect | Phase::Aborted)
    }

    /// Whether the batch is finished one way or the other.
    pub fn is_final(self) -> bool {
        matches!(self, Phase::Done | Phase::RolledBack | Phase::Aborted)
    }
}

/// Where the whole plan is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum State {
    /// A coordinator drives it (or will, after a takeover).
    Running,
    /// Every batch moved.
    Done,
    /// Every batch that had moved was rolled back.
    RolledBack,
    /// Aborted before any client moved.
    Aborted,
    /// A batch failed (and was rolled back when `autoRollback` is set); the
    /// batches before it stay moved. `rollback` moves them back.
    Failed,
}

impl State {
    /// Whether nothing runs any more.
    pub fn is_final(self) -> bool {
        !matches!(self, State::Running)
    }
}

/// What the operator asked of a running plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Request {
    /// Move every batch that moved back.
    Rollback,
    /// Stop before any client moves (refused once one may have).
    Abort,
}

/// One topic of a batch.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicMove {
    /// The cluster it was on.
    pub from: String,
    /// Its partition count (0: not partitioned).
    pub partitions: u32,
    /// Its stats on `from` at the precheck (who was attached).
    pub before: Option<TopicStats>,
}

/// A timestamped fact recorded while a batch ran.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Evidence {
    /// When, milliseconds since the Unix epoch.
    pub at_ms: i64,
    /// The phase it closes.
    pub phase: Phase,
    /// What was seen.
    pub note: String,
    /// The data behind it (stats, versions, timings).
    #[serde(default, skip_serializing_if = "serde_json::Value::is_null")]
    pub data: serde_json::Value,
}

/// One batch: routes moved together to the plan's target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Batch {
    /// The routes it sets (canonical selectors: `topic:…`, `prefix:…`,
    /// `namespace:…`).
    pub routes: Vec<String>,
    /// The cluster each route named before (`None`: no such route), to
    /// restore on rollback; filled at the precheck.
    #[serde(default)]
    pub previous: BTreeMap<String, Option<String>>,
    /// The topics that change cluster, by whole-topic name; filled at the
    /// precheck.
    #[serde(default)]
    pub topics: BTreeMap<String, TopicMove>,
    /// Where it is.
    pub phase: Phase,
    /// The routing-table version of its last route change (what the
    /// barrier waits for).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub table_version: Option<u64>,
    /// What was seen, phase by phase.
    #[serde(default)]
    pub evidence: Vec<Evidence>,
    /// Why it failed, if it did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// When its forward phases started (ms since the epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ms: Option<i64>,
    /// When it reached `Done`, `RolledBack` or `Aborted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub finished_at_ms: Option<i64>,
}

impl Batch {
    /// A batch of `routes`, not started.
    pub fn new(routes: Vec<String>) -> Batch {
        Batch {
            routes,
            previous: BTreeMap::new(),
            topics: BTreeMap::new(),
            phase: Phase::Pending,
            table_version: None,
            evidence: Vec::new(),
            error: None,
            started_at_ms: None,
            finished_at_ms: None,
        }
    }
}

/// How a plan runs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchOptions {
    /// How long every live proxy has to acknowledge a route change.
    pub barrier_timeout_ms: u64,
    /// How long the old cluster has to lose every client of a topic.
    pub evict_timeout_ms: u64,
    /// How long replication from the old cluster has to drain.
    pub settle_timeout_ms: u64,
    /// How long each batch runs watched before the next one starts.
    pub soak_ms: u64,
    /// The replication backlog (messages) above which the precheck refuses.
    pub max_replication_backlog: u64,
    /// Roll a batch back by itself when it fails or breaches its SLO.
    pub auto_rollback: bool,
}

impl Default for SwitchOptions {
    fn default() -> Self {
        SwitchOptions {
            barrier_timeout_ms: 30_000,
            evict_timeout_ms: 60_000,
            settle_timeout_ms: 120_000,
            soak_ms: 0,
            max_replication_backlog: 10_000,
            auto_rollback: true,
        }
    }
}

/// The persisted plan.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchRecord {
    /// Its id.
    pub id: String,
    /// The cluster every batch moves to.
    pub to: String,
    /// Where the plan is.
    pub state: State,
    /// The batches, in order.
    pub batches: Vec<Batch>,
    /// The options.
    pub options: SwitchOptions,
    /// What the operator asked, not yet done.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request: Option<Request>,
    /// Whether the operator asked for a rollback of the whole plan (as
    /// opposed to a batch rolled back by itself after a failure).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub rollback_requested: bool,
    /// Who drives it now (the lease holder's id).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// When it was started (ms since the epoch).
    pub created_at_ms: i64,
    /// When it was last written.
    pub updated_at_ms: i64,
}

impl SwitchRecord {
    /// The first batch not final, if any.
    pub fn current(&self) -> Option<usize> {
        self.batches.iter().position(|b| !b.phase.is_final())
    }
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or_default()
}
