//! Errors of topic moves.

use bkswitch_metadata_store::MetadataError;
use bkswitch_topic_routes::RoutesError;

use crate::precheck::PrecheckReport;
use crate::record::State;

/// Why a topic-move call failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SwitchError {
    /// The precheck found reasons the move could lose messages; nothing
    /// was written.
    #[error("the topic move was refused: {}", .reports.iter().flat_map(|r| r.problems.iter().cloned()).collect::<Vec<_>>().join("; "))]
    Refused {
        /// One report per batch.
        reports: Vec<PrecheckReport>,
    },
    /// Another plan runs.
    #[error("topic move `{id}` is {state:?}: wait for it, or roll it back or abort it first")]
    AlreadyRunning {
        /// The running plan.
        id: String,
        /// Its state.
        state: State,
    },
    /// No plan was ever started.
    #[error("no topic move was started")]
    NoSwitch,
    /// An abort once clients may have moved.
    #[error("topic move `{id}` cannot be aborted: clients may have moved already; roll it back")]
    AbortRefused {
        /// The plan.
        id: String,
    },
    /// Another coordinator holds the lease.
    #[error("topic moves are driven by `{owner}` now; wait, or stop it (its lease ends with its session)")]
    LeaseHeld {
        /// The lease holder.
        owner: String,
    },
    /// Another coordinator wrote the record since this one read it.
    #[error("topic move `{id}` was taken over by another coordinator")]
    LostOwnership {
        /// The plan.
        id: String,
    },
    /// Bad input.
    #[error("{0}")]
    Invalid(String),
    /// The stored record cannot be read.
    #[error("the topic move record {path} is unreadable: {reason}; it was left as it is")]
    Corrupt {
        /// Its path.
        path: String,
        /// Why.
        reason: String,
    },
    /// The routing table.
    #[error(transparent)]
    Routes(#[from] RoutesError),
    /// The metadata store.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
}

/// A result of topic moves.
pub type Result<T, E = SwitchError> = std::result::Result<T, E>;
