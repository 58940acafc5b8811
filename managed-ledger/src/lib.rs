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

pub mod schema;
mod storage;

pub use clock::{Clock, SystemClock};
pub use cursor::{CursorPromotion, InitialPosition, ManagedCursor};
pub use error::{ErrorKind, ManagedLedgerError, Result};
pub use ledger::{ManagedLedger, ManagedLedgerFactory};
pub use name::{validate_cursor_name, validate_managed_ledger_name};
pub use position::{Entry, Position};
pub use storage::{BookKeeperStorage, BookKeeperStorageClass, DEFAULT_STORAGE_CLASS};
