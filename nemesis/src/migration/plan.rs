//! The operations of a migration history, drawn from its seed.

use super::{OPS, WRITERS};

/// One operation or fault of a migration history.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MigrationOp {
    /// Start a migration from the store in use to the other one.
    Start {
        /// Wipe the target (`wipe_target` naming its root); without it a
        /// non-empty target is refused.
        wipe: bool,
        /// Whether the start names a target it must be refused: the source
        /// under another spelling, or a store registered as a bookie
        /// cluster's root.
        overlap: Overlap,
    },
    /// The newest coordinator runs this many steps.
    Step {
        /// Steps.
        steps: u8,
    },
    /// The newest coordinator crashes in the middle of a step: the step's
    /// future is dropped after this many microseconds.
    CrashMidStep {
        /// Microseconds the step runs before the crash.
        after_us: u16,
    },
    /// The oldest coordinator crashes between two steps.
    Crash,
    /// A new coordinator resumes the running migration from its record (the
    /// others, if any, are not stopped: two coordinators at once).
    Resume,
    /// The operator aborts the running migration.
    Abort,
    /// A participant registers and never answers (a stalled process).
    Stall,
    /// The stalled participants go away.
    Unstall,
    /// A writer's process dies: its writes stop, its session ends.
    Lose {
        /// The writer.
        writer: u8,
    },
    /// A lost writer starts again (a new participant, on the store in use).
    Restart {
        /// The writer.
        writer: u8,
    },
    /// A writer's first session expires (its ephemeral nodes go; it
    /// re-registers).
    ExpireSession {
        /// The writer.
        writer: u8,
    },
    /// Time passes.
    Wait {
        /// Milliseconds.
        ms: u16,
    },
    /// The next write of a writer's participant fails with a store error:
    /// on its migration control nodes (its published dirty paths, its
    /// acknowledgements, its markers), or on its own keys.
    StoreFault {
        /// The writer.
        writer: u8,
        /// On the control nodes (else on the writer's keys).
        control: bool,
        /// Applied by the store before the error (only on control nodes:
        /// the writers do not re-read their keys after an ambiguous write,
        /// a managed ledger does).
        applied: bool,
    },
}

/// A start aimed where a migration must never go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Overlap {
    /// The other store: an ordinary start.
    None,
    /// The source itself, spelled otherwise (`memory://A` for `memory://a`).
    Source,
    /// The other store, named as a bookie cluster's metadata root.
    Protected,
}

/// A migration history's operations, drawn from its seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MigrationPlan {
    /// The seed.
    pub seed: u64,
    /// Tree size seeded in `memory://a` besides the writers' keys.
    pub nodes: usize,
    /// The participants' dirty-set bound (small ones overflow: re-scans).
    pub dirty_limit: usize,
    /// The operations.
    pub ops: Vec<MigrationOp>,
}

impl MigrationPlan {
    /// The plan of `seed`.
    pub fn generate(seed: u64) -> MigrationPlan {
        let mut rng = fastrand::Rng::with_seed(seed);
        // Drawn apart, so that the histories of older seeds keep their
        // other operations.
        let mut aim = fastrand::Rng::with_seed(seed ^ 0x5eed_0a1e);
        let mut ops = Vec::with_capacity(OPS);
        for _ in 0..OPS {
            let writer = rng.u8(0..WRITERS as u8);
            ops.push(match rng.u8(0..100) {
                0..=11 => MigrationOp::Start {
                    wipe: rng.bool(),
                    overlap: match aim.u8(0..8) {
                        0 => Overlap::Source,
                        1 => Overlap::Protected,
                        _ => Overlap::None,
                    },
                },
                12..=41 => MigrationOp::Step {
                    steps: rng.u8(1..8),
                },
                42..=46 => MigrationOp::CrashMidStep {
                    after_us: rng.u16(0..2_000),
                },
                47..=50 => MigrationOp::Crash,
                51..=58 => MigrationOp::Resume,
                59..=62 => MigrationOp::Abort,
                63..=66 => MigrationOp::Stall,
                67..=70 => MigrationOp::Unstall,
                71..=75 => MigrationOp::Lose { writer },
                76..=82 => MigrationOp::Restart { writer },
                83..=86 => MigrationOp::ExpireSession { writer },
                _ => MigrationOp::Wait { ms: rng.u16(1..40) },
            });
            // Store faults come from the side generator too, between the
            // operations: the older seeds keep every operation they had.
            if aim.u8(0..6) == 0 {
                let control = aim.bool();
                ops.push(MigrationOp::StoreFault {
                    writer: aim.u8(0..WRITERS as u8),
                    control,
                    applied: control && aim.bool(),
                });
            }
        }
        MigrationPlan {
            seed,
            nodes: rng.usize(20..200),
            dirty_limit: if rng.bool() { 8 } else { 100_000 },
            ops,
        }
    }
}
