//! What a conformance run reports: [`RuleResult`] per rule, a
//! [`ConformanceFailure`] naming the rule, and the [`ConformanceReport`] of a
//! whole run.

use std::fmt;

/// A failed conformance check: which rule, and what was expected versus observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConformanceFailure {
    /// The rule's name (its function name in [`rules`](crate::testkit::rules)).
    pub rule: &'static str,
    /// What was checked and what happened.
    pub detail: String,
}

impl fmt::Display for ConformanceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "BookKeeper conformance rule `{}` failed: {}",
            self.rule, self.detail
        )
    }
}

impl std::error::Error for ConformanceFailure {}

/// Outcome of one rule.
pub type RuleResult = Result<(), ConformanceFailure>;

/// The failures of a [`run_all`](crate::testkit::run_all) run (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConformanceReport {
    /// Number of rules run.
    pub total: usize,
    /// The failing rules, in run order.
    pub failures: Vec<ConformanceFailure>,
}

impl fmt::Display for ConformanceReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names: Vec<_> = self.failures.iter().map(|x| x.rule).collect();
        writeln!(
            f,
            "{} of {} BookKeeper conformance rules failed: {}",
            self.failures.len(),
            self.total,
            names.join(", ")
        )?;
        for failure in &self.failures {
            writeln!(f, "- {failure}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConformanceReport {}
