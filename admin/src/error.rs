//! The REST error body and the mapping of every library error onto it.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bkswitch_bk_router::RouterError;
use bkswitch_registry::RegistryError;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The JSON body of every error answer (see `API.md`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// What went wrong, naming the object, and what to do.
    pub error: String,
    /// `INVALID_ARGUMENT`, `UNAUTHORIZED`, `NOT_FOUND`, `CONFLICT`, `UNAVAILABLE`
    /// or `INTERNAL`.
    pub code: String,
    /// The request field at fault, for 400 answers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Structured details (a failed precheck's result, open ledgers, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub details: Option<Value>,
}

/// An error answer of the REST API.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: ErrorBody,
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
    pub fn invalid(field: Option<&str>, message: impl Into<String>) -> ApiError {
        let mut e = ApiError::new(StatusCode::BAD_REQUEST, "INVALID_ARGUMENT", message);
        e.body.field = field.map(str::to_owned);
        e
    }

    /// 401 `UNAUTHORIZED`.
    pub fn unauthorized(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, "UNAUTHORIZED", message)
    }

    /// 404 `NOT_FOUND`.
    pub fn not_found(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "NOT_FOUND", message)
    }

    /// 409 `CONFLICT`.
    pub fn conflict(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::CONFLICT, "CONFLICT", message)
    }

    /// 503 `UNAVAILABLE`.
    pub fn unavailable(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::SERVICE_UNAVAILABLE, "UNAVAILABLE", message)
    }

    /// 500 `INTERNAL`.
    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "INTERNAL", message)
    }

    /// Attaches structured details.
    pub fn with_details(mut self, details: Value) -> ApiError {
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
