//! [`RegistrySync`]: every node follows the registry and the switch directive
//! ([design §3](bkswitch_docs::design), the config watcher).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bkswitch_registry::{
    LeaderElection, Registry, RegistryEvent, RegistryWatcher, SwitchDirective,
};
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;

use crate::{MultiClusterManagedLedgerStorage, ReadMode, RouterError, RouterMetrics};

/// First pause before retrying a directive whose switch failed.
pub const SYNC_RETRY_MIN: Duration = Duration::from_millis(100);
/// Longest pause between retries of a directive whose switch keeps failing.
pub const SYNC_RETRY_MAX: Duration = Duration::from_secs(5);

/// How often an origin-less directive re-checks the election while no leader
/// is known.
const LEADER_POLL: Duration = Duration::from_millis(50);

/// A directive this node must orchestrate (BUILD → PROMOTE → CLEANUP), handed
/// to the orchestrator through [`RegistrySync::take_duties`].
///
/// Of the nodes following one registry, exactly one gets each duty: the node
/// named by the directive's `origin`, or, without an origin, the elected
/// leader. A node that restarts gets the duty of the current directive again
/// when it coordinates it: the orchestrator resumes from its persisted
/// progress ([I6](bkswitch_docs::invariants::I6)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoordinatorDuty {
    /// The directive's epoch.
    pub epoch: i64,
    /// The cluster to switch to.
    pub target: String,
    /// The node that asked for the switch, if named.
    pub origin: Option<String>,
}

/// When this node applied a switch directive: what
/// [`RegistrySync::last_applied`] reports, and what a node's status shows.
///
/// Both instants are milliseconds since the Unix epoch, on the wall clocks of
/// the directive's writer and of this node: on one machine (or with
/// synchronized clocks) `applied_at_ms - written_at_ms` is how long the
/// directive took to become visible here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppliedDirective {
    /// The directive's epoch.
    pub epoch: i64,
    /// The cluster this node switched to.
    pub target: String,
    /// When the directive was written (its `ts`).
    pub written_at_ms: i64,
    /// When this node's active cluster became the target.
    pub applied_at_ms: i64,
}

impl AppliedDirective {
    /// `applied_at_ms - written_at_ms`, never negative.
    pub fn visible_after_ms(&self) -> i64 {
        (self.applied_at_ms - self.written_at_ms).max(0)
    }
}

/// Follows a registry for one [`MultiClusterManagedLedgerStorage`]:
///
/// - a cluster record that appears or changes is registered for routing
///   (DEPRECATED clusters included: old ledgers stay readable); a removed
///   record changes nothing (logged);
/// - a switch directive newer than the last applied one switches the active
///   cluster to its target and sets the read mode to
///   [`ReadMode::DualRead`]. If the target's client cannot start, the old
///   cluster stays active, the failure is counted and the switch retried with
///   backoff ([`SYNC_RETRY_MIN`] doubling up to [`SYNC_RETRY_MAX`]) until it
///   succeeds or a newer directive arrives;
/// - after applying a directive, this node takes the [`CoordinatorDuty`] when
///   the directive's `origin` is this node, or when it has no origin and this
///   node is the elected leader (the election is joined at start).
///
/// Reconnections and session expiries are covered by the registry watcher,
/// which reads the registry again and reports what changed meanwhile.
#[derive(Debug)]
pub struct RegistrySync {
    node_id: String,
    applied: watch::Receiver<i64>,
    overrides_applied: watch::Receiver<i64>,
    last_applied: Arc<Mutex<Option<AppliedDirective>>>,
    duties: Mutex<Option<mpsc::UnboundedReceiver<CoordinatorDuty>>>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
    election: Arc<LeaderElection>,
    metrics: Arc<RouterMetrics>,
}

impl RegistrySync {
    /// Joins the leader election as `node_id`, starts watching `registry` and
    /// applies what it reports to `storage` (the current directive first, if
    /// any). Must be called inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`RouterError::Registry`] when the election cannot be joined (e.g. an
    /// empty node id) or the registry cannot be watched.
    pub async fn start(
        storage: MultiClusterManagedLedgerStorage,
        registry: Registry,
        node_id: &str,
    ) -> Result<RegistrySync, RouterError> {
        let election =
            Arc::new(
                registry
                    .elect(node_id)
                    .await
                    .map_err(|source| RouterError::Registry {
                        operation: format!("joining the leader election as '{node_id}'"),
                        source,
                    })?,
            );
        let watcher = match registry.watch().await {
            Ok(w) => w,
            Err(source) => {
                let _ = election.resign().await;
                return Err(RouterError::Registry {
                    operation: format!("watching the registry at '{}'", registry.root()),
                    source,
                });
            }
        };
        let metrics = storage.metrics();
        let (applied_tx, applied) = watch::channel(0);
        let (overrides_tx, overrides_applied) = watch::channel(0);
        let (duty_tx, duty_rx) = mpsc::unbounded_channel();
        let (stop, stop_rx) = watch::channel(false);
        let last_applied = Arc::new(Mutex::new(None));
        let worker = Worker {
            storage,
            registry,
            node_id: node_id.to_owned(),
            election: election.clone(),
            metrics: metrics.clone(),
            applied: applied_tx,
            applied_record: last_applied.clone(),
            duties: duty_tx,
            last_applied: 0,
            pending: None,
            undecided: None,
            orphan: None,
            overrides: None,
            overrides_applied: overrides_tx,
        };
        let task = tokio::spawn(worker.run(watcher, stop_rx));
        Ok(RegistrySync {
            node_id: node_id.to_owned(),
            applied,
            overrides_applied,
            last_applied,
            duties: Mutex::new(Some(duty_rx)),
            stop,
            task: Mutex::new(Some(task)),
            election,
            metrics,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// The epoch of the last directive applied (0: none yet).
    pub fn applied_epoch(&self) -> i64 {
        *self.applied.borrow()
    }

    /// The last directive this node applied, and when (`None`: none yet).
    pub fn last_applied(&self) -> Option<AppliedDirective> {
        self.last_applied.lock().clone()
    }

    /// A receiver of the applied epoch, to wait for a directive to be applied
    /// (`rx.wait_for(|e| *e >= epoch)`).
    pub fn applied_epoch_watch(&self) -> watch::Receiver<i64> {
        self.applied.clone()
    }

    /// The highest per-prefix override epoch this node applied (0: none yet),
    /// as a watch: what a canary waits for on every node.
    pub fn overrides_applied_watch(&self) -> watch::Receiver<i64> {
        self.overrides_applied.clone()
    }

    /// The stream of duties this node must orchestrate; `Some` once (the
    /// first call takes it). Duties are queued until taken.
    pub fn take_duties(&self) -> Option<mpsc::UnboundedReceiver<CoordinatorDuty>> {
        self.duties.lock().take()
    }

    /// Whether this node is the elected leader now.
    pub fn is_leader(&self) -> bool {
        self.election.is_leader()
    }

    /// The elected leader's node id as last seen, if known.
    pub fn leader(&self) -> Option<String> {
        self.election.leader()
    }

    /// The counters (shared with the storage).
    pub fn metrics(&self) -> Arc<RouterMetrics> {
        self.metrics.clone()
    }

    /// Stops following the registry and leaves the election. Stopping twice is
    /// harmless.
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let task = self.task.lock().take();
        if let Some(task) = task {
            let _ = task.await;
        }
        if let Err(e) = self.election.resign().await {
            tracing::debug!(error = %e, node = %self.node_id, "leaving the leader election");
        }
    }
}

impl Drop for RegistrySync {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.lock().take() {
            task.abort();
        }
    }
}

/// A directive not applied yet, and when to try again.
struct Pending {
    directive: SwitchDirective,
    received: Instant,
    next_at: tokio::time::Instant,
    backoff: Duration,
}

struct Worker {
    storage: MultiClusterManagedLedgerStorage,
    registry: Registry,
    node_id: String,
    election: Arc<LeaderElection>,
    metrics: Arc<RouterMetrics>,
    applied: watch::Sender<i64>,
    applied_record: Arc<Mutex<Option<AppliedDirective>>>,
    duties: mpsc::UnboundedSender<CoordinatorDuty>,
    last_applied: i64,
    pending: Option<Pending>,
    /// An applied origin-less directive waiting for a known leader.
    undecided: Option<SwitchDirective>,
    /// The last applied origin-less directive whose duty this node has not
    /// taken: taken if this node becomes the leader later (the leader that
    /// held it may have lost its session before finishing).
    orphan: Option<SwitchDirective>,
    /// Per-prefix overrides not applied yet, and when to try again.
    overrides: Option<(
        bkswitch_registry::PrefixOverrides,
        tokio::time::Instant,
        Duration,
    )>,
    /// The highest override epoch applied (0: none).
    overrides_applied: watch::Sender<i64>,
}

impl Worker {
    async fn run(mut self, mut watcher: RegistryWatcher, mut stop: watch::Receiver<bool>) {
        loop {
            let retry_at = self.pending.as_ref().map(|p| p.next_at);
            let overrides_at = self.overrides.as_ref().map(|(_, at, _)| *at);
            tokio::select! {
                biased;
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                }
                event = watcher.next_event() => match event {
                    Some(event) => self.on_event(event).await,
                    None => {
                        tracing::info!(node = %self.node_id, "registry watcher ended (store closed)");
                        break;
                    }
                },
                () = sleep_until(retry_at), if retry_at.is_some() => self.attempt().await,
                () = sleep_until(overrides_at), if overrides_at.is_some() => {
                    self.apply_overrides().await;
                }
                () = tokio::time::sleep(LEADER_POLL), if self.undecided.is_some() => {
                    if let Some(d) = self.undecided.take() {
                        self.coordinate(d);
                    }
                }
                () = tokio::time::sleep(LEADER_POLL), if self.orphan.is_some() => {
                    self.adopt_orphan();
                }
            }
        }
    }

    async fn on_event(&mut self, event: RegistryEvent) {
        match event {
            RegistryEvent::ClusterAdded(rec) | RegistryEvent::ClusterChanged(rec) => {
                if let Err(e) = self
                    .storage
                    .add_cluster(&rec.name, &rec.metadata_service_uri)
                {
                    tracing::warn!(
                        cluster = %rec.name,
                        uri = %rec.metadata_service_uri,
                        error = %e,
                        "registry cluster not routable"
                    );
                }
            }
            RegistryEvent::ClusterRemoved(name) => {
                tracing::info!(
                    cluster = %name,
                    "cluster unregistered; it stays routable for ledgers stamped to it"
                );
            }
            RegistryEvent::Directive(d) => {
                let newest = self.pending.as_ref().map_or(self.last_applied, |p| {
                    p.directive.epoch.max(self.last_applied)
                });
                if d.epoch > newest {
                    self.undecided = None;
                    self.pending = Some(Pending {
                        directive: d,
                        received: Instant::now(),
                        next_at: tokio::time::Instant::now(),
                        backoff: SYNC_RETRY_MIN,
                    });
                    self.attempt().await;
                }
            }
            RegistryEvent::Overrides(map) => {
                self.overrides = Some((map, tokio::time::Instant::now(), SYNC_RETRY_MIN));
                self.apply_overrides().await;
            }
            RegistryEvent::Resynced => {
                self.metrics
                    .registry_resyncs
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(node = %self.node_id, "registry read again after reconnection");
            }
            other => tracing::debug!(event = ?other, "registry event ignored"),
        }
    }

    /// Applies the pending per-prefix overrides to the storage (registering
    /// their clusters for routing first); retried with backoff when a
    /// cluster's client does not start. Until then new ledgers of those
    /// prefixes keep the active cluster, which is safe (they are stamped
    /// with it).
    async fn apply_overrides(&mut self) {
        let Some((map, _, backoff)) = self.overrides.take() else {
            return;
        };
        for o in map.values() {
            if !self.storage.clusters().iter().any(|(n, _)| *n == o.cluster) {
                if let Ok(Some(rec)) = self.registry.get(&o.cluster).await {
                    let _ = self
                        .storage
                        .add_cluster(&rec.name, &rec.metadata_service_uri);
                }
            }
        }
        let list: Vec<(String, String)> = map
            .iter()
            .map(|(p, o)| (p.clone(), o.cluster.clone()))
            .collect();
        match self.storage.set_prefix_overrides(&list).await {
            Ok(()) => {
                let epoch = map.values().map(|o| o.epoch).max().unwrap_or(0);
                tracing::info!(node = %self.node_id, overrides = ?list, epoch,
                    "per-prefix overrides applied");
                self.overrides_applied.send_replace(epoch);
            }
            Err(e) => {
                tracing::warn!(node = %self.node_id, error = %e,
                    retry_in_ms = backoff.as_millis() as u64,
                    "per-prefix overrides not applied; retrying");
                let next = (backoff * 2).min(SYNC_RETRY_MAX);
                self.overrides = Some((map, tokio::time::Instant::now() + backoff, next));
            }
        }
    }

    /// Tries to switch to the pending directive's target.
    async fn attempt(&mut self) {
        let Some(p) = self.pending.as_mut() else {
            return;
        };
        let target = p.directive.target.clone();
        if !self.storage.clusters().iter().any(|(n, _)| *n == target) {
            match self.registry.get(&target).await {
                Ok(Some(rec)) => {
                    let _ = self
                        .storage
                        .add_cluster(&rec.name, &rec.metadata_service_uri);
                }
                Ok(None) => {}
                Err(e) => {
                    tracing::debug!(cluster = %target, error = %e, "reading the target's record")
                }
            }
        }
        let swapped = match failpoint_swap(&target) {
            Err(e) => Err(e),
            Ok(()) => self.storage.switch_active_cluster(&target).await,
        };
        match swapped {
            Ok(()) => {
                self.storage.set_read_mode(ReadMode::DualRead);
                let applied_at_ms = now_ms();
                let Some(p) = self.pending.take() else {
                    return;
                };
                let d = p.directive;
                *self.applied_record.lock() = Some(AppliedDirective {
                    epoch: d.epoch,
                    target: d.target.clone(),
                    written_at_ms: d.ts,
                    applied_at_ms,
                });
                self.last_applied = d.epoch;
                self.metrics
                    .directives_applied
                    .fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .last_applied_epoch
                    .store(d.epoch, Ordering::Relaxed);
                let since_written = applied_at_ms.saturating_sub(d.ts);
                tracing::info!(
                    node = %self.node_id,
                    target = %d.target,
                    epoch = d.epoch,
                    origin = d.origin.as_deref().unwrap_or(""),
                    elapsed_ms = p.received.elapsed().as_millis() as u64,
                    since_written_ms = since_written,
                    "switch directive applied"
                );
                let epoch = d.epoch;
                // Duty first, so that a waiter on the applied epoch sees it.
                self.coordinate(d);
                self.applied.send_replace(epoch);
            }
            Err(e) => {
                self.metrics
                    .directive_failures
                    .fetch_add(1, Ordering::Relaxed);
                p.next_at = tokio::time::Instant::now() + p.backoff;
                tracing::warn!(
                    node = %self.node_id,
                    target = %target,
                    epoch = p.directive.epoch,
                    retry_in_ms = p.backoff.as_millis() as u64,
                    error = %e,
                    "switch directive not applied; the active cluster is unchanged, retrying"
                );
                p.backoff = (p.backoff * 2).min(SYNC_RETRY_MAX);
            }
        }
    }

    /// Takes the duty of an applied directive if this node coordinates it:
    /// it is the directive's origin, or there is no origin and it leads.
    /// Otherwise the directive is kept as the orphan, for
    /// [`adopt_orphan`](Self::adopt_orphan).
    fn coordinate(&mut self, d: SwitchDirective) {
        if self.orphan.as_ref().is_some_and(|o| o.epoch < d.epoch) {
            self.orphan = None;
        }
        let mine = match origin_of(&d) {
            Some(origin) => origin == self.node_id,
            None if self.election.is_leader() => true,
            None if self.election.leader().is_none() => {
                // No leader known now (e.g. the connection is lost): decide
                // once the election settles, unless a newer directive comes.
                self.undecided = Some(d);
                return;
            }
            None => false,
        };
        if mine {
            self.take_duty(d);
        } else {
            self.orphan = Some(d);
        }
    }

    /// Takes the orphan's duty when this node leads and the duty has no
    /// other live coordinator: the directive has no origin (the leader that
    /// held it may have lost its session before finishing), or its origin's
    /// candidacy is gone from the election (that node stopped or lost its
    /// session; it may never come back). The switch lease keeps a returning
    /// origin and this node from running the switch at once, and resuming a
    /// switch that finished meanwhile does nothing.
    fn adopt_orphan(&mut self) {
        if !self.election.is_leader() {
            return;
        }
        let Some(d) = self.orphan.as_ref() else {
            return;
        };
        let reason = match origin_of(d) {
            None => "became the leader: taking over the origin-less switch",
            Some(origin) if !self.election.is_candidate(origin) => {
                "the switch's origin left the election: the leader takes its duty over"
            }
            Some(_) => return,
        };
        if let Some(d) = self.orphan.take() {
            tracing::info!(node = %self.node_id, epoch = d.epoch,
                origin = d.origin.as_deref().unwrap_or(""), "{reason}");
            self.metrics
                .coordinator_takeovers
                .fetch_add(1, Ordering::Relaxed);
            self.take_duty(d);
        }
    }

    /// Hands the duty of `d` to this node's coordinator.
    fn take_duty(&mut self, d: SwitchDirective) {
        if self.orphan.as_ref().is_some_and(|o| o.epoch <= d.epoch) {
            self.orphan = None;
        }
        self.metrics
            .coordinator_duties
            .fetch_add(1, Ordering::Relaxed);
        tracing::info!(
            node = %self.node_id,
            target = %d.target,
            epoch = d.epoch,
            "this node coordinates the switch"
        );
        let _ = self.duties.send(CoordinatorDuty {
            epoch: d.epoch,
            target: d.target,
            origin: d.origin,
        });
    }
}

/// The directive's origin node, when it names one.
fn origin_of(d: &SwitchDirective) -> Option<&str> {
    d.origin.as_deref().filter(|o| !o.is_empty())
}

async fn sleep_until(at: Option<tokio::time::Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// Failpoint `sync::swap` (only with the `failpoints` feature): the swap to
/// `target` fails as if its client could not start; the sync retries it.
#[allow(clippy::unnecessary_wraps)]
fn failpoint_swap(target: &str) -> Result<(), RouterError> {
    let _ = target;
    fail::fail_point!("sync::swap", |_| Err(RouterError::InvalidSettings(
        format!("failpoint `sync::swap` injected a fault switching to '{target}'")
    )));
    Ok(())
}
