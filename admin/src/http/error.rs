//! Error answers: [`ApiError`] (a status and the [`ErrorBody`]) and the
//! mapping of every library error onto it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bkswitch_bk_router::RouterError;
use bkswitch_registry::RegistryError;
use bkswitch_switch_orchestrator::{OrchestratorError, PromoteError};
use serde_json::Value;

use crate::node::NodeError;
use crate::wire::ErrorBody;

/// An error answer of the REST API.
#[derive(Debug, Clone)]
pub(super) struct ApiError {
    /// The HTTP status.
    pub(super) status: StatusCode,
    /// The body.
    pub(super) body: ErrorBody,
}

impl ApiError {
    fn new(status: StatusCode, code: &str, message: impl Into<String>) -> ApiError {
        ApiError {
            status,
            body: ErrorBody {
                error: message.into(),
                code: code.to_owned(),
                field: None,
                details: None,
            },
        }
    }

    /// 400 `INVALID_ARGUMENT`, optionally naming the field.
    pub(super) fn invalid(field: Option<&str>, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message);
        e.body.field = field.map(str::to_owned);
        e
    }

    /// 401 `UNAUTHORIZED`.
    pub(super) fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", message)
    }

    /// 403 `FORBIDDEN`.
    pub(super) fn forbidden(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "FORBIDDEN", message)
    }

    /// 404 `NOT_FOUND`.
    pub(super) fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// 409 `CONFLICT`.
    pub(super) fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "CONFLICT", message)
    }

    /// 503 `UNAVAILABLE`.
    pub(super) fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message)
    }

    /// 500 `INTERNAL`.
    pub(super) fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
    }

    /// Attaches structured details.
    pub(super) fn with_details(mut self, details: Value) -> ApiError {
        self.body.details = Some(details);
        self
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        (self.status, Json(self.body)).into_response()
    }
}

impl From<RegistryError> for ApiError {
    fn from(e: RegistryError) -> ApiError {
        let msg = e.to_string();
        match &e {
            RegistryError::NotFound { .. } => ApiError::not_found(msg),
            RegistryError::InvalidName { .. } => ApiError::invalid(Some("name"), msg),
            RegistryError::InvalidPrefix { .. } => ApiError::invalid(Some("prefix"), msg),
            RegistryError::InvalidUri { .. } | RegistryError::UriCollision { .. } => {
                ApiError::invalid(Some("metadataServiceUri"), msg)
            }
            RegistryError::AlreadyExists { .. }
            | RegistryError::ActiveCluster { .. }
            | RegistryError::AnotherActive { .. }
            | RegistryError::Deprecated { .. }
            | RegistryError::Conflict { .. } => ApiError::conflict(msg),
            RegistryError::Metadata(m) if m.is_retryable() => ApiError::unavailable(msg),
            _ => ApiError::internal(msg),
        }
    }
}

impl From<RouterError> for ApiError {
    fn from(e: RouterError) -> ApiError {
        let msg = e.to_string();
        match &e {
            RouterError::UnknownCluster { .. } => ApiError::not_found(msg),
            RouterError::CloseRefused { ledger_ids, .. } => {
                ApiError::conflict(msg).with_details(serde_json::json!({ "ledgerIds": ledger_ids }))
            }
            RouterError::ClientStart { .. } => ApiError::unavailable(msg),
            RouterError::InvalidSettings(_) => ApiError::invalid(None, msg),
            _ => ApiError::conflict(msg),
        }
    }
}

impl From<OrchestratorError> for ApiError {
    fn from(e: OrchestratorError) -> ApiError {
        let msg = e.to_string();
        let retryable = e.is_retryable();
        match e {
            OrchestratorError::UnknownCluster { .. } | OrchestratorError::NoSuchSwitch { .. } => {
                ApiError::not_found(msg)
            }
            OrchestratorError::PrecheckFailed(result) => ApiError::conflict(msg)
                .with_details(serde_json::to_value(&*result).unwrap_or_default()),
            OrchestratorError::Registry(r) => ApiError::from(r),
            OrchestratorError::Metadata { ref source, .. } if source.is_retryable() => {
                ApiError::unavailable(msg)
            }
            // The client's cause says whether it passes (an unreachable
            // cluster: 503, retry) or not (a URI the client refuses, a
            // cluster the router does not know: 409).
            OrchestratorError::Client { .. } if retryable => ApiError::unavailable(msg),
            OrchestratorError::Client { .. } => ApiError::conflict(msg),
            OrchestratorError::CorruptRecord { .. }
            | OrchestratorError::CorruptMetadata { .. }
            | OrchestratorError::Metadata { .. } => ApiError::internal(msg),
            _ => ApiError::conflict(msg),
        }
    }
}

/// The answer the REST API gives for `e`: its HTTP status and error body.
pub(crate) fn answer_of(e: NodeError) -> (u16, ErrorBody) {
    let a = ApiError::from(e);
    (a.status.as_u16(), a.body)
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> ApiError {
        match e {
            NodeError::Registry(r) => r.into(),
            NodeError::Orchestrator(o) => o.into(),
            NodeError::Router(r) => r.into(),
            e @ (NodeError::ClusterInUse { .. }
            | NodeError::ClusterInCanary { .. }
            | NodeError::TopicOwned { .. }) => ApiError::conflict(e.to_string()),
            NodeError::ClusterOverridden { ref prefixes, .. } => {
                let details = serde_json::json!({ "overrides": prefixes });
                ApiError::conflict(e.to_string()).with_details(details)
            }
            NodeError::UndecodableMetadata {
                count, ref paths, ..
            } => {
                let details = serde_json::json!({ "undecodable": count, "paths": paths });
                ApiError::conflict(e.to_string()).with_details(details)
            }
            NodeError::ClusterHoldsLedgers { ref usage, .. } => {
                let details = serde_json::to_value(usage.as_ref()).unwrap_or_default();
                ApiError::conflict(e.to_string()).with_details(details)
            }
            e @ (NodeError::MigrationInProgress { .. }
            | NodeError::StartInProgress { .. }
            | NodeError::SwitchUnfinished { .. }
            | NodeError::MigrationEnded { .. }
            | NodeError::NoMigrationParticipant { .. }) => ApiError::conflict(e.to_string()),
            NodeError::Invalid { field, message } => ApiError::invalid(Some(field), message),
            e @ NodeError::NoSwitch => ApiError::not_found(e.to_string()),
            e @ NodeError::FailStopped { .. } => ApiError::unavailable(e.to_string()),
            e @ NodeError::InvalidMigration { .. } => {
                ApiError::invalid(Some("targetUrl"), e.to_string())
            }
            e @ NodeError::NoMetadataMigration => ApiError::not_found(e.to_string()),
            NodeError::Metadata(ref m)
                if m.kind() == bkswitch_metadata_store::ErrorKind::BadVersion =>
            {
                ApiError::conflict(format!(
                    "{e}; the record changed meanwhile (another coordinator or operator): \
                     read the status and retry"
                ))
            }
            NodeError::Metadata(ref m) if m.is_retryable() => ApiError::unavailable(e.to_string()),
            e @ NodeError::ClusterProbe { .. } => {
                let msg = e.to_string();
                if e.is_retryable() {
                    ApiError::unavailable(msg)
                } else {
                    ApiError::invalid(Some("metadataServiceUri"), msg)
                }
            }
            other => ApiError::internal(other.to_string()),
        }
    }
}

/// An owner's refusal of a cursor promotion; the details carry the
/// [`PromoteError`] itself, for the coordinator to read back.
impl From<PromoteError> for ApiError {
    fn from(e: PromoteError) -> ApiError {
        let msg = e.to_string();
        let details = serde_json::to_value(&e).unwrap_or_default();
        match e {
            PromoteError::RolledOver { .. } => ApiError::conflict(msg),
            PromoteError::NotOwner { .. } => ApiError::not_found(msg),
            PromoteError::Unavailable { .. } => ApiError::unavailable(msg),
            _ => ApiError::internal(msg),
        }
        .with_details(details)
    }
}

#[cfg(test)]
mod tests {
    use bkswitch_switch_orchestrator::Phase;

    use super::*;

    fn status(e: OrchestratorError) -> StatusCode {
        ApiError::from(e).status
    }

    #[test]
    fn orchestrator_errors_keep_their_answers() {
        // Our own records and the managed-ledger metadata that do not parse
        // are both the server's fault (500), each named in the message.
        let record = ApiError::from(OrchestratorError::CorruptRecord {
            path: "/admin/bookie-clusters/orchestrator/7".into(),
            reason: "expected value".into(),
        });
        assert_eq!(record.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            record.body.error.contains("orchestrator/7"),
            "{:?}",
            record.body
        );
        let metadata = ApiError::from(OrchestratorError::CorruptMetadata {
            path: "/schemas/t/ns/s".into(),
            reason: "not a SchemaLocator".into(),
        });
        assert_eq!(metadata.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert!(
            metadata.body.error.contains("/schemas/t/ns/s"),
            "{:?}",
            metadata.body
        );
        // A contended record and a switch in progress are conflicts.
        assert_eq!(
            status(OrchestratorError::Contended {
                switch_id: "7".into(),
                what: "ledger record",
                path: "/r".into(),
            }),
            StatusCode::CONFLICT
        );
        let starting = ApiError::from(OrchestratorError::SwitchInProgress {
            switch_id: "7".into(),
            target: "new".into(),
            phase: None,
        });
        assert_eq!(starting.status, StatusCode::CONFLICT);
        assert!(
            starting.body.error.contains("starting"),
            "{:?}",
            starting.body
        );
        // A client error answers 503 (retry) only when its cause passes.
        #[derive(Debug, thiserror::Error)]
        #[error("client failed")]
        struct Cause(bool);
        impl bkswitch_switch_orchestrator::RetryableError for Cause {
            fn is_retryable(&self) -> bool {
                self.0
            }
        }
        let client = |retryable| OrchestratorError::Client {
            cluster: "new".into(),
            reason: "the client does not start".into(),
            source: Some(std::sync::Arc::new(Cause(retryable))),
        };
        assert_eq!(status(client(true)), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status(client(false)), StatusCode::CONFLICT);
        let building = ApiError::from(OrchestratorError::WrongPhase {
            switch_id: "7".into(),
            phase: Phase::Build,
            reason: "wait".into(),
        });
        assert!(
            building.body.error.contains("phase BUILD"),
            "{:?}",
            building.body
        );
    }
}
