#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod api;
mod error;
pub mod memory;
mod schemes;
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
