//! [`RouterMetrics`]: the counters of a storage and its registry sync.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// Counters of a [`MultiClusterManagedLedgerStorage`](crate::MultiClusterManagedLedgerStorage)
/// and of the [`RegistrySync`](crate::RegistrySync) that follows the registry
/// for it. Plain atomics, read with relaxed ordering; export them as you like.
#[derive(Debug, Default)]
pub struct RouterMetrics {
    /// Switch directives applied (the active cluster switched to the target).
    pub directives_applied: AtomicU64,
    /// Failed attempts to apply a directive (the target's client did not
    /// start); each is retried with backoff.
    pub directive_failures: AtomicU64,
    /// Epoch of the last directive applied (0: none).
    pub last_applied_epoch: AtomicI64,
    /// Unstamped ledgers found to be created after bootstrap ([I17](bkswitch_docs::invariants::I17)
    /// corruption).
    pub unstamped_after_bootstrap: AtomicU64,
    /// Coordinator duties this node took (directives it orchestrates).
    pub coordinator_duties: AtomicU64,
    /// Of those, duties taken over as the leader: the directive had no
    /// origin, or its origin left the election.
    pub coordinator_takeovers: AtomicU64,
    /// Times the registry was read again after a reconnection or a new session.
    pub registry_resyncs: AtomicU64,
}

/// A copy of the [`RouterMetrics`] counters at one instant.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RouterMetricsSnapshot {
    /// See [`RouterMetrics::directives_applied`].
    pub directives_applied: u64,
    /// See [`RouterMetrics::directive_failures`].
    pub directive_failures: u64,
    /// See [`RouterMetrics::last_applied_epoch`].
    pub last_applied_epoch: i64,
    /// See [`RouterMetrics::unstamped_after_bootstrap`].
    pub unstamped_after_bootstrap: u64,
    /// See [`RouterMetrics::coordinator_duties`].
    pub coordinator_duties: u64,
    /// See [`RouterMetrics::coordinator_takeovers`].
    pub coordinator_takeovers: u64,
    /// See [`RouterMetrics::registry_resyncs`].
    pub registry_resyncs: u64,
}

impl RouterMetrics {
    /// The current values.
    pub fn snapshot(&self) -> RouterMetricsSnapshot {
        RouterMetricsSnapshot {
            directives_applied: self.directives_applied.load(Ordering::Relaxed),
            directive_failures: self.directive_failures.load(Ordering::Relaxed),
            last_applied_epoch: self.last_applied_epoch.load(Ordering::Relaxed),
            unstamped_after_bootstrap: self.unstamped_after_bootstrap.load(Ordering::Relaxed),
            coordinator_duties: self.coordinator_duties.load(Ordering::Relaxed),
            coordinator_takeovers: self.coordinator_takeovers.load(Ordering::Relaxed),
            registry_resyncs: self.registry_resyncs.load(Ordering::Relaxed),
        }
    }
}
