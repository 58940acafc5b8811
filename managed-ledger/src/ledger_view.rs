//! What a cursor sees of its managed ledger: the narrow interface that keeps
//! `cursor` from depending on `ledger`.
//!
//! A cursor needs two things from the managed ledger it belongs to:
//!
//! - the shared [`Ctx`](crate::ctx::Ctx): its name and metadata path, the
//!   metadata store, the config and clock, and the hook call sites through
//!   which it creates, opens and deletes its cursor ledgers (S1, S2, S4);
//! - a [`LedgerView`]: where entries are, and reading them.
//!
//! The ledger hands each cursor its `Ctx` and a weak [`LedgerView`] of itself
//! (`ledger` implements the trait); the cursor never names the ledger's types.

use async_trait::async_trait;
use bkswitch_bk_client::LedgerId;

use crate::error::Result;
use crate::position::{Entry, Position};

/// The positions and entries of a managed ledger, as its cursors use them.
#[async_trait]
pub(crate) trait LedgerView: Send + Sync + std::fmt::Debug {
    /// The position of the last acknowledged entry (`(ledger, -1)` when there
    /// is none yet).
    fn last_confirmed(&self) -> Position;

    /// The position after `pos`: the next entry of its ledger, or the first
    /// entry of the next ledger that has (or may get) entries.
    fn next_position(&self, pos: Position) -> Position;

    /// Whether the managed ledger records the ledger `ledger_id`.
    fn holds_ledger(&self, ledger_id: LedgerId) -> bool;

    /// Reads up to `max` entries from `start`, across ledgers (lenient: empty
    /// when nothing is readable there).
    async fn read_from(&self, start: Position, max: usize) -> Result<Vec<Entry>>;
}
