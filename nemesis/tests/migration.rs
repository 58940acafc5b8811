//! Migration histories (moving the metadata store between in-memory
//! backends, with coordinator and participant faults) as CI runs them: a few
//! seeds; `scripts/nemesis-long.sh` runs many more.

use bkswitch_nemesis::migration::{
    run_migration_histories, run_migration_history, MigrationOp, MigrationPlan,
    MIGRATION_REGRESSION_SEEDS,
};

/// How many migration histories CI runs.
const CI_HISTORIES: u64 = 12;

#[test]
fn random_migration_histories_lose_no_acknowledged_write() {
    let mut completed = 0;
    let mut acked = 0;
    let failed = run_migration_histories(0, CI_HISTORIES, |o| {
        completed += o.ended[0];
        acked += o.acked;
    });
    let report: String = failed
        .iter()
        .map(|o| format!("{}\n{}", o.trace.join("\n"), o))
        .collect();
    assert!(failed.is_empty(), "{report}");
    // The histories did move the store and did write.
    assert!(
        completed >= CI_HISTORIES as usize / 2,
        "{completed} completed"
    );
    assert!(acked > 1_000, "{acked} acknowledged writes");
}

#[test]
fn plans_hold_every_kind_of_operation_and_fault() {
    let mut seen = std::collections::BTreeSet::new();
    for seed in 0..CI_HISTORIES {
        let plan = MigrationPlan::generate(seed);
        assert_eq!(plan, MigrationPlan::generate(seed), "plans follow the seed");
        for op in plan.ops {
            seen.insert(
                format!("{op:?}")
                    .split([' ', '{'])
                    .next()
                    .unwrap_or_default()
                    .to_owned(),
            );
        }
    }
    for kind in [
        "Start",
        "Step",
        "CrashMidStep",
        "Crash",
        "Resume",
        "Abort",
        "Stall",
        "Unstall",
        "Lose",
        "Restart",
        "ExpireSession",
        "StoreFault",
    ] {
        assert!(seen.contains(kind), "no {kind} in {seen:?}");
    }
    let _ = MigrationOp::Wait { ms: 1 };
}

#[test]
fn migration_regression_seeds_pass() {
    for seed in MIGRATION_REGRESSION_SEEDS {
        let o = run_migration_history(&MigrationPlan::generate(seed));
        assert!(o.passed(), "{}\n{o}", o.trace.join("\n"));
    }
}
