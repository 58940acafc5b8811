//! What a history can get wrong: the kinds of violation the checker and the
//! traffic (while the history runs) report.

use std::fmt;

/// What went wrong in a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ViolationKind {
    /// An acknowledged message is missing or out of order.
    MessageLost,
    /// A ledger the metadata references is missing, or on another cluster
    /// than its stamp names.
    LedgerMissing,
    /// An acknowledged schema version cannot be read.
    SchemaLost,
    /// A cursor is behind its last acknowledged mark-delete.
    CursorBehind,
    /// A topic does not load after the faults healed.
    TopicUnloadable,
    /// Not exactly one ACTIVE cluster, or a stamp, override or switch names an
    /// unregistered cluster.
    Registry,
    /// An operator call answered without a clear error, or did not do what
    /// its answer said.
    OperatorCall,
    /// A switch or canary is stuck: no final state and no documented call
    /// moves it.
    Stuck,
    /// A node started with the id of a running node.
    DuplicateNode,
    /// A canary or switch started while another coordinator works on the
    /// same ledgers (an overlapping canary, a cluster-wide switch in
    /// progress or cleaning up).
    TwoCoordinators,
    /// New data does not go where the registry routes it (a schema version
    /// of a canary's prefix created on another cluster).
    Routing,
    /// A node's managed ledgers did not pause trims and rollovers while its
    /// metadata session was lost, or did not resume once it was back.
    SessionPause,
    /// A consumer never received an acknowledged message that its cursor
    /// has since moved past (a consumer-side gap), or received acknowledged
    /// messages out of order.
    ConsumerGap,
    /// A consumer received more duplicates than its redeliveries allow.
    Duplicates,
    /// A cursor is ahead of every mark-delete the traffic asked for.
    CursorAhead,
    /// A stamp that does not decode, or a managed-ledger, cursor or schema
    /// node that does not decode.
    CorruptMetadata,
    /// A referenced ledger does not hold what was acknowledged (entry count,
    /// last entry, bytes), read straight off its stamped cluster.
    LedgerContents,
    /// A read delivered data that was never written to this topic (a read
    /// served from the wrong cluster, or corrupt data).
    WrongData,
    /// Metadata the nemesis corrupted was overwritten or deleted while it
    /// did not decode, or a node took it for metadata (loaded a managed
    /// ledger or cursor from it).
    CorruptionMishandled,
}

/// One violation, with a message saying what and where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Its kind.
    pub kind: ViolationKind,
    /// What was seen.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "[{:?}] {}", self.kind, self.message)
    }
}

/// Violations collected during a history.
#[derive(Debug, Default, Clone)]
pub struct Violations(pub Vec<Violation>);

impl Violations {
    /// Records one.
    pub fn push(&mut self, kind: ViolationKind, message: impl Into<String>) {
        self.0.push(Violation {
            kind,
            message: message.into(),
        });
    }
}
