//! Live copy progress of BUILD: entries and bytes copied per ledger and for
//! the whole switch, kept in memory by the coordinator that copies.
//!
//! Every copy reports through the ledger copy's progress callback
//! ([`CopyOptions::progress`](bkswitch_ledger_copy::CopyOptions::progress))
//! into a few atomics: nothing is written to the metadata per entry, and a
//! reader ([`Orchestrator::copy_progress`](crate::Orchestrator::copy_progress))
//! sums the finished ledgers and the few copies in flight (at most twice
//! `migration_concurrency`, schema and cursor stages).
//!
//! # Takeover
//!
//! The progress lives in the process of the coordinator. A coordinator that
//! takes a switch over (the origin died, a node restarted) starts from the
//! ledger records: ledgers already recorded count as done with the entries
//! and bytes their records hold (`copiedLastEntryId + 1`, `copiedBytes`), and
//! the copies that were in flight start again from zero, as the copies
//! themselves do (a partial copy is replaced). A run that ends on an error
//! drops its live progress, so a node that lost the switch never shows a
//! stale one; the next run starts from the records again.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use bkswitch_ledger_copy::{CopyError, CopyReport};
use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use crate::model::{LedgerKind, SwitchLedgerRecord, SwitchLedgerState};

/// The copy progress of a switch (JSON camelCase, as `GET /status` sends it
/// under `copyProgress`).
///
/// `entriesTotal` and `bytesTotal` sum the ledgers whose copy has started
/// (the source's snapshot is taken when a copy starts) and the finished
/// ones: while `ledgersDone + copying.len() < ledgersTotal` they grow as
/// further copies start. `ledgersTotal` counts the ledgers BUILD has found so
/// far: it grows by pages of 1,024 ledgers on switches with more. A stale
/// cursor copy that PROMOTE replaces (on a cursor no node owns) counts as one
/// more copy here, not in the records.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BuildProgress {
    /// The switch.
    pub switch_id: String,
    /// The cluster ledgers are copied from.
    pub source: String,
    /// The cluster ledgers are copied to.
    pub target: String,
    /// Whether this is the live progress of the coordinator answering
    /// (`true`), or what the ledger records say (`false`: finished ledgers
    /// only, nothing in `copying`).
    pub live: bool,
    /// Schema and cursor ledgers to copy, as known so far.
    pub ledgers_total: u64,
    /// Ledgers whose copy ended (copied, found already present, or failed).
    pub ledgers_done: u64,
    /// Of those, the copies that failed (the ledger stays on the source, or
    /// went away before the copy).
    pub ledgers_failed: u64,
    /// Entries copied: of the finished copies, and so far of those in flight.
    pub entries_copied: u64,
    /// Entries of the finished copies and of those in flight.
    pub entries_total: u64,
    /// Payload bytes copied.
    pub bytes_copied: u64,
    /// Payload bytes of the finished copies and of those in flight.
    pub bytes_total: u64,
    /// When this coordinator started (or took over) copying, ms since the
    /// Unix epoch; `None` for a progress read from the records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// The copies in flight, by kind and ledger id.
    pub copying: Vec<LedgerProgress>,
}

impl BuildProgress {
    /// Whether every ledger found so far has been copied (or failed).
    pub fn is_complete(&self) -> bool {
        self.ledgers_done >= self.ledgers_total && self.copying.is_empty()
    }
}

/// One copy in flight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerProgress {
    /// Schema or cursor ledger.
    pub kind: LedgerKind,
    /// The ledger id (the same on both clusters).
    pub ledger_id: i64,
    /// The cluster it is copied from.
    pub source: String,
    /// The cluster it is copied to.
    pub target: String,
    /// Entries acknowledged by the target so far.
    pub entries_copied: u64,
    /// Entries of the source snapshot (0 until the copy has opened it).
    pub entries_total: u64,
    /// Payload bytes acknowledged so far.
    pub bytes_copied: u64,
    /// Payload bytes of the source snapshot (0 until opened).
    pub bytes_total: u64,
}

/// Entries and bytes written to targets by one coordinator's copies since it
/// started, every switch and every attempt together (a copy started again
/// counts again): what the metrics `bkswitch_copied_entries_total` and
/// `bkswitch_copied_bytes_total` export.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CopyCounters {
    /// Entries acknowledged by a target.
    pub entries: u64,
    /// Their payload bytes.
    pub bytes: u64,
}

/// The live progress of every switch a coordinator (and its canary views)
/// copies, by the switch's records path.
#[derive(Default)]
pub(crate) struct ProgressRegistry {
    switches: Mutex<HashMap<String, Arc<SwitchProgress>>>,
    entries: AtomicU64,
    bytes: AtomicU64,
}

impl ProgressRegistry {
    pub(crate) fn get(&self, key: &str) -> Option<Arc<SwitchProgress>> {
        self.switches.lock().get(key).cloned()
    }

    /// The progress of `key`, made with `init` when there is none.
    pub(crate) fn get_or_insert(
        &self,
        key: &str,
        init: impl FnOnce() -> SwitchProgress,
    ) -> Arc<SwitchProgress> {
        self.switches
            .lock()
            .entry(key.to_owned())
            .or_insert_with(|| Arc::new(init()))
            .clone()
    }

    /// Drops the progress of `key` if the run `run` copied into it last.
    pub(crate) fn remove_if_run(&self, key: &str, run: u64) {
        let mut switches = self.switches.lock();
        if switches
            .get(key)
            .is_some_and(|p| p.run.load(Ordering::Relaxed) == run)
        {
            switches.remove(key);
        }
    }

    pub(crate) fn counters(&self) -> CopyCounters {
        CopyCounters {
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// What the ledger records of a switch say was copied.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Baseline {
    pub(crate) ledgers: u64,
    pub(crate) failed: u64,
    pub(crate) entries: u64,
    pub(crate) bytes: u64,
}

impl Baseline {
    /// Adds one ledger record.
    pub(crate) fn add(&mut self, rec: &SwitchLedgerRecord) {
        self.ledgers += 1;
        match rec.state {
            SwitchLedgerState::Failed | SwitchLedgerState::Obsolete => self.failed += 1,
            _ => {
                self.entries += u64::try_from(rec.copied_last_entry_id + 1).unwrap_or(0);
                self.bytes += rec.copied_bytes.unwrap_or(0);
            }
        }
    }
}

/// The live progress of one switch.
pub(crate) struct SwitchProgress {
    switch_id: String,
    source: String,
    target: String,
    started_at: i64,
    /// The run that copies into it (the last one).
    run: AtomicU64,
    ledgers_total: AtomicU64,
    ledgers_done: AtomicU64,
    ledgers_failed: AtomicU64,
    /// Of the finished copies.
    entries_done: AtomicU64,
    bytes_done: AtomicU64,
    copying: Mutex<BTreeMap<(LedgerKind, i64), Arc<Cell>>>,
}

#[derive(Default)]
struct Cell {
    entries_copied: AtomicU64,
    entries_total: AtomicU64,
    bytes_copied: AtomicU64,
    bytes_total: AtomicU64,
}

impl SwitchProgress {
    /// The progress of a switch whose records say `base`.
    pub(crate) fn new(
        switch_id: &str,
        source: &str,
        target: &str,
        started_at: i64,
        base: Baseline,
    ) -> SwitchProgress {
        SwitchProgress {
            switch_id: switch_id.to_owned(),
            source: source.to_owned(),
            target: target.to_owned(),
            started_at,
            run: AtomicU64::new(0),
            ledgers_total: AtomicU64::new(base.ledgers),
            ledgers_done: AtomicU64::new(base.ledgers),
            ledgers_failed: AtomicU64::new(base.failed),
            entries_done: AtomicU64::new(base.entries),
            bytes_done: AtomicU64::new(base.bytes),
            copying: Mutex::new(BTreeMap::new()),
        }
    }

    /// Marks the progress as the run `run`'s.
    pub(crate) fn set_run(&self, run: u64) {
        self.run.store(run, Ordering::Relaxed);
    }

    /// BUILD found `n` more ledgers to copy.
    pub(crate) fn expect(&self, n: usize) {
        self.ledgers_total.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A copy of `(kind, ledger_id)` starts: returns the handle its progress
    /// callback and its end report to.
    pub(crate) fn start(
        self: &Arc<Self>,
        registry: &Arc<ProgressRegistry>,
        kind: LedgerKind,
        ledger_id: i64,
    ) -> Tracker {
        let cell = Arc::new(Cell::default());
        self.copying.lock().insert((kind, ledger_id), cell.clone());
        Tracker {
            switch: self.clone(),
            registry: registry.clone(),
            key: (kind, ledger_id),
            cell,
            ended: false,
        }
    }

    /// A snapshot (`live`).
    pub(crate) fn snapshot(&self) -> BuildProgress {
        let mut p = BuildProgress {
            switch_id: self.switch_id.clone(),
            source: self.source.clone(),
            target: self.target.clone(),
            live: true,
            ledgers_total: self.ledgers_total.load(Ordering::Relaxed),
            ledgers_done: self.ledgers_done.load(Ordering::Relaxed),
            ledgers_failed: self.ledgers_failed.load(Ordering::Relaxed),
            entries_copied: self.entries_done.load(Ordering::Relaxed),
            entries_total: 0,
            bytes_copied: self.bytes_done.load(Ordering::Relaxed),
            bytes_total: 0,
            started_at: Some(self.started_at),
            copying: Vec::new(),
        };
        p.entries_total = p.entries_copied;
        p.bytes_total = p.bytes_copied;
        for ((kind, ledger_id), cell) in self.copying.lock().iter() {
            let l = LedgerProgress {
                kind: *kind,
                ledger_id: *ledger_id,
                source: self.source.clone(),
                target: self.target.clone(),
                entries_copied: cell.entries_copied.load(Ordering::Relaxed),
                entries_total: cell.entries_total.load(Ordering::Relaxed),
                bytes_copied: cell.bytes_copied.load(Ordering::Relaxed),
                bytes_total: cell.bytes_total.load(Ordering::Relaxed),
            };
            p.entries_copied += l.entries_copied;
            p.entries_total += l.entries_total.max(l.entries_copied);
            p.bytes_copied += l.bytes_copied;
            p.bytes_total += l.bytes_total.max(l.bytes_copied);
            p.copying.push(l);
        }
        // Counted done before being removed from `copying`, for a moment.
        p.ledgers_total = p.ledgers_total.max(p.ledgers_done);
        p
    }
}

/// One copy's link to its switch's progress; a copy abandoned without
/// [`end`](Self::end) (an error of the coordinator, a crash) leaves the
/// ledger not done.
pub(crate) struct Tracker {
    switch: Arc<SwitchProgress>,
    registry: Arc<ProgressRegistry>,
    key: (LedgerKind, i64),
    cell: Arc<Cell>,
    ended: bool,
}

impl Tracker {
    /// The callback for [`CopyOptions::with_progress`](bkswitch_ledger_copy::CopyOptions::with_progress):
    /// stores the copy's counts and adds what is new to the counters. A copy
    /// started again (a partial copy replaced) reports from zero again.
    pub(crate) fn callback(&self) -> impl Fn(&bkswitch_ledger_copy::CopyProgress) + Send + Sync {
        let cell = self.cell.clone();
        let registry = self.registry.clone();
        move |p| {
            cell.entries_total.store(p.entries_total, Ordering::Relaxed);
            cell.bytes_total.store(p.bytes_total, Ordering::Relaxed);
            let before = cell
                .entries_copied
                .swap(p.entries_copied, Ordering::Relaxed);
            if p.entries_copied > before {
                registry
                    .entries
                    .fetch_add(p.entries_copied - before, Ordering::Relaxed);
            }
            let before = cell.bytes_copied.swap(p.bytes_copied, Ordering::Relaxed);
            if p.bytes_copied > before {
                registry
                    .bytes
                    .fetch_add(p.bytes_copied - before, Ordering::Relaxed);
            }
        }
    }

    /// The copy ended: a copy counts its entries and bytes as done, a
    /// failure counts the ledger failed.
    pub(crate) fn end(mut self, result: &Result<CopyReport, CopyError>) {
        let s = &self.switch;
        match result {
            Ok(report) => {
                s.entries_done.fetch_add(report.entries, Ordering::Relaxed);
                s.bytes_done.fetch_add(report.bytes, Ordering::Relaxed);
            }
            Err(_) => {
                s.ledgers_failed.fetch_add(1, Ordering::Relaxed);
            }
        }
        s.ledgers_done.fetch_add(1, Ordering::Relaxed);
        self.ended = true;
        s.copying.lock().remove(&self.key);
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        if !self.ended {
            self.switch.copying.lock().remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bkswitch_ledger_copy::{CopyOutcome, CopyProgress};
    use std::time::Duration;

    fn progress(entries_copied: u64, bytes_copied: u64) -> CopyProgress {
        CopyProgress {
            ledger_id: 7,
            entries_copied,
            bytes_copied,
            last_entry_id: entries_copied as i64 - 1,
            entries_total: 10,
            bytes_total: 100,
        }
    }

    #[test]
    fn in_flight_and_finished_copies_add_up() {
        let registry = Arc::new(ProgressRegistry::default());
        let base = Baseline {
            ledgers: 2,
            failed: 1,
            entries: 5,
            bytes: 50,
        };
        let s = registry.get_or_insert("k", || SwitchProgress::new("3", "old", "new", 1, base));
        s.expect(1);
        let t = s.start(&registry, LedgerKind::Cursor, 7);
        let cb = t.callback();
        cb(&progress(0, 0));
        cb(&progress(4, 40));
        let p = s.snapshot();
        assert_eq!(
            (p.ledgers_total, p.ledgers_done, p.ledgers_failed),
            (3, 2, 1)
        );
        assert_eq!((p.entries_copied, p.entries_total), (9, 15));
        assert_eq!((p.bytes_copied, p.bytes_total), (90, 150));
        assert_eq!(p.copying.len(), 1);
        assert_eq!(p.copying[0].entries_copied, 4);
        assert!(!p.is_complete());
        // A copy started again reports from zero; the counters count both.
        cb(&progress(0, 0));
        cb(&progress(10, 100));
        assert_eq!(
            registry.counters(),
            CopyCounters {
                entries: 14,
                bytes: 140
            }
        );
        t.end(&Ok(CopyReport {
            ledger_id: 7,
            outcome: CopyOutcome::Copied,
            entries: 10,
            bytes: 100,
            last_entry_id: 9,
            duration: Duration::ZERO,
        }));
        let p = s.snapshot();
        assert_eq!(
            (p.ledgers_done, p.entries_copied, p.entries_total),
            (3, 15, 15)
        );
        assert_eq!((p.bytes_copied, p.bytes_total), (150, 150));
        assert!(p.is_complete());
    }

    /// The baseline of a takeover: copied records count their entries and
    /// bytes, failed and obsolete ones count failed; a record of an earlier
    /// version (no `copiedBytes`) still reads, its bytes unknown (0).
    #[test]
    fn the_records_make_the_baseline() {
        let record = |json: &str| -> SwitchLedgerRecord { serde_json::from_str(json).unwrap() };
        let old = record(
            r#"{"kind":"cursor","ledgerId":7,"ownerPath":"/m/a","copiedLastEntryId":9,
                "state":"PROMOTED","updatedAt":1}"#,
        );
        assert_eq!(old.copied_bytes, None);
        let new = record(
            r#"{"kind":"schema","ledgerId":8,"ownerPath":"/schemas/s","copiedLastEntryId":0,
                "copiedBytes":42,"state":"BUILT","updatedAt":1}"#,
        );
        let failed = record(
            r#"{"kind":"cursor","ledgerId":9,"ownerPath":"/m/b","copiedLastEntryId":-1,
                "state":"FAILED","reason":"gone","updatedAt":1}"#,
        );
        let mut base = Baseline::default();
        for r in [&old, &new, &failed] {
            base.add(r);
        }
        assert_eq!(
            (base.ledgers, base.failed, base.entries, base.bytes),
            (3, 1, 11, 42)
        );
        assert_eq!(
            serde_json::to_value(&new).unwrap()["copiedBytes"],
            serde_json::json!(42)
        );
    }

    #[test]
    fn an_abandoned_copy_is_not_done() {
        let registry = Arc::new(ProgressRegistry::default());
        let s = registry.get_or_insert("k", || {
            SwitchProgress::new("3", "old", "new", 1, Baseline::default())
        });
        s.expect(1);
        let t = s.start(&registry, LedgerKind::Schema, 7);
        t.callback()(&progress(3, 30));
        drop(t);
        let p = s.snapshot();
        assert_eq!(
            (p.ledgers_done, p.entries_copied, p.entries_total),
            (0, 0, 0)
        );
        assert!(p.copying.is_empty());
        assert_eq!(registry.counters().entries, 3);
    }
}
