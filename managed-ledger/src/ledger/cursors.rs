//! The managed ledger's cursors: recovering them at open, opening (creating)
//! and deleting one, and the slowest mark-delete position that bounds trim.
//! Each cursor gets the shared `Ctx` and a weak [`LedgerView`] of this ledger.

use std::sync::{Arc, Weak};

use super::state::MlInner;
use crate::cursor::{CursorInner, InitialPosition, ManagedCursor};
use crate::error::{ManagedLedgerError, Result};
use crate::ledger_view::LedgerView;
use crate::name::validate_cursor_name;
use crate::position::Position;

impl MlInner {
    /// What a cursor of this ledger sees of it.
    fn view(self: &Arc<Self>) -> Weak<dyn LedgerView> {
        let weak: Weak<MlInner> = Arc::downgrade(self);
        weak
    }

    /// Recovers every cursor recorded under the managed ledger's path.
    pub(super) async fn recover_cursors(self: &Arc<Self>) -> Result<()> {
        let ctx = &self.ctx;
        let names = ctx.store.children(&ctx.path).await.map_err(|e| {
            ManagedLedgerError::metadata(
                format!("listing the cursors of managed ledger '{}'", ctx.name),
                e,
            )
        })?;
        for name in names {
            let cursor = CursorInner::recover(self.view(), ctx.clone(), &name).await?;
            if let Some(cursor) = cursor {
                self.cursors.lock().insert(name, cursor);
            }
        }
        Ok(())
    }

    /// Opens the cursor `name`, creating it at `initial` when it does not exist.
    pub(super) async fn open_cursor_at(
        self: &Arc<Self>,
        name: &str,
        initial: InitialPosition,
    ) -> Result<ManagedCursor> {
        validate_cursor_name(name)?;
        self.check_open_for_cursor()?;
        if let Some(c) = self.cursors.lock().get(name) {
            return Ok(ManagedCursor { inner: c.clone() });
        }
        let md = match initial {
            InitialPosition::Latest => self.last_confirmed(),
            InitialPosition::Earliest => {
                let s = self.state.lock();
                match s.info.ledger_info.first() {
                    Some(l) => Position::new(l.ledger_id, -1),
                    None => s.last_confirmed,
                }
            }
        };
        let cursor = CursorInner::create(self.view(), self.ctx.clone(), name, md).await?;
        let mut map = self.cursors.lock();
        let c = map.entry(name.to_owned()).or_insert(cursor).clone();
        Ok(ManagedCursor { inner: c })
    }

    /// The open cursor `name`.
    pub(super) fn cursor(&self, name: &str) -> Result<ManagedCursor> {
        self.cursors
            .lock()
            .get(name)
            .map(|c| ManagedCursor { inner: c.clone() })
            .ok_or_else(|| ManagedLedgerError::NoSuchCursor {
                name: self.ctx.name.clone(),
                cursor: name.to_owned(),
            })
    }

    /// Every cursor, by name.
    pub(super) fn cursors(&self) -> Vec<ManagedCursor> {
        self.cursors
            .lock()
            .values()
            .map(|c| ManagedCursor { inner: c.clone() })
            .collect()
    }

    /// Deletes the cursor `name`: its cursor ledger and its metadata.
    pub(super) async fn delete_cursor(&self, name: &str) -> Result<()> {
        validate_cursor_name(name)?;
        let c = self.cursor(name)?;
        c.inner.delete().await?;
        self.cursors.lock().remove(name);
        Ok(())
    }

    /// The mark-delete position of the slowest cursor, or the last confirmed
    /// position when there is no cursor.
    pub(super) fn slowest_mark_delete(&self) -> Position {
        let cursors = self.cursors.lock();
        cursors
            .values()
            .map(|c| c.mark_delete_position())
            .min()
            .unwrap_or_else(|| self.last_confirmed())
    }
}
