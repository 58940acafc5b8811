//! The node's two background duties: coordinating the switches the registry
//! sync hands it, and rolling its topics over after every applied directive.
//! Both stop when the node stops (or when every handle to it is dropped).

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_router::CoordinatorDuty;
use bkswitch_switch_orchestrator::adapters::LocalTopics;
use bkswitch_switch_orchestrator::{Orchestrator, OrchestratorError, Phase};

use crate::metrics::{NodeMetrics, SwitchEvent};
use tokio::sync::{mpsc, watch};

/// Runs the orchestrator for every duty the registry sync hands this node
/// (it is the directive's origin, or the elected leader).
pub(crate) async fn coordinate(
    node_id: String,
    orchestrator: Orchestrator,
    metrics: Arc<NodeMetrics>,
    mut duties: mpsc::UnboundedReceiver<CoordinatorDuty>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let duty = tokio::select! {
            d = duties.recv() => match d { Some(d) => d, None => return },
            _ = stop.wait_for(|s| *s) => return,
        };
        tracing::info!(node = %node_id, epoch = duty.epoch, target = %duty.target,
            "coordinating switch");
        if !run_switch(&node_id, &orchestrator, &metrics, duty.epoch, &stop).await {
            return;
        }
    }
}

/// Resumes the switch of the directive `epoch` until it is coordinated (or
/// fails for good); `false` when the node stopped meanwhile. A rollback's
/// directive resumes the switch it rolls back (an interrupted rollback is
/// finished; a finished one returns at once).
pub(super) async fn run_switch(
    node_id: &str,
    orchestrator: &Orchestrator,
    metrics: &NodeMetrics,
    epoch: i64,
    stop: &watch::Receiver<bool>,
) -> bool {
    let mut delay = Duration::from_millis(100);
    let mut missing = 0;
    loop {
        let resumed = match orchestrator.switch_for_epoch(epoch).await {
            Ok(Some(id)) => orchestrator.resume(&id).await,
            Ok(None) => Err(OrchestratorError::NoSuchSwitch {
                switch_id: epoch.to_string(),
            }),
            Err(e) => Err(e),
        };
        match resumed {
            // The origin writes the directive, then the switch record: the
            // record may not be there yet. A directive without any record
            // (written by hand, or the origin crashed in between) is left
            // alone after a while; the operator re-issues the switch.
            Err(OrchestratorError::NoSuchSwitch { .. }) if missing < 100 => {
                missing += 1;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Ok(status) => {
                tracing::info!(node = %node_id, switch = %status.switch_id,
                    phase = %status.phase, "switch coordinated");
                // A forward switch brought to SWITCHED by this run (a
                // finished rollback is counted where it ran).
                if status.epoch == epoch && status.phase == Phase::Switched {
                    metrics.switch_event(SwitchEvent::Succeeded);
                }
                return true;
            }
            Err(e) if e.is_retryable() => {
                tracing::warn!(node = %node_id, epoch, error = %e,
                    "switch run failed; resuming");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                tracing::error!(node = %node_id, epoch, error = %e,
                    "switch run stopped; an operator must look at it");
                metrics.switch_event(SwitchEvent::Failed);
                return true;
            }
        }
        if *stop.borrow() {
            return false;
        }
    }
}

/// Rolls over every owned topic at `rate` topics per second after each
/// applied directive ([design §5.2](bkswitch_docs::design)).
pub(crate) async fn roll_after_switch(
    node_id: String,
    topics: Arc<LocalTopics>,
    rate: u32,
    mut applied: watch::Receiver<i64>,
    mut stop: watch::Receiver<bool>,
) {
    let mut last = *applied.borrow_and_update();
    loop {
        tokio::select! {
            r = applied.changed() => if r.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
        let epoch = *applied.borrow_and_update();
        if epoch == last {
            continue;
        }
        last = epoch;
        let report = topics.force_rollover(rate).await;
        tracing::info!(node = %node_id, epoch, ?report,
            "forced rollover after the switch");
    }
}

/// Every `interval`, while this node leads the election, takes over the
/// canaries left unfinished ([`Orchestrator::resume_canaries`]) and runs one
/// pass of the automatic cleanup ([`Orchestrator::auto_cleanup`]: after the
/// dual-read timeout, never inside the rollback window).
pub(crate) async fn clean_up_by_itself(
    node: crate::node::WeakNode,
    interval: Duration,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            () = tokio::time::sleep(interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
        let Some(node) = node.upgrade() else { return };
        if !node.sync().is_leader() {
            continue;
        }
        // A canary whose coordinator died (or stopped with this node) is
        // taken over, as the cluster-wide switch of a dead origin is.
        match node.coordinator().resume_canaries().await {
            Ok(resumed) => {
                for st in resumed {
                    tracing::info!(node = %node.node_id(), switch = %st.switch_id,
                        phase = %st.phase, "canary taken over");
                }
            }
            Err(e) => tracing::warn!(node = %node.node_id(), error = %e,
                "taking over the unfinished canaries; retried at the next interval"),
        }
        // The cluster-wide switch, then every canary (its old copies).
        let mut coordinators = vec![node.coordinator().clone()];
        match node.orchestrator().canary_prefixes().await {
            Ok(prefixes) => {
                coordinators.extend(prefixes.iter().map(|p| node.coordinator().for_prefix(p)))
            }
            Err(e) => tracing::warn!(node = %node.node_id(), error = %e,
                "listing the canaries for the automatic cleanup"),
        }
        for orch in coordinators {
            match orch.auto_cleanup().await {
                Ok(Some(report)) => tracing::info!(node = %node.node_id(),
                    canary = orch.scope().unwrap_or(""),
                    deleted = report.targets.len(), remaining = report.remaining,
                    phase = %report.phase, "automatic cleanup pass"),
                Ok(None) => {}
                Err(e) => tracing::warn!(node = %node.node_id(), error = %e,
                    "automatic cleanup pass failed; retried at the next interval"),
            }
        }
    }
}
