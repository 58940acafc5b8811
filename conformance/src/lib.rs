#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::future::BoxFuture;
use futures::FutureExt;

/// A failed conformance check: which suite and rule, and what was expected
/// versus observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConformanceFailure {
    /// The suite's name (`BookKeeper`, `metadata-store`, …).
    pub suite: &'static str,
    /// The rule's name (its function name in the suite's `rules`).
    pub rule: &'static str,
    /// What was checked and what happened.
    pub detail: String,
}

impl ConformanceFailure {
    /// A failure of `rule` in `suite`.
    pub fn new(suite: &'static str, rule: &'static str, detail: impl Into<String>) -> Self {
        ConformanceFailure {
            suite,
            rule,
            detail: detail.into(),
        }
    }
}

impl fmt::Display for ConformanceFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} conformance rule `{}` failed: {}",
            self.suite, self.rule, self.detail
        )
    }
}

impl std::error::Error for ConformanceFailure {}

/// Outcome of one rule.
pub type RuleResult = Result<(), ConformanceFailure>;

/// The failures of a [`run_all`] run (at least one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConformanceReport {
    /// The suite's name.
    pub suite: &'static str,
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
            "{} of {} {} conformance rules failed: {}",
            self.failures.len(),
            self.total,
            self.suite,
            names.join(", ")
        )?;
        for failure in &self.failures {
            writeln!(f, "- {failure}")?;
        }
        Ok(())
    }
}

impl std::error::Error for ConformanceReport {}

/// One rule of a suite, run against an environment `E`.
pub struct Rule<E: ?Sized> {
    /// The rule's name (its function name).
    pub name: &'static str,
    /// The rule's family: the module of the suite's `rules` that holds it.
    pub family: &'static str,
    /// The behaviour it checks.
    pub description: &'static str,
    /// Runs the rule.
    pub run: for<'a> fn(&'a E) -> BoxFuture<'a, RuleResult>,
}

impl<E: ?Sized> fmt::Debug for Rule<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("family", &self.family)
            .field("description", &self.description)
            .finish()
    }
}

/// Runs one rule, turning a panic inside it into a failure that names the rule.
pub async fn run_rule<E: ?Sized>(suite: &'static str, rule: &Rule<E>, env: &E) -> RuleResult {
    match AssertUnwindSafe((rule.run)(env)).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic payload".to_string());
            Err(ConformanceFailure::new(
                suite,
                rule.name,
                format!("panicked: {message}"),
            ))
        }
    }
}

/// Runs every rule against `env`, one after the other, and reports all
/// failures.
///
/// # Errors
/// A [`ConformanceReport`] naming every failing rule and what it observed.
pub async fn run_all<E: ?Sized>(
    suite: &'static str,
    rules: &[Rule<E>],
    env: &E,
) -> Result<(), ConformanceReport> {
    let mut failures = Vec::new();
    for rule in rules {
        if let Err(failure) = run_rule(suite, rule, env).await {
            failures.push(failure);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(ConformanceReport {
            suite,
            total: rules.len(),
            failures,
        })
    }
}

/// Runs a future to completion on a fresh multi-thread tokio runtime with two
/// worker threads (the generated conformance tests use it, so that a test file
/// needs no tokio macros).
///
/// # Panics
/// If the runtime cannot be built.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("building a tokio runtime for a conformance test")
        .block_on(future)
}
