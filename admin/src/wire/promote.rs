//! The node-to-node call `POST /internal/promote-cursor`: a coordinator asks
//! the topic's owner to promote a copied cursor ledger
//! ([I9](bkswitch_docs::invariants::I9), [I13](bkswitch_docs::invariants::I13)),
//! and the mapping of its bodies onto the orchestrator's
//! [`CursorPromoteRequest`] and [`CursorPromoteOutcome`].

use bkswitch_switch_orchestrator::{CursorPromoteOutcome, CursorPromoteRequest};
use serde::{Deserialize, Serialize};

/// Body of `POST /internal/promote-cursor`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromoteCursorRequest {
    /// The topic (managed ledger name) owning the cursor.
    pub topic: String,
    /// The cursor's name.
    pub cursor_name: String,
    /// The cluster the cursor ledger was copied to.
    pub target_cluster_name: String,
    /// The cursor ledger the coordinator copied.
    pub expected_cursors_ledger_id: i64,
    /// The last entry id of the copy.
    pub copied_last_entry_id: i64,
}

impl From<&CursorPromoteRequest> for PromoteCursorRequest {
    fn from(req: &CursorPromoteRequest) -> PromoteCursorRequest {
        PromoteCursorRequest {
            topic: req.managed_ledger.clone(),
            cursor_name: req.cursor_name.clone(),
            target_cluster_name: req.target_cluster_name.clone(),
            expected_cursors_ledger_id: req.expected_cursors_ledger_id,
            copied_last_entry_id: req.copied_last_entry_id,
        }
    }
}

impl From<PromoteCursorRequest> for CursorPromoteRequest {
    fn from(body: PromoteCursorRequest) -> CursorPromoteRequest {
        CursorPromoteRequest {
            managed_ledger: body.topic,
            cursor_name: body.cursor_name,
            target_cluster_name: body.target_cluster_name,
            expected_cursors_ledger_id: body.expected_cursors_ledger_id,
            copied_last_entry_id: body.copied_last_entry_id,
        }
    }
}

/// What the owner did with a cursor PROMOTE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PromoteOutcome {
    /// The stamp now names the target; the ledger id is unchanged.
    Promoted,
    /// The stamp already named the target; nothing was written.
    AlreadyOnTarget,
    /// The cursor was ahead of the copy and rolled over onto a new ledger on
    /// the target (`newLedgerId`); the copy is unreferenced.
    RolledOver,
}

/// Answer of `POST /internal/promote-cursor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromoteCursorResponse {
    /// What the owner did.
    pub outcome: PromoteOutcome,
    /// The new cursor ledger, for [`PromoteOutcome::RolledOver`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_ledger_id: Option<i64>,
}

impl From<CursorPromoteOutcome> for PromoteCursorResponse {
    fn from(outcome: CursorPromoteOutcome) -> PromoteCursorResponse {
        match outcome {
            CursorPromoteOutcome::Promoted => PromoteCursorResponse {
                outcome: PromoteOutcome::Promoted,
                new_ledger_id: None,
            },
            CursorPromoteOutcome::AlreadyOnTarget => PromoteCursorResponse {
                outcome: PromoteOutcome::AlreadyOnTarget,
                new_ledger_id: None,
            },
            CursorPromoteOutcome::RolledOver { new_ledger_id } => PromoteCursorResponse {
                outcome: PromoteOutcome::RolledOver,
                new_ledger_id: Some(new_ledger_id),
            },
        }
    }
}

impl PromoteCursorResponse {
    /// The owner's answer as the orchestrator's outcome; `None` for
    /// `ROLLED_OVER` without `newLedgerId`.
    pub fn cursor_outcome(&self) -> Option<CursorPromoteOutcome> {
        Some(match self.outcome {
            PromoteOutcome::Promoted => CursorPromoteOutcome::Promoted,
            PromoteOutcome::AlreadyOnTarget => CursorPromoteOutcome::AlreadyOnTarget,
            PromoteOutcome::RolledOver => CursorPromoteOutcome::RolledOver {
                new_ledger_id: self.new_ledger_id?,
            },
        })
    }
}
