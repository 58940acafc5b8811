//! The ports through which the coordinator reaches BookKeeper clusters and
//! topic owners. The adapters to the multi-cluster router and to open managed
//! ledgers are in [`adapters`](crate::adapters) (feature `adapters`).

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{BookKeeper, LedgerId};
use serde::{Deserialize, Serialize};

use crate::error::{OrchestratorError, Result};

/// The BookKeeper client of each registered cluster.
#[async_trait]
pub trait ClusterClients: Send + Sync {
    /// The client of `cluster` (started if needed).
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::Client`] when the cluster is unknown or its client
    /// cannot start.
    async fn client(&self, cluster: &str) -> Result<Arc<dyn BookKeeper>>;

    /// Checks that a client of `cluster`, registered at
    /// `metadata_service_uri`, starts — before a switch to it is recorded.
    /// The default asks [`client`](Self::client); implementations that learn
    /// clusters asynchronously (a router following the registry) first make
    /// the just-registered cluster known.
    ///
    /// # Errors
    ///
    /// As [`client`](Self::client).
    async fn probe(&self, cluster: &str, metadata_service_uri: &str) -> Result<()> {
        let _ = metadata_service_uri;
        self.client(cluster).await.map(drop)
    }
}

/// Fixed clients by name (tests, dedicated coordinator processes).
#[derive(Debug, Clone, Default)]
pub struct StaticClients {
    clients: BTreeMap<String, Arc<dyn BookKeeper>>,
}

impl StaticClients {
    /// No clients.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds the client of `cluster`.
    pub fn with(mut self, cluster: &str, client: Arc<dyn BookKeeper>) -> Self {
        self.clients.insert(cluster.to_owned(), client);
        self
    }
}

#[async_trait]
impl ClusterClients for StaticClients {
    async fn client(&self, cluster: &str) -> Result<Arc<dyn BookKeeper>> {
        self.clients
            .get(cluster)
            .cloned()
            .ok_or_else(|| OrchestratorError::Client {
                cluster: cluster.to_owned(),
                reason: "no client is configured for this cluster".to_owned(),
                source: None,
            })
    }
}

/// The request the coordinator sends to a cursor's owner
/// (`POST /internal/promote-cursor`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CursorPromoteRequest {
    /// The managed ledger (topic) name.
    pub managed_ledger: String,
    /// The cursor name.
    pub cursor_name: String,
    /// The cluster the stamp must name afterwards.
    pub target_cluster_name: String,
    /// The cursor ledger the coordinator copied; the owner refuses (409) when
    /// the cursor records another one.
    pub expected_cursors_ledger_id: LedgerId,
    /// The last entry id of the copy.
    pub copied_last_entry_id: i64,
}

/// What the owner did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "outcome")]
pub enum CursorPromoteOutcome {
    /// The stamp now names the target.
    Promoted,
    /// The stamp already named the target.
    AlreadyOnTarget,
    /// The cursor moved past the copy and rolled over onto a new ledger on the target.
    RolledOver {
        /// The new cursor ledger.
        new_ledger_id: LedgerId,
    },
}

/// Why an owner did not promote.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", tag = "error")]
#[non_exhaustive]
pub enum PromoteError {
    /// The cursor records another ledger than expected (HTTP 409).
    #[error("cursor `{cursor}` of `{managed_ledger}` records cursor ledger {actual}, not {expected}; the copy is obsolete")]
    RolledOver {
        /// The managed ledger.
        managed_ledger: String,
        /// The cursor.
        cursor: String,
        /// The expected ledger.
        expected: LedgerId,
        /// The ledger recorded.
        actual: LedgerId,
    },
    /// This node does not own the topic (or the cursor is not loaded there).
    #[error(
        "this node does not own `{managed_ledger}` (cursor `{cursor}`); ask the current owner"
    )]
    NotOwner {
        /// The managed ledger.
        managed_ledger: String,
        /// The cursor.
        cursor: String,
    },
    /// Temporarily impossible (node not switched yet, store unavailable); retry.
    #[error("cursor promotion temporarily impossible: {reason}; retry")]
    Unavailable {
        /// Why.
        reason: String,
    },
    /// Anything else.
    #[error("cursor promotion failed: {reason}")]
    Other {
        /// Why.
        reason: String,
    },
}

impl PromoteError {
    /// Whether retrying may help.
    pub fn is_retryable(&self) -> bool {
        matches!(self, PromoteError::Unavailable { .. })
    }

    /// The HTTP status the admin surface answers with.
    pub fn http_status(&self) -> u16 {
        match self {
            PromoteError::RolledOver { .. } => 409,
            PromoteError::NotOwner { .. } => 421,
            PromoteError::Unavailable { .. } => 503,
            PromoteError::Other { .. } => 500,
        }
    }
}

/// Runs a cursor PROMOTE on the node that owns the cursor, under the cursor
/// lock ([I13](bkswitch_docs::invariants::I13)).
///
/// # Contract
///
/// Changes only the stamp when the cursor ledger still is
/// `expected_cursors_ledger_id` and holds exactly the copied entries
/// ([I9](bkswitch_docs::invariants::I9));
/// rolls the cursor over onto a new ledger on the target when it holds more;
/// refuses with [`PromoteError::RolledOver`] when the cursor records another
/// ledger. Idempotent.
#[async_trait]
pub trait CursorPromoter: Send + Sync {
    /// Promotes the cursor ledger named by `req`.
    ///
    /// # Errors
    ///
    /// See [`PromoteError`].
    async fn promote_cursor(
        &self,
        req: &CursorPromoteRequest,
    ) -> std::result::Result<CursorPromoteOutcome, PromoteError>;
}

/// Who owns each topic now.
#[async_trait]
pub trait TopicOwners: Send + Sync {
    /// The owner of `managed_ledger`, `None` when no node owns it.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError`] when ownership cannot be determined (retried later).
    async fn owner(&self, managed_ledger: &str) -> Result<Option<Arc<dyn CursorPromoter>>>;
}

/// No node owns any topic: the coordinator promotes every cursor itself.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoOwners;

#[async_trait]
impl TopicOwners for NoOwners {
    async fn owner(&self, _managed_ledger: &str) -> Result<Option<Arc<dyn CursorPromoter>>> {
        Ok(None)
    }
}
