//! Fencing a metadata write whose answer was lost.
//!
//! A compare-and-set that failed without an answer (connection lost, timed
//! out) may still land later: it can sit in the server's queue, or in a
//! quorum not yet committed, when the caller reads the node back and sees
//! it unchanged. Deleting the ledger that write records would then leave the
//! metadata naming a deleted ledger once it lands (found by the nemesis's
//! late writes). Writing the stored value back, expecting the same version
//! the lost write expected, makes sure it never lands: after that the
//! version has moved past what it expects.

use bkswitch_metadata_store::{ExpectedVersion, MetadataError, MetadataStore};

/// What fencing a lost write did.
#[derive(Debug)]
pub(crate) enum Fence {
    /// The stored value was written back; the lost write can never land.
    /// The node's new version.
    Fenced(i64),
    /// The node changed meanwhile (the lost write may be what changed it):
    /// read it again before deciding anything.
    Moved,
    /// The store failed: nothing is known.
    Failed(MetadataError),
}

/// Writes `stored` back at `path` expecting `version`: the version the lost
/// write expected, and the one the node was read back at.
pub(crate) async fn fence(
    store: &dyn MetadataStore,
    path: &str,
    stored: &[u8],
    version: i64,
) -> Fence {
    match store
        .put_version(path, stored, ExpectedVersion::Exactly(version))
        .await
    {
        Ok(v) => Fence::Fenced(v),
        Err(e) if e.is_conflict() => Fence::Moved,
        Err(e) => Fence::Failed(e),
    }
}
