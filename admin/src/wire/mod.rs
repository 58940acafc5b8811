//! The REST contract of the bookie-clusters API as Rust types: the base path,
//! every request and answer body, the error body and the switch phases. The
//! server (the node's REST API) and the client ([`AdminClient`](crate::AdminClient))
//! both take their types from here, so what one serializes is what the other
//! reads. The contract in prose, with every status code, is `API.md` next to
//! this crate's manifest.
//!
//! JSON names are camelCase, as in the registry records
//! ([formats §3](bkswitch_docs::formats)). Request bodies refuse unknown fields.
//!
//! # Where the types come from
//!
//! Answers whose shape a library already defines are that library's types,
//! re-exported here rather than listed again: [`ClusterRecord`] and
//! [`PrecheckResult`] (the registry), [`CleanupTarget`], [`Counts`] and
//! [`Phase`] (the orchestrator).
//!
//! Four answers are *documents*: [`NodeStatus`], [`SwitchStatusDoc`],
//! [`CopyProgressDoc`] (inside [`NodeStatus`]) and [`CleanupReportDoc`] (named
//! so that they never meet the orchestrator's typed `SwitchStatus`,
//! `CleanupReport` and ledger-copy's `CopyProgress`). The server builds each
//! from the typed records (`NodeStatus::new`, `SwitchStatusDoc::from`,
//! `CopyProgressDoc::from`, `CleanupReportDoc::new`); the client
//! keeps the JSON exactly as sent (what `bookie-clusters --json` prints) and
//! reads it through accessors that tolerate what an older or newer server may
//! send: a missing counter reads as 0, a missing field as `None`, and a phase
//! this client does not know falls back to `None` from [`SwitchStatusDoc::phase`]
//! while [`SwitchStatusDoc::phase_name`] still gives its name.
//!
//! # Phases
//!
//! A switch moves through the orchestrator's [`Phase`]s, named on the wire
//! `BUILD`, `PROMOTE`, `SWITCHED`, `CLEANUP`, `DONE`, `DONE_WITH_FAILURES`,
//! `ROLLING_BACK` and `ROLLED_BACK` ([`Phase::as_str`]).

mod cleanup;
mod error;
mod json;
mod migration;
mod promote;
mod pulsar;
mod requests;
mod status;

pub use bkswitch_bk_router::ReadMode;
pub use bkswitch_registry::{ClusterRecord, ClusterStatus, PrecheckResult, SwitchDirective};
pub use bkswitch_switch_orchestrator::{CleanupTarget, Counts, LedgerKind, Phase};
pub use cleanup::{CleanupFailure, CleanupReportDoc, CleanupTargets};
pub use error::ErrorBody;
pub use migration::{
    MigrationPlanDoc, MigrationStartRequest, MigrationStatusDoc, PlanEntryDoc, WipeTarget,
    MIGRATION_PATH,
};
pub use promote::{PromoteCursorRequest, PromoteCursorResponse, PromoteOutcome};
pub use pulsar::{
    PulsarClusterRequest, RemoveRouteRequest, RouteRequest, TopicSwitchRequest, PULSAR_PATH,
};
pub use requests::{
    CleanupRequest, OverrideRequest, ReadModeRequest, ReadModeResponse, RegisterRequest,
    RemoveOverrideRequest, RollbackRequest, SwitchRequest,
};
pub use status::{CopyProgressDoc, LedgerCopyDoc, NodeStatus, SwitchFailure, SwitchStatusDoc};

/// The path every endpoint lives under.
pub const BASE_PATH: &str = "/admin/v2/bookie-clusters";

/// Where a node serves its metrics (Prometheus text format), outside
/// [`BASE_PATH`].
pub const METRICS_PATH: &str = "/metrics";

/// The largest request body the server accepts (a larger one is refused with
/// 400 `INVALID_ARGUMENT`).
pub const MAX_BODY_BYTES: usize = 64 * 1024;
