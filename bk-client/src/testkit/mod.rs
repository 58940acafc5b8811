//! The BookKeeper conformance suite, shipped as product.
//!
//! Every rule of BookKeeper's ledger API semantics ([formats §4](bkswitch_docs::formats))
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
//! use bkswitch_bk_client::testkit::{run_all, MemoryBookKeeperTestEnv};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let report = run_all(&MemoryBookKeeperTestEnv::new()).await;
//! assert!(report.is_ok(), "{}", report.unwrap_err());
//! # });
//! ```
//!
//! | file | what it holds |
//! |---|---|
//! | `env.rs` | [`BookKeeperTestEnv`] and the ready [`MemoryBookKeeperTestEnv`] |
//! | `suite.rs` | [`all_rules`], [`RULE_NAMES`], [`run_rule`], [`run_all`] |
//! | `macros.rs` | [`bk_conformance_tests!`](crate::bk_conformance_tests) |
//! | `rules/` | the rules, one file per family (see [`rules`]) |
//!
//! The metadata store's suite (`bkswitch_metadata_store::testkit`) has the same
//! shape; both are built on `bkswitch-conformance` ([`Rule`], [`RuleResult`],
//! [`ConformanceFailure`], [`ConformanceReport`], [`block_on`]).

mod env;
mod macros;
pub mod rules;
mod suite;

/// Re-exported so an environment can be implemented without another dependency.
pub use async_trait::async_trait;
pub use bkswitch_conformance::{block_on, ConformanceFailure, ConformanceReport, Rule, RuleResult};
pub use env::{BookKeeperTestEnv, MemoryBookKeeperTestEnv};
pub use suite::{all_rules, run_all, run_rule, RULE_NAMES};

/// The suite's name in failures and reports.
pub const SUITE: &str = "BookKeeper";
