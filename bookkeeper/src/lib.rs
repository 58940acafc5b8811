#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod bookies;
mod client;
mod config;
pub mod digest;
mod errors;
mod idgen;
mod inner;
mod ledger;
mod meta;
pub mod quorum;
#[cfg(feature = "testkit")]
pub mod testkit;
mod uri;
pub(crate) mod wire;

/// Protobuf types of BookKeeper's `DataFormats.proto` (generated).
#[allow(missing_docs, unreachable_pub, clippy::all)]
pub mod proto {
    include!(concat!(env!("OUT_DIR"), "/bookkeeper.formats.rs"));
}

pub use bookies::BookieSet;
pub use client::{BookKeeperClient, BookKeeperClientFactory, MAX_ENSEMBLE_SIZE};
pub use config::ClientConfig;
pub use idgen::{
    advance_ledger_id_generator, next_ledger_id, ClusterIdgenSource, IdgenAdvance, ZkIdgenSource,
};
pub use meta::format::{
    decode as decode_ledger_metadata, encode as encode_ledger_metadata, LedgerRecord,
    METADATA_FORMAT_VERSION,
};
pub use meta::layout::LedgerManagerKind;
pub use uri::{LayoutChoice, MetadataServiceUri, ZOOKEEPER_SCHEMES};
pub use wire::conn::{WireCounts, WireStats};
