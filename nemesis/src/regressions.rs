//! The known defects of issue #20 (item 5) the nemesis shows on the code it
//! was written against: random seeds that fail ([`REGRESSION_SEEDS`]) and
//! directed plans for what randomness does not reach in the CI budget
//! ([`DIRECTED`]). Each replays with the same runner and checker as every
//! other history, and must pass once the defect is fixed.

use std::time::Duration;

use crate::plan::{Op, Plan, Settings, StoreKind};
use crate::store::WriteKind;

/// A random history that showed a defect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegressionSeed {
    /// The seed (`nemesis replay --seed S`).
    pub seed: u64,
    /// The defect of issue #20 it shows (item 5's numbering).
    pub defect: &'static str,
    /// How it failed.
    pub failure: &'static str,
}

/// Seeds of random histories that failed, with the defect each one shows.
/// They replay deterministically and pass once the defect is fixed.
pub const REGRESSION_SEEDS: &[RegressionSeed] = &[
    RegressionSeed {
        seed: 301_017,
        defect: "N24",
        failure: "node-0 lost its metadata connection just before a migration flipped it to \
                  the other tree: its managed ledgers heard the connection lost on the old \
                  store, the flip re-armed their watch on the target without saying that \
                  it answers, and they stayed paused (no rollover, no trim) after the \
                  connection was back (SessionPause). Timing-dependent: about one run in \
                  eight before the fix (the directed test is \
                  metadata-migration/tests/flip_session_events.rs)",
    },
    RegressionSeed {
        seed: 90,
        defect: "N23",
        failure: "a migration's coordinator frozen in its pause with its session expiring: \
                  another node took the lead and flipped the migration; thawed, the first \
                  went on copying its dirty paths and copied the source's old schema \
                  locator over the one written on the target after the flip (SchemaLost: \
                  an acknowledged version reads back other data). The coordinator's check \
                  of its record was a read, which a lagging follower (stale reads) answered \
                  from before the takeover. Timing-dependent: it failed in about a third of \
                  its runs before the fix (the directed test is \
                  metadata-migration/tests/stalled_coordinator.rs)",
    },
    RegressionSeed {
        seed: 206_302,
        defect: "N21 (issue #36)",
        failure: "a canary of `t/ns1/persistent/a` on `third` accepted inside the canary of \
                  `t/ns1/persistent/` on `new`, `third`'s ids past `old`'s only: the topic's \
                  next ledger would go below its last one (TopicUnloadable)",
    },
    RegressionSeed {
        seed: 100_385,
        defect: "N19 (issue #36)",
        failure: "every node stopped while a metadata migration was in its pause: none could \
                  start again (its start writes its registration and the bootstrap marker, \
                  refused in the pause; only a coordinator, elected with ephemeral nodes, ends \
                  the pause) — Stuck",
    },
    RegressionSeed {
        seed: 101_679,
        defect: "N19 (issue #36)",
        failure: "the same, the move back to `memory://a`",
    },
    RegressionSeed {
        seed: 104_485,
        defect: "N17 (issue #36)",
        failure: "a canary's override answered 503 landed late and routed a prefix to `third` \
                  below the ids already used: its topics never roll over (TopicUnloadable)",
    },
    RegressionSeed {
        seed: 107_518,
        defect: "N17 (issue #36)",
        failure: "an unregister answered 503 landed while a switch to that cluster ran: the \
                  switch stays in PROMOTE for good (Stuck)",
    },
    RegressionSeed {
        seed: 108_511,
        defect: "N17 (issue #36)",
        failure: "an unregister answered 503 landed later: data ledgers stamped with a cluster \
                  that is no longer registered (Registry)",
    },
    RegressionSeed {
        seed: 109_758,
        defect: "N18 (issue #36)",
        failure: "a node frozen past its session came back unregistered (its registration was \
                  refused once and never tried again): a second node with its id started \
                  (DuplicateNode)",
    },
    RegressionSeed {
        seed: 49,
        defect: "N16 (issue #36)",
        failure: "a schema-locator or cursor write answered `Unavailable` landed after its \
                  writer had read the node back unchanged and deleted the new ledger: the \
                  metadata names a deleted ledger (LedgerMissing); fixed by fencing the lost \
                  write before deleting",
    },
    RegressionSeed {
        seed: 165,
        defect: "N16 (issue #36)",
        failure: "the same (late writes), a schema ledger lost",
    },
    RegressionSeed {
        seed: 196,
        defect: "N16 (issue #36)",
        failure: "the same (late writes), a cursor ledger lost",
    },
    RegressionSeed {
        seed: 0,
        defect: "5.2",
        failure: "an ambiguous ledger-info write with the connection lost right after: the new \
                  data ledger is deleted while the metadata names it; the topic never loads \
                  again (LedgerMissing, TopicUnloadable)",
    },
    RegressionSeed {
        seed: 57,
        defect: "5.2",
        failure: "the same for a cursor: the new cursor ledger is deleted while the cursor's \
                  metadata names it (LedgerMissing, cursor)",
    },
    RegressionSeed {
        seed: 120,
        defect: "5.6",
        failure: "ambiguous cursor writes with the connection lost on the node that owns \
                  `t/ns2/persistent/c` and coordinates the canary of `t/ns2/`: the canary stays \
                  in PROMOTE for ever (Stuck) and the cursor comes back behind its acknowledged \
                  mark-delete (CursorBehind); shrunk to 4 operations (`--keep 0,1,2,6`)",
    },
    RegressionSeed {
        seed: 13,
        defect: "5.4",
        failure: "a canary stays in BUILD after every fault healed and every node restarted, \
                  and remove-override does not move it (Stuck)",
    },
    RegressionSeed {
        seed: 233,
        defect: "5.1",
        failure: "the canary of `t/ns1/` starts while the canary of the overlapping `t/ns1/pers` \
                  is in BUILD (TwoCoordinators); also 5.2",
    },
    RegressionSeed {
        seed: 100_695,
        defect: "5.1",
        failure: "the canary of `t/ns1/pers` starts while the cluster-wide switch old -> new is \
                  in CLEANUP (TwoCoordinators); also 5.2 and 5.12 (long run)",
    },
    RegressionSeed {
        seed: 100_754,
        defect: "5.3",
        failure: "`DELETE /third` answers 204 while the canary of `t/ns1/persistent/` to `third` \
                  is SWITCHED: the override and the canary name an unregistered cluster (long \
                  run)",
    },
    RegressionSeed {
        seed: 11,
        defect: "5.12",
        failure: "a second node-2 starts while node-2 runs (DuplicateNode)",
    },
    RegressionSeed {
        seed: 204_214,
        defect: "N20 (issue #36)",
        failure: "node-2's session expires in a connection loss; a second node-2 registers \
                  meanwhile; the first, seeing the registration created, stopped checking it \
                  and ran on beside the second (DuplicateNode after healing)",
    },
    RegressionSeed {
        seed: 209_831,
        defect: "N20 (issue #36)",
        failure: "as 204214 for node-1: both nodes with one id still ran after healing \
                  (DuplicateNode)",
    },
    RegressionSeed {
        seed: 209_961,
        defect: "N20 (issue #36)",
        failure: "a duplicate of a node whose session was lost: the first must fail-stop once \
                  it finds its id taken (DuplicateNode); also N21",
    },
    RegressionSeed {
        seed: 206_430,
        defect: "N22 (issue #36)",
        failure: "the idgen of a switch's source advanced while the switch ran: topics could \
                  not roll over onto the target, whose next id was below their last ledger \
                  (TopicUnloadable)",
    },
    RegressionSeed {
        seed: 209_628,
        defect: "N22 (issue #36)",
        failure: "as 206430, with the switch's directive written late (TopicUnloadable)",
    },
];

/// Seeds that failed through a flaw of the checker, not of bkswitch (found by
/// the long run, triaged): they replay as regressions of the checker and
/// must pass.
pub const CHECKER_SEEDS: &[RegressionSeed] = &[
    RegressionSeed {
        seed: 160,
        defect: "checker",
        failure: "`DELETE /third` answered 204 and the checker reported the record still there: \
                  it read through node-0, whose participant had not followed the migration \
                  just completed (its reads of the migration record lag, stale reads), so \
                  it took the tree of the first running node for the tree in use and read \
                  the tree the nodes had left. The tree in use is now the one no completed \
                  migration left, and the checker reads through a node on it",
    },
    RegressionSeed {
        seed: 106_720,
        defect: "checker",
        failure: "`POST /switch` to `old` answered 409 CONFLICT (the switch to `third` was \
                  still SWITCHED) and the checker reported a recorded switch: its read of the \
                  latest switch before the call failed (the reading node's connection was \
                  lost) and counted as \"no switch\", the read after succeeded. The checker \
                  now compares only two successful reads, through any node that can read",
    },
];

/// A fixed history for a defect randomness does not reach reliably.
#[derive(Debug, Clone, Copy)]
pub struct Directed {
    /// A name (`nemesis` tests are named after it).
    pub name: &'static str,
    /// The defect of issue #20 it shows.
    pub defect: &'static str,
    /// What it does and how it fails today.
    pub failure: &'static str,
    /// Its operations.
    pub ops: fn() -> Vec<Op>,
}

const OLD: usize = 0;
const NEW: usize = 1;
const THIRD: usize = 2;

fn canary_setup(target: usize) -> Vec<Op> {
    vec![
        Op::Register {
            node: 0,
            cluster: target,
        },
        Op::AdvanceIdgen {
            cluster: target,
            margin: 10_000,
        },
        Op::Wait { millis: 1_000 },
    ]
}

/// The directed histories.
pub const DIRECTED: &[Directed] = &[
    Directed {
        name: "ambiguous_ledger_writes_then_connection_loss",
        defect: "5.2",
        failure: "every node's next ledger-info writes are applied, then the connection drops \
                  for 500 ms: the rollover deletes the new ledger the metadata names; the topics \
                  never load again",
        ops: || {
            let mut ops = vec![Op::Wait { millis: 1_000 }];
            for node in 0..3 {
                ops.push(Op::Ambiguous {
                    node,
                    kind: WriteKind::LedgerInfo,
                    count: 3,
                    outage_ms: 500,
                });
            }
            ops.push(Op::Wait { millis: 3_000 });
            ops
        },
    },
    Directed {
        name: "overlapping_canary_starts_while_another_builds",
        defect: "5.1",
        failure: "with the target slow, the canary of `t/ns1/` is in BUILD when the canary of \
                  `t/ns1/persistent/a` is started: it is accepted (200), two coordinators copy \
                  and promote the same ledgers",
        ops: || {
            let mut ops = canary_setup(NEW);
            ops.extend([
                Op::ClusterSlow {
                    cluster: NEW,
                    millis: 300,
                },
                Op::SetOverride {
                    node: 0,
                    prefix: 0,
                    cluster: NEW,
                },
                Op::SetOverride {
                    node: 1,
                    prefix: 1,
                    cluster: NEW,
                },
                Op::ClusterUp { cluster: NEW },
                Op::Wait { millis: 5_000 },
            ]);
            ops
        },
    },
    Directed {
        name: "unregister_the_target_of_a_canary_in_build",
        defect: "5.3",
        failure: "with the target slow, the canary of `t/ns2/` is in BUILD and its target is \
                  unregistered (204): the override names an unregistered cluster",
        ops: || {
            let mut ops = canary_setup(THIRD);
            ops.extend([
                Op::ClusterSlow {
                    cluster: THIRD,
                    millis: 300,
                },
                Op::SetOverride {
                    node: 0,
                    prefix: 4,
                    cluster: THIRD,
                },
                Op::Unregister {
                    node: 1,
                    cluster: THIRD,
                },
                Op::ClusterUp { cluster: THIRD },
                Op::Wait { millis: 5_000 },
            ]);
            ops
        },
    },
    Directed {
        name: "canary_coordinator_crashes_in_build",
        defect: "5.4",
        failure: "the node that started a canary crashes while it is in BUILD (target slow); \
                  no other node takes it over: it stays in BUILD with faults healed and every \
                  node restarted",
        ops: || {
            let mut ops = canary_setup(NEW);
            ops.extend([
                Op::ClusterSlow {
                    cluster: NEW,
                    millis: 300,
                },
                Op::SetOverride {
                    node: 1,
                    prefix: 0,
                    cluster: NEW,
                },
                Op::Crash { node: 1 },
                Op::ClusterUp { cluster: NEW },
                Op::Restart { node: 1 },
                Op::ExpectSettled { millis: 60_000 },
            ]);
            ops
        },
    },
    Directed {
        name: "rollback_with_the_target_dead",
        defect: "5.5 (not reproduced)",
        failure: "a switch to `new` reaches SWITCHED with owned topics; `new` becomes \
                  unreachable; the rollback must still converge. It does on the embedded \
                  stack (the operator calls rollback again, the owners flip their cursors): a \
                  guard, not a regression",
        ops: || {
            let mut ops = canary_setup(NEW);
            ops.extend([
                Op::Switch {
                    node: 0,
                    cluster: NEW,
                },
                Op::ExpectSettled { millis: 60_000 },
                Op::ClusterDown {
                    cluster: NEW,
                    hang: false,
                },
                Op::AdvanceIdgen {
                    cluster: 0,
                    margin: 10_000,
                },
                Op::Rollback { node: 0 },
                Op::Wait { millis: 10_000 },
                Op::Rollback { node: 0 },
                Op::ExpectRolledBack { millis: 60_000 },
            ]);
            ops
        },
    },
    Directed {
        name: "canary_routes_schema_creation",
        defect: "5.7",
        failure: "after the canary of `t/ns1/` is SWITCHED, a new schema version of `t/ns1/a` \
                  is created on the old cluster",
        ops: || {
            let mut ops = canary_setup(NEW);
            ops.extend([
                Op::SetOverride {
                    node: 0,
                    prefix: 0,
                    cluster: NEW,
                },
                Op::ExpectSettled { millis: 60_000 },
                Op::ExpectSchemaOn {
                    schema: 0,
                    cluster: NEW,
                },
            ]);
            ops
        },
    },
    Directed {
        name: "misaligned_canary_prefix_scopes_schemas_like_ledgers",
        defect: "5.7",
        failure: "the canary of the misaligned prefix `t/ns1/pers` moved the managed ledgers \
                  of `t/ns1/persistent/a` but not the schema `t/ns1/a`. Since the fix such a \
                  prefix is refused (400, nothing written): the schema stays with its managed \
                  ledgers on `old`, and the checker holds the refusal to having written nothing",
        ops: || {
            let mut ops = canary_setup(NEW);
            ops.extend([
                Op::SetOverride {
                    node: 0,
                    prefix: 3,
                    cluster: NEW,
                },
                Op::ExpectSettled { millis: 60_000 },
                Op::ExpectSchemaOn {
                    schema: 0,
                    cluster: OLD,
                },
            ]);
            ops
        },
    },
    Directed {
        name: "ambiguous_cursor_write_in_a_canary_promote",
        defect: "5.6",
        failure: "the node that owns `t/ns2/persistent/c` and coordinates the canary of `t/ns2/` \
                  gets its cursor writes applied then loses its connection (seed 120 shrunk, \
                  timings of a directed plan): the canary stays in PROMOTE for ever (Stuck), and \
                  the cursor's new ledger is deleted while its metadata names it (5.2)",
        ops: || {
            let mut ops = canary_setup(THIRD);
            ops.extend([
                Op::Ambiguous {
                    node: 2,
                    kind: WriteKind::Cursor,
                    count: 3,
                    outage_ms: 1_819,
                },
                Op::SetOverride {
                    node: 2,
                    prefix: 4,
                    cluster: THIRD,
                },
                Op::Wait { millis: 3_000 },
            ]);
            ops
        },
    },
    Directed {
        name: "duplicate_node_id",
        defect: "5.12",
        failure: "a second node with id node-0 starts while node-0 runs",
        ops: || vec![Op::Wait { millis: 500 }, Op::Duplicate { node: 0 }],
    },
    Directed {
        name: "connection_lost_on_every_node",
        defect: "6",
        failure: "every node loses its metadata connection in turn for 3 s under traffic: \
                  while it is lost, its managed ledgers must not trim or roll over (appends go \
                  on to the current ledgers), and both must resume once it is back",
        ops: || {
            let mut ops = vec![Op::Wait { millis: 2_000 }];
            for node in 0..3 {
                ops.push(Op::LoseConnection {
                    node,
                    millis: 3_000,
                });
                ops.push(Op::Wait { millis: 1_000 });
            }
            ops
        },
    },
];

/// The plan of a directed history (its seed is 0; nothing in it is random).
pub fn directed_plan(d: &Directed) -> Plan {
    let day = Duration::from_secs(24 * 3600);
    Plan {
        seed: 0,
        settings: Settings {
            nodes: 3,
            rollback_window: day,
            dual_read_timeout: 15 * day,
            auto_cleanup_interval: Duration::from_secs(5),
            skew_ms: Vec::new(),
            migrations: false,
            buggify_per_mille: 0,
            store_kind: StoreKind::ZooKeeper,
            stale_reads: false,
        },
        ops: (d.ops)(),
    }
}

/// The directed history named `name`.
pub fn directed(name: &str) -> Option<&'static Directed> {
    DIRECTED.iter().find(|d| d.name == name)
}
