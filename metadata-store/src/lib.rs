#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The README (the crate's documentation) links the ZooKeeper and etcd items
// and the test kit, which exist only with the `zk`, `etcd` and `testkit`
// features.
#![cfg_attr(
    not(all(feature = "zk", feature = "etcd", feature = "testkit")),
    allow(rustdoc::broken_intra_doc_links)
)]

mod error;
#[cfg(feature = "etcd")]
mod etcd;
pub mod fallback;
pub mod layer;
mod memory;
mod open;
mod path;
mod secret;
mod store;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
mod types;
#[cfg(feature = "zk")]
mod zk;

pub use error::{ErrorKind, MetadataError, Operation, Result};
#[cfg(feature = "etcd")]
pub use etcd::{
    check_etcd_url, etcd_key_prefixes, EtcdStore, EtcdStoreOptions, EtcdTls, EtcdUser, ReadBatches,
    WriteBatches,
};
pub use memory::MemoryStore;
pub use open::{
    check_store_url, open_store, open_store_with, StoreSecurity, StoreTimeouts, STORE_URL_FORMS,
};
pub use path::{validate_path, PathUse, MAX_VALUE_LEN, RESERVED_ROOT};
pub use secret::Secret;
pub use store::{MetadataStore, MetadataStoreExt, Update};
pub use types::{
    CreateMode, ExpectedVersion, GetResult, Notification, SessionEvent, Stat, WatchStream,
};
#[cfg(feature = "zk")]
pub use zk::{check_zk_host, ZkAuth, ZkStore, ZkStoreOptions, ZkTls};
