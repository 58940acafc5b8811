#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod error;
mod memory;
mod path;
mod store;
pub mod testkit;
mod types;
mod zk;

pub use error::{ErrorKind, MetadataError, Operation, Result};
pub use memory::MemoryStore;
pub use path::{validate_path, PathUse, MAX_VALUE_LEN, RESERVED_ROOT};
pub use store::{MetadataStore, MetadataStoreExt, Update};
pub use types::{
    CreateMode, ExpectedVersion, GetResult, Notification, SessionEvent, Stat, WatchStream,
};
pub use zk::{check_zk_host, ZkStore, ZkStoreOptions};
