//! How the coordinator reaches BookKeeper clusters and topic owners.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::{BookKeeper, LedgerId};
use bkswitch_bk_router::MultiClusterManagedLedgerStorage;
use bkswitch_managed_ledger::{CursorPromotion, ManagedLedger, ManagedLedgerError};
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

fn client_error(cluster: &str, e: bkswitch_bk_router::RouterError) -> OrchestratorError {
    OrchestratorError::Client {
        cluster: cluster.to_owned(),
        reason: e.to_string(),
        source: Some(Box::new(e)),
    }
}

#[async_trait]
impl ClusterClients for MultiClusterManagedLedgerStorage {
    async fn client(&self, cluster: &str) -> Result<Arc<dyn BookKeeper>> {
        self.connect_cluster(cluster)
            .await
            .map_err(|e| client_error(cluster, e))
    }

    /// The registry watcher may not have delivered the cluster's record yet
    /// (it was registered a moment ago): it is added for routing with its
    /// registered URI first (the watcher's own add is then a no-op).
    async fn probe(&self, cluster: &str, metadata_service_uri: &str) -> Result<()> {
        self.add_cluster(cluster, metadata_service_uri)
            .map_err(|e| client_error(cluster, e))?;
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

/// The managed ledgers open in this process: the owner side of cursor PROMOTE
/// for an in-process coordinator, and the forced rollover of
/// [design §5.2](bkswitch_docs::design).
#[derive(Debug, Clone, Default)]
pub struct LocalTopics {
    topics: Arc<parking_lot::Mutex<BTreeMap<String, ManagedLedger>>>,
}

/// What [`LocalTopics::force_rollover`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RolloverReport {
    /// How many managed ledgers rolled over.
    pub rolled: usize,
    /// Managed ledgers that could not roll over, with the error.
    pub errors: Vec<(String, String)>,
}

impl LocalTopics {
    /// No topic.
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers an open managed ledger (replacing one of the same name).
    pub fn insert(&self, ml: ManagedLedger) {
        self.topics.lock().insert(ml.name().to_owned(), ml);
    }

    /// Forgets a managed ledger (it was closed or moved to another node).
    pub fn remove(&self, name: &str) -> Option<ManagedLedger> {
        self.topics.lock().remove(name)
    }

    /// The managed ledger `name`, if open here.
    pub fn get(&self, name: &str) -> Option<ManagedLedger> {
        self.topics.lock().get(name).cloned()
    }

    /// The names of the open managed ledgers, sorted.
    pub fn list(&self) -> Vec<String> {
        self.topics.lock().keys().cloned().collect()
    }

    /// Rolls over every open managed ledger, at most `rate_per_sec` per second
    /// (values below 1 count as 1), so that new entries land on the active
    /// cluster without waiting for the natural rollover
    /// ([design §5.2](bkswitch_docs::design)).
    pub async fn force_rollover(&self, rate_per_sec: u32) -> RolloverReport {
        let pause = Duration::from_secs(1) / rate_per_sec.max(1);
        let mut report = RolloverReport::default();
        for (i, name) in self.list().into_iter().enumerate() {
            if i > 0 {
                tokio::time::sleep(pause).await;
            }
            let Some(ml) = self.get(&name) else { continue };
            match ml.rollover().await {
                Ok(()) => report.rolled += 1,
                Err(e) => report.errors.push((name, e.to_string())),
            }
        }
        report
    }
}

#[async_trait]
impl TopicOwners for LocalTopics {
    async fn owner(&self, managed_ledger: &str) -> Result<Option<Arc<dyn CursorPromoter>>> {
        Ok(self
            .topics
            .lock()
            .contains_key(managed_ledger)
            .then(|| Arc::new(self.clone()) as Arc<dyn CursorPromoter>))
    }
}

#[async_trait]
impl CursorPromoter for LocalTopics {
    async fn promote_cursor(
        &self,
        req: &CursorPromoteRequest,
    ) -> std::result::Result<CursorPromoteOutcome, PromoteError> {
        let not_owner = || PromoteError::NotOwner {
            managed_ledger: req.managed_ledger.clone(),
            cursor: req.cursor_name.clone(),
        };
        let ml = self.get(&req.managed_ledger).ok_or_else(not_owner)?;
        let cursor = ml.cursor(&req.cursor_name).map_err(|_| not_owner())?;
        match cursor
            .promote_cursor_ledger(
                req.expected_cursors_ledger_id,
                req.copied_last_entry_id,
                &req.target_cluster_name,
            )
            .await
        {
            Ok(CursorPromotion::AlreadyOnTarget) => Ok(CursorPromoteOutcome::AlreadyOnTarget),
            Ok(CursorPromotion::Promoted { .. }) => Ok(CursorPromoteOutcome::Promoted),
            Ok(CursorPromotion::RolledOver { new_ledger_id }) => {
                Ok(CursorPromoteOutcome::RolledOver { new_ledger_id })
            }
            Err(e) => Err(map_ml_error(req, e)),
        }
    }
}

fn map_ml_error(req: &CursorPromoteRequest, e: ManagedLedgerError) -> PromoteError {
    match e {
        ManagedLedgerError::CursorRolledOver {
            expected, actual, ..
        } => PromoteError::RolledOver {
            managed_ledger: req.managed_ledger.clone(),
            cursor: req.cursor_name.clone(),
            expected,
            actual,
        },
        ManagedLedgerError::Closed { .. } | ManagedLedgerError::Fenced { .. } => {
            PromoteError::NotOwner {
                managed_ledger: req.managed_ledger.clone(),
                cursor: req.cursor_name.clone(),
            }
        }
        e if e.is_retryable() => PromoteError::Unavailable {
            reason: e.to_string(),
        },
        e => PromoteError::Other {
            reason: e.to_string(),
        },
    }
}
