//! The start lock: every start of a bookie-cluster switch, a canary or a
//! metadata migration runs its checks and its first write while holding it,
//! so that two starts that exclude each other never both pass their checks.
//! Only [`Node`]'s verbs take it; nothing outside the crate can start around
//! it.

use bkswitch_metadata_migration::read_current;
use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion};

use super::migration::phase_name;
use super::{Node, NodeError};

/// The node that every start of a bookie-cluster switch, a canary or a
/// metadata migration holds for the moment of its checks and its first
/// write (every start verb of [`Node`] takes it): ephemeral, so that a node that dies
/// while starting something releases it with its session.
pub const START_LOCK_PATH: &str = "/admin/bkswitch-start";

/// The value of [`START_LOCK_PATH`].
#[derive(Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct StartLock {
    /// The node starting something.
    #[serde(default)]
    node: String,
    /// What it starts.
    #[serde(default)]
    what: String,
    /// When it took the lock (its clock, ms since the epoch).
    #[serde(default)]
    at_ms: u64,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Node {
    /// Runs `start` (the checks and the first write of a switch, a canary or
    /// a metadata migration, described by `what`) while holding the start
    /// lock ([`START_LOCK_PATH`]), so that two starts that exclude each other
    /// (a migration and a switch, asked of two nodes at the same moment) never
    /// both pass their checks: each check reads what the starts before it
    /// wrote. The lock is an ephemeral node created for the start and deleted
    /// after it (a refused start leaves the store as it was); a node that
    /// dies while starting releases it with its session.
    ///
    /// # Errors
    ///
    /// [`NodeError::StartInProgress`] when another start holds the lock
    /// (nothing written; retry), [`NodeError::Metadata`] when the store
    /// fails, and the errors of `start`.
    pub(crate) async fn exclusive_start<T>(
        &self,
        what: &str,
        start: impl std::future::Future<Output = Result<T, NodeError>>,
    ) -> Result<T, NodeError> {
        let store = self.migration_store();
        let mine = StartLock {
            node: self.node_id().to_owned(),
            what: what.to_owned(),
            at_ms: now_ms(),
        };
        let value = serde_json::to_vec(&mine).expect("a start lock serializes");
        match store
            .create(START_LOCK_PATH, &value, CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let other: StartLock = match store.get(START_LOCK_PATH).await {
                    Ok(Some(r)) => serde_json::from_slice(&r.value).unwrap_or_default(),
                    _ => StartLock::default(),
                };
                return Err(NodeError::StartInProgress {
                    refused: format!("start {what}"),
                    other: if other.what.is_empty() {
                        "something".to_owned()
                    } else {
                        other.what
                    },
                    node: if other.node.is_empty() {
                        "?".to_owned()
                    } else {
                        other.node
                    },
                });
            }
            Err(e) => return Err(e.into()),
        }
        let result = start.await;
        // Released only if still ours (a lock lost with this node's session
        // may have been taken by another start since).
        let released = match store.get(START_LOCK_PATH).await {
            Ok(Some(r)) if r.value == value => store
                .delete(START_LOCK_PATH, ExpectedVersion::Exactly(r.stat.version))
                .await
                .map_err(|e| e.to_string()),
            Ok(_) => Ok(()),
            Err(e) => Err(e.to_string()),
        };
        if let Err(e) = released {
            tracing::warn!(node = %self.node_id(), error = %e,
                "the start lock was not released; it goes with this node's session");
        }
        result
    }

    /// Refuses `what` (a switch, a canary, another migration) while a
    /// metadata migration is unfinished (read only).
    ///
    /// # Errors
    ///
    /// [`NodeError::MigrationInProgress`], [`NodeError::Metadata`].
    pub(crate) async fn refuse_during_migration(&self, what: &str) -> Result<(), NodeError> {
        if let Some((rec, _)) = read_current(self.migration_store().as_ref()).await? {
            if !rec.phase.is_terminal() {
                return Err(NodeError::MigrationInProgress {
                    refused: what.to_owned(),
                    id: rec.id,
                    phase: phase_name(rec.phase),
                    target_url: rec.target_url,
                });
            }
        }
        Ok(())
    }
}
