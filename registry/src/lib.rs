#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod election;
mod error;
pub mod failpoints;
mod idgen;
mod model;
mod registry;
mod watcher;

pub use bkswitch_bk_client::{ClusterUri, IdgenSource, DEFAULT_LEDGERS_ROOT, DEFAULT_ZK_PORT};
pub use election::{LeaderElection, ELECTION_RETRY_DELAY};
pub use error::{RegistryError, Result};
pub use idgen::{PrecheckResult, MAX_AT_RISK_LISTED};
pub use model::{BootstrapMarker, ClusterRecord, ClusterStatus, SwitchDirective};
pub use registry::{
    schema_id_prefix, validate_name, validate_prefix, PrefixOverride, PrefixOverrides, Registry,
    DEFAULT_ROOT, MAX_CAS_ATTEMPTS, RESERVED_NAMES, STALE_INDEX_GRACE, URI_INDEX,
};
pub use watcher::{RegistryEvent, RegistryWatcher, WATCH_RETRY_DELAY};
