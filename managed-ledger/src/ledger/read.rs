//! The read path: locating positions across the recorded ledgers, reading
//! entries, and the cache of read handles. The S2 resolver is consulted once
//! per handle open ([I4](bkswitch_docs::invariants::I4)); the current ledger
//! is read through its write handle. This is also what the cursors see of the
//! ledger ([`LedgerView`]).

use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{EntryId, LedgerId, ReadHandle};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;

use super::state::MlInner;
use crate::error::{ManagedLedgerError, Result};
use crate::ledger_view::LedgerView;
use crate::position::{Entry, Position};

impl MlInner {
    /// Reads up to `max_entries` from `start`, which must be an entry the
    /// managed ledger holds (see
    /// [`ManagedLedger::read_entries`](super::ManagedLedger::read_entries)).
    pub(super) async fn read_entries(
        &self,
        start: Position,
        max_entries: usize,
    ) -> Result<Vec<Entry>> {
        self.validate_read_start(start)?;
        self.read_from(start, max_entries).await
    }

    fn entries_of(li: &LedgerInfo, lc: Position) -> i64 {
        match li.entries {
            Some(n) => n,
            None if lc.ledger_id == li.ledger_id => lc.entry_id + 1,
            None => 0,
        }
    }

    /// The first readable position at or after `pos` and the last readable entry
    /// of its ledger; `None` when nothing is readable there yet.
    fn locate(&self, pos: Position) -> Option<(Position, EntryId)> {
        let s = self.state.lock();
        let lc = s.last_confirmed;
        let mut pos = pos;
        for li in &s.info.ledger_info {
            if li.ledger_id < pos.ledger_id {
                continue;
            }
            if li.ledger_id > pos.ledger_id {
                pos = Position::new(li.ledger_id, 0);
            }
            let n = Self::entries_of(li, lc);
            let first = pos.entry_id.max(0);
            if first < n {
                return Some((Position::new(li.ledger_id, first), n - 1));
            }
        }
        None
    }

    fn validate_read_start(&self, start: Position) -> Result<()> {
        let invalid = |reason: String| ManagedLedgerError::InvalidPosition {
            name: self.ctx.name.clone(),
            position: start,
            reason,
        };
        if start.ledger_id < 0 || start.entry_id < 0 {
            return Err(invalid("ledger and entry ids must not be negative".into()));
        }
        let s = self.state.lock();
        let Some(li) = s
            .info
            .ledger_info
            .iter()
            .find(|l| l.ledger_id == start.ledger_id)
        else {
            return Err(invalid(format!(
                "the managed ledger holds no ledger {} (trimmed or never part of it); \
                 its ledgers are {:?}",
                start.ledger_id,
                s.info
                    .ledger_info
                    .iter()
                    .map(|l| l.ledger_id)
                    .collect::<Vec<_>>()
            )));
        };
        if start.entry_id >= Self::entries_of(li, s.last_confirmed) {
            return Err(invalid(format!(
                "beyond the end: the last confirmed entry is {}; read from an earlier \
                 position or wait for more entries",
                s.last_confirmed
            )));
        }
        Ok(())
    }

    /// The handle to read `ledger_id`: the write handle of the current ledger,
    /// a cached handle, or a new one opened on the client S2 names
    /// ([I4](bkswitch_docs::invariants::I4)).
    async fn read_handle(&self, ledger_id: LedgerId) -> Result<Arc<dyn ReadHandle>> {
        let li = {
            let s = self.state.lock();
            if let Some((id, h)) = &s.current {
                if *id == ledger_id {
                    let r: Arc<dyn ReadHandle> = h.clone();
                    return Ok(r);
                }
            }
            if let Some(h) = self.read_handles.lock().get(&ledger_id) {
                return Ok(h.clone());
            }
            s.info
                .ledger_info
                .iter()
                .find(|l| l.ledger_id == ledger_id)
                .cloned()
        };
        let Some(li) = li else {
            return Err(ManagedLedgerError::InvalidPosition {
                name: self.ctx.name.clone(),
                position: Position::new(ledger_id, 0),
                reason: "the ledger was trimmed while being read".into(),
            });
        };
        let client = self.ctx.resolve_ledger_to_open(&li).await?;
        let cfg = &self.ctx.config;
        let h = client
            .open_ledger_no_recovery(ledger_id, cfg.digest_type, &cfg.password)
            .await
            .map_err(|e| {
                ManagedLedgerError::client(
                    format!(
                        "opening ledger {ledger_id} of managed ledger '{}' for reading",
                        self.ctx.name
                    ),
                    e,
                )
            })?;
        let mut cache = self.read_handles.lock();
        Ok(cache.entry(ledger_id).or_insert(h).clone())
    }
}

#[async_trait]
impl LedgerView for MlInner {
    fn last_confirmed(&self) -> Position {
        self.state.lock().last_confirmed
    }

    fn next_position(&self, pos: Position) -> Position {
        let s = self.state.lock();
        let lc = s.last_confirmed;
        let current = s.current.as_ref().map(|(id, _)| *id);
        let mut found = false;
        for li in &s.info.ledger_info {
            if li.ledger_id < pos.ledger_id {
                continue;
            }
            if li.ledger_id > pos.ledger_id || found {
                if Some(li.ledger_id) == current || Self::entries_of(li, lc) > 0 {
                    return Position::new(li.ledger_id, 0);
                }
                continue;
            }
            found = true;
            if Some(li.ledger_id) == current || pos.entry_id + 1 < Self::entries_of(li, lc) {
                return Position::new(pos.ledger_id, pos.entry_id + 1);
            }
        }
        Position::new(pos.ledger_id, pos.entry_id + 1)
    }

    fn holds_ledger(&self, ledger_id: LedgerId) -> bool {
        self.state
            .lock()
            .info
            .ledger_info
            .iter()
            .any(|l| l.ledger_id == ledger_id)
    }

    async fn read_from(&self, start: Position, max: usize) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let mut pos = start;
        while out.len() < max {
            let Some((first, last_avail)) = self.locate(pos) else {
                break;
            };
            let want = (max - out.len()) as i64;
            let last = last_avail.min(first.entry_id + want - 1);
            let handle = self.read_handle(first.ledger_id).await?;
            match handle.read_entries(first.entry_id, last).await {
                Ok(entries) => {
                    out.extend(entries.into_iter().map(|e| Entry {
                        position: Position::new(first.ledger_id, e.entry_id),
                        data: e.data,
                    }));
                }
                Err(e) => {
                    self.read_handles.lock().remove(&first.ledger_id);
                    return Err(ManagedLedgerError::client(
                        format!(
                            "reading entries {}..={} of ledger {} of managed ledger '{}'",
                            first.entry_id, last, first.ledger_id, self.ctx.name
                        ),
                        e,
                    ));
                }
            }
            pos = Position::new(first.ledger_id, last + 1);
        }
        Ok(out)
    }
}
