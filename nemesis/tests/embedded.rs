//! The nemesis on the embedded stack, as CI runs it: determinism, 300
//! random histories, and the histories that show the known defects of issue
//! #20 (red until those are fixed).

use std::collections::BTreeMap;

use bkswitch_nemesis::regressions::{
    directed, directed_plan, CHECKER_SEEDS, DIRECTED, REGRESSION_SEEDS,
};
use bkswitch_nemesis::{run_embedded, run_many, Outcome, Plan};

/// How many random histories CI runs.
const CI_HISTORIES: u64 = 300;

fn summary(failed: &[Outcome]) -> String {
    let mut s = String::new();
    for o in failed {
        s.push_str(&o.report());
    }
    s
}

#[test]
fn the_same_seed_replays_the_same_history() {
    for seed in [1, 13, 120, 233] {
        let plan = Plan::generate(seed);
        let a = run_embedded(&plan);
        let b = run_embedded(&plan);
        assert!(a.trace.len() > plan.ops.len(), "seed {seed}: {:?}", a.trace);
        assert_eq!(a.trace, b.trace, "seed {seed} gave two different traces");
        assert_eq!(
            a.figures, b.figures,
            "seed {seed} gave two different counts"
        );
    }
}

#[test]
fn random_embedded_histories_have_no_violation() {
    let mut failed = Vec::new();
    let totals = run_many(0, CI_HISTORIES, |o| {
        if std::env::var_os("NEMESIS_TOTALS").is_some() {
            eprintln!("seed {} buggified {}", o.seed, o.figures.buggified);
        }
        if !o.passed() {
            failed.push(o.clone());
        }
    });
    assert_eq!(totals.histories, CI_HISTORIES as usize);
    assert!(totals.published > 0 && totals.faults > 0, "{totals:?}");
    // Buggify failed metadata calls in a third of the histories (item 3).
    assert!(totals.buggified > 100, "{totals:?}");
    // The metadata store moved under everything else (item 4).
    assert!(totals.moves > 20, "{totals:?}");
    // Session faults are injected, and the pause shows (issue #20, item 6).
    assert!(
        totals.sessions.losses > 0 && totals.sessions.deferred_rollovers > 0,
        "{totals:?}"
    );
    // Below the metadata: bookies lose copies, metadata is corrupted (and
    // the traffic is refused over it, naming it), reads are stale.
    assert!(totals.copies_lost > 100, "{totals:?}");
    assert!(
        totals.corruptions > 20 && totals.corruptions_refused > 5,
        "{totals:?}"
    );
    assert!(
        totals.stale_histories > 20 && totals.stale_reads > 100,
        "{totals:?}"
    );
    let mut kinds: BTreeMap<String, usize> = BTreeMap::new();
    for o in &failed {
        for k in o.kinds() {
            *kinds.entry(format!("{k:?}")).or_default() += 1;
        }
    }
    assert!(
        failed.is_empty(),
        "{} of {CI_HISTORIES} histories failed (histories per violation kind: {kinds:?}); \
         totals {totals:?}\n{}",
        failed.len(),
        summary(&failed)
    );
}

#[test]
fn regression_seeds_pass() {
    let mut failed = Vec::new();
    for r in REGRESSION_SEEDS.iter().chain(CHECKER_SEEDS) {
        let o = run_embedded(&Plan::generate(r.seed));
        if !o.passed() {
            failed.push(format!(
                "defect {} (seed {}): {}\n{}",
                r.defect,
                r.seed,
                r.failure,
                o.report()
            ));
        }
    }
    assert!(failed.is_empty(), "{}", failed.join("\n"));
}

fn directed_passes(name: &str) {
    let d = directed(name).unwrap_or_else(|| panic!("no directed history `{name}`"));
    let o = run_embedded(&directed_plan(d));
    assert!(
        o.passed(),
        "directed history `{name}` (defect {}): {}\n{}\ntrace:\n{}",
        d.defect,
        d.failure,
        o.report(),
        o.trace.join("\n")
    );
}

#[test]
fn every_directed_history_has_a_test() {
    let names: Vec<&str> = DIRECTED.iter().map(|d| d.name).collect();
    assert_eq!(
        names,
        [
            "ambiguous_ledger_writes_then_connection_loss",
            "overlapping_canary_starts_while_another_builds",
            "unregister_the_target_of_a_canary_in_build",
            "canary_coordinator_crashes_in_build",
            "rollback_with_the_target_dead",
            "canary_routes_schema_creation",
            "misaligned_canary_prefix_scopes_schemas_like_ledgers",
            "ambiguous_cursor_write_in_a_canary_promote",
            "duplicate_node_id",
            "connection_lost_on_every_node",
        ]
    );
}

/// Issue #20, item 6: the nemesis shows the pause. Every node loses its
/// metadata connection in turn under traffic; the checker finds no
/// `SessionPause` violation (each node's managed ledgers saw the session lost
/// and back), and the figures show the work put off meanwhile.
#[test]
fn directed_6_connection_lost_on_every_node_pauses_trims_and_rollovers() {
    let d = directed("connection_lost_on_every_node").unwrap();
    let o = run_embedded(&directed_plan(d));
    assert!(o.passed(), "{}\ntrace:\n{}", o.report(), o.trace.join("\n"));
    let paused = o
        .trace
        .iter()
        .filter(|l| l.contains("reconnected (paused meanwhile)"))
        .count();
    assert!(
        paused >= 1,
        "no node paused while its connection was lost: {:?}",
        o.trace
    );
    let s = o.figures.sessions;
    assert!(s.losses >= paused as u64, "{s:?}");
    assert!(
        s.deferred_rollovers > 0,
        "traffic went on for 9 s without a connection and 8-entry ledgers, yet no rollover \
         was put off: {s:?}"
    );
}

#[test]
fn directed_5_2_ambiguous_ledger_writes_then_connection_loss() {
    directed_passes("ambiguous_ledger_writes_then_connection_loss");
}

#[test]
fn directed_5_1_overlapping_canary_starts_while_another_builds() {
    directed_passes("overlapping_canary_starts_while_another_builds");
}

#[test]
fn directed_5_3_unregister_the_target_of_a_canary_in_build() {
    directed_passes("unregister_the_target_of_a_canary_in_build");
}

#[test]
fn directed_5_4_canary_coordinator_crashes_in_build() {
    directed_passes("canary_coordinator_crashes_in_build");
}

#[test]
fn directed_5_5_rollback_with_the_target_dead() {
    directed_passes("rollback_with_the_target_dead");
}

#[test]
fn directed_5_7_canary_routes_schema_creation() {
    directed_passes("canary_routes_schema_creation");
}

#[test]
fn directed_5_7_misaligned_canary_prefix_scopes_schemas_like_ledgers() {
    directed_passes("misaligned_canary_prefix_scopes_schemas_like_ledgers");
}

#[test]
fn directed_5_6_ambiguous_cursor_write_in_a_canary_promote() {
    directed_passes("ambiguous_cursor_write_in_a_canary_promote");
}

#[test]
fn directed_5_12_duplicate_node_id() {
    directed_passes("duplicate_node_id");
}
