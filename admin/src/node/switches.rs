//! [`Switches`]: what a node's switches and canaries are doing, read only.
//! Starting, rolling back and cleaning up go through [`Node`](super::Node)'s
//! verbs, which own their rules (validation, the start lock, the exclusion of
//! metadata migrations, events and metrics): the coordinator itself is not
//! reachable from outside the crate:
//!
//! ```compile_fail
//! async fn around_the_rules(node: &bkswitch_admin::Node) {
//!     // No start without the node's rules: the view has no `start_switch`.
//!     let _ = node.orchestrator().start_switch("new", None).await;
//! }
//! ```

use bkswitch_registry::PrecheckResult;
use bkswitch_switch_orchestrator::{
    BuildProgress, CleanupTarget, ClusterUsage, CopyCounters, CopyStats, Orchestrator, Result,
    SwitchLedgerRecord, SwitchStatus,
};

/// A read-only view of a node's switch coordinator, cluster-wide or scoped to
/// a canary's prefix ([`for_prefix`](Self::for_prefix)). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Switches {
    orchestrator: Orchestrator,
}

impl Switches {
    pub(crate) fn new(orchestrator: Orchestrator) -> Switches {
        Switches { orchestrator }
    }

    /// The same view scoped to the canary of `prefix`.
    pub fn for_prefix(&self, prefix: &str) -> Switches {
        Switches::new(self.orchestrator.for_prefix(prefix))
    }

    /// The status of the switch `switch_id`.
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::status`].
    pub async fn status(&self, switch_id: &str) -> Result<SwitchStatus> {
        self.orchestrator.status(switch_id).await
    }

    /// The status of the switch recorded last, if any.
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::current_status`].
    pub async fn current_status(&self) -> Result<Option<SwitchStatus>> {
        self.orchestrator.current_status().await
    }

    /// Every recorded switch id, oldest first.
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::switch_ids`].
    pub async fn switch_ids(&self) -> Result<Vec<String>> {
        self.orchestrator.switch_ids().await
    }

    /// The per-ledger records of the switch `switch_id`.
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::ledger_records`].
    pub async fn ledger_records(&self, switch_id: &str) -> Result<Vec<SwitchLedgerRecord>> {
        self.orchestrator.ledger_records(switch_id).await
    }

    /// The copies a cleanup of `switch_id` would delete (read only).
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::cleanup_targets`].
    pub async fn cleanup_targets(&self, switch_id: &str) -> Result<Vec<CleanupTarget>> {
        self.orchestrator.cleanup_targets(switch_id).await
    }

    /// The recorded ledgers the bookie cluster `name` holds (read only).
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::cluster_usage`].
    pub async fn cluster_usage(&self, name: &str) -> Result<ClusterUsage> {
        self.orchestrator.cluster_usage(name).await
    }

    /// The prefixes with a canary recorded.
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::canary_prefixes`].
    pub async fn canary_prefixes(&self) -> Result<Vec<String>> {
        self.orchestrator.canary_prefixes().await
    }

    /// The live progress of the copy of `switch_id` while this node builds
    /// it.
    pub fn live_copy_progress(&self, switch_id: &str) -> Option<BuildProgress> {
        self.orchestrator.live_copy_progress(switch_id)
    }

    /// What this node's coordinator copied so far (entries, bytes), over
    /// every switch.
    pub fn copy_counters(&self) -> CopyCounters {
        self.orchestrator.copy_counters()
    }

    /// Copy counters of this node's coordinator.
    pub fn copy_stats(&self) -> CopyStats {
        self.orchestrator.copy_stats()
    }

    /// Whether a switch to `target` may start now (read only; the switch
    /// itself is [`Node::start_switch`](super::Node::start_switch)).
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::precheck`].
    pub async fn precheck(&self, target: &str) -> Result<PrecheckResult> {
        self.orchestrator.precheck(target).await
    }
}
