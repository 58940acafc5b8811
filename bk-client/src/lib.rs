#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The README (the crate's documentation) links the test kit, which exists only
// with the `testkit` feature.
#![cfg_attr(not(feature = "testkit"), allow(rustdoc::broken_intra_doc_links))]

mod api;
mod error;
pub mod memory;
mod schemes;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod types;

pub use api::{
    BookKeeper, BookKeeperExt, ClientFactory, ReadHandle, ReadHandleExt, WriteHandle,
    WriteHandleExt,
};
pub use error::{BkError, BkErrorKind, Result};
pub use memory::{
    FencedRecreateFailure, MemoryBookKeeper, MemoryClientFactory, MemoryCluster,
    MemoryClusterConfig, MemoryClusters, OpKind, UnavailableMode,
};
pub use schemes::SchemeClientFactory;
pub use types::{
    DeleteMissing, DigestType, Ensemble, EntryId, LedgerConfig, LedgerEntry, LedgerId,
    LedgerMetadata, LedgerState, NO_ENTRY,
};
