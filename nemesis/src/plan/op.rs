//! The operations of a history ([`Op`]): operator calls, faults, waits and
//! the expectations of directed plans.

use std::fmt;

use super::{CorruptTarget, CLUSTERS, PREFIXES, SCHEMAS};
use crate::store::WriteKind;

/// One step of a history.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `POST /{cluster}` through node `node`.
    Register {
        /// The node whose REST API is called.
        node: usize,
        /// Index into [`CLUSTERS`].
        cluster: usize,
    },
    /// `DELETE /{cluster}`.
    Unregister {
        /// The node called.
        node: usize,
        /// Index into [`CLUSTERS`].
        cluster: usize,
    },
    /// `GET /precheck/{cluster}`.
    Precheck {
        /// The node called.
        node: usize,
        /// Index into [`CLUSTERS`].
        cluster: usize,
    },
    /// The operator's id-generator step: moves `cluster`'s next ledger id
    /// `margin` ids beyond every id the other clusters handed out.
    AdvanceIdgen {
        /// Index into [`CLUSTERS`].
        cluster: usize,
        /// 1 (refused: below the precheck's safety margin) or 10,000 (beyond it).
        margin: i64,
    },
    /// `POST /switch`.
    Switch {
        /// The node called.
        node: usize,
        /// Index into [`CLUSTERS`].
        cluster: usize,
    },
    /// `POST /rollback`.
    Rollback {
        /// The node called.
        node: usize,
    },
    /// `POST /cleanup`.
    Cleanup {
        /// The node called.
        node: usize,
        /// A dry run.
        dry_run: bool,
        /// Inside the rollback window too.
        force: bool,
    },
    /// `POST /overrides` (starts a canary).
    SetOverride {
        /// The node called.
        node: usize,
        /// Index into [`PREFIXES`].
        prefix: usize,
        /// Index into [`CLUSTERS`].
        cluster: usize,
    },
    /// `POST /overrides/remove` (rolls the canary back).
    RemoveOverride {
        /// The node called.
        node: usize,
        /// Index into [`PREFIXES`].
        prefix: usize,
    },
    /// The node crashes: its metadata connection is cut for good, its session
    /// expires (its ephemeral nodes go), then it is stopped.
    Crash {
        /// The node.
        node: usize,
    },
    /// A crashed node starts again with the same id (no-op when it runs).
    Restart {
        /// The node.
        node: usize,
    },
    /// A second node is started with the id of `node`.
    Duplicate {
        /// The node whose id is reused.
        node: usize,
    },
    /// The node's metadata session expires (and is re-established).
    ExpireSession {
        /// The node.
        node: usize,
    },
    /// The node loses its metadata connection for `millis`.
    LoseConnection {
        /// The node.
        node: usize,
        /// For how long (virtual time).
        millis: u64,
    },
    /// The node's next `count` writes of `kind` are ambiguous: applied, then
    /// answered `Unavailable`; with `outage_ms` > 0 the connection is lost
    /// for that long right after (so the caller cannot read back either).
    Ambiguous {
        /// The node.
        node: usize,
        /// Which writes.
        kind: WriteKind,
        /// How many.
        count: usize,
        /// Connection loss after the write (virtual ms; 0: none).
        outage_ms: u64,
    },
    /// A bookie cluster becomes unreachable (failing fast, or hanging with an
    /// operation timeout).
    ClusterDown {
        /// Index into [`CLUSTERS`].
        cluster: usize,
        /// Hang rather than fail fast.
        hang: bool,
    },
    /// A bookie cluster is reachable and fast again.
    ClusterUp {
        /// Index into [`CLUSTERS`].
        cluster: usize,
    },
    /// A bookie cluster answers every operation `millis` late.
    ClusterSlow {
        /// Index into [`CLUSTERS`].
        cluster: usize,
        /// The latency (virtual time).
        millis: u64,
    },
    /// Moves every node's clock forward by `days` (the wall clock the
    /// coordinators read: switch records, the rollback window, the dual-read
    /// timeout of the automatic cleanup), then lets the automatic cleanup run.
    MoveClock {
        /// How far, in days.
        days: u64,
    },
    /// Moves every node's clock forward by `hours` in the middle of a
    /// history (rollback windows and automatic cleanup meet it mid-step).
    MoveClockHours {
        /// How far, in hours.
        hours: u64,
    },
    /// Two operator calls on two nodes at the same moment (each an
    /// operator operation: switch, rollback, cleanup, set or remove an
    /// override).
    Racing {
        /// The first call.
        first: Box<Op>,
        /// The second call.
        second: Box<Op>,
    },
    /// An operator call whose client goes away after `after_ms` (virtual
    /// time): the handler is dropped wherever it is.
    Cancelled {
        /// The call (an operator operation).
        call: Box<Op>,
        /// When the client goes away.
        after_ms: u64,
    },
    /// The node's process freezes (SIGSTOP) with its calls in flight for
    /// `millis`; its session expires meanwhile when `expire`; then it
    /// resumes (SIGCONT) and its calls go on: a zombie.
    Freeze {
        /// The node.
        node: usize,
        /// How long (virtual time).
        millis: u64,
        /// Whether its session expires while it is frozen.
        expire: bool,
    },
    /// `POST /admin/v2/metadata/migration` on the node: moves every node's
    /// metadata to the other in-memory tree (`memory://a` ⇄ `memory://b`),
    /// wiping the target's leftovers of an earlier move by naming its root
    /// (histories with [`Settings::migrations`](super::Settings::migrations) only).
    Migrate {
        /// The node called.
        node: usize,
    },
    /// The next `count` writes of `kind` by the node are answered
    /// `Unavailable` at once and land `delay_ms` later.
    LateWrites {
        /// The node.
        node: usize,
        /// Which writes.
        kind: WriteKind,
        /// How many.
        count: usize,
        /// How late (virtual time).
        delay_ms: u64,
    },
    /// One bookie of `cluster` loses its copies: of one ledger (the
    /// `ledger`-th of the cluster's ledgers by id, modulo) or, with `None`,
    /// of every ledger (its disk replaced). Never an entry's last copy: the
    /// other bookies of the write set keep theirs, and reads and recoveries
    /// must come from them.
    LoseCopies {
        /// Index into [`CLUSTERS`].
        cluster: usize,
        /// Which of the cluster's bookies.
        bookie: usize,
        /// One ledger (drawn), or every ledger.
        ledger: Option<u64>,
    },
    /// Metadata bytes replaced by bytes that do not decode, behind every
    /// node's back (what `pick` chooses is at [`CorruptTarget`]); the
    /// nemesis records what it replaced.
    Corrupt {
        /// What is damaged.
        target: CorruptTarget,
        /// Which one.
        pick: u64,
    },
    /// Every corruption so far is repaired, as an operator restores a
    /// backup: the bytes it replaced are written back (a node that no longer
    /// holds the corrupt bytes was overwritten or deleted: a violation).
    RepairMetadata,
    /// Lets time pass (traffic and the nodes' own duties run).
    Wait {
        /// How long (virtual time).
        millis: u64,
    },
    /// Directed plans only: every switch and canary must reach SWITCHED,
    /// DONE or ROLLED_BACK within `millis`, with the faults still active.
    ExpectSettled {
        /// How long to wait (virtual time).
        millis: u64,
    },
    /// Directed plans only: the cluster-wide switch must be ROLLED_BACK
    /// within `millis`, with the faults still active.
    ExpectRolledBack {
        /// How long to wait (virtual time).
        millis: u64,
    },
    /// Directed plans only: a schema version put now under `schema` is
    /// stored on `cluster` (where the managed ledgers of its topic go).
    ExpectSchemaOn {
        /// Index into [`SCHEMAS`].
        schema: usize,
        /// Index into [`CLUSTERS`].
        cluster: usize,
    },
}

impl fmt::Display for Op {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = |i: &usize| CLUSTERS[*i];
        let p = |i: &usize| PREFIXES[*i];
        match self {
            Op::Register { node, cluster } => write!(f, "node{node}: register {}", c(cluster)),
            Op::Unregister { node, cluster } => {
                write!(f, "node{node}: unregister {}", c(cluster))
            }
            Op::Precheck { node, cluster } => write!(f, "node{node}: precheck {}", c(cluster)),
            Op::AdvanceIdgen { cluster, margin } => {
                write!(f, "advance idgen of {} (margin {margin})", c(cluster))
            }
            Op::Switch { node, cluster } => write!(f, "node{node}: switch to {}", c(cluster)),
            Op::Rollback { node } => write!(f, "node{node}: rollback"),
            Op::Cleanup {
                node,
                dry_run,
                force,
            } => write!(f, "node{node}: cleanup dry_run={dry_run} force={force}"),
            Op::SetOverride {
                node,
                prefix,
                cluster,
            } => write!(
                f,
                "node{node}: set-override `{}` -> {}",
                p(prefix),
                c(cluster)
            ),
            Op::RemoveOverride { node, prefix } => {
                write!(f, "node{node}: remove-override `{}`", p(prefix))
            }
            Op::Crash { node } => write!(f, "crash node{node}"),
            Op::Restart { node } => write!(f, "restart node{node}"),
            Op::Duplicate { node } => write!(f, "start a duplicate of node{node}"),
            Op::ExpireSession { node } => write!(f, "expire the session of node{node}"),
            Op::LoseConnection { node, millis } => {
                write!(
                    f,
                    "node{node} loses its metadata connection for {millis} ms"
                )
            }
            Op::Ambiguous {
                node,
                kind,
                count,
                outage_ms,
            } => write!(
                f,
                "node{node}: next {count} {kind:?} writes ambiguous (then {outage_ms} ms without \
                 connection)"
            ),
            Op::ClusterDown { cluster, hang } => write!(
                f,
                "cluster {} unreachable ({})",
                c(cluster),
                if *hang { "hang" } else { "fail fast" }
            ),
            Op::ClusterUp { cluster } => write!(f, "cluster {} healthy", c(cluster)),
            Op::ClusterSlow { cluster, millis } => {
                write!(f, "cluster {} slow ({millis} ms)", c(cluster))
            }
            Op::Wait { millis } => write!(f, "wait {millis} ms"),
            Op::LoseCopies {
                cluster,
                bookie,
                ledger,
            } => match ledger {
                Some(pick) => write!(
                    f,
                    "bookie {bookie} of {} loses its copies of ledger #{pick}",
                    c(cluster)
                ),
                None => write!(f, "bookie {bookie} of {} loses its disk", c(cluster)),
            },
            Op::Corrupt { target, pick } => write!(f, "corrupt {target:?} #{pick}"),
            Op::RepairMetadata => write!(f, "repair every corrupted metadata"),
            Op::MoveClock { days } => write!(f, "move the clock {days} days forward"),
            Op::MoveClockHours { hours } => write!(f, "move the clock {hours} hours forward"),
            Op::Migrate { node } => write!(f, "node{node}: migrate the metadata store"),
            Op::Freeze {
                node,
                millis,
                expire,
            } => write!(
                f,
                "node{node} frozen {millis} ms{}",
                if *expire {
                    ", its session expiring"
                } else {
                    ""
                }
            ),
            Op::LateWrites {
                node,
                kind,
                count,
                delay_ms,
            } => write!(
                f,
                "node{node}: next {count} {kind:?} writes land {delay_ms} ms late"
            ),
            Op::Racing { first, second } => write!(f, "race [{first}] with [{second}]"),
            Op::Cancelled { call, after_ms } => {
                write!(f, "[{call}], its client gone after {after_ms} ms")
            }
            Op::ExpectSettled { millis } => {
                write!(f, "expect every switch settled within {millis} ms")
            }
            Op::ExpectRolledBack { millis } => {
                write!(f, "expect the switch rolled back within {millis} ms")
            }
            Op::ExpectSchemaOn { schema, cluster } => write!(
                f,
                "expect a new version of schema {} on {}",
                SCHEMAS[*schema],
                c(cluster)
            ),
        }
    }
}

/// The kind of a fault, as the figures count it (`None`: not a fault).
pub fn fault_kind(op: &Op) -> Option<&'static str> {
    Some(match op {
        Op::Crash { .. } => "crash",
        Op::Freeze { .. } => "freeze",
        Op::LateWrites { .. } => "late writes",
        Op::Duplicate { .. } => "duplicate node",
        Op::ExpireSession { .. } => "session expiry",
        Op::LoseConnection { .. } => "connection loss",
        Op::Ambiguous { .. } => "ambiguous writes",
        Op::ClusterDown { .. } => "cluster down",
        Op::ClusterSlow { .. } => "cluster slow",
        Op::LoseCopies {
            ledger: Some(_), ..
        } => "copies of a ledger lost",
        Op::LoseCopies { ledger: None, .. } => "bookie disk lost",
        Op::Corrupt {
            target: CorruptTarget::ManagedLedger,
            ..
        } => "managed-ledger node corrupted",
        Op::Corrupt {
            target: CorruptTarget::Cursor,
            ..
        } => "cursor node corrupted",
        Op::Corrupt {
            target: CorruptTarget::SchemaLocator,
            ..
        } => "schema locator corrupted",
        Op::Corrupt {
            target: CorruptTarget::LedgerMetadata(_),
            ..
        } => "ledger metadata corrupted",
        _ => return None,
    })
}

impl Op {
    /// Whether this op is a fault (rather than an operator call or a wait).
    pub fn is_fault(&self) -> bool {
        fault_kind(self).is_some()
    }
}
