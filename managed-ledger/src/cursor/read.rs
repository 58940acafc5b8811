//! Reading through a cursor and acknowledging: read, rewind, mark-delete and
//! individual deletes, each persisted through the cursor's ledger.

use super::state::CursorInner;
use crate::error::{ManagedLedgerError, Result};
use crate::ledger_view::LedgerView;
use crate::position::{Entry, Position};

impl CursorInner {
    /// Reads from the read position (see
    /// [`ManagedCursor::read_entries`](super::ManagedCursor::read_entries)).
    pub(super) async fn read_entries(&self, max_entries: usize) -> Result<Vec<Entry>> {
        let ml = self.ml()?;
        loop {
            let start = self.pos.lock().read;
            let entries = ml.read_from(start, max_entries).await?;
            let Some(last) = entries.last().map(|e| e.position) else {
                return Ok(Vec::new());
            };
            let mut st = self.pos.lock();
            if st.read == start {
                st.read = ml.next_position(last);
            }
            let md = st.mark_delete;
            let kept: Vec<Entry> = entries
                .into_iter()
                .filter(|e| e.position > md && !st.contains(e.position))
                .collect();
            if !kept.is_empty() {
                return Ok(kept);
            }
        }
    }

    /// Moves the read position back to right after the mark-delete position.
    pub(super) fn rewind(&self) {
        let ml = self.ml.upgrade();
        let mut st = self.pos.lock();
        st.read = match ml {
            Some(ml) => ml.next_position(st.mark_delete),
            None => st.mark_delete,
        };
    }

    fn validate(&self, ml: &dyn LedgerView, p: Position) -> Result<()> {
        let invalid = |reason: String| ManagedLedgerError::InvalidPosition {
            name: self.ctx.name.clone(),
            position: p,
            reason,
        };
        if p.ledger_id < 0 || p.entry_id < -1 {
            return Err(invalid("ledger id must be >= 0 and entry id >= -1".into()));
        }
        let lc = ml.last_confirmed();
        if p > lc {
            return Err(invalid(format!(
                "beyond the last confirmed entry {lc}; acknowledge only entries that were read"
            )));
        }
        Ok(())
    }

    /// Marks everything up to `position` consumed (see
    /// [`ManagedCursor::mark_delete`](super::ManagedCursor::mark_delete)).
    pub(super) async fn mark_delete(&self, position: Position) -> Result<()> {
        let mut meta = self.meta.lock().await;
        self.check_open(&meta)?;
        let ml = self.ml()?;
        self.validate(ml.as_ref(), position)?;
        let pi = {
            let mut st = self.pos.lock();
            if position <= st.mark_delete {
                return Ok(());
            }
            if !ml.holds_ledger(position.ledger_id) {
                return Err(ManagedLedgerError::InvalidPosition {
                    name: self.ctx.name.clone(),
                    position,
                    reason: "the managed ledger holds no such ledger".into(),
                });
            }
            st.mark_delete = position;
            st.settle(ml.as_ref());
            st.position_info()
        };
        self.persist(&mut meta, pi).await
    }

    /// Deletes individual entries (see
    /// [`ManagedCursor::delete`](super::ManagedCursor::delete)).
    pub(super) async fn delete_entries(&self, positions: &[Position]) -> Result<()> {
        let mut meta = self.meta.lock().await;
        self.check_open(&meta)?;
        let ml = self.ml()?;
        for p in positions {
            self.validate(ml.as_ref(), *p)?;
            if p.entry_id < 0 || !ml.holds_ledger(p.ledger_id) {
                if *p <= self.pos.lock().mark_delete {
                    continue;
                }
                return Err(ManagedLedgerError::InvalidPosition {
                    name: self.ctx.name.clone(),
                    position: *p,
                    reason: "not an entry of the managed ledger".into(),
                });
            }
        }
        let pi = {
            let mut st = self.pos.lock();
            let mut changed = false;
            for p in positions {
                if *p > st.mark_delete && !st.contains(*p) {
                    st.insert(*p);
                    changed = true;
                }
            }
            if !changed {
                return Ok(());
            }
            st.settle(ml.as_ref());
            st.position_info()
        };
        self.persist(&mut meta, pi).await
    }
}
