//! The managed cursor: a named, durable read position with individual deletes.
//!
//! A cursor depends on its managed ledger only through the shared `Ctx` and a
//! [`LedgerView`](crate::ledger_view::LedgerView); it never names the ledger's
//! types.
//!
//! | file | concern |
//! |---|---|
//! | `api.rs` | [`ManagedCursor`], the public API, and [`InitialPosition`] |
//! | `state.rs` | `CursorInner`: metadata, version and cursor ledger under the cursor lock; positions; shared checks |
//! | `positions.rs` | mark-delete and read positions, individually deleted ranges, settling |
//! | `read.rs` | reading, rewinding, mark-delete and individual deletes |
//! | `persist.rs` | positions appended to the cursor ledger, rollover, the compare-and-set, close and delete |
//! | `recovery.rs` | creating a cursor, recovering one from its metadata and cursor ledger |
//! | `properties.rs` | `cursorProperties`: user properties, the update primitive, PROMOTE ([`CursorPromotion`]) |

mod api;
mod persist;
mod positions;
mod properties;
mod read;
mod recovery;
mod state;

pub use api::{InitialPosition, ManagedCursor};
pub use properties::CursorPromotion;
pub(crate) use state::CursorInner;
