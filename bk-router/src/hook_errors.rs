//! The [`HookError`]s the routing hooks return: each names the ledger and, when
//! known, the cluster, and says what the operator can do. All cold: none is
//! built on a successful resolve.

use std::time::Duration;

use bkswitch_bk_client::LedgerId;
use bkswitch_mledger_spi::{HookError, HookErrorKind};
use bkswitch_proto::{StampError, Stamped, ATTR_KEY};

use crate::ReadMode;

/// How long [`HookErrorKind::ClusterUnavailable`] errors ask callers to wait.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// The stamp names a cluster that is not registered.
#[cold]
pub(crate) fn unknown_cluster(name: &str, ledger_id: LedgerId) -> HookError {
    HookError::new(
        HookErrorKind::UnknownCluster,
        format!(
            "ledger {ledger_id} is stamped with bookie cluster '{name}', which is not registered; \
             register the cluster (it holds the ledger's data) — the ledger is not read from any \
             other cluster"
        ),
    )
    .with_cluster(name)
    .with_ledger(ledger_id)
}

/// A legacy ledger, and the recorded bootstrap cluster is not registered.
#[cold]
pub(crate) fn unknown_bootstrap(name: &str, ledger_id: LedgerId) -> HookError {
    HookError::new(
        HookErrorKind::UnknownCluster,
        format!(
            "ledger {ledger_id} has no cluster stamp (legacy), so it is on the bootstrap cluster \
             '{name}', which is not registered; register it"
        ),
    )
    .with_cluster(name)
    .with_ledger(ledger_id)
}

/// A legacy ledger, and no bootstrap cluster is recorded.
#[cold]
pub(crate) fn no_bootstrap(ledger_id: LedgerId) -> HookError {
    HookError::new(
        HookErrorKind::Other,
        format!(
            "ledger {ledger_id} has no cluster stamp (legacy) and no bootstrap cluster is \
             recorded; record the bootstrap cluster before reading legacy ledgers"
        ),
    )
    .with_ledger(ledger_id)
}

/// The stamp could not be read.
#[cold]
pub(crate) fn corrupt(e: StampError, ledger_id: LedgerId) -> HookError {
    HookError::new(HookErrorKind::CorruptMetadata, e.to_string()).with_ledger(ledger_id)
}

/// The stamp appears more than once: the full error, from the proto crate's
/// own check.
#[cold]
pub(crate) fn duplicate_stamp<T: Stamped>(info: &T, ledger_id: LedgerId) -> HookError {
    match info.cluster_stamp() {
        Err(e) => corrupt(e, ledger_id),
        Ok(_) => HookError::new(
            HookErrorKind::CorruptMetadata,
            format!("ledger {ledger_id} carries the key {ATTR_KEY} more than once"),
        )
        .with_ledger(ledger_id),
    }
}

/// The read mode (encoded as by [`ReadMode::to_u8`]) refuses the cluster.
#[cold]
pub(crate) fn refused_by_mode(name: &str, ledger_id: LedgerId, mode: u8) -> HookError {
    let mode = ReadMode::from_u8(mode);
    let why = match mode {
        ReadMode::OldClusterOnly => "the active cluster is not read",
        _ => "only the active cluster is read",
    };
    HookError::new(
        HookErrorKind::RefusedByReadMode,
        format!(
            "ledger {ledger_id} is on bookie cluster '{name}' and the read mode is {mode} \
             ({why}); retry after setting the read mode to DUAL_READ"
        ),
    )
    .with_cluster(name)
    .with_ledger(ledger_id)
}

/// An unstamped ledger newer than `lowest`, which was created stamped on the
/// bootstrap cluster ([I17](bkswitch_docs::invariants::I17)).
#[cold]
pub(crate) fn unstamped_after_bootstrap(
    ledger_id: LedgerId,
    lowest: LedgerId,
    bootstrap: String,
) -> HookError {
    HookError::new(
        HookErrorKind::CorruptMetadata,
        format!(
            "ledger {ledger_id} has no cluster stamp but is newer than ledger {lowest}, which \
             was created stamped on the bootstrap cluster '{bootstrap}': it was created after \
             bootstrap by a writer running without the multi-cluster plugin (I17); it is not \
             guessed to be on any cluster — find which cluster holds it and stamp it"
        ),
    )
    .with_cluster(bootstrap)
    .with_ledger(ledger_id)
}

/// The cluster is registered but its client is not started; `starting` says
/// whether a start was begun in the background. Retryable.
#[cold]
pub(crate) fn not_started(name: &str, ledger_id: LedgerId, starting: bool) -> HookError {
    HookError::new(
        HookErrorKind::ClusterUnavailable,
        format!(
            "ledger {ledger_id} is on bookie cluster '{name}', whose client is not started{}; \
             retry in a moment",
            if starting {
                " (starting it now)"
            } else {
                " and cannot be started here (no async runtime)"
            }
        ),
    )
    .with_cluster(name)
    .with_ledger(ledger_id)
    .with_retry_after(RETRY_AFTER)
}
