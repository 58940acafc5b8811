//! Faults below the ledger: copies lost on single bookies, and ledger
//! metadata that no longer decodes.
//!
//! A stored entry has one copy on every bookie of its write set (BookKeeper's
//! `RoundRobinDistributionSchedule`: indexes `(e + i) % E` of the ensemble for
//! `i` in `0..WQ`). A bookie may lose its copies — its disk replaced, an entry
//! log damaged — while the other bookies of the write set keep theirs:
//!
//! - a **read** asks the write set in order and skips a bookie that lost its
//!   copy, as the real client moves to the next replica on an error or a
//!   missing entry; it fails with `NoSuchEntryException` (-13), naming the
//!   bookies, only when every copy is gone;
//! - a **recovery open** takes the last add confirmed from the bookies, as
//!   before, and reads the entry after the one the bookies' headers confirm
//!   (the ledger's last entry: a writer's entry carries the confirmation of
//!   the one before it) from any bookie that still holds it, writing it back
//!   to its whole write set. A bookie that lost its copy answers as
//!   BookKeeper's bookies do since their data-integrity check (a bookie that
//!   lost data does not claim the entry was never written), so when no copy
//!   is left the recovery cannot tell whether the entry was acknowledged and
//!   fails, retryable, instead of ending the ledger early;
//! - **introspection** ([`MemoryCluster::entry`]) returns an entry only while
//!   a copy is left.
//!
//! Metadata corruption stands for the ledger's metadata node holding bytes
//! that do not decode: opens fail with the error BookKeeper's client gives
//! (`the metadata of ledger N cannot be decoded`, code -999), a writer's
//! close cannot seal (its compare-and-set finds another version, whose
//! re-read fails the same way), adds and reads through handles already open
//! go on (they talk to bookies), and a delete succeeds (BookKeeper deletes a
//! ledger's metadata without reading it). Restoring the bytes (an operator's
//! backup) ends it.

use std::collections::BTreeSet;

use super::cluster::MemoryCluster;
use super::ledger::LedgerData;
use crate::error::{BkError, BkErrorKind};
use crate::types::{EntryId, LedgerId};

impl LedgerData {
    /// The ensemble indexes entry `entry_id` is written to, in read order.
    pub(crate) fn write_set(&self, entry_id: EntryId) -> Vec<usize> {
        let e = i64::from(self.metadata.ensemble_size.max(1));
        (0..i64::from(self.metadata.write_quorum_size))
            .map(|i| (entry_id.max(0) + i).rem_euclid(e) as usize)
            .collect()
    }

    /// The bookie at ensemble index `index` for entry `entry_id`.
    fn bookie(&self, entry_id: EntryId, index: usize) -> String {
        self.metadata
            .ensembles
            .iter()
            .rev()
            .find(|e| e.first_entry_id <= entry_id)
            .or(self.metadata.ensembles.first())
            .and_then(|e| e.bookies.get(index).cloned())
            .unwrap_or_else(|| format!("bookie #{index}"))
    }

    /// Whether the bookie at `index` still holds its copy of `entry_id`.
    fn holds(&self, index: usize, entry_id: EntryId) -> bool {
        self.lost
            .get(&index)
            .is_none_or(|lost| !lost.contains(&entry_id))
    }

    /// How many bookies of its write set still hold `entry_id`.
    pub(crate) fn copies(&self, entry_id: EntryId) -> usize {
        self.write_set(entry_id)
            .into_iter()
            .filter(|i| self.holds(*i, entry_id))
            .count()
    }

    /// The first entry of `first..=last` no bookie holds any more, with the
    /// bookies of its write set.
    pub(crate) fn first_lost(
        &self,
        first: EntryId,
        last: EntryId,
    ) -> Option<(EntryId, Vec<String>)> {
        if self.lost.is_empty() {
            return None;
        }
        let candidates: BTreeSet<EntryId> = self
            .lost
            .values()
            .flat_map(|l| l.range(first..=last).copied())
            .collect();
        candidates
            .into_iter()
            .find(|e| self.copies(*e) == 0)
            .map(|e| {
                let bookies = self
                    .write_set(e)
                    .into_iter()
                    .map(|i| self.bookie(e, i))
                    .collect();
                (e, bookies)
            })
    }

    /// Whether `entry_id` is stored (below or above a gap).
    fn is_stored(&self, entry_id: EntryId) -> bool {
        usize::try_from(entry_id).is_ok_and(|i| i < self.entries.len())
            || self.ahead.contains_key(&entry_id)
    }

    /// The bookie at `index` loses its copies of the stored entries of
    /// `first..=last`; an entry whose last copy it holds keeps it unless
    /// `last_copy`. Returns the copies lost.
    fn lose(&mut self, index: usize, first: EntryId, last: EntryId, last_copy: bool) -> u64 {
        let stored_end = self.entries.len() as EntryId;
        let top = self.ahead.keys().next_back().copied().unwrap_or(-1);
        let last = last.min(stored_end.max(top + 1) - 1);
        let mut n = 0;
        for e in first.max(0)..=last {
            if !self.is_stored(e)
                || !self.write_set(e).contains(&index)
                || !self.holds(index, e)
                || (!last_copy && self.copies(e) < 2)
            {
                continue;
            }
            self.lost.entry(index).or_default().insert(e);
            n += 1;
        }
        n
    }

    /// A recovery wrote `entry_id` back to its whole write set.
    pub(crate) fn rereplicate(&mut self, entry_id: EntryId) {
        for lost in self.lost.values_mut() {
            lost.remove(&entry_id);
        }
        self.lost.retain(|_, l| !l.is_empty());
    }
}

/// The error of a read of `entry_id` whose every copy is gone.
pub(crate) fn lost_error(
    cluster: &str,
    ledger_id: LedgerId,
    what: &str,
    entry_id: EntryId,
    bookies: &[String],
) -> BkError {
    BkError::new(
        BkErrorKind::NoSuchEntry,
        format!(
            "{what} failed: entry {entry_id} is on none of its bookies {bookies:?} (each lost \
             its copy); restore the bookies' data"
        ),
    )
    .with_cluster(cluster)
    .with_ledger(ledger_id)
}

/// The error of an operation that needs the ledger's metadata while it does
/// not decode (the message of BookKeeper's client).
pub(crate) fn corrupt_metadata_error(cluster: &str, ledger_id: LedgerId, what: &str) -> BkError {
    BkError::new(
        BkErrorKind::Other,
        format!(
            "{what} failed: the metadata of ledger {ledger_id} cannot be decoded; restore it \
             in the metadata service"
        ),
    )
    .with_cluster(cluster)
    .with_ledger(ledger_id)
}

impl MemoryCluster {
    /// Bookie `bookie` loses its copies of entries `first..=last` of ledger
    /// `ledger_id` (only the stored entries it holds), behind every client's
    /// back. An entry whose last copy it holds keeps it unless `last_copy`
    /// (so that a fault taking at most `WQ − 1` copies never loses data).
    /// Returns the copies lost (0 when the ledger or the bookie is unknown).
    pub fn lose_copies(
        &self,
        ledger_id: LedgerId,
        bookie: &str,
        first: EntryId,
        last: EntryId,
        last_copy: bool,
    ) -> u64 {
        let Some(cell) = self.inner.ledger(ledger_id) else {
            return 0;
        };
        let mut d = cell.data.lock();
        let Some(index) = d
            .metadata
            .ensembles
            .first()
            .and_then(|e| e.bookies.iter().position(|b| b == bookie))
        else {
            return 0;
        };
        d.lose(index, first, last, last_copy)
    }

    /// Bookie `bookie` loses every copy it holds, of every ledger (its disk
    /// replaced); entries written afterwards are stored on it again. An entry
    /// whose last copy it holds keeps it unless `last_copy`. Returns the
    /// copies lost.
    pub fn lose_bookie(&self, bookie: &str, last_copy: bool) -> u64 {
        self.ledger_ids()
            .into_iter()
            .map(|id| self.lose_copies(id, bookie, 0, EntryId::MAX, last_copy))
            .sum()
    }

    /// How many bookies still hold entry `entry_id` of ledger `ledger_id`
    /// (the write quorum unless copies were lost); `None` when the ledger or
    /// the entry is not stored.
    pub fn copies(&self, ledger_id: LedgerId, entry_id: EntryId) -> Option<usize> {
        let cell = self.inner.ledger(ledger_id)?;
        let d = cell.data.lock();
        d.is_stored(entry_id).then(|| d.copies(entry_id))
    }

    /// Copies of the ledger's entries lost so far (and not written back by a
    /// recovery).
    pub fn lost_copies(&self, ledger_id: LedgerId) -> u64 {
        self.inner.ledger(ledger_id).map_or(0, |cell| {
            let d = cell.data.lock();
            d.lost.values().map(|l| l.len() as u64).sum()
        })
    }

    /// The ledger's metadata stops decoding (its bytes damaged in the
    /// metadata service); returns whether the ledger exists.
    pub fn corrupt_metadata(&self, ledger_id: LedgerId) -> bool {
        self.set_metadata_corrupt(ledger_id, true)
    }

    /// The ledger's metadata decodes again (restored from a backup); returns
    /// whether the ledger exists.
    pub fn restore_metadata(&self, ledger_id: LedgerId) -> bool {
        self.set_metadata_corrupt(ledger_id, false)
    }

    fn set_metadata_corrupt(&self, ledger_id: LedgerId, corrupt: bool) -> bool {
        match self.inner.ledger(ledger_id) {
            Some(cell) => {
                cell.data.lock().metadata_corrupt = corrupt;
                true
            }
            None => false,
        }
    }

    /// Whether the ledger's metadata does not decode, if the ledger exists.
    pub fn is_metadata_corrupt(&self, ledger_id: LedgerId) -> Option<bool> {
        let cell = self.inner.ledger(ledger_id)?;
        let d = cell.data.lock();
        Some(d.metadata_corrupt)
    }
}
