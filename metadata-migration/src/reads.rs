//! Reads through a [`MigratingStore`]: on the store in use, and never an
//! answer of the source that a participant ahead of this one changed in the
//! target already.
//!
//! Participants learn of a completed migration one after the other. One that
//! moved writes in the target at once, while another, paused in the source
//! until it reads the record, would still answer reads from the source: a
//! node the first one deleted comes back, a value it changed goes back
//! (found by the linearizability nemesis, seed 7 of
//! `migrating_stores_stay_linearizable_across_the_flip`). So a read made while
//! the participant is paused checks the migration's record after it read the
//! source; when the record says completed, the participant moves first and
//! reads again on the target. This is linearizable because the source is
//! frozen while anybody is paused: the coordinator writes COMPLETED only once
//! every participant acknowledged the pause, so the answer of a read that
//! found the record not completed yet was the state of the metadata when the
//! record was read. It costs one read of the record per read in the pause,
//! and nothing outside it.

use std::future::Future;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bkswitch_metadata_store::{ErrorKind, MetadataStore, Operation, Result};

use crate::participant::{paused_error, MigratingStore};
use crate::record::{is_control_path, read_current, read_record, Phase};

impl MigratingStore {
    /// The migration this participant is paused in, when it is.
    fn paused_in(&self) -> Option<Option<String>> {
        let st = self.inner.state.lock();
        st.paused.as_ref().map(|_| st.tracking.clone())
    }

    /// Runs `read` of `path` on the store in use (see the [module
    /// documentation](self)).
    pub(crate) async fn read<T, F, Fut>(&self, op: Operation, path: &str, read: F) -> Result<T>
    where
        F: Fn(Arc<dyn MetadataStore>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        loop {
            let store = self.current();
            let paused = if is_control_path(path) {
                None
            } else {
                self.paused_in()
            };
            let r = self.read_current(&read).await?;
            let Some(tracking) = paused else {
                return Ok(r);
            };
            if !Arc::ptr_eq(&store, &self.current()) {
                // It moved during the read: read again on the target.
                continue;
            }
            let rec = match &tracking {
                Some(id) => read_record(store.as_ref(), id).await,
                None => read_current(store.as_ref()).await,
            };
            if !Arc::ptr_eq(&store, &self.current()) {
                continue;
            }
            match rec? {
                Some((rec, _)) if rec.phase == Phase::Completed && rec.target_url != self.url() => {
                    self.reconcile().await?;
                    if Arc::ptr_eq(&store, &self.current()) {
                        return Err(paused_error(
                            op,
                            path,
                            &format!(
                                "migration {} to {} completed and this participant has not \
                                 moved to the target yet",
                                rec.id, rec.target_url
                            ),
                        ));
                    }
                }
                _ => return Ok(r),
            }
        }
    }

    /// Runs a read on the store in use. A read that began on the source just
    /// before a flip and met it closed (the participant closes the source once
    /// it moved) is read again on the target: the flip is not the caller's
    /// failure. Writes are never repeated this way.
    async fn read_current<T, F, Fut>(&self, read: &F) -> Result<T>
    where
        F: Fn(Arc<dyn MetadataStore>) -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        loop {
            let store = self.current();
            match read(store.clone()).await {
                Err(e)
                    if e.kind() == ErrorKind::Closed
                        && !self.inner.closed.load(Ordering::Acquire)
                        && !Arc::ptr_eq(&store, &self.current()) =>
                {
                    continue
                }
                r => return r,
            }
        }
    }
}
