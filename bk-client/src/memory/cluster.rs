//! In-memory bookie clusters: ledgers, id generator, settings and fault knobs.

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::watch;

use super::ledger::{Completions, LedgerCell};
use crate::error::{BkError, BkErrorKind, Result};
use crate::types::{DeleteMissing, EntryId, LedgerId, LedgerMetadata};

/// How an unavailable cluster behaves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UnavailableMode {
    /// Every operation fails at once with the retryable
    /// [`Unavailable`](BkErrorKind::Unavailable) error (-8).
    FailFast,
    /// Operations wait until the cluster is available again; with an operation
    /// timeout ([`MemoryCluster::set_operation_timeout`]) they fail with the
    /// retryable [`Timeout`](BkErrorKind::Timeout) error (-23) when it expires,
    /// without one they wait forever (so callers can test their own timeouts).
    Hang,
}

/// Kinds of cluster operations, for latency injection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum OpKind {
    /// `create_ledger` / `create_ledger_adv`.
    Create,
    /// `open_ledger` / `open_ledger_no_recovery`.
    Open,
    /// `add_entry` / `add_entry_at` (the write reaching the bookies).
    Add,
    /// `read_entries` / `read_unconfirmed`.
    Read,
    /// `read_last_add_confirmed`.
    ReadLac,
    /// Closing a write handle (the metadata seal).
    Close,
    /// `delete_ledger`.
    Delete,
}

impl OpKind {
    const ALL: [OpKind; 7] = [
        OpKind::Create,
        OpKind::Open,
        OpKind::Add,
        OpKind::Read,
        OpKind::ReadLac,
        OpKind::Close,
        OpKind::Delete,
    ];

    fn index(self) -> usize {
        match self {
            OpKind::Create => 0,
            OpKind::Open => 1,
            OpKind::Add => 2,
            OpKind::Read => 3,
            OpKind::ReadLac => 4,
            OpKind::Close => 5,
            OpKind::Delete => 6,
        }
    }

    fn name(self) -> &'static str {
        match self {
            OpKind::Create => "create",
            OpKind::Open => "open",
            OpKind::Add => "add",
            OpKind::Read => "read",
            OpKind::ReadLac => "read last add confirmed",
            OpKind::Close => "close",
            OpKind::Delete => "delete",
        }
    }
}

/// Where re-creating a fenced-then-deleted ledger id fails (see
/// [`MemoryCluster::fail_fenced_recreates`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FencedRecreateFailure {
    /// `create_ledger_adv` itself fails with `LedgerFencedException` (-101) and
    /// creates nothing.
    #[default]
    OnCreate,
    /// `create_ledger_adv` succeeds (the metadata is new) but the first add fails with
    /// -101 because the bookies still hold the fence, as real bookies do until their
    /// garbage collector forgets the old ledger. The writer is then closed for adds.
    OnFirstAdd,
}

/// Settings of a [`MemoryCluster`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryClusterConfig {
    /// Number of bookies (default 3). Ensembles larger than this fail with
    /// `NotEnoughBookiesException` (-6).
    pub bookies: usize,
    /// What deleting a missing ledger does (default [`DeleteMissing::Succeed`]).
    pub delete_missing: DeleteMissing,
    /// Whether opens ignore the requested digest type and use the stored one
    /// (default true, as Pulsar configures its clients). When false a mismatch fails
    /// with `DigestMatchException` (-5).
    pub digest_autodetection: bool,
    /// Timeout of operations waiting on a [`UnavailableMode::Hang`] cluster
    /// (default none: wait forever).
    pub operation_timeout: Option<Duration>,
}

impl Default for MemoryClusterConfig {
    fn default() -> Self {
        MemoryClusterConfig {
            bookies: 3,
            delete_missing: DeleteMissing::Succeed,
            digest_autodetection: true,
            operation_timeout: None,
        }
    }
}

impl MemoryClusterConfig {
    /// Set the number of bookies.
    pub fn with_bookies(mut self, bookies: usize) -> Self {
        self.bookies = bookies;
        self
    }

    /// Set what deleting a missing ledger does.
    pub fn with_delete_missing(mut self, delete_missing: DeleteMissing) -> Self {
        self.delete_missing = delete_missing;
        self
    }

    /// Turn digest autodetection on or off.
    pub fn with_digest_autodetection(mut self, on: bool) -> Self {
        self.digest_autodetection = on;
        self
    }

    /// Set the timeout of operations on a hanging cluster.
    pub fn with_operation_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.operation_timeout = timeout;
        self
    }
}

/// See [`ClusterInner::add_plan`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AddPlan {
    Immediate,
    FailFast,
    Deferred(Duration),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Available,
    Unavailable(UnavailableMode),
}

#[derive(Debug)]
struct FaultState {
    unavailable: Option<UnavailableMode>,
    latency: [Duration; 7],
    operation_timeout: Option<Duration>,
}

impl FaultState {
    fn any_active(&self) -> bool {
        self.unavailable.is_some() || self.latency.iter().any(|d| !d.is_zero())
    }
}

#[derive(Debug)]
struct Faults {
    /// Fast path: false when no fault or latency is configured.
    active: AtomicBool,
    state: Mutex<FaultState>,
    health: watch::Sender<Health>,
}

/// Ledger registry and id generator of a cluster.
#[derive(Debug)]
pub(crate) struct Registry {
    pub(crate) next_id: LedgerId,
    pub(crate) ledgers: HashMap<LedgerId, Arc<LedgerCell>>,
    pub(crate) fenced_then_deleted: HashSet<LedgerId>,
    pub(crate) fenced_recreates: u32,
    pub(crate) fenced_recreate_failure: FencedRecreateFailure,
    pub(crate) delete_missing: DeleteMissing,
}

/// Shared state of one cluster. Lock order: `registry` before a ledger's lock, never
/// the reverse; no lock is held across an await.
#[derive(Debug)]
pub(crate) struct ClusterInner {
    pub(crate) name: String,
    pub(crate) bookies: Vec<String>,
    pub(crate) digest_autodetection: bool,
    pub(crate) registry: Mutex<Registry>,
    faults: Faults,
}

impl ClusterInner {
    /// An error of `kind` located on this cluster (and ledger, when given).
    pub(crate) fn err(
        &self,
        kind: BkErrorKind,
        ledger: Option<LedgerId>,
        message: impl Into<String>,
    ) -> BkError {
        let e = BkError::new(kind, message).with_cluster(self.name.clone());
        match ledger {
            Some(id) => e.with_ledger(id),
            None => e,
        }
    }

    /// Whether any fault or latency is configured (cheap).
    pub(crate) fn faults_active(&self) -> bool {
        self.faults.active.load(Ordering::Acquire)
    }

    /// How an add issued now must proceed: fail at once (fail-fast), wait for the
    /// cluster and/or its latency in the background (`Some(latency)`), or be stored
    /// immediately (`None`).
    pub(crate) fn add_plan(&self) -> AddPlan {
        if !self.faults_active() {
            return AddPlan::Immediate;
        }
        let s = self.faults.state.lock();
        let latency = s.latency[OpKind::Add.index()];
        match s.unavailable {
            Some(UnavailableMode::FailFast) => AddPlan::FailFast,
            Some(UnavailableMode::Hang) => AddPlan::Deferred(latency),
            None if !latency.is_zero() => AddPlan::Deferred(latency),
            None => AddPlan::Immediate,
        }
    }

    pub(crate) fn unavailable_error(&self, op: OpKind, ledger: Option<LedgerId>) -> BkError {
        self.err(
            BkErrorKind::Unavailable,
            ledger,
            format!("{} failed: the bookie cluster cannot be reached", op.name()),
        )
    }

    /// Apply the configured faults to one operation: fail fast, wait while the
    /// cluster hangs (up to the operation timeout), then sleep the injected latency.
    pub(crate) async fn gate(&self, op: OpKind, ledger: Option<LedgerId>) -> Result<()> {
        if !self.faults_active() {
            return Ok(());
        }
        let latency = self.latency(op);
        self.gate_with_latency(op, ledger, latency).await
    }

    fn latency(&self, op: OpKind) -> Duration {
        self.faults.state.lock().latency[op.index()]
    }

    /// [`gate`](Self::gate) with a latency fixed earlier (adds take theirs at call
    /// time, when their ordering slot is taken).
    pub(crate) async fn gate_with_latency(
        &self,
        op: OpKind,
        ledger: Option<LedgerId>,
        latency: Duration,
    ) -> Result<()> {
        let (unavailable, timeout) = {
            let s = self.faults.state.lock();
            (s.unavailable, s.operation_timeout)
        };
        match unavailable {
            Some(UnavailableMode::FailFast) => return Err(self.unavailable_error(op, ledger)),
            Some(UnavailableMode::Hang) => self.wait_available(op, ledger, timeout).await?,
            None => {}
        }
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        Ok(())
    }

    async fn wait_available(
        &self,
        op: OpKind,
        ledger: Option<LedgerId>,
        timeout: Option<Duration>,
    ) -> Result<()> {
        let mut rx = self.faults.health.subscribe();
        let wait = async {
            loop {
                let health = *rx.borrow_and_update();
                match health {
                    Health::Available => return Ok(()),
                    Health::Unavailable(UnavailableMode::FailFast) => {
                        return Err(self.unavailable_error(op, ledger))
                    }
                    Health::Unavailable(UnavailableMode::Hang) => {
                        if rx.changed().await.is_err() {
                            return Err(self.unavailable_error(op, ledger));
                        }
                    }
                }
            }
        };
        match timeout {
            None => wait.await,
            Some(t) => match tokio::time::timeout(t, wait).await {
                Ok(r) => r,
                Err(_) => Err(self.err(
                    BkErrorKind::Timeout,
                    ledger,
                    format!(
                        "{} timed out after {t:?}: the bookie cluster is not responding",
                        op.name()
                    ),
                )),
            },
        }
    }

    /// Look up a live ledger.
    pub(crate) fn ledger(&self, ledger_id: LedgerId) -> Option<Arc<LedgerCell>> {
        self.registry.lock().ledgers.get(&ledger_id).cloned()
    }

    /// The ensemble of a new ledger: `size` bookies, rotated by ledger id.
    pub(crate) fn ensemble_for(&self, ledger_id: LedgerId, size: usize) -> Vec<String> {
        let n = self.bookies.len();
        let start = ledger_id.rem_euclid(n.max(1) as i64) as usize;
        (0..size)
            .map(|i| self.bookies[(start + i) % n].clone())
            .collect()
    }
}

/// An in-process BookKeeper cluster that follows BookKeeper's ledger semantics
/// ([formats §4](bkswitch_docs::formats)), with test knobs: id generator control, delete
/// behaviour, unavailability, latency and fenced re-creation.
///
/// Cheap to clone (a shared handle). Clients are [`MemoryBookKeeper`](super::MemoryBookKeeper)s from
/// [`client`](MemoryCluster::client); several clients of one cluster see the same
/// ledgers, so a recovery open by one fences another's writer.
///
/// Faults use tokio's clock, so tests may run with paused time.
#[derive(Clone)]
pub struct MemoryCluster {
    pub(crate) inner: Arc<ClusterInner>,
}

impl fmt::Debug for MemoryCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryCluster")
            .field("name", &self.inner.name)
            .field("bookies", &self.inner.bookies.len())
            .finish_non_exhaustive()
    }
}

impl MemoryCluster {
    /// A new cluster with the default settings (3 bookies, delete of a missing ledger
    /// succeeds, digest autodetection, no operation timeout).
    pub fn new(name: impl Into<String>) -> MemoryCluster {
        MemoryCluster::with_config(name, MemoryClusterConfig::default())
    }

    /// A new cluster with the given settings.
    pub fn with_config(name: impl Into<String>, config: MemoryClusterConfig) -> MemoryCluster {
        let name = name.into();
        let bookies = (0..config.bookies)
            .map(|i| format!("{name}-bookie-{i}:3181"))
            .collect();
        let (health, _) = watch::channel(Health::Available);
        MemoryCluster {
            inner: Arc::new(ClusterInner {
                bookies,
                digest_autodetection: config.digest_autodetection,
                registry: Mutex::new(Registry {
                    next_id: 0,
                    ledgers: HashMap::new(),
                    fenced_then_deleted: HashSet::new(),
                    fenced_recreates: 0,
                    fenced_recreate_failure: FencedRecreateFailure::OnCreate,
                    delete_missing: config.delete_missing,
                }),
                faults: Faults {
                    active: AtomicBool::new(false),
                    state: Mutex::new(FaultState {
                        unavailable: None,
                        latency: [Duration::ZERO; 7],
                        operation_timeout: config.operation_timeout,
                    }),
                    health,
                },
                name,
            }),
        }
    }

    /// The cluster name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// Addresses of the cluster's bookies.
    pub fn bookies(&self) -> &[String] {
        &self.inner.bookies
    }

    // ----- settings -----

    /// What deleting a missing ledger does.
    pub fn delete_missing(&self) -> DeleteMissing {
        self.inner.registry.lock().delete_missing
    }

    /// Change what deleting a missing ledger does.
    pub fn set_delete_missing(&self, behaviour: DeleteMissing) {
        self.inner.registry.lock().delete_missing = behaviour;
    }

    // ----- id generator -----

    /// The id the next `create_ledger` will try (ids start at 0, like BookKeeper's
    /// ZooKeeper id generator).
    pub fn next_ledger_id(&self) -> LedgerId {
        self.inner.registry.lock().next_id
    }

    /// Move the id generator forward so the next `create_ledger` tries `next`.
    ///
    /// # Errors
    /// `next` below the current next id → [`InvalidArgument`](BkErrorKind::InvalidArgument)
    /// (-14): ids below it may already be in use and an id generator never goes back.
    pub fn advance_ledger_id_to(&self, next: LedgerId) -> Result<()> {
        let mut reg = self.inner.registry.lock();
        if next < reg.next_id {
            return Err(self.inner.err(
                BkErrorKind::InvalidArgument,
                None,
                format!(
                    "refusing to move the ledger id generator backwards from {} to {next}; \
                     ids below {} may already be in use, pass a value >= {}",
                    reg.next_id, reg.next_id, reg.next_id
                ),
            ));
        }
        reg.next_id = next;
        Ok(())
    }

    // ----- faults -----

    /// Make the cluster unavailable in the given mode (until
    /// [`set_available`](MemoryCluster::set_available) or
    /// [`restore`](MemoryCluster::restore)).
    pub fn set_unavailable(&self, mode: UnavailableMode) {
        self.update_faults(|s| s.unavailable = Some(mode));
    }

    /// Make the cluster available again (waiting operations proceed); latency
    /// injection is kept.
    pub fn set_available(&self) {
        self.update_faults(|s| s.unavailable = None);
    }

    /// The current unavailability mode, if any.
    pub fn unavailable_mode(&self) -> Option<UnavailableMode> {
        self.inner.faults.state.lock().unavailable
    }

    /// Delay every operation of kind `op` by `delay` (`Duration::ZERO` removes it).
    pub fn set_latency(&self, op: OpKind, delay: Duration) {
        self.update_faults(|s| s.latency[op.index()] = delay);
    }

    /// Delay every operation by `delay`.
    pub fn set_latency_all(&self, delay: Duration) {
        self.update_faults(|s| {
            for op in OpKind::ALL {
                s.latency[op.index()] = delay;
            }
        });
    }

    /// Remove all injected latency.
    pub fn clear_latency(&self) {
        self.update_faults(|s| s.latency = [Duration::ZERO; 7]);
    }

    /// Back to healthy: available and without injected latency.
    pub fn restore(&self) {
        self.update_faults(|s| {
            s.unavailable = None;
            s.latency = [Duration::ZERO; 7];
        });
    }

    /// Set the timeout of operations on a hanging cluster (`None`: wait forever).
    pub fn set_operation_timeout(&self, timeout: Option<Duration>) {
        self.update_faults(|s| s.operation_timeout = timeout);
    }

    /// The timeout of operations on a hanging cluster.
    pub fn operation_timeout(&self) -> Option<Duration> {
        self.inner.faults.state.lock().operation_timeout
    }

    fn update_faults(&self, change: impl FnOnce(&mut FaultState)) {
        let faults = &self.inner.faults;
        let mut s = faults.state.lock();
        change(&mut s);
        faults.active.store(s.any_active(), Ordering::Release);
        let health = match s.unavailable {
            Some(mode) => Health::Unavailable(mode),
            None => Health::Available,
        };
        faults.health.send_if_modified(|h| {
            let changed = *h != health;
            *h = health;
            changed
        });
    }

    /// Make the next `count` `create_ledger_adv` calls whose id was fenced (by a
    /// recovery open) and then deleted fail with `LedgerFencedException` (-101), as
    /// real bookies do while they still remember the fence. `count = 0` turns it off.
    pub fn fail_fenced_recreates(&self, count: u32, failure: FencedRecreateFailure) {
        let mut reg = self.inner.registry.lock();
        reg.fenced_recreates = count;
        reg.fenced_recreate_failure = failure;
    }

    /// How many fenced re-creations are still set to fail.
    pub fn fenced_recreates_remaining(&self) -> u32 {
        self.inner.registry.lock().fenced_recreates
    }

    // ----- introspection -----

    /// Ids of all ledgers, ascending.
    pub fn ledger_ids(&self) -> Vec<LedgerId> {
        let mut ids: Vec<_> = self.inner.registry.lock().ledgers.keys().copied().collect();
        ids.sort_unstable();
        ids
    }

    /// Whether the ledger exists.
    pub fn contains_ledger(&self, ledger_id: LedgerId) -> bool {
        self.inner.registry.lock().ledgers.contains_key(&ledger_id)
    }

    /// The ledger's metadata as stored, if it exists.
    pub fn ledger_metadata(&self, ledger_id: LedgerId) -> Option<LedgerMetadata> {
        let cell = self.inner.ledger(ledger_id)?;
        let d = cell.data.lock();
        Some(d.metadata.clone())
    }

    /// Number of entries stored on the bookies (including unconfirmed ones above a
    /// gap), if the ledger exists.
    pub fn entry_count(&self, ledger_id: LedgerId) -> Option<u64> {
        let cell = self.inner.ledger(ledger_id)?;
        let d = cell.data.lock();
        Some((d.entries.len() + d.ahead.len()) as u64)
    }

    /// The ledger's last add confirmed as the bookies know it, if it exists.
    pub fn last_add_confirmed(&self, ledger_id: LedgerId) -> Option<EntryId> {
        let cell = self.inner.ledger(ledger_id)?;
        let d = cell.data.lock();
        Some(d.lac)
    }

    /// The stored bytes of one entry (below or above a gap), as the bookies
    /// hold them: `None` when the ledger or the entry is not there, or every
    /// bookie of its write set lost its copy. A checker
    /// reads what was acknowledged straight off the cluster with this.
    pub fn entry(&self, ledger_id: LedgerId, entry_id: EntryId) -> Option<Bytes> {
        let cell = self.inner.ledger(ledger_id)?;
        let d = cell.data.lock();
        if d.first_lost(entry_id, entry_id).is_some() {
            return None; // every copy lost
        }
        usize::try_from(entry_id)
            .ok()
            .and_then(|i| d.entries.get(i).cloned())
            .or_else(|| d.ahead.get(&entry_id).cloned())
    }

    /// Replaces the stored bytes of one entry behind every client's back (a
    /// corrupted replica, for checkers' self-tests); returns whether the entry
    /// was there.
    pub fn replace_entry(&self, ledger_id: LedgerId, entry_id: EntryId, data: Bytes) -> bool {
        let Some(cell) = self.inner.ledger(ledger_id) else {
            return false;
        };
        let mut d = cell.data.lock();
        if let Some(slot) = usize::try_from(entry_id)
            .ok()
            .and_then(|i| d.entries.get_mut(i))
        {
            *slot = data;
            return true;
        }
        match d.ahead.get_mut(&entry_id) {
            Some(slot) => {
                *slot = data;
                true
            }
            None => false,
        }
    }

    /// Whether a recovery open fenced the ledger, if it exists.
    pub fn is_fenced(&self, ledger_id: LedgerId) -> Option<bool> {
        let cell = self.inner.ledger(ledger_id)?;
        let d = cell.data.lock();
        Some(d.fenced)
    }

    /// Whether the id belonged to a ledger that was fenced and then deleted.
    pub fn was_fenced_then_deleted(&self, ledger_id: LedgerId) -> bool {
        self.inner
            .registry
            .lock()
            .fenced_then_deleted
            .contains(&ledger_id)
    }

    /// Delete a ledger directly (no client, no faults); returns whether it existed.
    pub fn remove_ledger(&self, ledger_id: LedgerId) -> bool {
        let mut done = Completions::default();
        let existed = {
            let mut reg = self.inner.registry.lock();
            remove_locked(&mut reg, &self.inner.name, ledger_id, &mut done)
        };
        done.fire();
        existed
    }
}

/// Remove a ledger under the registry lock; pending adds go to `done`.
pub(crate) fn remove_locked(
    reg: &mut Registry,
    cluster: &str,
    ledger_id: LedgerId,
    done: &mut Completions,
) -> bool {
    match reg.ledgers.remove(&ledger_id) {
        None => false,
        Some(cell) => {
            let mut d = cell.data.lock();
            if d.fenced {
                reg.fenced_then_deleted.insert(ledger_id);
            }
            d.mark_deleted(done, cluster);
            true
        }
    }
}

/// A set of named in-memory clusters, e.g. behind a
/// [`MemoryClientFactory`](super::MemoryClientFactory). Cheap to clone (shared).
#[derive(Clone, Default)]
pub struct MemoryClusters {
    clusters: Arc<Mutex<HashMap<String, MemoryCluster>>>,
    defaults: MemoryClusterConfig,
}

impl fmt::Debug for MemoryClusters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryClusters")
            .field("names", &self.names())
            .finish_non_exhaustive()
    }
}

impl MemoryClusters {
    /// An empty set; clusters created on demand get the default settings.
    pub fn new() -> MemoryClusters {
        MemoryClusters::default()
    }

    /// An empty set whose clusters created on demand get `defaults`.
    pub fn with_defaults(defaults: MemoryClusterConfig) -> MemoryClusters {
        MemoryClusters {
            clusters: Arc::default(),
            defaults,
        }
    }

    /// The cluster called `name`, created on first use.
    pub fn get_or_create(&self, name: &str) -> MemoryCluster {
        self.clusters
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| MemoryCluster::with_config(name, self.defaults.clone()))
            .clone()
    }

    /// The cluster called `name`, created with `config` on first use (an existing
    /// cluster keeps its settings).
    pub fn get_or_create_with(&self, name: &str, config: MemoryClusterConfig) -> MemoryCluster {
        self.clusters
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| MemoryCluster::with_config(name, config))
            .clone()
    }

    /// The cluster called `name`, if it exists.
    pub fn get(&self, name: &str) -> Option<MemoryCluster> {
        self.clusters.lock().get(name).cloned()
    }

    /// Names of all clusters, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<_> = self.clusters.lock().keys().cloned().collect();
        names.sort();
        names
    }
}
