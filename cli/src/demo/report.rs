//! What a demo run observed: [`DemoReport`] (what `--json` prints) and its
//! [`InvariantCheck`]s.

use serde::Serialize;

use crate::traffic::TrafficReport;

/// One checked invariant.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InvariantCheck {
    /// What was checked (with the invariant's number when it has one).
    pub name: String,
    /// Whether it held.
    pub ok: bool,
    /// What was observed.
    pub detail: String,
}

/// What a demo run observed (`--json` prints it).
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DemoReport {
    /// Topics under traffic.
    pub topics: usize,
    /// Nodes.
    pub nodes: usize,
    /// Where the metadata lived (`memory`, or the ZooKeeper or etcd URL with
    /// the run's chroot or key prefix).
    pub metadata_store: String,
    /// The bookie clusters: `memory`, or `real (N bookies per cluster)`.
    pub bookkeeper: String,
    /// Acknowledged publishes.
    pub published: u64,
    /// Entries consumed (first deliveries).
    pub consumed: u64,
    /// Failed publish attempts.
    pub publish_failures: u64,
    /// Sequence numbers consumers never saw.
    pub consumer_gaps: u64,
    /// Redeliveries (at-least-once).
    pub consumer_duplicates: u64,
    /// Schema ledgers promoted to `new`.
    pub schemas_promoted: u64,
    /// Cursor ledgers promoted to `new` (stamp flip).
    pub cursors_promoted: u64,
    /// Ledgers that failed to move.
    pub failed_ledgers: u64,
    /// Live cursors moved by rollover instead of a stamp flip.
    pub rollover_fallbacks: u64,
    /// Ledgers copied to `new` (same id, same entry ids).
    pub ledgers_copied: u64,
    /// From `POST /switch` until every node created new ledgers on `new`
    /// (polled every 20 ms, after the switch call and a schema write return).
    pub switch_visible_ms: u64,
    /// From the directive's write until the last node's swap, from the nodes'
    /// own records (`u64::MAX` when unknown).
    pub directive_visible_ms: u64,
    /// From `POST /switch` until every topic's current ledger was on `new`.
    pub all_writes_moved_ms: u64,
    /// From `POST /switch` until the switch reached SWITCHED.
    pub build_promote_ms: u64,
    /// `DONE`, `DONE_WITH_FAILURES` or `ROLLED_BACK`.
    pub outcome: String,
    /// Publish statistics before, during and after the switch.
    pub traffic: TrafficReport,
    /// Every invariant checked.
    pub invariants: Vec<InvariantCheck>,
    /// Whether every invariant held.
    pub invariants_ok: bool,
}
