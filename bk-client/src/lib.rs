#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The README (the crate's documentation) links the test kit, which exists only
// with the `testkit` feature.
#![cfg_attr(not(feature = "testkit"), allow(rustdoc::broken_intra_doc_links))]

mod api;
mod error;
mod idgen;
pub mod memory;
mod schemes;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod types;
pub mod uri;

pub use api::{
    BookKeeper, BookKeeperExt, ClientFactory, ReadHandle, ReadHandleExt, WriteHandle,
    WriteHandleExt,
};
pub use error::{BkError, BkErrorKind, Result};
pub use idgen::IdgenSource;
pub use memory::{
    FencedRecreateFailure, MemoryBookKeeper, MemoryClientFactory, MemoryCluster,
    MemoryClusterConfig, MemoryClusters, OpKind, UnavailableMode,
};
pub use schemes::SchemeClientFactory;
pub use types::{
    DeleteMissing, DigestType, Ensemble, EntryId, LedgerConfig, LedgerEntry, LedgerId,
    LedgerMetadata, LedgerState, NO_ENTRY,
};
pub use uri::{
    ClusterUri, LayoutChoice, MetadataServiceUri, UriError, DEFAULT_LEDGERS_ROOT, DEFAULT_ZK_PORT,
    SUPPORTED_SCHEMES, ZOOKEEPER_SCHEMES,
};
