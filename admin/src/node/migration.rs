//! The node's part in moving the metadata store to another backend
//! (PIP-454, [`bkswitch_metadata_migration`]): the participant every metadata
//! user of the node goes through ([`MigrationHandle`]), the operator's start,
//! status and abort, the exclusion of bookie-cluster switches, and the two
//! background duties:
//!
//! - [`follow_pause`]: while the participant's write gate is closed, the
//!   managed ledgers see a lost metadata session (no trim, no rollover, no
//!   deletion in the pause) and a reconnected one when writes reopen;
//! - [`coordinate_migrations`]: the node that leads the switch-coordinator
//!   election runs the current unfinished migration step by step, and stops
//!   when it loses the lead; the next leader goes on from the record.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_managed_ledger::MetadataSession;
use bkswitch_metadata_migration::{
    abort, read_current, Coordinator, CoordinatorOptions, MigratingStore, MigrationRecord,
    MigrationRequest, ProtectedRoot, StartPlan, TargetPlan,
};
use bkswitch_metadata_store::{ErrorKind, MetadataError, MetadataStore, SessionEvent};
use bkswitch_registry::ClusterUri;
use bkswitch_switch_orchestrator::{Phase as SwitchPhase, SwitchStatus};
use parking_lot::Mutex;
use tokio::sync::watch;

use super::{Node, NodeError, WeakNode};

/// A node's migration participant and how the node takes part in
/// migrations: what [`NodeConfig::migration`](super::NodeConfig::migration)
/// carries. Cheap to clone (clones share the participant and what they saw).
#[derive(Debug, Clone)]
pub struct MigrationHandle {
    participant: MigratingStore,
    /// Settings of the coordinator this node runs while it leads the
    /// election.
    pub coordinator: CoordinatorOptions,
    /// Whether this node runs the current migration while it leads the
    /// switch-coordinator election (default `true`). Off, nobody on this
    /// node drives a started migration (tests drive one by hand).
    pub coordinate: bool,
    /// How often the node looks for an unfinished migration to run while it
    /// leads, and whether it still leads (default 500 ms).
    pub poll_interval: Duration,
    /// A wait between two steps of the coordinator (default none): bounds
    /// the load the copy puts on both stores (each step copies at most
    /// [`CoordinatorOptions::page_size`] nodes).
    pub step_interval: Duration,
    seen: Arc<Seen>,
}

#[derive(Debug, Default)]
struct Seen {
    /// The last record this node read or wrote (what the status shows after
    /// the flip, when the record stays behind in the source store).
    last: Mutex<Option<MigrationRecord>>,
    /// Times this node took up the coordinator of a migration.
    runs: AtomicU64,
    /// Coordinator steps this node ran.
    steps: AtomicU64,
}

impl MigrationHandle {
    /// The handle of `participant`, with the documented defaults.
    pub fn new(participant: MigratingStore) -> MigrationHandle {
        MigrationHandle {
            participant,
            coordinator: CoordinatorOptions::default(),
            coordinate: true,
            poll_interval: Duration::from_millis(500),
            step_interval: Duration::ZERO,
            seen: Arc::default(),
        }
    }

    /// The participant (the store every metadata user of the node uses).
    pub fn participant(&self) -> &MigratingStore {
        &self.participant
    }

    /// Times this node took up the coordinator of a migration (it led the
    /// election while one was unfinished).
    pub fn coordinator_runs(&self) -> u64 {
        self.seen.runs.load(Ordering::Relaxed)
    }

    /// Coordinator steps this node ran.
    pub fn coordinator_steps(&self) -> u64 {
        self.seen.steps.load(Ordering::Relaxed)
    }

    fn remember(&self, record: &MigrationRecord) {
        *self.seen.last.lock() = Some(record.clone());
    }
}

/// The phase as on the wire and in the record (`COPYING`, …).
pub(super) fn phase_name(phase: bkswitch_metadata_migration::Phase) -> String {
    serde_json::to_value(phase)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_else(|| format!("{phase:?}"))
}

/// A refusal of the store as [`NodeError::InvalidMigration`] (a 400), any
/// other error as it is (an unreachable target: retryable).
fn invalid_migration(target_url: &str, e: MetadataError) -> NodeError {
    match e.kind() {
        ErrorKind::InvalidArgument | ErrorKind::InvalidPath => NodeError::InvalidMigration {
            target_url: target_url.to_owned(),
            reason: match e {
                MetadataError::InvalidArgument { reason, .. } => reason,
                other => other.to_string(),
            },
        },
        _ => NodeError::Metadata(e),
    }
}

/// A switch or canary that has not finished (neither final nor rolled back).
fn unfinished(st: &SwitchStatus) -> bool {
    !st.phase.is_final() && st.phase != SwitchPhase::RolledBack
}

impl Node {
    /// The migration participant this node was started with, if any.
    pub fn migration(&self) -> Option<&MigrationHandle> {
        self.inner.config.migration.as_ref()
    }

    /// The store the migration record lives in: the participant's current
    /// store (the source of a running migration), else the node's store.
    pub(super) fn migration_store(&self) -> Arc<dyn MetadataStore> {
        match self.migration() {
            Some(h) => h.participant.current(),
            None => self.inner.config.store.clone(),
        }
    }

    /// The current metadata migration's record; after the flip (the record
    /// stays in the source store) the one the participant followed to the
    /// target ([`MigratingStore::completed`]), or the last one this node saw;
    /// `None` when there is none.
    ///
    /// # Errors
    ///
    /// [`NodeError::Metadata`] when the store cannot be read or the record
    /// does not decode.
    pub async fn metadata_migration(&self) -> Result<Option<MigrationRecord>, NodeError> {
        // A flip between taking the store in use and reading it closes
        // that store under the read: read again from the one now in use.
        let current = loop {
            let store = self.migration_store();
            match read_current(store.as_ref()).await {
                Err(e)
                    if e.kind() == ErrorKind::Closed
                        && !Arc::ptr_eq(&store, &self.migration_store()) => {}
                r => break r?.map(|(r, _)| r),
            }
        };
        Ok(match (current, self.migration()) {
            (Some(r), Some(h)) => {
                h.remember(&r);
                Some(r)
            }
            (Some(r), None) => Some(r),
            (None, Some(h)) => {
                // After the flip: the record the participant followed, unless
                // this node saw a later one.
                let last = h.seen.last.lock().clone();
                match (h.participant.completed(), last) {
                    (Some(done), Some(last))
                        if last.id != done.id && last.updated_ms > done.updated_ms =>
                    {
                        Some(last)
                    }
                    (Some(done), _) => {
                        h.remember(&done);
                        Some(done)
                    }
                    (None, last) => last,
                }
            }
            (None, None) => None,
        })
    }

    /// Starts moving the metadata store to `target_url`: checks everything
    /// first, writing nothing ([`Coordinator::plan`]: the URL, the overlap
    /// with the source and with the registered bookie clusters' roots, the
    /// target's reachability and content, the wipe named by `wipe_target`,
    /// unfinished switches, canaries and migrations), then takes the start
    /// lock, checks the exclusions again and writes the record. The node
    /// that leads the election runs it from there.
    ///
    /// `wipe_target` confirms the wipe of a non-empty target by naming its
    /// root (`/`, `/pulsar`); [`Node::plan_metadata_migration`] lists what
    /// it deletes.
    ///
    /// # Errors
    ///
    /// - [`NodeError::NoMigrationParticipant`]: this node was started
    ///   without one;
    /// - [`NodeError::MigrationInProgress`]: a migration is unfinished;
    /// - [`NodeError::SwitchUnfinished`]: a bookie-cluster switch or canary
    ///   is unfinished;
    /// - [`NodeError::InvalidMigration`]: the target URL is malformed,
    ///   overlaps the source or a bookie cluster's metadata, holds what a
    ///   migration does not own, or is not empty and the wipe is not
    ///   confirmed by naming its root;
    /// - [`NodeError::Metadata`]: the stores failed (the target cannot be
    ///   reached: retryable).
    ///
    /// Nothing is written when it fails, in the source or the target.
    pub async fn start_metadata_migration(
        &self,
        target_url: &str,
        wipe_target: Option<&str>,
    ) -> Result<MigrationRecord, NodeError> {
        let h = self.migration_participant()?;
        self.refuse_during_migration("start another metadata migration")
            .await?;
        self.refuse_unfinished_switches().await?;
        let plan = self.migration_plan(h, target_url, wipe_target).await?;
        if let Err(e) = plan.check_wipe() {
            plan.close().await;
            return Err(invalid_migration(target_url, e));
        }
        let what = format!("a metadata migration to {target_url}");
        let started = self
            .exclusive_start(&what, async {
                // Again under the lock: a switch started meanwhile is seen.
                if let Err(e) = self.refuse_start_conflicts().await {
                    return Ok(Err(e));
                }
                Ok(plan
                    .start(h.coordinator.clone())
                    .await
                    .map_err(|e| invalid_migration(target_url, e)))
            })
            .await;
        let coordinator = started??;
        let record = coordinator.record().clone();
        h.remember(&record);
        tracing::info!(node = %self.node_id(), migration = %record.id,
            source = %record.source_url, target = %record.target_url,
            wiped = record.wipe_target, "metadata migration started");
        Ok(record)
    }

    /// A dry run of [`start_metadata_migration`](Self::start_metadata_migration):
    /// every check but the wipe's confirmation, and what the target holds
    /// (what a wipe confirmed by naming [`TargetPlan::root`] deletes).
    /// Writes nothing.
    ///
    /// # Errors
    ///
    /// As [`start_metadata_migration`](Self::start_metadata_migration).
    pub async fn plan_metadata_migration(&self, target_url: &str) -> Result<TargetPlan, NodeError> {
        let h = self.migration_participant()?;
        self.refuse_during_migration("start another metadata migration")
            .await?;
        self.refuse_unfinished_switches().await?;
        let plan = self.migration_plan(h, target_url, None).await?;
        let target = plan.target().clone();
        plan.close().await;
        // A target holding what a migration never deletes is refused here
        // too; a plain non-empty one is listed.
        if target.entries.iter().any(|e| !e.deletable) {
            return Err(invalid_migration(
                target_url,
                target.check_wipe(None).expect_err("refused"),
            ));
        }
        Ok(target)
    }

    fn migration_participant(&self) -> Result<&MigrationHandle, NodeError> {
        self.migration()
            .ok_or_else(|| NodeError::NoMigrationParticipant {
                node: self.node_id().to_owned(),
            })
    }

    async fn refuse_start_conflicts(&self) -> Result<(), NodeError> {
        self.refuse_during_migration("start another metadata migration")
            .await?;
        self.refuse_unfinished_switches().await
    }

    /// [`Coordinator::plan`] with the registered bookie clusters' metadata
    /// roots protected. Writes nothing.
    async fn migration_plan(
        &self,
        h: &MigrationHandle,
        target_url: &str,
        wipe_target: Option<&str>,
    ) -> Result<StartPlan, NodeError> {
        if target_url.trim().is_empty() {
            return Err(NodeError::InvalidMigration {
                target_url: target_url.to_owned(),
                reason: "the target URL is empty; name the store to move to (`zk://…` or \
                         `etcd://…`)"
                    .to_owned(),
            });
        }
        let mut protected = Vec::new();
        for c in self.registry().list().await? {
            if let Ok(ClusterUri::ZooKeeper(zk)) = ClusterUri::parse(&c.metadata_service_uri) {
                protected.push(ProtectedRoot {
                    url: format!("{}{}", zk.zk_url(), zk.ledgers_root()),
                    owner: format!("bookie cluster `{}`", c.name),
                });
            }
        }
        let request = MigrationRequest {
            id: None,
            source_url: h.participant.url(),
            target_url: target_url.to_owned(),
            wipe_target: wipe_target.map(str::to_owned),
            protected,
        };
        Coordinator::plan(
            h.participant.current(),
            h.participant.opener().as_ref(),
            request,
        )
        .await
        .map_err(|e| invalid_migration(target_url, e))
    }

    /// Aborts the current metadata migration (any phase before COMPLETED):
    /// writes resume on the source.
    ///
    /// # Errors
    ///
    /// [`NodeError::NoMetadataMigration`] when none is recorded,
    /// [`NodeError::MigrationEnded`] when it has already ended (nothing
    /// written), [`NodeError::Metadata`] when the store failed (a
    /// `BadVersion`: the record changed meanwhile, retry).
    pub async fn abort_metadata_migration(
        &self,
        reason: &str,
    ) -> Result<MigrationRecord, NodeError> {
        let store = self.migration_store();
        match read_current(store.as_ref()).await? {
            // After the flip the record stays in the source store: the one
            // this node followed has ended.
            None => {
                return Err(match self.metadata_migration().await? {
                    Some(rec) => NodeError::MigrationEnded {
                        id: rec.id,
                        phase: phase_name(rec.phase),
                    },
                    None => NodeError::NoMetadataMigration,
                });
            }
            Some((rec, _)) if rec.phase.is_terminal() => {
                return Err(NodeError::MigrationEnded {
                    id: rec.id,
                    phase: phase_name(rec.phase),
                });
            }
            Some(_) => {}
        }
        let record = abort(store.as_ref(), reason).await?;
        if let Some(h) = self.migration() {
            h.remember(&record);
        }
        tracing::warn!(node = %self.node_id(), migration = %record.id,
            "metadata migration aborted");
        Ok(record)
    }

    /// The status document of `record` as this node sees it (paused, the
    /// store it uses), as the REST API answers it.
    pub fn migration_doc(&self, record: &MigrationRecord) -> crate::wire::MigrationStatusDoc {
        let participant = self.migration().map(|h| h.participant());
        crate::wire::MigrationStatusDoc::new(
            record,
            participant.is_some_and(|p| p.is_paused()),
            participant.map(|p| p.url()),
        )
    }

    /// Refuses a migration while the cluster-wide switch or a canary has
    /// not finished (read only).
    async fn refuse_unfinished_switches(&self) -> Result<(), NodeError> {
        let orch = self.orchestrator();
        if let Some(st) = orch.current_status().await? {
            if unfinished(&st) {
                return Err(NodeError::SwitchUnfinished {
                    switch: format!("bookie-cluster switch `{}`", st.switch_id),
                    target: st.target,
                    phase: st.phase.to_string(),
                });
            }
        }
        for prefix in orch.canary_prefixes().await? {
            if let Some(st) = orch.for_prefix(&prefix).current_status().await? {
                if unfinished(&st) {
                    return Err(NodeError::SwitchUnfinished {
                        switch: format!("canary `{}` of `{prefix}`", st.switch_id),
                        target: st.target,
                        phase: st.phase.to_string(),
                    });
                }
            }
        }
        Ok(())
    }
}

/// Tells `session` (the managed ledgers' view of the metadata session) that
/// the session is lost while the participant's write gate is closed, and
/// back when writes reopen.
pub(crate) async fn follow_pause(
    node_id: String,
    mut paused: watch::Receiver<bool>,
    session: Arc<MetadataSession>,
    mut stop: watch::Receiver<bool>,
) {
    let mut lost = false;
    loop {
        let now = *paused.borrow_and_update();
        if now != lost {
            lost = now;
            if now {
                tracing::info!(node = %node_id,
                    "metadata writes paused by the migration: trims and rollovers wait");
                session.on_event(SessionEvent::ConnectionLost);
            } else {
                tracing::info!(node = %node_id, "metadata writes reopened");
                session.on_event(SessionEvent::Reconnected);
            }
        }
        tokio::select! {
            r = paused.changed() => if r.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// While this node leads the switch-coordinator election, runs the current
/// unfinished migration step by step; stops when it loses the lead (the
/// next leader resumes from the record) or the node stops.
pub(crate) async fn coordinate_migrations(node: WeakNode, mut stop: watch::Receiver<bool>) {
    loop {
        let Some(n) = node.upgrade() else { return };
        let Some(h) = n.migration().cloned() else {
            return;
        };
        let leads = n.sync().is_leader();
        let node_id = n.node_id().to_owned();
        drop(n);
        if leads {
            match run_while_leading(&node, &h, &stop).await {
                Ok(()) => {}
                // Aborted by an operator, or another coordinator took over:
                // the next look at the record decides.
                Err(e) if e.kind() == ErrorKind::BadVersion => {
                    tracing::info!(node = %node_id, error = %e,
                        "the metadata migration's record changed under this coordinator");
                }
                Err(e) => tracing::warn!(node = %node_id, error = %e,
                    "running the metadata migration; resumed from its record"),
            }
        }
        tokio::select! {
            () = tokio::time::sleep(h.poll_interval) => {}
            _ = stop.wait_for(|s| *s) => return,
        }
    }
}

/// Resumes the current migration and steps it while this node leads.
async fn run_while_leading(
    node: &WeakNode,
    h: &MigrationHandle,
    stop: &watch::Receiver<bool>,
) -> Result<(), MetadataError> {
    let opener = h.participant.opener();
    let Some(mut coordinator) = Coordinator::resume(
        h.participant.current(),
        opener.as_ref(),
        h.coordinator.clone(),
    )
    .await?
    else {
        return Ok(());
    };
    h.seen.runs.fetch_add(1, Ordering::Relaxed);
    let id = coordinator.record().id.clone();
    tracing::info!(migration = %id, phase = ?coordinator.record().phase,
        "this node leads: running the metadata migration");
    loop {
        let leads = match node.upgrade() {
            Some(n) => n.sync().is_leader(),
            None => false,
        };
        if !leads || *stop.borrow() {
            tracing::info!(migration = %id,
                "no longer the leader: the metadata migration is left to the next one");
            return Ok(());
        }
        let phase = coordinator.step().await?;
        h.seen.steps.fetch_add(1, Ordering::Relaxed);
        h.remember(coordinator.record());
        if phase.is_terminal() {
            tracing::info!(migration = %id, ?phase, "metadata migration ended");
            return Ok(());
        }
        if !h.step_interval.is_zero() {
            tokio::time::sleep(h.step_interval).await;
        }
    }
}
