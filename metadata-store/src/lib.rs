#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The README (the crate's documentation) links the ZooKeeper items and the test
// kit, which exist only with the `zk` and `testkit` features.
#![cfg_attr(
    not(all(feature = "zk", feature = "testkit")),
    allow(rustdoc::broken_intra_doc_links)
)]

mod error;
mod memory;
mod path;
mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod types;
#[cfg(feature = "zk")]
mod zk;

pub use error::{ErrorKind, MetadataError, Operation, Result};
pub use memory::MemoryStore;
pub use path::{validate_path, PathUse, MAX_VALUE_LEN, RESERVED_ROOT};
pub use store::{MetadataStore, MetadataStoreExt, Update};
pub use types::{
    CreateMode, ExpectedVersion, GetResult, Notification, SessionEvent, Stat, WatchStream,
};
#[cfg(feature = "zk")]
pub use zk::{check_zk_host, ZkStore, ZkStoreOptions};
