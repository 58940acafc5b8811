//! The managed ledger and its factory.
//!
//! | file | concern |
//! |---|---|
//! | `api.rs` | [`ManagedLedger`], the public API; each method hands over to one file below |
//! | `factory.rs` | [`ManagedLedgerFactory`]: names, config checks, the shared `Ctx` |
//! | `open.rs` | opening: load the metadata, recover the last ledger, start a new one, recover the cursors |
//! | `state.rs` | `MlInner`: status, writer, metadata and version, read-handle cache, cursors; status checks |
//! | `metadata.rs` | `ManagedLedgerInfo` load, encode and compare-and-set |
//! | `write.rs` | appends, rollover, creating and recording a new ledger |
//! | `read.rs` | locating positions, reading entries, the read-handle cache; the cursors' [`LedgerView`](crate::ledger_view::LedgerView) |
//! | `trim.rs` | deleting consumed ledgers under retention |
//! | `cursors.rs` | the ledger's cursors: recover, open, delete, slowest position |
//! | `close.rs` | terminate, close, delete |

mod api;
mod close;
mod cursors;
mod factory;
mod metadata;
mod open;
mod read;
mod state;
mod trim;
mod write;

pub use api::ManagedLedger;
pub use factory::ManagedLedgerFactory;
