//! Three nemesis histories on real ZooKeeper and real bookies (`serve`
//! processes killed with SIGKILL, bookies killed and restarted). Skipped with
//! a note without Java and the BookKeeper jars, unless
//! `BKSWITCH_REQUIRE_BK=1`.

use bkswitch_nemesis::real::run_real;

/// How many real histories CI runs.
const CI_REAL_HISTORIES: u64 = 3;

#[test]
fn real_histories_have_no_violation() {
    if !bkswitch_bk_harness::bk_available() {
        bkswitch_bk_harness::require_bk();
        eprintln!("skipped: Java or the BookKeeper jars are missing");
        return;
    }
    let totals = run_real(0, CI_REAL_HISTORIES).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(totals.histories, CI_REAL_HISTORIES as usize);
    assert!(totals.published > 0, "no traffic: {totals:?}");
    assert!(
        totals.failed.is_empty(),
        "real histories failed (reports above): {totals:?}"
    );
}
