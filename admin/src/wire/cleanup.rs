//! The cleanup answers: the old copies cleanup may delete
//! ([`CleanupTargets`], `GET /cleanup-targets`) and what a cleanup did
//! ([`CleanupReportDoc`], `POST /cleanup`).

use bkswitch_switch_orchestrator::{CleanupTarget, Phase};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use super::json::{array, i64_field, str_field, u64_field};

/// Answer of `GET /cleanup-targets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupTargets {
    /// The switch the targets were left behind by.
    pub switch_id: String,
    /// The ledgers eligible for deletion.
    pub targets: Vec<CleanupTarget>,
}

/// What a cleanup did (`CleanupReport` of the API, the answer of
/// `POST /cleanup`):
/// `{"dryRun","switchId","targets","deleted","remaining","failed","phase","outcome"}`.
///
/// The server makes it with [`CleanupReportDoc::new`]; the client reads it
/// through the accessors, which tolerate missing fields (see the
/// [module docs](super)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CleanupReportDoc(pub Value);

impl CleanupReportDoc {
    /// The answer for the orchestrator's `report` of a cleanup of switch
    /// `switch_id`. The outcome is `DRY_RUN`, `DONE`, `DONE_WITH_FAILURES`, or
    /// `IN_PROGRESS` while copies remain.
    pub fn new(switch_id: &str, report: &bkswitch_switch_orchestrator::CleanupReport) -> Self {
        let outcome = if report.dry_run {
            "DRY_RUN"
        } else {
            match report.phase {
                Phase::Done => "DONE",
                Phase::DoneWithFailures => "DONE_WITH_FAILURES",
                _ => "IN_PROGRESS",
            }
        };
        let failed: Vec<Value> = report
            .errors
            .iter()
            .map(|(cluster, ledger_id, reason)| {
                json!({ "cluster": cluster, "ledgerId": ledger_id, "reason": reason })
            })
            .collect();
        CleanupReportDoc(json!({
            "dryRun": report.dry_run,
            "switchId": switch_id,
            "targets": report.targets,
            "deleted": if report.dry_run { 0 } else { report.targets.len() },
            "remaining": report.remaining,
            "failed": failed,
            "phase": report.phase,
            "outcome": outcome,
        }))
    }

    /// The JSON as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// Whether nothing was deleted on purpose.
    pub fn dry_run(&self) -> Option<bool> {
        self.0.get("dryRun").and_then(Value::as_bool)
    }

    /// The switch cleaned up after.
    pub fn switch_id(&self) -> Option<&str> {
        str_field(&self.0, "switchId")
    }

    /// The ledgers considered; entries of an unexpected shape are skipped.
    pub fn targets(&self) -> Vec<CleanupTarget> {
        array(&self.0, "targets", |t| CleanupTarget::deserialize(t).ok())
            .into_iter()
            .flatten()
            .collect()
    }

    /// How many ledgers were deleted.
    pub fn deleted(&self) -> u64 {
        u64_field(&self.0, "deleted")
    }

    /// The deletions that failed.
    pub fn failed(&self) -> Vec<CleanupFailure> {
        array(&self.0, "failed", |f| CleanupFailure {
            ledger_id: i64_field(f, "ledgerId"),
            reason: str_field(f, "reason").map(str::to_owned),
        })
    }

    /// `DRY_RUN`, `IN_PROGRESS`, `DONE` or `DONE_WITH_FAILURES`.
    pub fn outcome(&self) -> Option<&str> {
        str_field(&self.0, "outcome")
    }
}

/// One ledger cleanup failed to delete, as the client reads it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CleanupFailure {
    /// The ledger.
    pub ledger_id: Option<i64>,
    /// Why.
    pub reason: Option<String>,
}
