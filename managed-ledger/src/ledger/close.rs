//! How a managed ledger stops: terminate (seal and record the last position),
//! close (seal, no metadata write) and delete (every ledger through the S2
//! resolver, [I15](bkswitch_docs::invariants::I15), every cursor, then the
//! metadata).

use bkswitch_metadata_store::{ErrorKind, ExpectedVersion};

use super::metadata::replace_ledger_info;
use super::state::{MlInner, Status};
use crate::error::{FenceCause, ManagedLedgerError, Result};
use crate::position::Position;

impl MlInner {
    /// Terminates (see [`ManagedLedger::terminate`](super::ManagedLedger::terminate)).
    pub(super) async fn terminate(&self) -> Result<Position> {
        let mut w = self.writer.lock().await;
        if let Status::Terminated(p) = self.state.lock().status {
            return Ok(p);
        }
        self.check_writable()?;
        self.settle_unknown_write(&mut w).await?;
        let now = self.ctx.now();
        self.finish_current(&mut w, now).await?;
        let (mut info, version, lc) = {
            let s = self.state.lock();
            (s.info.clone(), s.version, s.last_confirmed)
        };
        if let Some(li) = &w.closed_unrecorded {
            replace_ledger_info(&mut info, li.clone());
        }
        info.terminated_position = Some(lc.to_nested());
        let new_version = self.write_info(&info, version).await?;
        w.closed_unrecorded = None;
        let mut s = self.state.lock();
        s.info = info;
        s.version = new_version;
        s.status = Status::Terminated(lc);
        tracing::info!(managed_ledger = %self.ctx.name, position = %lc, "terminated");
        Ok(lc)
    }

    /// Closes (see [`ManagedLedger::close`](super::ManagedLedger::close)).
    pub(super) async fn close(&self) -> Result<()> {
        let mut w = self.writer.lock().await;
        let cursors: Vec<_> = self.cursors.lock().values().cloned().collect();
        for c in cursors {
            c.close().await;
        }
        let result = match w.current.take() {
            Some(mut c) => {
                if let Some(f) = c.last_add.take() {
                    let _ = f.await;
                }
                c.handle.close().await.map_err(|e| {
                    ManagedLedgerError::client(
                        format!(
                            "sealing ledger {} while closing managed ledger '{}'",
                            c.id, self.ctx.name
                        ),
                        e,
                    )
                })
            }
            None => Ok(()),
        };
        {
            let mut s = self.state.lock();
            s.current = None;
            if !matches!(s.status, Status::Deleted) {
                s.status = Status::Closed;
            }
        }
        self.read_handles.lock().clear();
        result
    }

    /// Deletes (see [`ManagedLedger::delete`](super::ManagedLedger::delete)).
    pub(super) async fn delete(&self) -> Result<()> {
        // Its ledgers would be gone while the metadata still names them.
        if !self.ctx.session.is_available() {
            tracing::info!(managed_ledger = %self.ctx.name,
                "delete refused: the metadata session is lost");
            return Err(ManagedLedgerError::MetadataSessionLost {
                name: self.ctx.name.clone(),
                deferred: "deleting the managed ledger",
            });
        }
        let mut w = self.writer.lock().await;
        if let Some(mut c) = w.current.take() {
            if let Some(f) = c.last_add.take() {
                let _ = f.await;
            }
            let _ = c.handle.close().await;
        }
        let cursors: Vec<_> = {
            let mut map = self.cursors.lock();
            std::mem::take(&mut *map).into_values().collect()
        };
        for c in cursors {
            c.delete().await?;
        }
        let (info, version) = {
            let mut s = self.state.lock();
            s.current = None;
            (s.info.clone(), s.version)
        };
        self.read_handles.lock().clear();
        let ctx = &self.ctx;
        for li in &info.ledger_info {
            ctx.delete_ledger(li, "managed-ledger delete").await?;
        }
        match ctx
            .store
            .delete(&ctx.path, ExpectedVersion::Exactly(version))
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == ErrorKind::NotFound => {}
            Err(e) if e.is_conflict() => {
                self.mark_fenced("delete");
                return Err(ManagedLedgerError::fenced_by(
                    &ctx.name,
                    "its metadata changed before delete",
                    FenceCause::Metadata(e),
                ));
            }
            Err(e) => {
                return Err(ManagedLedgerError::metadata(
                    format!("deleting the metadata of managed ledger '{}'", ctx.name),
                    e,
                ))
            }
        }
        self.state.lock().status = Status::Deleted;
        tracing::info!(managed_ledger = %ctx.name, "deleted");
        Ok(())
    }
}
