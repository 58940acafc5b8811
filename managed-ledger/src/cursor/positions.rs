//! A cursor's positions ([`CursorPos`]): the read position, the mark-delete
//! position and the individually deleted ranges, and how they settle.

use bkswitch_bk_client::LedgerId;
use bkswitch_proto::ml::{MessageRange, PositionInfo};

use crate::ledger_view::LedgerView;
use crate::position::Position;

#[derive(Debug)]
pub(super) struct CursorPos {
    pub(super) mark_delete: Position,
    pub(super) read: Position,
    /// Individually deleted ranges `(lower exclusive, upper inclusive]`, within one
    /// ledger each, sorted, merged.
    pub(super) ranges: Vec<(Position, Position)>,
    pub(super) cursors_ledger_id: LedgerId,
}

impl CursorPos {
    /// Positions at `mark_delete` (read position there too until the caller
    /// moves it) with the individually deleted `ranges`.
    pub(super) fn new(
        mark_delete: Position,
        ranges: Vec<(Position, Position)>,
        cursors_ledger_id: LedgerId,
    ) -> CursorPos {
        CursorPos {
            mark_delete,
            read: mark_delete,
            ranges,
            cursors_ledger_id,
        }
    }

    pub(super) fn contains(&self, p: Position) -> bool {
        self.ranges.iter().any(|(lo, hi)| *lo < p && p <= *hi)
    }

    pub(super) fn insert(&mut self, p: Position) {
        self.ranges.push((p.prev_in_ledger(), p));
        self.ranges.sort();
        let mut merged: Vec<(Position, Position)> = Vec::with_capacity(self.ranges.len());
        for (lo, hi) in self.ranges.drain(..) {
            match merged.last_mut() {
                Some(last) if last.1.ledger_id == lo.ledger_id && lo <= last.1 => {
                    last.1 = last.1.max(hi);
                }
                _ => merged.push((lo, hi)),
            }
        }
        self.ranges = merged;
    }

    /// Drops what the mark-delete position covers, then advances it over
    /// individually deleted ranges that follow it.
    pub(super) fn settle(&mut self, ml: &dyn LedgerView) {
        loop {
            let md = self.mark_delete;
            self.ranges.retain(|(_, hi)| *hi > md);
            for r in &mut self.ranges {
                if r.0 < md && r.0.ledger_id == md.ledger_id {
                    r.0 = md;
                }
            }
            let next = ml.next_position(md);
            match self
                .ranges
                .iter()
                .find(|(lo, hi)| *lo < next && next <= *hi)
            {
                Some(&(_, hi)) => self.mark_delete = hi,
                None => break,
            }
        }
        let next = ml.next_position(self.mark_delete);
        if self.read < next {
            self.read = next;
        }
    }

    /// The `PositionInfo` persisted for these positions.
    pub(super) fn position_info(&self) -> PositionInfo {
        PositionInfo {
            ledger_id: self.mark_delete.ledger_id,
            entry_id: self.mark_delete.entry_id,
            individual_deleted_messages: self.message_ranges(),
            ..Default::default()
        }
    }

    fn message_ranges(&self) -> Vec<MessageRange> {
        self.ranges
            .iter()
            .map(|(lo, hi)| MessageRange {
                lower_endpoint: lo.to_nested(),
                upper_endpoint: hi.to_nested(),
            })
            .collect()
    }
}

/// The ranges a persisted `individualDeletedMessages` list describes.
pub(super) fn ranges_of(list: &[MessageRange]) -> Vec<(Position, Position)> {
    list.iter()
        .map(|r| {
            (
                Position::from_nested(&r.lower_endpoint),
                Position::from_nested(&r.upper_endpoint),
            )
        })
        .collect()
}
