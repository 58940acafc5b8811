//! What the client's modules share below all of them: the largest ensemble
//! the client handles and the mapping of metadata-store failures to
//! BookKeeper's codes. Depends on nothing else in the crate.

use bkswitch_bk_client::{BkError, BkErrorKind};
use bkswitch_metadata_store::{ErrorKind, MetadataError};

/// The largest ensemble this client handles (acknowledgements are tracked in a
/// 64-bit mask).
pub const MAX_ENSEMBLE_SIZE: u32 = 64;

/// Maps a metadata-store failure to BookKeeper's codes: unreachable or expired
/// → `ZKException` (-9, retryable), closed → `ClientClosed` (-19), anything
/// else → an unexpected condition naming the path.
pub(crate) fn zk_error(cluster: &str, what: &str, e: MetadataError) -> BkError {
    let message = format!("{what}: {e}");
    let err = match e.kind() {
        ErrorKind::Unavailable | ErrorKind::SessionExpired => BkError::from_code(-9, message),
        ErrorKind::Closed => BkError::new(BkErrorKind::ClientClosed, message),
        _ => BkError::new(BkErrorKind::Other, message),
    };
    err.with_cluster(cluster).with_source(e)
}
