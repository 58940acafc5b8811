//! [`ManagedCursor`], the public API of a cursor, and where a new one starts
//! ([`InitialPosition`]). Each method documents the contract and hands over to
//! the file of its concern.

use std::sync::Arc;

use bkswitch_bk_client::{EntryId, LedgerId};
use bkswitch_proto::ml::{ManagedCursorInfo, StringProperty};

use super::properties::CursorPromotion;
use super::state::CursorInner;
#[cfg(doc)]
use crate::error::ManagedLedgerError;
use crate::error::Result;
use crate::position::{Entry, Position};

/// Where a new cursor starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialPosition {
    /// After the last confirmed entry (Pulsar's default): only new entries.
    #[default]
    Latest,
    /// Before the first entry still held.
    Earliest,
}

/// A named cursor of a [`ManagedLedger`](crate::ManagedLedger): a read position,
/// a durable mark-delete position and individually deleted ranges.
///
/// Its metadata lives at `/managed-ledgers/<name>/<cursor>` (`ManagedCursorInfo`);
/// each persisted position is an `ml::PositionInfo` entry of its cursor ledger.
/// Every metadata write of one cursor runs under the cursor's async lock. Cheap
/// to clone (shared).
#[derive(Debug, Clone)]
pub struct ManagedCursor {
    pub(crate) inner: Arc<CursorInner>,
}

impl ManagedCursor {
    /// The cursor's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The mark-delete position: every entry at or before it is consumed.
    pub fn mark_delete_position(&self) -> Position {
        self.inner.mark_delete_position()
    }

    /// The position the next [`read_entries`](Self::read_entries) starts at.
    pub fn read_position(&self) -> Position {
        self.inner.pos.lock().read
    }

    /// The id of the cursor ledger recorded in the metadata (`-1` when the
    /// position lives only in the metadata snapshot).
    pub fn cursor_ledger_id(&self) -> LedgerId {
        self.inner.pos.lock().cursors_ledger_id
    }

    /// Individually deleted ranges `(lower exclusive, upper inclusive]` after the
    /// mark-delete position.
    pub fn individually_deleted_ranges(&self) -> Vec<(Position, Position)> {
        self.inner.pos.lock().ranges.clone()
    }

    /// The `ManagedCursorInfo` last written for this cursor and its store version
    /// (taken under the cursor lock).
    pub async fn metadata(&self) -> (ManagedCursorInfo, i64) {
        let meta = self.inner.meta.lock().await;
        (meta.info.clone(), meta.version)
    }

    /// Reads up to `max_entries` entries from the read position, skipping
    /// individually deleted ones, and advances the read position. Empty when
    /// nothing new is available.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Closed`]; client and hook errors of the read.
    pub async fn read_entries(&self, max_entries: usize) -> Result<Vec<Entry>> {
        self.inner.read_entries(max_entries).await
    }

    /// Moves the read position back to right after the mark-delete position.
    pub fn rewind(&self) {
        self.inner.rewind();
    }

    /// Marks every entry up to and including `position` as consumed and persists
    /// the position (cursor ledger entry; a new cursor ledger when the config's
    /// thresholds are reached). A position at or before the current mark-delete
    /// position changes nothing.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidPosition`] for a negative position, one beyond
    /// the last confirmed entry, or a ledger the managed ledger does not hold
    /// (nothing changes); [`ManagedLedgerError::Closed`]; client, store and hook
    /// errors of persisting.
    pub async fn mark_delete(&self, position: Position) -> Result<()> {
        self.inner.mark_delete(position).await
    }

    /// Deletes individual entries (out of order acknowledgements). Entries right
    /// after the mark-delete position advance it.
    ///
    /// # Errors
    ///
    /// As [`mark_delete`](Self::mark_delete); every position is checked before
    /// anything changes.
    pub async fn delete(&self, positions: &[Position]) -> Result<()> {
        self.inner.delete_entries(positions).await
    }

    /// Forces a new cursor ledger (created through S1, recorded with its S4
    /// properties in one CAS) holding the current position; the previous cursor
    /// ledger is deleted through the cursor resolver.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Closed`]; client, store and hook errors (nothing
    /// unrecorded is left behind).
    pub async fn roll_cursor_ledger(&self) -> Result<()> {
        self.inner.force_roll().await
    }

    /// Changes `cursorProperties` and nothing else, under the cursor lock, with
    /// a compare-and-set against the cursor's current metadata version, provided
    /// the recorded cursor ledger is still `expected_cursors_ledger_id`
    /// ([I9](bkswitch_docs::invariants::I9), [I13](bkswitch_docs::invariants::I13)).
    /// `f` may set reserved `_pulsar.` keys: this is the primitive for hooks and
    /// the orchestrator, not a user API.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::CursorRolledOver`] when the cursor ledger changed
    /// (nothing written); [`ManagedLedgerError::MetadataConflict`] when another
    /// writer changed the metadata; [`ManagedLedgerError::Closed`]; store errors.
    pub async fn update_cursor_properties<F>(
        &self,
        expected_cursors_ledger_id: LedgerId,
        f: F,
    ) -> Result<(ManagedCursorInfo, i64)>
    where
        F: FnOnce(&mut Vec<StringProperty>),
    {
        self.inner
            .update_properties(expected_cursors_ledger_id, f)
            .await
    }

    /// Moves the cursor's ledger to `target_cluster` after the coordinator
    /// copied it there (the owner side of a cursor PROMOTE, invariants
    /// [I9](bkswitch_docs::invariants::I9) and [I13](bkswitch_docs::invariants::I13)).
    /// Runs under the cursor lock, so no mark-delete interleaves.
    ///
    /// `expected_cursors_ledger_id` is the cursor ledger the coordinator copied
    /// and `copied_last_entry_id` the last entry id of its copy.
    ///
    /// - The stamp already names `target_cluster`: nothing to do,
    ///   [`CursorPromotion::AlreadyOnTarget`].
    /// - The ledger holds exactly the copied entries: one compare-and-set
    ///   changing only the stamp ([`CursorPromotion::Promoted`]). The cursor then
    ///   stops appending to that ledger (its write handle, on the old cluster, is
    ///   closed), so no position is ever written to a ledger whose stamp names
    ///   another cluster: the next persist rolls onto a new cursor ledger created
    ///   through S1 on the active cluster.
    /// - The ledger holds entries beyond the copy (the cursor is live and
    ///   acknowledged since the copy was taken): promoting the stale copy would
    ///   rewind the cursor on recovery, so the cursor rolls over instead onto a
    ///   new ledger on `target_cluster` holding the latest position
    ///   ([`CursorPromotion::RolledOver`]). The copy under the old id on the
    ///   target is then unreferenced and the caller deletes it.
    ///
    /// Rolling over rather than sealing and copying the tail is deliberate: a
    /// copy made by the coordinator is closed, so the tail could only be added by
    /// deleting and re-creating the copy (which real bookies may refuse for a
    /// while after fencing), whereas a rollover is the cursor's ordinary
    /// durable path and takes one ledger creation and one compare-and-set.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::CursorRolledOver`] when the recorded cursor ledger
    /// is not `expected_cursors_ledger_id` (nothing written);
    /// [`ManagedLedgerError::NotOnActiveCluster`] when a rollover is needed but
    /// this node does not create ledgers on `target_cluster` yet (retryable);
    /// [`ManagedLedgerError::CorruptMetadata`] for a duplicated stamp;
    /// [`ManagedLedgerError::Closed`] when the cursor is closed and the copy
    /// is not exact (a closed cursor is promoted by its exact copy, but never
    /// rolled over); client, store and hook errors.
    pub async fn promote_cursor_ledger(
        &self,
        expected_cursors_ledger_id: LedgerId,
        copied_last_entry_id: EntryId,
        target_cluster: &str,
    ) -> Result<CursorPromotion> {
        self.inner
            .promote(
                expected_cursors_ledger_id,
                copied_last_entry_id,
                target_cluster,
            )
            .await
    }

    /// The user-visible cursor properties (reserved `_pulsar.` keys excluded).
    pub async fn cursor_properties(&self) -> Vec<(String, String)> {
        self.inner.user_properties().await
    }

    /// Sets user cursor properties (replacing values of keys already present,
    /// appending others); reserved keys are kept untouched.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidArgument`] for a key starting with `_pulsar.`
    /// ([I16](bkswitch_docs::invariants::I16); nothing written); otherwise as
    /// [`update_cursor_properties`](Self::update_cursor_properties).
    pub async fn set_cursor_properties(&self, props: &[(String, String)]) -> Result<()> {
        self.inner.set_user_properties(props).await
    }

    /// Closes the cursor's ledger handle; the cursor stays recorded.
    pub async fn close(&self) {
        self.inner.close().await;
    }
}
