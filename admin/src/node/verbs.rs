//! The switch verbs of [`Node`]: each owns its validation, the start lock,
//! its exclusion of metadata migrations, and its events and metrics, so that
//! an embedder calling them gets exactly what the REST API answers (the
//! handlers only translate requests and errors).

use bkswitch_registry::{ClusterRecord, PrecheckResult, RegistryError};
use bkswitch_switch_orchestrator::{
    CleanupOptions, CleanupReport, CleanupTarget, Phase, SwitchStatus,
};

use super::{Node, NodeError};
use crate::metrics::SwitchEvent;

/// `name` as a valid cluster name, or a 400 naming `field`.
fn checked(field: &'static str, name: &str) -> Result<(), NodeError> {
    if name.is_empty() {
        return Err(NodeError::Invalid {
            field,
            message: format!("`{field}` must name a registered cluster"),
        });
    }
    bkswitch_registry::validate_name(name).map_err(|e| NodeError::Invalid {
        field,
        message: e.to_string(),
    })
}

impl Node {
    /// The registered cluster `name`.
    ///
    /// # Errors
    ///
    /// The registry's: a bad name (400), `NotFound` (404) for a cluster not
    /// registered.
    pub async fn cluster(&self, name: &str) -> Result<ClusterRecord, NodeError> {
        bkswitch_registry::validate_name(name)?;
        match self.registry().get(name).await? {
            Some(r) => Ok(r),
            None => Err(RegistryError::NotFound {
                name: name.to_owned(),
            }
            .into()),
        }
    }

    /// Whether a switch to `target` may start now: the id-generator check
    /// and what to do when it fails (read only).
    ///
    /// # Errors
    ///
    /// The registry's refusal of a bad name (nothing read); the
    /// orchestrator's errors (an unknown cluster, metadata errors).
    pub async fn precheck(&self, target: &str) -> Result<PrecheckResult, NodeError> {
        bkswitch_registry::validate_name(target)?;
        Ok(self.coordinator().precheck(target).await?)
    }

    /// Starts the cluster-wide switch to `target`, coordinated by this node:
    /// refused while a metadata migration is unfinished (checked before and
    /// again under the start lock), or while another start holds the lock.
    /// Returns the switch's status once started; the copy runs in the
    /// background.
    ///
    /// # Errors
    ///
    /// [`NodeError::Invalid`] (`target`), [`NodeError::MigrationInProgress`],
    /// [`NodeError::StartInProgress`] (nothing written); the orchestrator's
    /// refusals (an unknown or deprecated target, a switch in progress, the
    /// precheck).
    pub async fn start_switch(&self, target: &str) -> Result<SwitchStatus, NodeError> {
        checked("target", target)?;
        let refused = format!("start a bookie-cluster switch to `{target}`");
        self.refuse_during_migration(&refused).await?;
        let what = format!("a bookie-cluster switch to `{target}`");
        // A start asked again while its switch runs answers that switch: it
        // is not counted as another start.
        let before = self
            .coordinator()
            .current_status()
            .await?
            .map(|s| s.switch_id);
        let status = self
            .exclusive_start(&what, async {
                // Again under the start lock: a migration started meanwhile
                // is seen.
                self.refuse_during_migration(&refused).await?;
                Ok(self
                    .coordinator()
                    .start_switch(target, Some(self.node_id()))
                    .await?)
            })
            .await?;
        if before.as_deref() != Some(status.switch_id.as_str()) {
            self.metrics().switch_event(SwitchEvent::Started);
        }
        Ok(status)
    }

    /// The id of the switch recorded last.
    ///
    /// # Errors
    ///
    /// [`NodeError::NoSwitch`]; metadata errors.
    pub async fn current_switch_id(&self) -> Result<String, NodeError> {
        match self.coordinator().current_status().await? {
            Some(s) => Ok(s.switch_id),
            None => Err(NodeError::NoSwitch),
        }
    }

    /// Rolls the switch recorded last back (inside its rollback window).
    ///
    /// # Errors
    ///
    /// [`NodeError::NoSwitch`]; the orchestrator's refusals (cleanup
    /// started, window closed, not converged yet: call again).
    pub async fn rollback(&self) -> Result<SwitchStatus, NodeError> {
        let id = self.current_switch_id().await?;
        let status = self.coordinator().rollback(&id).await?;
        if status.phase == Phase::RolledBack {
            self.metrics().switch_event(SwitchEvent::RolledBack);
        }
        Ok(status)
    }

    /// The copies a cleanup of the switch recorded last would delete (read
    /// only), with that switch's id.
    ///
    /// # Errors
    ///
    /// [`NodeError::NoSwitch`]; the orchestrator's errors.
    pub async fn cleanup_targets(&self) -> Result<(String, Vec<CleanupTarget>), NodeError> {
        let id = self.current_switch_id().await?;
        let targets = self.coordinator().cleanup_targets(&id).await?;
        Ok((id, targets))
    }

    /// Cleans up the switch recorded last (deletes the copies no longer
    /// needed), with that switch's id.
    ///
    /// # Errors
    ///
    /// [`NodeError::Invalid`] (`srcClusterFilter`), [`NodeError::NoSwitch`];
    /// the orchestrator's refusals (window still open without `force`, a
    /// switch not finished).
    pub async fn cleanup(
        &self,
        options: CleanupOptions,
    ) -> Result<(String, CleanupReport), NodeError> {
        if let Some(f) = &options.src_cluster_filter {
            checked("srcClusterFilter", f)?;
        }
        let id = self.current_switch_id().await?;
        let report = self.coordinator().cleanup(&id, options).await?;
        Ok((id, report))
    }
}
