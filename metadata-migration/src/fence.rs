//! Fencing a coordinator's writes to the target.
//!
//! A coordinator checks its record at the start of every step, but a step
//! makes many writes to the target (a page of the copy, the paths of a
//! catch-up round or of the pause). One stalled in the middle of a step —
//! its process paused, its source store slow to answer, its reads served by
//! a ZooKeeper follower behind the leader — while another coordinator took
//! the migration over and flipped it would otherwise go on copying old
//! source values over the nodes written in the target after the flip, losing
//! acknowledged writes (N23, found by the nemesis).
//!
//! So every coordinator claims a fencing token when it begins or resumes: a
//! write of the node `/admin/metadata-migration/fences/<id>` in the source,
//! whose version is the token. Before it writes to the target after any call
//! to the source (what it writes was computed from those reads), it writes
//! the node again with a compare-and-set on its token. A coordinator that
//! took over claimed a newer token, so the stalled one's compare-and-set
//! fails and it writes nothing more. A write is used, not a read: a read may
//! be served by a ZooKeeper follower that has not seen the other coordinator
//! yet, a conditional write goes through the leader. It costs one write to
//! the source per run of target writes that follows source reads (one per
//! batch of the copy, per catch-up round, per pause).
//!
//! What it cannot fence: a write already sent to the target when the
//! coordinator stalled (it lands later), and a process paused between the
//! compare-and-set and the target write it guards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{
    ExpectedVersion, MetadataError, MetadataStore, MetadataStoreExt, Operation, Result,
};

use crate::record::MIGRATION_ROOT;

/// The fencing node of migration `id`.
pub(crate) fn fence_path(id: &str) -> String {
    format!("{MIGRATION_ROOT}/fences/{id}")
}

/// A coordinator's fencing token (see the [module documentation](self)).
#[derive(Debug)]
pub(crate) struct Fence {
    source: Arc<dyn MetadataStore>,
    path: String,
    /// The version of the fencing node this coordinator wrote last.
    token: tokio::sync::Mutex<i64>,
    /// A call to the source was made since the last compare-and-set.
    read_since: AtomicBool,
}

impl Fence {
    /// Claims the token of migration `id` in `source`: older coordinators'
    /// next compare-and-set fails.
    pub(crate) async fn claim(source: Arc<dyn MetadataStore>, id: &str) -> Result<Arc<Fence>> {
        let path = fence_path(id);
        let stat = source.put(&path, b"", ExpectedVersion::Any).await?;
        Ok(Arc::new(Fence {
            source,
            path,
            token: tokio::sync::Mutex::new(stat.version),
            read_since: AtomicBool::new(true),
        }))
    }

    /// Before a write to the target: the token is still this coordinator's
    /// (checked by a compare-and-set when the source was called since the
    /// last check).
    async fn before_write(&self, call: &Call<'_>) -> Result<()> {
        if !self.read_since.load(Ordering::SeqCst) {
            return Ok(());
        }
        let mut token = self.token.lock().await;
        if !self.read_since.swap(false, Ordering::SeqCst) {
            return Ok(());
        }
        match self
            .source
            .put(&self.path, b"", ExpectedVersion::Exactly(*token))
            .await
        {
            Ok(stat) => {
                *token = stat.version;
                Ok(())
            }
            Err(e) => {
                self.read_since.store(true, Ordering::SeqCst);
                if !e.is_conflict() {
                    return Err(e);
                }
                Err(MetadataError::BadVersion {
                    op: Operation::Put,
                    path: format!(
                        "{} (another coordinator took the migration over, or it ended: this \
                         one writes nothing more to the target; {} of {} refused)",
                        self.path,
                        call.operation(),
                        call.path()
                    ),
                    expected: *token,
                })
            }
        }
    }

    /// Deletes the fencing node (the migration ended).
    pub(crate) async fn remove(source: &dyn MetadataStore, id: &str) {
        let _ = source.delete_recursive(&fence_path(id)).await;
    }
}

/// The source as a coordinator calls it: every call is remembered by the
/// fence.
#[derive(Debug)]
pub(crate) struct TrackedSource {
    source: Arc<dyn MetadataStore>,
    fence: Arc<Fence>,
}

impl TrackedSource {
    pub(crate) fn new(source: Arc<dyn MetadataStore>, fence: Arc<Fence>) -> TrackedSource {
        TrackedSource { source, fence }
    }
}

#[async_trait]
impl Layer for TrackedSource {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.source.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        self.fence.read_since.store(true, Ordering::SeqCst);
        let r = call.run(self.source.as_ref()).await;
        // An answer that arrives late is a read made late: check again.
        self.fence.read_since.store(true, Ordering::SeqCst);
        r
    }
}

/// The target as a coordinator writes it: fenced.
#[derive(Debug)]
pub(crate) struct FencedTarget {
    target: Arc<dyn MetadataStore>,
    fence: Arc<Fence>,
}

impl FencedTarget {
    pub(crate) fn new(target: Arc<dyn MetadataStore>, fence: Arc<Fence>) -> FencedTarget {
        FencedTarget { target, fence }
    }
}

#[async_trait]
impl Layer for FencedTarget {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.target.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        if call.is_write() {
            self.fence.before_write(&call).await?;
        }
        call.run(self.target.as_ref()).await
    }
}
