//! The metadata-migration endpoints (PIP-454): `GET`/`POST`
//! [`MIGRATION_PATH`] and `POST` [`MIGRATION_PATH`]`/abort`.

use bkswitch_metadata_migration::{MigrationRecord, TargetPlan};
use serde::{Deserialize, Serialize};

/// Where the metadata-migration endpoints live (outside
/// [`BASE_PATH`](super::BASE_PATH), as `pulsar-admin metadata-migration`
/// finds them): `GET` the status, `POST` a start, `POST …/abort`.
pub const MIGRATION_PATH: &str = "/admin/v2/metadata/migration";

/// `POST /admin/v2/metadata/migration`: move the metadata store to
/// `targetUrl`, or (`dryRun`) list what the start would do.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct MigrationStartRequest {
    /// The store to move to (`zk://…` or `etcd://…`); it must be empty, or
    /// its wipe confirmed by `wipeTarget`.
    pub target_url: String,
    /// Confirms the wipe of a non-empty target by naming its root exactly
    /// (`"/"`, `"/pulsar"`: the `root` a dry run answers). A wipe never
    /// deletes what a migration does not own. `true`/`false` (the old form)
    /// are accepted only as "no wipe" (`false`); `true` is refused with a
    /// 400 saying what to name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wipe_target: Option<WipeTarget>,
    /// Checks everything and answers a [`MigrationPlanDoc`] (what the target
    /// holds, what a wipe would delete) without writing anything.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
}

/// The value of `wipeTarget`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum WipeTarget {
    /// The target's root, named to confirm the wipe.
    Root(String),
    /// The old boolean form: `false` is "no wipe", `true` is refused.
    Flag(bool),
}

/// The answer of a dry run: what the target holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MigrationPlanDoc {
    /// Always `true`: nothing was written.
    pub dry_run: bool,
    /// The target URL.
    pub target_url: String,
    /// The target's root: the value of `wipeTarget` that confirms a wipe.
    pub root: String,
    /// What a confirmed wipe deletes, subtree by subtree (empty: the
    /// target is empty and no wipe is needed).
    pub would_delete: Vec<PlanEntryDoc>,
    /// Nodes a confirmed wipe deletes in all.
    pub nodes: u64,
}

/// One subtree a wipe would delete.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct PlanEntryDoc {
    /// Its path in the target store.
    pub path: String,
    /// Nodes in it, itself included.
    pub nodes: u64,
    /// What it looks like (a top-level name of Pulsar's or bkswitch's
    /// layout), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
}

impl MigrationPlanDoc {
    /// The document of a [`TargetPlan`].
    pub fn new(plan: &TargetPlan) -> MigrationPlanDoc {
        MigrationPlanDoc {
            dry_run: true,
            target_url: plan.target_url.clone(),
            root: plan.root.clone(),
            would_delete: plan
                .entries
                .iter()
                .map(|e| PlanEntryDoc {
                    path: e.path.clone(),
                    nodes: e.nodes,
                    kind: e.kind.clone(),
                })
                .collect(),
            nodes: plan.nodes(),
        }
    }
}

/// The status of a metadata migration: the record (as the answering node
/// read it) and the answering node's own view.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct MigrationStatusDoc {
    /// Migration id.
    pub id: String,
    /// `PREPARATION`, `COPYING`, `CATCH_UP`, `PAUSED`, `COMPLETED`, `FAILED`
    /// or `ABORTED`.
    pub phase: String,
    /// The store moved from.
    pub source_url: String,
    /// The store moved to.
    pub target_url: String,
    /// The current round of requests to the participants.
    pub round: u64,
    /// Nodes copied (or found equal) by the copy.
    pub nodes_copied: u64,
    /// Changed paths copied again by the catch-up rounds and the pause.
    pub changes_caught_up: u64,
    /// Full re-scans (a participant overflowed or died).
    pub rescans: u64,
    /// Whether the nodes nobody wrote were verified.
    pub verified: bool,
    /// Length of the write pause in milliseconds (set at COMPLETED).
    pub pause_ms: u64,
    /// Paths copied and verified in the pause.
    pub pause_nodes: u64,
    /// Why it failed or was aborted.
    pub error: Option<String>,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Last change, milliseconds since the Unix epoch.
    pub updated_ms: i64,
    /// Whether the answering node's metadata writes are paused right now.
    pub writes_paused: bool,
    /// The store the answering node uses right now (`None`: it has no
    /// migration participant).
    pub node_store_url: Option<String>,
}

impl MigrationStatusDoc {
    /// The document of `record`, with the answering node's gate and store.
    pub fn new(
        record: &MigrationRecord,
        writes_paused: bool,
        node_store_url: Option<String>,
    ) -> MigrationStatusDoc {
        let phase = serde_json::to_value(record.phase)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default();
        MigrationStatusDoc {
            id: record.id.clone(),
            phase,
            source_url: record.source_url.clone(),
            target_url: record.target_url.clone(),
            round: record.round,
            nodes_copied: record.copied,
            changes_caught_up: record.caught_up,
            rescans: record.rescans,
            verified: record.verified,
            pause_ms: record.pause_ms,
            pause_nodes: record.pause_nodes,
            error: record.error.clone(),
            created_ms: record.created_ms,
            updated_ms: record.updated_ms,
            writes_paused,
            node_store_url,
        }
    }

    /// Whether the migration has ended (`COMPLETED`, `FAILED`, `ABORTED`).
    pub fn is_terminal(&self) -> bool {
        matches!(self.phase.as_str(), "COMPLETED" | "FAILED" | "ABORTED")
    }
}
