//! Positions of entries in a managed ledger.

use std::fmt;

use bkswitch_bk_client::{EntryId, LedgerId};
use bkswitch_proto::ml;

/// The position of an entry: the ledger that holds it and its entry id there.
///
/// Positions order by ledger id, then entry id, as Pulsar's `Position` does (a
/// managed ledger's ledger ids grow with every rollover). `(ledger, -1)` is the
/// position *before* the first entry of `ledger`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Position {
    /// The ledger id.
    pub ledger_id: LedgerId,
    /// The entry id within the ledger.
    pub entry_id: EntryId,
}

impl Position {
    /// A position.
    pub const fn new(ledger_id: LedgerId, entry_id: EntryId) -> Position {
        Position {
            ledger_id,
            entry_id,
        }
    }

    /// The position right before this one in the same ledger (`(l, e - 1)`).
    pub const fn prev_in_ledger(self) -> Position {
        Position::new(self.ledger_id, self.entry_id - 1)
    }

    pub(crate) fn to_nested(self) -> ml::NestedPositionInfo {
        ml::NestedPositionInfo {
            ledger_id: self.ledger_id,
            entry_id: self.entry_id,
        }
    }

    pub(crate) fn from_nested(p: &ml::NestedPositionInfo) -> Position {
        Position::new(p.ledger_id, p.entry_id)
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.ledger_id, self.entry_id)
    }
}

/// One entry read from a managed ledger.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// Where the entry is.
    pub position: Position,
    /// Its payload (shared, not copied).
    pub data: bytes::Bytes,
}
