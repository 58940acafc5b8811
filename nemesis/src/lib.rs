//! A seeded nemesis over the whole bkswitch stack (issue #20, items 1–4).
//!
//! - [`plan`]: a history's operations and settings, generated from a seed.
//! - [`stack`]: the embedded stack (several nodes, in-memory metadata with a
//!   session per node, in-memory bookie clusters `old`, `new`, `third`), REST
//!   calls served in process.
//! - [`store`]: metadata faults (connection loss, ambiguous writes).
//! - [`corrupt`]: corrupt metadata, injected and repaired.
//! - [`stale`]: reads served by a follower behind the leader (ZooKeeper).
//! - [`traffic`]: producers, consumers and schema puts, recording what was
//!   acknowledged.
//! - [`checker`]: the invariants checked after healing.
//! - [`violation`]: what a history can get wrong.
//! - [`history`]: running a plan, deterministically (current-thread runtime,
//!   paused time), and the replay command.
//! - [`linear`]: linearizability of metadata-store histories.
//! - [`shrink`]: dropping operations while a history still fails.
//! - [`real`]: histories on real ZooKeeper and real bookies.
//! - [`migration`]: migration histories (moving the metadata store between
//!   in-memory backends under conditional writers, with coordinator and
//!   participant faults).
//! - [`regressions`]: the seeds and directed tests that show known defects.
#![doc = include_str!("../README.md")]

pub mod checker;
pub mod corrupt;
pub mod history;
pub mod linear;
pub mod migration;
pub mod plan;
pub mod real;
pub mod regressions;
pub mod shrink;
pub mod stack;
pub mod stale;
pub mod store;
pub mod traffic;
pub mod violation;

pub use checker::{Violation, ViolationKind};
pub use history::{plan_of, replay_command, run_embedded, Figures, Outcome};
pub use plan::{Op, Plan, Settings};
pub use stack::SessionCounts;

/// Totals over many histories.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Totals {
    /// Histories run.
    pub histories: usize,
    /// Operations run.
    pub ops: usize,
    /// Faults injected.
    pub faults: usize,
    /// Operator calls made.
    pub operator_calls: usize,
    /// Acknowledged publishes.
    pub published: usize,
    /// Metadata sessions lost and the trims and rollovers put off meanwhile
    /// (the pause at work), over every history.
    pub sessions: SessionCounts,
    /// Metadata calls buggify failed.
    pub buggified: u64,
    /// Metadata-store migrations completed.
    pub moves: u64,
    /// Faults injected, by kind.
    pub fault_kinds: std::collections::BTreeMap<&'static str, usize>,
    /// Bookie copies lost (never an entry's last).
    pub copies_lost: u64,
    /// Metadata corrupted, and corruptions the traffic was refused over.
    pub corruptions: usize,
    /// Corruptions the traffic ran into and was refused over, naming them.
    pub corruptions_refused: usize,
    /// Histories whose reads were served by lagging followers.
    pub stale_histories: usize,
    /// Reads answered with an older state than the leader's.
    pub stale_reads: u64,
    /// Histories that failed, with their seeds.
    pub failed: Vec<u64>,
    /// Violations found.
    pub violations: usize,
    /// Failed histories per violation kind.
    pub by_kind: std::collections::BTreeMap<String, usize>,
}

impl Totals {
    /// Adds one history.
    pub fn add(&mut self, o: &Outcome) {
        self.histories += 1;
        self.ops += o.figures.ops;
        self.faults += o.figures.faults;
        self.operator_calls += o.figures.operator_calls;
        self.published += o.figures.published;
        self.buggified += o.figures.buggified;
        self.moves += o.figures.moves;
        for (k, n) in &o.figures.fault_kinds {
            *self.fault_kinds.entry(k).or_default() += n;
        }
        self.copies_lost += o.figures.copies_lost;
        self.corruptions += o.figures.corruptions;
        self.corruptions_refused += o.figures.corruptions_refused;
        self.stale_histories += usize::from(o.figures.stale_reads > 0);
        self.stale_reads += o.figures.stale_reads;
        self.sessions.losses += o.figures.sessions.losses;
        self.sessions.deferred_trims += o.figures.sessions.deferred_trims;
        self.sessions.deferred_rollovers += o.figures.sessions.deferred_rollovers;
        self.violations += o.violations.0.len();
        if !o.passed() {
            self.failed.push(o.seed);
        }
        for k in o.kinds() {
            *self.by_kind.entry(format!("{k:?}")).or_default() += 1;
        }
    }
}

/// Runs `count` embedded histories with seeds `first..first + count`, calling
/// `each` after every one.
pub fn run_many(first: u64, count: u64, mut each: impl FnMut(&Outcome)) -> Totals {
    let mut totals = Totals::default();
    for seed in first..first + count {
        let o = run_embedded(&Plan::generate(seed));
        totals.add(&o);
        each(&o);
    }
    totals
}

/// [`run_many`] on `jobs` threads (seed `first + j`, `first + j + jobs`, …
/// on thread `j`; each history on a runtime of its own, so a seed gives the
/// same history whatever the number of jobs). `each` is called on the
/// calling thread, in the order the histories end.
///
/// # Panics
///
/// When a thread cannot be started.
pub fn run_many_jobs(first: u64, count: u64, jobs: u64, mut each: impl FnMut(&Outcome)) -> Totals {
    if jobs <= 1 {
        return run_many(first, count, each);
    }
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::scope(|scope| {
        for j in 0..jobs {
            let tx = tx.clone();
            let started = std::thread::Builder::new()
                .name(format!("nemesis-{j}"))
                .stack_size(64 << 20)
                .spawn_scoped(scope, move || {
                    let mut seed = first + j;
                    while seed < first + count {
                        if tx.send(run_embedded(&Plan::generate(seed))).is_err() {
                            return;
                        }
                        seed += jobs;
                    }
                });
            if let Err(e) = started {
                panic!("cannot start a nemesis thread: {e}");
            }
        }
        drop(tx);
        let mut totals = Totals::default();
        for o in rx {
            totals.add(&o);
            each(&o);
        }
        totals.failed.sort_unstable();
        totals
    })
}
