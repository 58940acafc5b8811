//! The body of every error answer.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The JSON body of every error answer:
/// `{"error", "code", "field"?, "details"?}`.
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
