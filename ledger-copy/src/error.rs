//! [`CopyError`]: why a ledger copy or verification failed.

use bkswitch_bk_client::{BkError, LedgerId};

/// Why [`copy_ledger_preserving_ids`](crate::copy_ledger_preserving_ids) or
/// [`verify_dst_matches_src`](crate::verify_dst_matches_src) failed.
///
/// Cluster-side failures keep the [`BkError`] (with BookKeeper's numeric code);
/// [`is_retryable`](CopyError::is_retryable) says whether running the same copy
/// again later can succeed.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum CopyError {
    /// Opening or reading the source ledger failed, including a source ledger that
    /// does not exist (`NoSuchLedgerExistsOnMetadataServerException`, -25). A partial
    /// destination ledger created by this copy was closed and deleted (best effort).
    #[error("copy of ledger {ledger_id} failed reading the source cluster '{cluster}': {source}")]
    SourceRead {
        /// The ledger being copied.
        ledger_id: LedgerId,
        /// The source cluster.
        cluster: String,
        /// The client error.
        source: BkError,
    },
    /// Creating, writing or closing the destination ledger failed. A partial
    /// destination ledger created by this copy was closed and deleted (best effort:
    /// when the destination is unreachable it may stay, see the crate docs).
    #[error(
        "copy of ledger {ledger_id} failed writing the destination cluster '{cluster}': {source}"
    )]
    DestinationWrite {
        /// The ledger being copied.
        ledger_id: LedgerId,
        /// The destination cluster.
        cluster: String,
        /// The client error.
        source: BkError,
    },
    /// Opening or reading the existing destination ledger during a verification
    /// failed (other than "it does not exist" or "its password/digest differ", which
    /// are reported as a difference).
    #[error(
        "verification of ledger {ledger_id} failed reading the destination cluster '{cluster}': {source}"
    )]
    DestinationRead {
        /// The ledger being verified.
        ledger_id: LedgerId,
        /// The destination cluster.
        cluster: String,
        /// The client error.
        source: BkError,
    },
    /// The destination already holds the ledger id with different content. The
    /// destination ledger was left untouched.
    #[error(
        "ledger {ledger_id} already exists on the destination with different content ({reason}); \
         it was left untouched: if it is a stale or partial copy and no other copy of it is \
         running, delete it on the destination and copy again, otherwise find out which \
         cluster holds the right data"
    )]
    Mismatch {
        /// The ledger being copied.
        ledger_id: LedgerId,
        /// What differs (first difference found).
        reason: String,
    },
    /// The [`on_created`](crate::CopyOptions::on_created) callback refused the
    /// ledger this copy had just created; it was deleted again (best effort) and
    /// nothing else was written.
    #[error(
        "copy of ledger {ledger_id} abandoned: the destination ledger was created but could not \
         be recorded ({reason}); it was deleted again, copy once the cause is fixed"
    )]
    NotRecorded {
        /// The ledger being copied.
        ledger_id: LedgerId,
        /// Why the callback refused.
        reason: String,
    },
    /// The request itself is invalid (negative ledger id, zero window); nothing was
    /// read or written.
    #[error("invalid copy request for ledger {ledger_id}: {reason}; nothing was read or written")]
    InvalidArgument {
        /// The ledger id as given.
        ledger_id: LedgerId,
        /// What is wrong and how to fix it.
        reason: String,
    },
}

impl CopyError {
    /// Whether running the same copy again later can succeed: true for cluster
    /// errors whose [`BkError::is_retryable`] is true (unavailable, timeout); false
    /// for [`Mismatch`](CopyError::Mismatch) and
    /// [`InvalidArgument`](CopyError::InvalidArgument).
    pub fn is_retryable(&self) -> bool {
        match self {
            CopyError::SourceRead { source, .. }
            | CopyError::DestinationWrite { source, .. }
            | CopyError::DestinationRead { source, .. } => source.is_retryable(),
            CopyError::Mismatch { .. } | CopyError::InvalidArgument { .. } => false,
            // Recording is typically a metadata write: worth another try.
            CopyError::NotRecorded { .. } => true,
        }
    }

    /// The ledger the copy was about.
    pub fn ledger_id(&self) -> LedgerId {
        match self {
            CopyError::SourceRead { ledger_id, .. }
            | CopyError::DestinationWrite { ledger_id, .. }
            | CopyError::DestinationRead { ledger_id, .. }
            | CopyError::Mismatch { ledger_id, .. }
            | CopyError::NotRecorded { ledger_id, .. }
            | CopyError::InvalidArgument { ledger_id, .. } => *ledger_id,
        }
    }

    /// The client error behind a cluster failure, if any.
    pub fn bk_error(&self) -> Option<&BkError> {
        match self {
            CopyError::SourceRead { source, .. }
            | CopyError::DestinationWrite { source, .. }
            | CopyError::DestinationRead { source, .. } => Some(source),
            CopyError::Mismatch { .. }
            | CopyError::NotRecorded { .. }
            | CopyError::InvalidArgument { .. } => None,
        }
    }
}
