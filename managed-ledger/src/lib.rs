#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod clock;
mod ctx;
mod cursor;
mod error;
mod ledger;
mod name;
mod position;
pub mod testing;

// Module owners while the crate is being built: `schema` is written separately
// from the managed ledger / cursor modules; keep edits inside your own files.
pub mod schema;

pub use clock::{Clock, SystemClock};
pub use cursor::{InitialPosition, ManagedCursor};
pub use error::{ErrorKind, ManagedLedgerError, Result};
pub use ledger::{ManagedLedger, ManagedLedgerFactory};
pub use name::{validate_cursor_name, validate_managed_ledger_name};
pub use position::{Entry, Position};
