//! [`Operator`]: every operator verb, one trait for a node in process
//! ([`Node`]) and over HTTP ([`AdminClient`]), so that an embedder, the CLI
//! and the tests drive a node the same way and get the same answers: the
//! same documents, and the same refusals with the same HTTP status and error
//! body as the REST API.

use async_trait::async_trait;

use crate::client::{AdminClient, ClientError};
use crate::node::{Node, NodeError};
use crate::wire::{
    CleanupReportDoc, CleanupRequest, CleanupTargets, ClusterRecord, ClusterStatus, ErrorBody,
    MigrationPlanDoc, MigrationStatusDoc, NodeStatus, PrecheckResult, SwitchStatusDoc,
};

/// Why an operator verb failed, the same way in process and over HTTP.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OperatorError {
    /// The node refused or failed: the HTTP status and the error body its
    /// REST API answers (in process: what it *would* answer).
    #[error("{} ({}, HTTP {status})", body.error, body.code)]
    Refused {
        /// `400`, `401`, `404`, `409`, `503`, `500`.
        status: u16,
        /// The error body: message, code, field, details.
        body: ErrorBody,
    },
    /// The node could not be asked (over HTTP only): unreachable, no answer
    /// in time, an answer that is not the API's, a bad URL.
    #[error(transparent)]
    Unreachable(ClientError),
}

impl OperatorError {
    /// The HTTP status of a refusal (`None` when the node was not reached).
    pub fn status(&self) -> Option<u16> {
        match self {
            OperatorError::Refused { status, .. } => Some(*status),
            OperatorError::Unreachable(e) => e.status(),
        }
    }

    /// The error code of a refusal (`CONFLICT`, `INVALID_ARGUMENT`, …).
    pub fn code(&self) -> Option<&str> {
        match self {
            OperatorError::Refused { body, .. } => Some(&body.code),
            OperatorError::Unreachable(_) => None,
        }
    }

    /// Whether the same call may succeed later (`503`, transport failures).
    pub fn is_retryable(&self) -> bool {
        match self {
            OperatorError::Refused { status, .. } => *status == 503,
            OperatorError::Unreachable(e) => e.is_retryable(),
        }
    }
}

impl From<NodeError> for OperatorError {
    fn from(e: NodeError) -> OperatorError {
        let (status, body) = crate::http::answer_of(e);
        OperatorError::Refused { status, body }
    }
}

impl From<ClientError> for OperatorError {
    fn from(e: ClientError) -> OperatorError {
        match e {
            ClientError::Api {
                status,
                code,
                message,
                field,
                details,
            } => OperatorError::Refused {
                status,
                body: ErrorBody {
                    error: message,
                    code,
                    field,
                    details,
                },
            },
            e => OperatorError::Unreachable(e),
        }
    }
}

/// Every operator verb of a node. Implemented by [`Node`] (in process: the
/// node's own rules, no HTTP) and [`AdminClient`] (the node's REST API).
#[async_trait]
pub trait Operator: Send + Sync {
    /// Every registered bookie cluster.
    async fn list_clusters(&self) -> Result<Vec<ClusterRecord>, OperatorError>;
    /// One registered cluster (404 when it is not).
    async fn cluster(&self, name: &str) -> Result<ClusterRecord, OperatorError>;
    /// Registers a cluster after probing it (`status` `None`: `STANDBY`).
    async fn register_cluster(
        &self,
        name: &str,
        metadata_service_uri: &str,
        status: Option<ClusterStatus>,
    ) -> Result<ClusterRecord, OperatorError>;
    /// Unregisters a cluster nothing uses any more (409 otherwise).
    async fn unregister_cluster(&self, name: &str) -> Result<(), OperatorError>;
    /// Whether a switch to `target` may start now, and what to do if not.
    async fn precheck(&self, target: &str) -> Result<PrecheckResult, OperatorError>;
    /// Starts the cluster-wide switch to `target`.
    async fn start_switch(&self, target: &str) -> Result<SwitchStatusDoc, OperatorError>;
    /// This node's view: registry, switch, copy progress, read mode.
    async fn status(&self) -> Result<NodeStatus, OperatorError>;
    /// Rolls the switch recorded last back.
    async fn rollback(&self) -> Result<SwitchStatusDoc, OperatorError>;
    /// What a cleanup of the switch recorded last would delete.
    async fn cleanup_targets(&self) -> Result<CleanupTargets, OperatorError>;
    /// Cleans up the switch recorded last.
    async fn cleanup(&self, request: &CleanupRequest) -> Result<CleanupReportDoc, OperatorError>;
    /// Starts the canary of `prefix` on `cluster`.
    async fn set_override(
        &self,
        prefix: &str,
        cluster: &str,
    ) -> Result<SwitchStatusDoc, OperatorError>;
    /// Ends (rolls back) the canary of `prefix`.
    async fn remove_override(&self, prefix: &str) -> Result<SwitchStatusDoc, OperatorError>;
    /// The current (or last seen) metadata migration (404 when none).
    async fn migration_status(&self) -> Result<MigrationStatusDoc, OperatorError>;
    /// Every check of a migration start and what the target holds; writes
    /// nothing.
    async fn plan_migration(&self, target_url: &str) -> Result<MigrationPlanDoc, OperatorError>;
    /// Starts a metadata migration to `target_url`; `wipe_target` names the
    /// target's root when its content may be deleted.
    async fn start_migration(
        &self,
        target_url: &str,
        wipe_target: Option<&str>,
    ) -> Result<MigrationStatusDoc, OperatorError>;
    /// Aborts the current metadata migration.
    async fn abort_migration(&self) -> Result<MigrationStatusDoc, OperatorError>;
}

#[async_trait]
impl Operator for Node {
    async fn list_clusters(&self) -> Result<Vec<ClusterRecord>, OperatorError> {
        Ok(self.registry().list().await.map_err(NodeError::from)?)
    }

    async fn cluster(&self, name: &str) -> Result<ClusterRecord, OperatorError> {
        Ok(Node::cluster(self, name).await?)
    }

    async fn register_cluster(
        &self,
        name: &str,
        metadata_service_uri: &str,
        status: Option<ClusterStatus>,
    ) -> Result<ClusterRecord, OperatorError> {
        let status = status.unwrap_or(ClusterStatus::Standby);
        Ok(Node::register_cluster(self, name, metadata_service_uri, status).await?)
    }

    async fn unregister_cluster(&self, name: &str) -> Result<(), OperatorError> {
        Ok(Node::unregister_cluster(self, name).await?)
    }

    async fn precheck(&self, target: &str) -> Result<PrecheckResult, OperatorError> {
        Ok(Node::precheck(self, target).await?)
    }

    async fn start_switch(&self, target: &str) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(Node::start_switch(self, target).await?.into())
    }

    async fn status(&self) -> Result<NodeStatus, OperatorError> {
        Ok(Node::status(self).await?)
    }

    async fn rollback(&self) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(Node::rollback(self).await?.into())
    }

    async fn cleanup_targets(&self) -> Result<CleanupTargets, OperatorError> {
        let (switch_id, targets) = Node::cleanup_targets(self).await?;
        Ok(CleanupTargets { switch_id, targets })
    }

    async fn cleanup(&self, request: &CleanupRequest) -> Result<CleanupReportDoc, OperatorError> {
        let (id, report) = Node::cleanup(self, request.options()).await?;
        Ok(CleanupReportDoc::new(&id, &report))
    }

    async fn set_override(
        &self,
        prefix: &str,
        cluster: &str,
    ) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(Node::set_override(self, prefix, cluster).await?.into())
    }

    async fn remove_override(&self, prefix: &str) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(Node::remove_override(self, prefix).await?.into())
    }

    async fn migration_status(&self) -> Result<MigrationStatusDoc, OperatorError> {
        match self.metadata_migration().await? {
            Some(record) => Ok(self.migration_doc(&record)),
            None => Err(NodeError::NoMetadataMigration.into()),
        }
    }

    async fn plan_migration(&self, target_url: &str) -> Result<MigrationPlanDoc, OperatorError> {
        let plan = self.plan_metadata_migration(target_url).await?;
        Ok(MigrationPlanDoc::new(&plan))
    }

    async fn start_migration(
        &self,
        target_url: &str,
        wipe_target: Option<&str>,
    ) -> Result<MigrationStatusDoc, OperatorError> {
        let record = self
            .start_metadata_migration(target_url, wipe_target)
            .await?;
        Ok(self.migration_doc(&record))
    }

    async fn abort_migration(&self) -> Result<MigrationStatusDoc, OperatorError> {
        let reason = format!("by an operator through node `{}`", self.node_id());
        let record = self.abort_metadata_migration(&reason).await?;
        Ok(self.migration_doc(&record))
    }
}

#[async_trait]
impl Operator for AdminClient {
    async fn list_clusters(&self) -> Result<Vec<ClusterRecord>, OperatorError> {
        Ok(self.list().await?)
    }

    async fn cluster(&self, name: &str) -> Result<ClusterRecord, OperatorError> {
        Ok(self.get(name).await?)
    }

    async fn register_cluster(
        &self,
        name: &str,
        metadata_service_uri: &str,
        status: Option<ClusterStatus>,
    ) -> Result<ClusterRecord, OperatorError> {
        Ok(self.register(name, metadata_service_uri, status).await?)
    }

    async fn unregister_cluster(&self, name: &str) -> Result<(), OperatorError> {
        Ok(self.unregister(name).await?)
    }

    async fn precheck(&self, target: &str) -> Result<PrecheckResult, OperatorError> {
        Ok(AdminClient::precheck(self, target).await?)
    }

    async fn start_switch(&self, target: &str) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(self.switch(target).await?)
    }

    async fn status(&self) -> Result<NodeStatus, OperatorError> {
        Ok(AdminClient::status(self).await?)
    }

    async fn rollback(&self) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(AdminClient::rollback(self).await?)
    }

    async fn cleanup_targets(&self) -> Result<CleanupTargets, OperatorError> {
        Ok(AdminClient::cleanup_targets(self).await?)
    }

    async fn cleanup(&self, request: &CleanupRequest) -> Result<CleanupReportDoc, OperatorError> {
        Ok(AdminClient::cleanup(self, request).await?)
    }

    async fn set_override(
        &self,
        prefix: &str,
        cluster: &str,
    ) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(AdminClient::set_override(self, prefix, cluster).await?)
    }

    async fn remove_override(&self, prefix: &str) -> Result<SwitchStatusDoc, OperatorError> {
        Ok(AdminClient::remove_override(self, prefix).await?)
    }

    async fn migration_status(&self) -> Result<MigrationStatusDoc, OperatorError> {
        Ok(AdminClient::migration_status(self).await?)
    }

    async fn plan_migration(&self, target_url: &str) -> Result<MigrationPlanDoc, OperatorError> {
        Ok(AdminClient::plan_migration(self, target_url).await?)
    }

    async fn start_migration(
        &self,
        target_url: &str,
        wipe_target: Option<&str>,
    ) -> Result<MigrationStatusDoc, OperatorError> {
        Ok(AdminClient::start_migration(self, target_url, wipe_target).await?)
    }

    async fn abort_migration(&self) -> Result<MigrationStatusDoc, OperatorError> {
        Ok(AdminClient::abort_migration(self).await?)
    }
}
