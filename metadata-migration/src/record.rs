//! The migration record and the layout of the control nodes in the source store.

use serde::{Deserialize, Serialize};

use bkswitch_metadata_store::{
    ExpectedVersion, MetadataError, MetadataStore, Operation, Result, Stat,
};

/// Root of every control node of the migration, in the store participants
/// currently use (the source of a migration). Never copied to the target.
pub const MIGRATION_ROOT: &str = "/admin/metadata-migration";
/// Pointer to the current migration: its value is the migration id.
pub const CURRENT_PATH: &str = "/admin/metadata-migration/current";
/// Parent of the participants' ephemeral nodes (one per [`MigratingStore`](crate::MigratingStore)).
pub const PARTICIPANTS_PATH: &str = "/admin/metadata-migration/participants";

/// The path of the record of migration `id`.
pub fn record_path(id: &str) -> String {
    format!("{MIGRATION_ROOT}/records/{id}")
}

/// Parent of the persistent "joined" markers of migration `id`: a participant
/// that tracks changes for it leaves one, so that the coordinator notices a
/// participant that died with changes it had not published.
pub fn joined_path(id: &str) -> String {
    format!("{MIGRATION_ROOT}/joined/{id}")
}

/// Parent of the published pages of dirty paths of migration `id`; page names
/// are `<round>-<participant>-<page>`.
pub fn dirty_path(id: &str) -> String {
    format!("{MIGRATION_ROOT}/dirty/{id}")
}

/// The phase of a migration.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum Phase {
    /// Participants start tracking the paths they write; the coordinator waits
    /// for every one of them to acknowledge.
    Preparation,
    /// The coordinator copies the source tree page by page (writes go on).
    Copying,
    /// Rounds of re-copying the paths written meanwhile, and the verification
    /// of the nodes nobody wrote (writes go on).
    CatchUp,
    /// Writes are refused with `WritesPaused`; the last changes are copied and
    /// verified.
    Paused,
    /// The flip is done: every participant uses the target.
    Completed,
    /// The migration failed; writes go on in the source.
    Failed,
    /// An operator aborted the migration; writes go on in the source.
    Aborted,
}

impl Phase {
    /// Whether the migration is over (completed, failed or aborted).
    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Completed | Phase::Failed | Phase::Aborted)
    }

    /// Whether participants must track the paths they write.
    pub fn tracks(self) -> bool {
        matches!(
            self,
            Phase::Preparation | Phase::Copying | Phase::CatchUp | Phase::Paused
        )
    }
}

/// The record of one migration, stored as JSON at [`record_path`] in the
/// source store. Every change is a compare-and-set on its version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MigrationRecord {
    /// Migration id (a path segment).
    pub id: String,
    /// URL of the source store (where this record lives).
    pub source_url: String,
    /// URL of the target store.
    pub target_url: String,
    /// Current phase.
    pub phase: Phase,
    /// Current round of the request to participants: each round asks every
    /// participant to publish the paths it wrote (and, in the pause, to close
    /// its gate first).
    pub round: u64,
    /// Whether the operator asked to wipe a non-empty target.
    pub wipe_target: bool,
    /// Last path copied in COPYING (depth-first, children sorted); the copy
    /// resumes after it.
    pub copy_cursor: Option<String>,
    /// Nodes copied (or checked equal) by COPYING.
    pub copied: u64,
    /// Dirty paths re-copied by CATCH_UP rounds and the pause.
    pub caught_up: u64,
    /// Full re-scans done (a participant overflowed or died).
    pub rescans: u64,
    /// Whether the nodes not written since tracking began were verified.
    pub verified: bool,
    /// Paths synced and verified during the pause.
    pub pause_nodes: u64,
    /// Length of the pause in milliseconds (set at COMPLETED).
    pub pause_ms: u64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Time of the last change, milliseconds since the Unix epoch.
    pub updated_ms: i64,
    /// Why the migration failed or was aborted.
    pub error: Option<String>,
}

/// The value of a participant's ephemeral node: what it acknowledged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct ParticipantAck {
    /// The migration acknowledged (`None`: none yet).
    pub migration: Option<String>,
    /// The phase acknowledged.
    pub phase: Option<Phase>,
    /// The round acknowledged: its dirty paths are published.
    pub round: u64,
    /// The node the participant belongs to
    /// ([`ParticipantOptions::node`](crate::ParticipantOptions::node)):
    /// a participant registered earlier by the same node is a dead
    /// incarnation, not waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

pub(crate) fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

pub(crate) fn corrupt(path: &str, what: &str, e: impl std::fmt::Display) -> MetadataError {
    MetadataError::InvalidArgument {
        op: Operation::Get,
        path: path.to_owned(),
        reason: format!(
            "the {what} stored here is not valid JSON ({e}); it was written by something \
             else than bkswitch-metadata-migration: fix or delete it by hand"
        ),
    }
}

/// Reads the current migration record (via [`CURRENT_PATH`]) and its version.
///
/// # Errors
///
/// Errors of the store, and `InvalidArgument` for a record that is not valid
/// JSON.
pub async fn read_current(store: &dyn MetadataStore) -> Result<Option<(MigrationRecord, i64)>> {
    let Some(current) = store.get(CURRENT_PATH).await? else {
        return Ok(None);
    };
    let id = String::from_utf8_lossy(&current.value).into_owned();
    read_record(store, &id).await
}

/// Reads the record of migration `id` and its version.
///
/// # Errors
///
/// Errors of the store, and `InvalidArgument` for a record that is not valid
/// JSON.
pub async fn read_record(
    store: &dyn MetadataStore,
    id: &str,
) -> Result<Option<(MigrationRecord, i64)>> {
    let path = record_path(id);
    match store.get(&path).await? {
        None => Ok(None),
        Some(r) => {
            let rec: MigrationRecord = serde_json::from_slice(&r.value)
                .map_err(|e| corrupt(&path, "migration record", e))?;
            Ok(Some((rec, r.stat.version)))
        }
    }
}

/// Writes `record` expecting `version` (compare-and-set).
pub(crate) async fn write_record(
    store: &dyn MetadataStore,
    record: &mut MigrationRecord,
    version: i64,
) -> Result<Stat> {
    record.updated_ms = now_ms();
    let value = serde_json::to_vec(record).expect("a record serializes");
    store
        .put(
            &record_path(&record.id),
            &value,
            ExpectedVersion::Exactly(version),
        )
        .await
}

/// Whether `path` is a control node of the migration (never copied, never
/// gated, never tracked).
pub fn is_control_path(path: &str) -> bool {
    path == MIGRATION_ROOT
        || path
            .strip_prefix(MIGRATION_ROOT)
            .is_some_and(|rest| rest.starts_with('/'))
}
