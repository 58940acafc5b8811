//! Shrinking a failing history: drop operations while it still fails with
//! the same kinds of violation.

use crate::history::{plan_of, run_embedded, Outcome};

/// Shrinks the failing `outcome` (of a full plan): removes chunks of
/// operations (halves, quarters, … single ones) as long as the history still
/// fails with at least the violation kinds it failed with, running at most
/// `budget` histories. Returns the smallest failing outcome found (with
/// [`Outcome::kept`] set, replayable with `--keep`).
pub fn shrink(outcome: &Outcome, budget: usize) -> Outcome {
    let target = outcome.kinds();
    let mut kept: Vec<usize> = match &outcome.kept {
        Some(k) => k.clone(),
        None => (0..plan_of(outcome.seed, None).ops.len()).collect(),
    };
    let mut best = outcome.clone();
    let mut runs = 0;
    let mut chunk = kept.len().div_ceil(2).max(1);
    while chunk >= 1 && runs < budget {
        let mut i = 0;
        let mut progressed = false;
        while i < kept.len() && runs < budget {
            let mut candidate = kept.clone();
            let end = (i + chunk).min(candidate.len());
            candidate.drain(i..end);
            let mut plan = plan_of(outcome.seed, Some(&candidate));
            plan.seed = outcome.seed;
            let mut o = run_embedded(&plan);
            runs += 1;
            if !o.passed() && target.is_subset(&o.kinds()) {
                o.kept = Some(candidate.clone());
                kept = candidate;
                best = o;
                progressed = true;
            } else {
                i += chunk;
            }
        }
        if chunk == 1 && !progressed {
            break;
        }
        chunk = if chunk == 1 { 1 } else { chunk / 2 };
    }
    best
}
