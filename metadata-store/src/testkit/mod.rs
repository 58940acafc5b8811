//! The conformance suite of [`MetadataStore`](crate::MetadataStore), shipped as
//! product: any implementation proves it keeps the trait's contract by running
//! it.
//!
//! Every rule is one public async function in [`rules`] that drives the store
//! under test through a [`MetadataStoreTestEnv`] (fresh isolated namespaces,
//! several sessions on one namespace). Run them:
//!
//! - all at once with [`run_all`], which reports every failing rule by name;
//! - one `#[test]` per rule with
//!   [`metadata_store_conformance_tests!`](crate::metadata_store_conformance_tests),
//!   so an implementer gets per-rule results from a ten-line test file (no tokio
//!   macros needed: the tests run on [`block_on`]).
//!
//! ```
//! use bkswitch_metadata_store::testkit::{run_all, MemoryTestEnv};
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let report = run_all(&MemoryTestEnv).await;
//! assert!(report.is_ok(), "{}", report.unwrap_err());
//! # });
//! ```
//!
//! The rules tolerate coalesced notifications where a backend may coalesce
//! them: they wait until the latest state is observed rather than counting
//! events. A rule checks with assertions; [`run_rule`] turns a panic into a
//! [`ConformanceFailure`] naming the rule and what broke.
//!
//! | file | what it holds |
//! |---|---|
//! | `env.rs` | [`MetadataStoreTestEnv`], [`TestNamespace`] and the ready [`MemoryTestEnv`] and [`ViaArc`] |
//! | `zk_env.rs` | `ZkTestEnv`, sessions on a running ZooKeeper (the `zk` feature) |
//! | `etcd_env.rs` | `EtcdTestEnv`, sessions on a running etcd (the `etcd` feature) |
//! | `suite.rs` | [`all_rules`], [`RULE_NAMES`], [`run_rule`], [`run_all`] |
//! | `recording.rs` | [`RecordingStore`]: records every write and injects failures (ambiguous ones too), for tests of code above the store |
//! | `macros.rs` | [`metadata_store_conformance_tests!`](crate::metadata_store_conformance_tests) |
//! | `rules/` | the rules, one file per family (see [`rules`]) |
//!
//! The BookKeeper client's suite (`bkswitch_bk_client::testkit`) has the same
//! shape; both are built on `bkswitch-conformance` ([`Rule`], [`RuleResult`],
//! [`ConformanceFailure`], [`ConformanceReport`], [`block_on`]).

mod env;
#[cfg(feature = "etcd")]
mod etcd_env;
mod macros;
mod recording;
pub mod rules;
mod suite;
#[cfg(feature = "zk")]
mod zk_env;

/// Re-exported so an environment can be implemented without another dependency.
pub use async_trait::async_trait;
pub use bkswitch_conformance::{block_on, ConformanceFailure, ConformanceReport, Rule, RuleResult};
pub use env::{MemoryTestEnv, MetadataStoreTestEnv, TestNamespace, ViaArc};
#[cfg(feature = "etcd")]
pub use etcd_env::EtcdTestEnv;
pub use recording::{InjectedFailure, RecordingStore, WriteOp, WriteRecord};
pub use suite::{all_rules, run_all, run_rule, RULE_NAMES};
#[cfg(feature = "zk")]
pub use zk_env::ZkTestEnv;

/// The suite's name in failures and reports.
pub const SUITE: &str = "metadata-store";
