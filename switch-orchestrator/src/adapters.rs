//! The adapters of the coordinator's ports to the node's storage (feature
//! `adapters`): the multi-cluster router
//! (`bkswitch_bk_router::MultiClusterManagedLedgerStorage`) as
//! [`ClusterClients`], and the managed ledgers open in a process
//! ([`LocalTopics`]) as [`TopicOwners`] and [`CursorPromoter`].
//!
//! The coordinator itself depends on the ports only (its default build links
//! neither the router nor the managed ledger). The node (`bkswitch-admin`)
//! turns this feature on and plugs these adapters in; the test kit uses the
//! same ones, so there is one implementation of each.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::BookKeeper;
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, RouterError};
use bkswitch_managed_ledger::{CursorPromotion, ManagedLedger, ManagedLedgerError};

use crate::error::{OrchestratorError, Result, RetryableError};
use crate::owners::{
    ClusterClients, CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, PromoteError,
    TopicOwners,
};

/// The router says whether its cause passes (an unreachable cluster) or not
/// (an unknown cluster, a refused URI).
impl RetryableError for RouterError {
    fn is_retryable(&self) -> bool {
        RouterError::is_retryable(self)
    }
}

fn client_error(cluster: &str, e: RouterError) -> OrchestratorError {
    OrchestratorError::Client {
        cluster: cluster.to_owned(),
        reason: e.to_string(),
        source: Some(Arc::new(e)),
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

#[cfg(test)]
mod tests {
    use bkswitch_bk_client::{BkError, BkErrorKind};
    use bkswitch_bk_router::RouterConfig;

    use super::*;

    #[test]
    fn router_errors_keep_their_retryability_through_the_adapter() {
        let start = |kind| RouterError::ClientStart {
            name: "new".into(),
            uri: "zk://h:1/ledgers".into(),
            source: Box::new(BkError::new(kind, "connecting")),
        };
        assert!(client_error("new", start(BkErrorKind::Unavailable)).is_retryable());
        assert!(!client_error("new", start(BkErrorKind::InvalidArgument)).is_retryable());
        let unknown = client_error(
            "new",
            RouterError::UnknownCluster {
                name: "new".into(),
                registered: vec![],
            },
        );
        assert!(!unknown.is_retryable());
        // The router's error stays the source, printable as it was.
        let source = std::error::Error::source(&unknown).expect("the router's error is kept");
        assert!(source.to_string().contains("new"), "{source}");
    }

    #[tokio::test]
    async fn an_unknown_cluster_of_the_router_is_a_client_error_that_is_not_retried() {
        let router = MultiClusterManagedLedgerStorage::new(RouterConfig::default());
        let e = match ClusterClients::client(&router, "nowhere").await {
            Err(e) => e,
            Ok(_) => panic!("an unregistered cluster has no client"),
        };
        assert!(
            matches!(&e, OrchestratorError::Client { cluster, source: Some(_), .. } if cluster == "nowhere"),
            "{e:?}"
        );
        assert!(!e.is_retryable());
    }
}
