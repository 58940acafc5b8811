//! One ledger of an in-memory cluster: metadata, stored entries and the state of its
//! single writer, all behind one lock that is never held across an await.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use crate::error::{BkError, BkErrorKind, Result};
use crate::types::{EntryId, LedgerEntry, LedgerId, LedgerMetadata, LedgerState, NO_ENTRY};

/// Completion channel of one pending add.
pub(crate) type AddSender = oneshot::Sender<Result<EntryId>>;

/// A ledger shared by the cluster registry and every handle on it.
#[derive(Debug)]
pub(crate) struct LedgerCell {
    pub(crate) id: LedgerId,
    pub(crate) data: Mutex<LedgerData>,
}

impl LedgerCell {
    pub(crate) fn new(metadata: LedgerMetadata, adv: bool, fail_adds_fenced: bool) -> LedgerCell {
        LedgerCell {
            id: metadata.ledger_id,
            data: Mutex::new(LedgerData {
                metadata,
                entries: Vec::new(),
                ahead: BTreeMap::new(),
                lac: NO_ENTRY,
                length: 0,
                fenced: false,
                deleted: false,
                lost: BTreeMap::new(),
                metadata_corrupt: false,
                writer: WriterState {
                    adv,
                    next_entry_id: 0,
                    pending: BTreeMap::new(),
                    status: WriterStatus::Open,
                    sealed_by_writer: false,
                    fail_adds_fenced,
                },
            }),
        }
    }
}

/// Whether the writer still accepts adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriterStatus {
    /// Accepting adds.
    Open,
    /// `close()` was called.
    Closed,
    /// An add failed unrecoverably; BookKeeper closes the handle in that case.
    Failed,
}

#[derive(Debug)]
pub(crate) struct WriterState {
    /// Created by `create_ledger_adv`.
    pub(crate) adv: bool,
    /// Next id handed out by `add_entry` (non-Adv handles).
    pub(crate) next_entry_id: EntryId,
    /// Adds issued but not yet completed, by entry id.
    pub(crate) pending: BTreeMap<EntryId, AddSender>,
    pub(crate) status: WriterStatus,
    /// The writer itself sealed the ledger.
    pub(crate) sealed_by_writer: bool,
    /// Bookies still remember a fence on this id (fenced-recreate knob).
    pub(crate) fail_adds_fenced: bool,
}

#[derive(Debug)]
pub(crate) struct LedgerData {
    pub(crate) metadata: LedgerMetadata,
    /// Stored entries `0..entries.len()` (contiguous).
    pub(crate) entries: Vec<Bytes>,
    /// Stored entries above a gap.
    pub(crate) ahead: BTreeMap<EntryId, Bytes>,
    /// Last add confirmed: the largest `k` with `0..=k` stored.
    pub(crate) lac: EntryId,
    /// Payload bytes of `0..=lac`.
    pub(crate) length: u64,
    /// A recovery open fenced the ledger.
    pub(crate) fenced: bool,
    /// The ledger was deleted (entries dropped; stale handles get -7).
    pub(crate) deleted: bool,
    /// Copies lost on single bookies (a fault): per bookie index of the
    /// ensemble, the stored entries whose copy that bookie no longer holds.
    /// An entry is readable while one bookie of its write set still holds it
    /// (see `replicas.rs`).
    pub(crate) lost: BTreeMap<usize, BTreeSet<EntryId>>,
    /// The ledger's metadata no longer decodes in the metadata service (a
    /// fault): opens fail naming the ledger, a writer's close cannot seal it.
    pub(crate) metadata_corrupt: bool,
    pub(crate) writer: WriterState,
}

/// Senders to notify once the ledger lock is released, in entry-id order.
#[derive(Default)]
pub(crate) struct Completions {
    ok: Vec<(EntryId, AddSender)>,
    failed: Vec<(EntryId, AddSender, BkError)>,
}

impl Completions {
    /// Deliver every completion, successes first (they are all below the failures
    /// because failures only ever take the whole pending set).
    pub(crate) fn fire(self) {
        for (id, tx) in self.ok {
            let _ = tx.send(Ok(id));
        }
        for (_, tx, err) in self.failed {
            let _ = tx.send(Err(err));
        }
    }
}

impl LedgerData {
    /// Store one entry and advance the LAC over every contiguous stored entry;
    /// pending adds now at or below the LAC are moved to `done`.
    pub(crate) fn store(&mut self, entry_id: EntryId, data: Bytes, done: &mut Completions) {
        if entry_id == self.entries.len() as EntryId {
            self.length += data.len() as u64;
            self.entries.push(data);
            while let Some(next) = self.ahead.remove(&(self.entries.len() as EntryId)) {
                self.length += next.len() as u64;
                self.entries.push(next);
            }
            self.lac = self.entries.len() as EntryId - 1;
            let rest = self.writer.pending.split_off(&(self.lac + 1));
            let confirmed = std::mem::replace(&mut self.writer.pending, rest);
            done.ok.extend(confirmed);
        } else {
            self.ahead.insert(entry_id, data);
        }
    }

    /// Fail every pending add with the error `make(entry_id)`.
    pub(crate) fn fail_pending(
        &mut self,
        done: &mut Completions,
        mut make: impl FnMut(EntryId) -> BkError,
    ) {
        for (id, tx) in std::mem::take(&mut self.writer.pending) {
            let err = make(id);
            done.failed.push((id, tx, err));
        }
    }

    /// Seal at the LAC: CLOSED, `last_entry_id = lac`, `length` = bytes of `0..=lac`.
    /// Entries stored above a gap are never acknowledged and are dropped.
    pub(crate) fn seal(&mut self) {
        self.metadata.state = LedgerState::Closed;
        self.metadata.last_entry_id = self.lac;
        self.metadata.length = self.length;
        self.ahead.clear();
    }

    /// Entries `first..=last`, all known to be stored (`last <= lac`).
    pub(crate) fn confirmed_range(&self, first: EntryId, last: EntryId) -> Vec<LedgerEntry> {
        debug_assert!(first >= 0 && first <= last && last <= self.lac);
        let (lo, hi) = (first as usize, last as usize);
        self.entries[lo..=hi]
            .iter()
            .zip(first..)
            .map(|(data, entry_id)| LedgerEntry {
                entry_id,
                data: data.clone(),
            })
            .collect()
    }

    /// Entries `first..=last` whether confirmed or not; `None` at the first missing one.
    pub(crate) fn stored_range(&self, first: EntryId, last: EntryId) -> Option<Vec<LedgerEntry>> {
        let span = (last - first).saturating_add(1);
        let bound = (self.entries.len() + self.ahead.len()) as i64;
        let mut out = Vec::with_capacity(span.min(bound).max(0) as usize);
        let mut entry_id = first;
        loop {
            let data = if entry_id < self.entries.len() as EntryId {
                self.entries[entry_id as usize].clone()
            } else {
                self.ahead.get(&entry_id)?.clone()
            };
            out.push(LedgerEntry { entry_id, data });
            if entry_id == last {
                return Some(out);
            }
            entry_id += 1;
        }
    }

    /// Drop the entries of a deleted ledger and fail its pending adds.
    pub(crate) fn mark_deleted(&mut self, done: &mut Completions, cluster: &str) {
        self.deleted = true;
        self.entries = Vec::new();
        self.ahead.clear();
        let ledger_id = self.metadata.ledger_id;
        self.fail_pending(done, |entry_id| {
            BkError::new(
                BkErrorKind::NoSuchLedger,
                format!("add of entry {entry_id} failed: the ledger was deleted"),
            )
            .with_cluster(cluster)
            .with_ledger(ledger_id)
        });
    }
}
