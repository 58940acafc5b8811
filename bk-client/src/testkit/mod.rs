//! The BookKeeper conformance suite, shipped as product.
//!
//! Every rule of BookKeeper's ledger API semantics (the project's FORMATS.md §4)
//! is one public async function in [`rules`] that drives a client through a
//! [`BookKeeperTestEnv`] and checks error codes *and* state. Run them:
//!
//! - all at once with [`run_all`], which reports every failing rule by name;
//! - one `#[test]` per rule with [`bk_conformance_tests!`](crate::bk_conformance_tests),
//!   so an implementer gets per-rule results from a ten-line test file.
//!
//! The rules never assume a fresh cluster: they learn current ids by creating
//! ledgers, use far-away ids (`2^40 +` a freshly generated id) for
//! `create_ledger_adv`, tolerate other writers of the id generator, and delete what
//! they create (best effort). Where a real cluster may legitimately lag (the last
//! add confirmed a no-recovery reader learns, or the length a writer reports while
//! adds are pending) the rule accepts either value; the in-memory backend's own
//! tests pin the exact behaviour.
//!
//! ```
//! use bkswitch_bk_client::testkit::{run_all, MemoryTestEnv};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let report = run_all(&MemoryTestEnv::new()).await;
//! assert!(report.is_ok(), "{}", report.unwrap_err());
//! # });
//! ```

use std::fmt;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures::future::BoxFuture;
use futures::FutureExt;

use crate::api::BookKeeper;
use crate::memory::{MemoryBookKeeper, MemoryCluster};
use crate::types::{DeleteMissing, LedgerConfig};

pub mod rules;

/// Re-exported so an environment can be implemented without another dependency.
pub use async_trait::async_trait;

/// The environment a conformance run drives: how to get clients of the cluster
/// under test and what the implementation promises.
///
/// ```
/// use std::sync::Arc;
/// use bkswitch_bk_client::testkit::{async_trait, BookKeeperTestEnv};
/// use bkswitch_bk_client::{BookKeeper, DeleteMissing, LedgerConfig, MemoryCluster};
///
/// struct DynEnv(MemoryCluster);
///
/// #[async_trait]
/// impl BookKeeperTestEnv for DynEnv {
///     type Client = Arc<dyn BookKeeper>;
///     async fn client(&self) -> Arc<dyn BookKeeper> { Arc::new(self.0.client()) }
///     fn delete_missing(&self) -> DeleteMissing { self.0.delete_missing() }
///     fn ledger_config(&self) -> LedgerConfig { LedgerConfig::default() }
/// }
/// ```
#[async_trait]
pub trait BookKeeperTestEnv: Send + Sync {
    /// The client type under test (`Arc<dyn BookKeeper>` works too).
    type Client: BookKeeper + 'static;

    /// A **new** client of the same cluster on every call (rules use two clients to
    /// check that a recovery open by one fences the other's writer).
    async fn client(&self) -> Self::Client;

    /// What deleting a missing ledger does on this implementation.
    fn delete_missing(&self) -> DeleteMissing;

    /// A configuration valid on the cluster (quorums within its bookie count); rules
    /// derive their ledgers (and the invalid variants) from it.
    fn ledger_config(&self) -> LedgerConfig;
}

/// A failed conformance check: which rule, and what was expected versus observed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConformanceFailure {
    /// The rule's name (its function name in [`rules`]).
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

/// The failures of a [`run_all`] run (at least one).
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

/// One rule of the suite.
pub struct Rule<E: ?Sized> {
    /// The rule's name (its function name in [`rules`]).
    pub name: &'static str,
    /// The BookKeeper behaviour it checks.
    pub description: &'static str,
    /// Runs the rule.
    pub run: for<'a> fn(&'a E) -> BoxFuture<'a, RuleResult>,
}

impl<E: ?Sized> fmt::Debug for Rule<E> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Rule")
            .field("name", &self.name)
            .field("description", &self.description)
            .finish()
    }
}

macro_rules! rule_list {
    ($($name:ident => $description:literal,)*) => {
        /// Every rule of the suite, in run order.
        pub fn all_rules<E: BookKeeperTestEnv + ?Sized>() -> Vec<Rule<E>> {
            vec![$(Rule {
                name: stringify!($name),
                description: $description,
                run: |env| Box::pin(rules::$name(env)),
            }),*]
        }

        /// Names of every rule, in run order.
        pub const RULE_NAMES: &[&str] = &[$(stringify!($name)),*];
    };
}

rule_list! {
    create_rejects_invalid_quorums => "ack > write, write > ensemble or ack <= 0 -> IncorrectParameter (-14), nothing created",
    create_allocates_distinct_increasing_ids => "create_ledger takes fresh ids from the id generator",
    new_ledger_is_open_and_empty => "a new handle is OPEN with LAC -1 and length 0; metadata holds the config",
    create_skips_ids_taken_by_adv => "create_ledger never returns an id created earlier by create_ledger_adv",
    adv_does_not_touch_id_generator => "create_ledger_adv uses the given id and leaves the id generator alone",
    adv_existing_id_is_ledger_exists => "create_ledger_adv of an existing id -> LedgerExists (-20), final",
    adv_negative_id_is_invalid => "create_ledger_adv with id < 0 -> IncorrectParameter (-14)",
    adv_stores_custom_metadata_as_given => "custom metadata is stored exactly as given (empty if none)",
    adv_duplicate_entry_checked_before_closed => "entry_id <= LAC or pending -> DuplicateEntryId (-22), even when closed",
    add_on_closed_handle_is_ledger_closed => "adds on a closed handle -> LedgerClosed (-11)",
    adv_out_of_order_lac_advances_contiguously => "out-of-order adds; LAC is the largest k with 0..=k acknowledged",
    completions_in_entry_id_order => "add completions are delivered in entry-id order",
    length_counts_confirmed_payload_bytes => "length grows by the payload bytes of confirmed entries",
    close_seals_at_lac => "close: CLOSED, lastEntryId = LAC, length = bytes of 0..=LAC",
    close_fails_pending_adds_and_second_close_succeeds => "close fails pending adds with -11; a second close succeeds",
    recovery_open_fences_writer => "a recovery open fences an OPEN ledger: the writer's next add -> LedgerFenced (-101)",
    recovery_closes_at_last_recoverable_entry => "recovery closes at the last recoverable entry; pending adds fail with -101",
    recovery_of_empty_ledger => "recovering an empty ledger closes it with lastEntryId -1 and length 0",
    no_recovery_open_does_not_fence => "a no-recovery open never fences: the writer continues; LAC snapshot; not closed",
    no_recovery_lac_refresh => "read_last_add_confirmed refreshes a no-recovery handle's LAC",
    open_closed_ledger_reports_sealed_state => "opening a CLOSED ledger: LAC = lastEntryId, length = metadata length",
    open_missing_ledger_is_no_such_ledger_on_metadata_server => "opening a missing ledger -> NoSuchLedgerExistsOnMetadataServer (-25)",
    read_rejects_bad_ranges => "first < 0 or first > last -> IncorrectParameter (-14)",
    read_beyond_lac_is_read_exception => "last > LAC -> ReadException (-1), so any read of an empty ledger",
    read_unconfirmed_skips_lac_check => "read_unconfirmed skips the LAC check; a missing entry -> NoSuchEntry (-13)",
    delete_missing_ledger_as_declared => "deleting a missing ledger: Ok, -7 or -25 as the implementation declares",
    delete_removes_ledger => "a deleted ledger cannot be opened (-25) and its id is not reused",
    illegal_op_mixing_add_styles => "add_entry on an Adv handle or add_entry_at on a normal handle -> IllegalOp (-100)",
    password_mismatch_is_unauthorized => "opening with the wrong password -> UnauthorizedAccess (-102)",
    clients_share_the_cluster => "two clients of one cluster see the same ledgers",
    client_close_rejects_operations => "a closed client fails with ClientClosed (-19); other clients are unaffected",
}

/// Run one rule, turning a panic inside it into a failure that names the rule.
pub async fn run_rule<E: BookKeeperTestEnv + ?Sized>(rule: &Rule<E>, env: &E) -> RuleResult {
    match AssertUnwindSafe((rule.run)(env)).catch_unwind().await {
        Ok(result) => result,
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_else(|| "unknown panic payload".to_string());
            Err(ConformanceFailure {
                rule: rule.name,
                detail: format!("panicked: {message}"),
            })
        }
    }
}

/// Run every rule against `env` (one after the other) and report all failures.
///
/// # Errors
/// A [`ConformanceReport`] naming every failing rule and what it observed.
pub async fn run_all<E: BookKeeperTestEnv + ?Sized>(env: &E) -> Result<(), ConformanceReport> {
    let rules = all_rules::<E>();
    let mut failures = Vec::new();
    for rule in &rules {
        if let Err(failure) = run_rule(rule, env).await {
            failures.push(failure);
        }
    }
    if failures.is_empty() {
        Ok(())
    } else {
        Err(ConformanceReport {
            total: rules.len(),
            failures,
        })
    }
}

/// Run a future to completion on a fresh current-thread tokio runtime (used by
/// [`bk_conformance_tests!`](crate::bk_conformance_tests) so test files need no
/// async test attribute).
///
/// # Panics
/// If the runtime cannot be built.
pub fn block_on<F: Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("building a tokio runtime for a conformance test")
        .block_on(future)
}

/// A [`BookKeeperTestEnv`] over an in-memory cluster: each call to `client` returns a
/// new [`MemoryBookKeeper`] of the same [`MemoryCluster`].
#[derive(Debug, Clone)]
pub struct MemoryTestEnv {
    cluster: MemoryCluster,
}

impl MemoryTestEnv {
    /// An environment over a new cluster with default settings.
    pub fn new() -> MemoryTestEnv {
        MemoryTestEnv::with_cluster(MemoryCluster::new("conformance"))
    }

    /// An environment over `cluster` (its delete behaviour is what it declares).
    pub fn with_cluster(cluster: MemoryCluster) -> MemoryTestEnv {
        MemoryTestEnv { cluster }
    }

    /// The cluster under test.
    pub fn cluster(&self) -> &MemoryCluster {
        &self.cluster
    }
}

impl Default for MemoryTestEnv {
    fn default() -> Self {
        MemoryTestEnv::new()
    }
}

#[async_trait]
impl BookKeeperTestEnv for MemoryTestEnv {
    type Client = MemoryBookKeeper;

    async fn client(&self) -> MemoryBookKeeper {
        self.cluster.client()
    }

    fn delete_missing(&self) -> DeleteMissing {
        self.cluster.delete_missing()
    }

    fn ledger_config(&self) -> LedgerConfig {
        LedgerConfig::default()
    }
}

/// Expand to one `#[test]` per conformance rule, each running the rule against the
/// environment `$env` (an expression evaluated inside the test's tokio runtime, so
/// it may `.await`). Put it in its own module to keep the test names apart:
///
/// ```
/// mod memory_conformance {
///     use bkswitch_bk_client::testkit::MemoryTestEnv;
///     bkswitch_bk_client::bk_conformance_tests!(MemoryTestEnv::new());
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! bk_conformance_tests {
    ($env:expr) => {
        $crate::__bk_conformance_tests! { $env;
            create_rejects_invalid_quorums,
            create_allocates_distinct_increasing_ids,
            new_ledger_is_open_and_empty,
            create_skips_ids_taken_by_adv,
            adv_does_not_touch_id_generator,
            adv_existing_id_is_ledger_exists,
            adv_negative_id_is_invalid,
            adv_stores_custom_metadata_as_given,
            adv_duplicate_entry_checked_before_closed,
            add_on_closed_handle_is_ledger_closed,
            adv_out_of_order_lac_advances_contiguously,
            completions_in_entry_id_order,
            length_counts_confirmed_payload_bytes,
            close_seals_at_lac,
            close_fails_pending_adds_and_second_close_succeeds,
            recovery_open_fences_writer,
            recovery_closes_at_last_recoverable_entry,
            recovery_of_empty_ledger,
            no_recovery_open_does_not_fence,
            no_recovery_lac_refresh,
            open_closed_ledger_reports_sealed_state,
            open_missing_ledger_is_no_such_ledger_on_metadata_server,
            read_rejects_bad_ranges,
            read_beyond_lac_is_read_exception,
            read_unconfirmed_skips_lac_check,
            delete_missing_ledger_as_declared,
            delete_removes_ledger,
            illegal_op_mixing_add_styles,
            password_mismatch_is_unauthorized,
            clients_share_the_cluster,
            client_close_rejects_operations,
        }
    };
}

/// Implementation detail of [`bk_conformance_tests!`].
#[doc(hidden)]
#[macro_export]
macro_rules! __bk_conformance_tests {
    ($env:expr; $($rule:ident,)*) => {
        $(
            #[test]
            fn $rule() {
                $crate::testkit::block_on(async {
                    let env = $env;
                    if let ::core::result::Result::Err(failure) =
                        $crate::testkit::rules::$rule(&env).await
                    {
                        ::core::panic!("{}", failure);
                    }
                });
            }
        )*
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn macro_lists_every_rule() {
        let source = include_str!("mod.rs");
        let start = source
            .find("__bk_conformance_tests! { $env;")
            .expect("macro body");
        let body = &source[start..];
        let end = body.find('}').expect("end of list");
        let listed: Vec<&str> = body[..end]
            .lines()
            .skip(1)
            .map(|l| l.trim().trim_end_matches(','))
            .filter(|l| !l.is_empty())
            .collect();
        assert_eq!(listed, RULE_NAMES);
    }
}
