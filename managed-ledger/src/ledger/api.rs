//! [`ManagedLedger`], the public API of an open managed ledger. Each method
//! documents the contract and hands over to the file of its concern.

use std::sync::Arc;

use bkswitch_bk_client::LedgerId;
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::ml::ManagedLedgerInfo;
use bytes::Bytes;

use super::state::{MlInner, Status};
use crate::cursor::{InitialPosition, ManagedCursor};
#[cfg(doc)]
use crate::error::ManagedLedgerError;
use crate::error::Result;
use crate::position::{Entry, Position};
use crate::session::MetadataSession;

/// A managed ledger: an append-only log of entries over a sequence of
/// BookKeeper ledgers, with named cursors.
///
/// Cheap to clone (shared). Appends are ordered and pipelined: concurrent
/// `append` futures are sequenced in the order they first run and await their
/// BookKeeper acknowledgements concurrently. See the crate documentation for the
/// hook call sites.
#[derive(Debug, Clone)]
pub struct ManagedLedger {
    pub(super) inner: Arc<MlInner>,
}

impl ManagedLedger {
    /// The managed ledger's name.
    pub fn name(&self) -> &str {
        &self.inner.ctx.name
    }

    /// The metadata store's session as this managed ledger sees it (shared
    /// by every managed ledger of its factory): see [`MetadataSession`].
    pub fn metadata_session(&self) -> Arc<MetadataSession> {
        self.inner.ctx.session.clone()
    }

    /// The config it was opened with.
    pub fn config(&self) -> &ManagedLedgerConfig {
        &self.inner.ctx.config
    }

    /// The position of the last acknowledged entry (`(ledger, -1)` when there is
    /// none yet).
    pub fn last_confirmed(&self) -> Position {
        self.inner.state.lock().last_confirmed
    }

    /// The id of the ledger appends go to now, if one is open.
    pub fn current_ledger_id(&self) -> Option<LedgerId> {
        self.inner.state.lock().current.as_ref().map(|(id, _)| *id)
    }

    /// The `ManagedLedgerInfo` last written by this instance and its store version.
    pub fn metadata(&self) -> (ManagedLedgerInfo, i64) {
        let s = self.inner.state.lock();
        (s.info.clone(), s.version)
    }

    /// Ids of the ledgers recorded, oldest first (the last one is the current
    /// ledger while the managed ledger is open).
    pub fn ledger_ids(&self) -> Vec<LedgerId> {
        self.inner
            .state
            .lock()
            .info
            .ledger_info
            .iter()
            .map(|l| l.ledger_id)
            .collect()
    }

    /// Whether this instance was fenced by another owner.
    pub fn is_fenced(&self) -> bool {
        self.inner.state.lock().status == Status::Fenced
    }

    /// The terminated position, if the managed ledger is terminated.
    pub fn terminated_position(&self) -> Option<Position> {
        match self.inner.state.lock().status {
            Status::Terminated(p) => Some(p),
            _ => None,
        }
    }

    /// Appends an entry and returns its position once BookKeeper acknowledged it.
    ///
    /// Rolls the current ledger over first when a threshold of the config is
    /// reached (entries or bytes once `min_ledger_rollover_time` has passed, or
    /// `max_ledger_rollover_time`).
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`] when another owner opened the managed
    /// ledger; [`ManagedLedgerError::Terminated`], [`ManagedLedgerError::Closed`];
    /// client, store and hook errors of the append or of a rollover.
    pub async fn append(&self, data: impl Into<Bytes>) -> Result<Position> {
        self.inner.append(data.into()).await
    }

    /// Forces a rollover: closes the current ledger, records its entries and size,
    /// and creates a new one through S1 with its S4 properties in one CAS.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append); on failure nothing unrecorded is left behind.
    /// [`ManagedLedgerError::MetadataSessionLost`] (retryable, nothing done)
    /// while the metadata store's session is lost.
    pub async fn rollover(&self) -> Result<()> {
        self.inner.force_rollover().await
    }

    /// Reads up to `max_entries` entries starting at `start`, across ledgers, up
    /// to the last confirmed entry.
    ///
    /// Ledgers are read through cached handles: the S2 resolver is consulted once
    /// when a handle is opened ([I4](bkswitch_docs::invariants::I4)); the current
    /// ledger is read through its write handle.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidPosition`] for a negative position, a ledger
    /// the managed ledger does not hold, or a start beyond the last confirmed
    /// entry; client and hook errors (the failing handle is dropped from the cache).
    pub async fn read_entries(&self, start: Position, max_entries: usize) -> Result<Vec<Entry>> {
        self.inner.read_entries(start, max_entries).await
    }

    /// Terminates the managed ledger: seals the current ledger and records the
    /// terminated position; later appends fail with
    /// [`ManagedLedgerError::Terminated`]. Returns the last position.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`], [`ManagedLedgerError::Closed`]; client and
    /// store errors.
    pub async fn terminate(&self) -> Result<Position> {
        self.inner.terminate().await
    }

    /// Closes the managed ledger: waits for pending appends, seals the current
    /// ledger and closes the cursors. No metadata is written (the next open
    /// records the last ledger's size, as Pulsar does).
    ///
    /// # Errors
    ///
    /// Client errors of sealing the ledger (the instance is closed anyway).
    pub async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    /// Deletes the managed ledger: every ledger (through the S2 resolver,
    /// [I15](bkswitch_docs::invariants::I15)), every cursor (its cursor ledger
    /// through the cursor resolver) and the metadata.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`] when the metadata changed under this owner;
    /// client, store and hook errors (a failed ledger delete stops the deletion
    /// before the metadata is removed, so it can be retried);
    /// [`ManagedLedgerError::MetadataSessionLost`] (retryable, nothing done)
    /// while the metadata store's session is lost (the ledgers would be
    /// deleted while the metadata still names them).
    pub async fn delete(&self) -> Result<()> {
        self.inner.delete().await
    }

    /// Deletes the ledgers every cursor has consumed that retention no longer
    /// keeps, oldest first, never the current ledger. Returns the deleted ids.
    ///
    /// A consumed ledger is deleted when no retention is configured, when it was
    /// closed longer than `retention_time` ago, or while the retained size exceeds
    /// `retention_size_bytes` (either configured limit triggers deletion). The
    /// metadata is updated first (one CAS), then each ledger is deleted through the
    /// S2 resolver ([I15](bkswitch_docs::invariants::I15)) and its cached read
    /// handle dropped.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`], [`ManagedLedgerError::Closed`]; store and
    /// hook errors. A failing BookKeeper delete is logged, not returned: the
    /// ledger is no longer recorded.
    /// [`ManagedLedgerError::MetadataSessionLost`] (retryable, nothing done)
    /// while the metadata store's session is lost, as in Pulsar.
    pub async fn trim_consumed_ledgers(&self) -> Result<Vec<LedgerId>> {
        self.inner.trim_consumed_ledgers().await
    }

    /// The mark-delete position of the slowest cursor, or the last confirmed
    /// position when there is no cursor.
    pub fn slowest_mark_delete(&self) -> Position {
        self.inner.slowest_mark_delete()
    }

    /// Opens the cursor `name`, creating it at the end of the managed ledger
    /// (Pulsar's `Latest`) when it does not exist.
    ///
    /// # Errors
    ///
    /// As [`open_cursor_at`](Self::open_cursor_at).
    pub async fn open_cursor(&self, name: &str) -> Result<ManagedCursor> {
        self.open_cursor_at(name, InitialPosition::Latest).await
    }

    /// Opens the cursor `name`, creating it at `initial` when it does not exist.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`]; [`ManagedLedgerError::Closed`];
    /// store errors.
    pub async fn open_cursor_at(
        &self,
        name: &str,
        initial: InitialPosition,
    ) -> Result<ManagedCursor> {
        self.inner.open_cursor_at(name, initial).await
    }

    /// The open cursor `name`.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::NoSuchCursor`].
    pub fn cursor(&self, name: &str) -> Result<ManagedCursor> {
        self.inner.cursor(name)
    }

    /// Every cursor, by name.
    pub fn cursors(&self) -> Vec<ManagedCursor> {
        self.inner.cursors()
    }

    /// Deletes the cursor `name`: its cursor ledger (through the cursor
    /// resolver) and its metadata.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`], [`ManagedLedgerError::NoSuchCursor`];
    /// client, store and hook errors.
    pub async fn delete_cursor(&self, name: &str) -> Result<()> {
        self.inner.delete_cursor(name).await
    }
}
