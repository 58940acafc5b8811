//! [`MetadataSession`]: whether the metadata store's session is up, as the
//! managed ledgers of one factory see it, and what was deferred while it was
//! not (Pulsar's `metadataServiceAvailable`).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use bkswitch_metadata_store::{MetadataStore, Notification, SessionEvent};
use bkswitch_proto::paths::MANAGED_LEDGERS_ROOT;
use futures::StreamExt;

/// Whether the metadata store's session is up, as the managed ledgers of one
/// [`ManagedLedgerFactory`](crate::ManagedLedgerFactory) see it, and how much
/// risky work was deferred while it was not.
///
/// Pulsar's `ManagedLedgerFactoryImpl` keeps `metadataServiceAvailable` from
/// the metadata store's session events (connection or session lost: false;
/// reconnected or session re-established: true), and its managed ledgers do
/// not trim and do not find the current ledger full while it is false. The
/// same here: while the session is lost, a managed ledger of this factory
/// - does not trim ([`ManagedLedger::trim_consumed_ledgers`](crate::ManagedLedger::trim_consumed_ledgers)
///   fails with [`ManagedLedgerError::MetadataSessionLost`](crate::ManagedLedgerError::MetadataSessionLost));
/// - does not roll its data ledger over when it is full or old (appends go on
///   to the current ledger), and a forced
///   [`rollover`](crate::ManagedLedger::rollover) fails the same way;
/// - does not roll a cursor ledger over when it is full or old (positions go
///   on to the current cursor ledger);
/// - is not deleted ([`ManagedLedger::delete`](crate::ManagedLedger::delete)
///   fails with `MetadataSessionLost`, nothing deleted).
///
/// A ledger that failed is still replaced (there is nothing else to write
/// to). Work resumes with the next append, persist or trim once the session
/// is back. The factory follows the store's [`SessionEvent`]s on a watch of
/// the managed-ledger root, from its first [`open`](crate::ManagedLedgerFactory::open).
#[derive(Debug)]
pub struct MetadataSession {
    available: AtomicBool,
    losses: AtomicU64,
    deferred_trims: AtomicU64,
    deferred_rollovers: AtomicU64,
}

impl Default for MetadataSession {
    fn default() -> Self {
        MetadataSession::new()
    }
}

impl MetadataSession {
    /// A session that is up, with nothing deferred.
    pub fn new() -> MetadataSession {
        MetadataSession {
            available: AtomicBool::new(true),
            losses: AtomicU64::new(0),
            deferred_trims: AtomicU64::new(0),
            deferred_rollovers: AtomicU64::new(0),
        }
    }

    /// Whether the session is up: trims and rollovers run.
    pub fn is_available(&self) -> bool {
        self.available.load(Ordering::Acquire)
    }

    /// Applies a session event of the metadata store:
    /// [`ConnectionLost`](SessionEvent::ConnectionLost) and
    /// [`SessionExpired`](SessionEvent::SessionExpired) make the session
    /// unavailable, [`Reconnected`](SessionEvent::Reconnected) and
    /// [`SessionReestablished`](SessionEvent::SessionReestablished) available
    /// again. The factory calls it for every event of its store; an embedder
    /// with its own session listener may call it too.
    pub fn on_event(&self, event: SessionEvent) {
        let available = match event {
            SessionEvent::ConnectionLost | SessionEvent::SessionExpired => false,
            SessionEvent::Reconnected | SessionEvent::SessionReestablished => true,
            // A future event kind changes nothing.
            _ => return,
        };
        let was = self.available.swap(available, Ordering::AcqRel);
        if was && !available {
            self.losses.fetch_add(1, Ordering::Relaxed);
            tracing::warn!(
                ?event,
                "metadata session lost: trims and rollovers are deferred"
            );
        } else if !was && available {
            tracing::info!(?event, "metadata session back: trims and rollovers resume");
        }
    }

    /// How many times the session was lost.
    pub fn losses(&self) -> u64 {
        self.losses.load(Ordering::Relaxed)
    }

    /// Trims refused because the session was lost.
    pub fn deferred_trims(&self) -> u64 {
        self.deferred_trims.load(Ordering::Relaxed)
    }

    /// Data or cursor ledger rollovers put off because the session was lost
    /// (one per append or persist that would have rolled over).
    pub fn deferred_rollovers(&self) -> u64 {
        self.deferred_rollovers.load(Ordering::Relaxed)
    }

    /// Counts a deferred trim.
    pub(crate) fn defer_trim(&self) {
        self.deferred_trims.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts a deferred rollover.
    pub(crate) fn defer_rollover(&self) {
        self.deferred_rollovers.fetch_add(1, Ordering::Relaxed);
    }

    /// Follows the session events of `store` from a task: they arrive on
    /// every watch stream of the store, here one on the managed-ledger root.
    /// The task ends with the stream (the store closed) or at the first
    /// notification after the session was dropped.
    pub(crate) async fn follow(
        self: &Arc<Self>,
        store: &dyn MetadataStore,
    ) -> bkswitch_metadata_store::Result<()> {
        let mut stream = store.watch(MANAGED_LEDGERS_ROOT).await?;
        let session = Arc::downgrade(self);
        tokio::spawn(async move {
            while let Some(n) = stream.next().await {
                let Some(session) = session.upgrade() else {
                    return;
                };
                if let Notification::Session(event) = n {
                    session.on_event(event);
                }
            }
        });
        Ok(())
    }
}
