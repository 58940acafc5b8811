#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The README (the crate's documentation) links the test kit, which exists only
// with the `testkit` feature.
#![cfg_attr(not(feature = "testkit"), allow(rustdoc::broken_intra_doc_links))]

mod ctx;
mod cursor;
mod error;
mod fence;
mod ledger;
pub mod ledger_metadata;
mod ledger_view;
mod name;
mod position;
mod props;
mod session;
mod storage;

pub mod schema;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;

pub use bkswitch_mledger_spi::{Clock, SystemClock};
pub use cursor::{CursorPromotion, InitialPosition, ManagedCursor};
pub use error::{FenceCause, ManagedLedgerError, ManagedLedgerErrorKind, Result};
pub use ledger::{ManagedLedger, ManagedLedgerFactory};
pub use name::{validate_cursor_name, validate_managed_ledger_name};
pub use position::{Entry, Position};
pub use session::MetadataSession;
pub use storage::{BookKeeperStorage, BookKeeperStorageClass, DEFAULT_STORAGE_CLASS};
