//! Histories: what the nemesis does, generated from a seed.
//!
//! A [`Plan`] is a list of [`Op`]s drawn from one seeded random generator
//! (`fastrand`), plus the history's [`Settings`]. The same seed always gives
//! the same plan; the plan is then executed on a stack while traffic runs
//! (see [`crate::history`]).

use std::time::Duration;

use crate::store::WriteKind;

mod op;

pub use op::{fault_kind, Op};

/// The bookie clusters of every history: `old` (bootstrap, ACTIVE at start),
/// `new` and `third` (registered by the history, or not).
pub const CLUSTERS: [&str; 3] = ["old", "new", "third"];

/// The topics the traffic writes, on purpose under nested, overlapping and
/// misaligned prefixes (`t/ns1` is a prefix of `t/ns10`'s name too).
pub const TOPICS: [&str; 4] = [
    "t/ns1/persistent/a",
    "t/ns1/persistent/b",
    "t/ns2/persistent/c",
    "t/ns10/persistent/d",
];

/// The schema ids the traffic puts versions of (`tenant/namespace/topic`).
pub const SCHEMAS: [&str; 3] = ["t/ns1/a", "t/ns2/c", "t/ns10/d"];

/// Canary prefixes: a namespace, a topic prefix nested in it, one overlapping
/// both, one misaligned on a segment (`t/ns1/pers`), another namespace, and
/// one the API must refuse with a 400 (`t/ns1`, no trailing `/`).
pub const PREFIXES: [&str; 6] = [
    "t/ns1/",
    "t/ns1/persistent/a",
    "t/ns1/persistent/",
    "t/ns1/pers",
    "t/ns2/",
    "t/ns1",
];

/// Per-history settings, drawn from the seed too.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Nodes in the stack.
    pub nodes: usize,
    /// The orchestrator's rollback window (zero: closed at once). Histories
    /// whose window is open may move the clock past it
    /// ([`Op::MoveClock`]).
    pub rollback_window: Duration,
    /// `dualReadTimeoutDays`; zero: automatic cleanup is due at once.
    pub dual_read_timeout: Duration,
    /// How often the nodes look for automatic cleanup (virtual time).
    pub auto_cleanup_interval: Duration,
    /// Whether the nodes take part in metadata migrations (their stores are
    /// `MigratingStore`s over `memory://a`), and the history moves the
    /// metadata between two trees under everything else ([`Op::Migrate`]).
    pub migrations: bool,
    /// Each node's wall clock ahead (or behind, negative) of the others, in
    /// milliseconds (empty: no skew).
    pub skew_ms: Vec<i64>,
    /// Buggify: the chance, per thousand, that any metadata call of a
    /// running node (its managed ledgers, registry sync, coordinator,
    /// ownership, REST verbs) fails until the faults heal — reads clean,
    /// writes clean or after applying. 0: off.
    pub buggify_per_mille: u32,
    /// What the in-memory metadata tree stands for: which read guarantee
    /// the nodes get.
    pub store_kind: StoreKind,
    /// ZooKeeper only: every node's reads may be served by a follower up to
    /// 2 s behind the leader, never older than what the node's session saw
    /// or wrote ([`crate::stale`]), until the faults heal.
    pub stale_reads: bool,
}

/// What the in-memory metadata tree of a history stands for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum StoreKind {
    /// A ZooKeeper ensemble: sequentially consistent per session; reads may
    /// be stale across sessions.
    ZooKeeper,
    /// etcd: linearizable reads (bkswitch never asks for serializable ones).
    Etcd,
}

/// What a [`Op::Corrupt`] damages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CorruptTarget {
    /// A managed ledger's node (its ledger list): the topic `TOPICS[pick % 4]`.
    ManagedLedger,
    /// The node of the cursor of the topic `TOPICS[pick % 4]`.
    Cursor,
    /// The schema locator of `SCHEMAS[pick % 3]`.
    SchemaLocator,
    /// The metadata BookKeeper keeps of one ledger of a cluster (index into
    /// [`CLUSTERS`]), the `pick`-th of its ledgers (by id, modulo).
    LedgerMetadata(usize),
}

/// A history to run: its seed, settings and operations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// The seed it was generated from.
    pub seed: u64,
    /// Its settings.
    pub settings: Settings,
    /// The operations, in order.
    pub ops: Vec<Op>,
}

/// How many random operations a generated history has (a third of the
/// histories then move the clock and wait: two more).
pub const DEFAULT_OPS: usize = 24;

impl Plan {
    /// The plan of `seed`, with [`DEFAULT_OPS`] operations.
    pub fn generate(seed: u64) -> Plan {
        Plan::generate_with(seed, DEFAULT_OPS)
    }

    /// The plan of `seed` with `len` operations.
    pub fn generate_with(seed: u64, len: usize) -> Plan {
        let mut rng = fastrand::Rng::with_seed(seed);
        let nodes = 3;
        let day = Duration::from_secs(24 * 3600);
        let settings = Settings {
            nodes,
            rollback_window: if rng.u8(0..3) == 0 {
                Duration::ZERO
            } else {
                day
            },
            dual_read_timeout: if rng.bool() { Duration::ZERO } else { 15 * day },
            auto_cleanup_interval: Duration::from_secs(rng.u64(1..10)),
            skew_ms: Vec::new(),
            migrations: false,
            buggify_per_mille: 0,
            store_kind: StoreKind::ZooKeeper,
            stale_reads: false,
        };
        let mut ops = Vec::with_capacity(len);
        // Most histories start the way an operator does: register a
        // cluster, advance its generator, switch. The rest start anywhere.
        if rng.u8(0..4) != 0 {
            let target = rng.usize(1..3);
            ops.push(Op::Register {
                node: 0,
                cluster: target,
            });
            ops.push(Op::AdvanceIdgen {
                cluster: target,
                margin: 10_000,
            });
        }
        while ops.len() < len {
            ops.push(random_op(&mut rng, nodes));
        }
        // A third of the histories buggify every metadata call (1–3 %),
        // drawn from a stream of its own: the operations stay the seed's.
        let mut bug = fastrand::Rng::with_seed(seed ^ 0x6275_6767_6966_7900);
        let mut settings = settings;
        if bug.u8(0..3) == 0 {
            settings.buggify_per_mille = bug.u32(10..=30);
        }
        // And from another: per-node clock skew in a third of the histories,
        // and up to three racing calls, cancelled calls, mid-history clock
        // moves, frozen processes (zombies) or late writes inserted among the
        // operations.
        let mut extra = fastrand::Rng::with_seed(seed ^ 0x7261_6365_7300_0000);
        if extra.u8(0..3) == 0 {
            settings.skew_ms = (0..nodes).map(|_| extra.i64(-90_000..=90_000)).collect();
        }
        for _ in 0..extra.usize(0..=3) {
            let op = match extra.u8(0..5) {
                3 => Op::Freeze {
                    node: extra.usize(0..nodes),
                    millis: extra.u64(100..8_000),
                    expire: extra.bool(),
                },
                4 => Op::LateWrites {
                    node: extra.usize(0..nodes),
                    kind: WriteKind::ALL[extra.usize(0..WriteKind::ALL.len())],
                    count: extra.usize(1..4),
                    delay_ms: extra.u64(10..3_000),
                },
                0 => Op::Racing {
                    first: Box::new(operator_op(&mut extra, nodes)),
                    second: Box::new(operator_op(&mut extra, nodes)),
                },
                1 => Op::Cancelled {
                    call: Box::new(operator_op(&mut extra, nodes)),
                    after_ms: extra.u64(0..200),
                },
                _ => Op::MoveClockHours {
                    hours: extra.u64(1..48),
                },
            };
            let at = extra.usize(0..=ops.len());
            ops.insert(at, op);
        }
        // And from a third: a quarter of the histories move the metadata
        // store once or twice under everything else.
        let mut mig = fastrand::Rng::with_seed(seed ^ 0x6d69_6772_6174_6500);
        if mig.u8(0..4) == 0 {
            settings.migrations = true;
            for _ in 0..mig.usize(1..=2) {
                let at = mig.usize(0..=ops.len());
                ops.insert(
                    at,
                    Op::Migrate {
                        node: mig.usize(0..nodes),
                    },
                );
            }
        }
        below_the_metadata(seed, &mut settings, &mut ops);
        // A third of the histories end by moving the clock past the rollback
        // window and the dual-read timeout, so that the automatic cleanup
        // runs on whatever the history left. Drawn from a stream of its own,
        // so that the operations above stay those of the seed.
        let mut tail = fastrand::Rng::with_seed(seed ^ 0x636c_6f63_6b00_0000);
        if tail.u8(0..3) == 0 {
            ops.push(Op::MoveClock {
                days: tail.u64(16..40),
            });
            ops.push(Op::Wait { millis: 12_000 });
        }
        Plan {
            seed,
            settings,
            ops,
        }
    }

    /// Faults in the plan.
    pub fn faults(&self) -> usize {
        self.ops.iter().filter(|o| o.is_fault()).count()
    }
}

/// The faults below the metadata, each from a stream of its own (the
/// operations of the other streams stay those of the seed):
/// - a third of the histories' metadata tree stands for etcd (linearizable
///   reads), the rest for ZooKeeper, half of those with stale reads;
/// - a third of the histories lose bookie copies once or twice: one
///   bookie's copies of one ledger, or of every ledger (its disk), never an
///   entry's last copy;
/// - a quarter corrupt metadata once or twice (a managed-ledger, cursor or
///   schema-locator node, or a ledger's BookKeeper metadata), each repaired
///   later in the history half of the time, else when the faults heal.
fn below_the_metadata(seed: u64, settings: &mut Settings, ops: &mut Vec<Op>) {
    let mut store = fastrand::Rng::with_seed(seed ^ 0x7374_616c_6500_0000);
    if store.u8(0..3) == 0 {
        settings.store_kind = StoreKind::Etcd;
    } else {
        settings.stale_reads = store.bool();
    }
    let mut disk = fastrand::Rng::with_seed(seed ^ 0x6469_736b_0000_0000);
    if disk.u8(0..3) == 0 {
        for _ in 0..disk.usize(1..=2) {
            let op = Op::LoseCopies {
                cluster: disk.usize(0..CLUSTERS.len()),
                bookie: disk.usize(0..3),
                ledger: disk.bool().then(|| disk.u64(..)),
            };
            let at = disk.usize(0..=ops.len());
            ops.insert(at, op);
        }
    }
    let mut bad = fastrand::Rng::with_seed(seed ^ 0x636f_7272_7570_7400);
    if bad.u8(0..4) == 0 {
        for _ in 0..bad.usize(1..=2) {
            let target = match bad.u8(0..4) {
                0 => CorruptTarget::ManagedLedger,
                1 => CorruptTarget::Cursor,
                2 => CorruptTarget::SchemaLocator,
                _ => CorruptTarget::LedgerMetadata(bad.usize(0..CLUSTERS.len())),
            };
            let at = bad.usize(0..=ops.len());
            ops.insert(
                at,
                Op::Corrupt {
                    target,
                    pick: bad.u64(..),
                },
            );
            if bad.bool() {
                let later = bad.usize(at + 1..=ops.len());
                ops.insert(later, Op::RepairMetadata);
            }
        }
    }
}

/// An operator call (what [`Op::Racing`] and [`Op::Cancelled`] make).
fn operator_op(rng: &mut fastrand::Rng, nodes: usize) -> Op {
    let node = rng.usize(0..nodes);
    match rng.u8(0..5) {
        0 => Op::Switch {
            node,
            cluster: rng.usize(0..CLUSTERS.len()),
        },
        1 => Op::Rollback { node },
        2 => Op::Cleanup {
            node,
            dry_run: false,
            force: rng.bool(),
        },
        3 => Op::SetOverride {
            node,
            prefix: rng.usize(0..PREFIXES.len()),
            cluster: rng.usize(0..CLUSTERS.len()),
        },
        _ => Op::RemoveOverride {
            node,
            prefix: rng.usize(0..PREFIXES.len()),
        },
    }
}

fn random_op(rng: &mut fastrand::Rng, nodes: usize) -> Op {
    let node = rng.usize(0..nodes);
    let cluster = rng.usize(0..CLUSTERS.len());
    let target = rng.usize(1..CLUSTERS.len());
    match rng.u32(0..100) {
        0..=5 => Op::Register {
            node,
            cluster: target,
        },
        6..=9 => Op::Unregister { node, cluster },
        10..=12 => Op::Precheck { node, cluster },
        13..=17 => Op::AdvanceIdgen {
            cluster,
            margin: if rng.bool() { 1 } else { 10_000 },
        },
        18..=25 => Op::Switch { node, cluster },
        26..=29 => Op::Rollback { node },
        30..=34 => Op::Cleanup {
            node,
            dry_run: rng.bool(),
            force: rng.bool(),
        },
        35..=42 => Op::SetOverride {
            node,
            prefix: rng.usize(0..PREFIXES.len()),
            cluster,
        },
        43..=46 => Op::RemoveOverride {
            node,
            prefix: rng.usize(0..PREFIXES.len()),
        },
        47..=50 => Op::Crash { node },
        51..=55 => Op::Restart { node },
        // Rare: it fails every history it runs in until refused.
        56 if rng.u8(0..4) == 0 => Op::Duplicate { node },
        56 => Op::Restart { node },
        57..=60 => Op::ExpireSession { node },
        61..=63 => Op::LoseConnection {
            node,
            millis: rng.u64(100..5_000),
        },
        64..=71 => Op::Ambiguous {
            node,
            kind: WriteKind::ALL[rng.usize(0..WriteKind::ALL.len())],
            count: rng.usize(1..4),
            outage_ms: if rng.bool() { 0 } else { rng.u64(50..3_000) },
        },
        72..=74 => Op::ClusterDown {
            cluster,
            hang: rng.bool(),
        },
        75..=78 => Op::ClusterUp { cluster },
        79..=80 => Op::ClusterSlow {
            cluster,
            millis: rng.u64(10..500),
        },
        _ => Op::Wait {
            millis: rng.u64(10..3_000),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_plan() {
        assert_eq!(Plan::generate(7), Plan::generate(7));
        assert_ne!(Plan::generate(7).ops, Plan::generate(8).ops);
        // DEFAULT_OPS operations of the seed's base stream, then maybe the
        // clock moved and a wait; the operations of the other streams
        // (racing and cancelled calls, zombies, late writes, mid-history
        // clock moves, migrations) inserted among them.
        let inserted = |op: &Op| {
            matches!(
                op,
                Op::Racing { .. }
                    | Op::Cancelled { .. }
                    | Op::MoveClockHours { .. }
                    | Op::Freeze { .. }
                    | Op::LateWrites { .. }
                    | Op::Migrate { .. }
                    | Op::LoseCopies { .. }
                    | Op::Corrupt { .. }
                    | Op::RepairMetadata
            )
        };
        let mut with_inserted = 0;
        for seed in 0..200 {
            let plan = Plan::generate(seed);
            let base: Vec<&Op> = plan.ops.iter().filter(|op| !inserted(op)).collect();
            with_inserted += usize::from(base.len() < plan.ops.len());
            match base.len() - DEFAULT_OPS {
                0 => {}
                2 => assert!(matches!(
                    base[DEFAULT_OPS..],
                    [Op::MoveClock { .. }, Op::Wait { .. }]
                )),
                n => panic!("seed {seed}: {n} operations after the first {DEFAULT_OPS}"),
            }
        }
        assert!(with_inserted > 100, "{with_inserted} of 200");
        let moved = (0..300)
            .filter(|&seed| {
                Plan::generate(seed)
                    .ops
                    .iter()
                    .any(|op| matches!(op, Op::MoveClock { .. }))
            })
            .count();
        assert!((50..150).contains(&moved), "{moved} of 300 move the clock");
    }

    #[test]
    fn a_share_of_the_histories_has_each_fault_below_the_metadata() {
        let plans: Vec<Plan> = (0..300).map(Plan::generate).collect();
        let with = |f: &dyn Fn(&Op) -> bool| plans.iter().filter(|p| p.ops.iter().any(f)).count();
        let lose = with(&|op| matches!(op, Op::LoseCopies { .. }));
        let corrupt = with(&|op| matches!(op, Op::Corrupt { .. }));
        let repair = with(&|op| matches!(op, Op::RepairMetadata));
        let stale = plans.iter().filter(|p| p.settings.stale_reads).count();
        let etcd = plans
            .iter()
            .filter(|p| p.settings.store_kind == StoreKind::Etcd)
            .count();
        assert!((70..130).contains(&lose), "{lose} of 300 lose copies");
        assert!(
            (50..100).contains(&corrupt),
            "{corrupt} of 300 corrupt metadata"
        );
        assert!(
            repair > 20 && repair < corrupt,
            "{repair} repair mid-history"
        );
        assert!((70..130).contains(&stale), "{stale} of 300 read stale");
        assert!((70..130).contains(&etcd), "{etcd} of 300 on etcd");
        // Never on etcd.
        assert!(plans
            .iter()
            .all(|p| !(p.settings.stale_reads && p.settings.store_kind == StoreKind::Etcd)));
    }
}
