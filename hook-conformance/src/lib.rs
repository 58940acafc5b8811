#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod env;
pub mod hooks;
pub mod rules;
mod suite;

pub use async_trait::async_trait;
pub use bkswitch_conformance::{block_on, ConformanceFailure, ConformanceReport, Rule, RuleResult};
pub use env::{
    HookedStorage, LedgerSetup, LedgerUnderTest, SchemasUnderTest, TestError, TestResult,
};
pub use suite::{all_rules, run_all, run_rule, RULE_NAMES};

/// The suite's name in failures and reports.
pub const SUITE: &str = "hooks";
