#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The README (the crate's documentation) links the test kit, which exists only
// with the `testkit` feature.
#![cfg_attr(not(feature = "testkit"), allow(rustdoc::broken_intra_doc_links))]

#[cfg(feature = "adapters")]
pub mod adapters;
mod error;
mod model;
mod orchestrator;
mod owners;
mod progress;
mod scan;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod usage;

pub use error::{OrchestratorError, Result, RetryableError};
pub use model::{
    CleanupOptions, CleanupReport, CleanupTarget, Counts, Failure, LedgerKind, Phase,
    SwitchLedgerRecord, SwitchLedgerState, SwitchRecord, SwitchStatus,
};
pub use orchestrator::{
    CopyStats, Orchestrator, OrchestratorConfig, DEFAULT_IDGEN_SAFETY_MARGIN, MAX_FAILURES_LISTED,
};
pub use owners::{
    ClusterClients, CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, NoOwners,
    PromoteError, StaticClients, TopicOwners,
};
pub use progress::{BuildProgress, CopyCounters, LedgerProgress};
pub use usage::{ClusterUsage, KindUsage, USAGE_SAMPLE};

/// Every failpoint of the switch path (compiled only with the `failpoints`
/// feature), for crash tests.
pub const FAILPOINTS: &[&str] = &[
    "orchestrator::directive",
    "orchestrator::switch_record",
    "orchestrator::copy",
    "orchestrator::created_record",
    "orchestrator::ledger_record",
    "orchestrator::schema_cas",
    "orchestrator::cursor_promote",
    "orchestrator::delete_target_copy",
    "orchestrator::cleanup_delete",
    "orchestrator::status_flip",
    "orchestrator::rollback_directive",
    "orchestrator::rollback_schema",
    "orchestrator::rollback_cursor",
];
