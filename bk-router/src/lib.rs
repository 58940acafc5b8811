#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod error;
mod mode;
mod routed;
mod storage;

pub use error::RouterError;
pub use mode::ReadMode;
pub use routed::RoutedClient;
pub use storage::{
    ClusterRouter, MultiClusterManagedLedgerStorage, RouterConfig, BOOTSTRAP_CLUSTER_NAME,
    CURRENT_CLUSTER_NAME, DEFAULT_OLD_LEDGER_READ_TIMEOUT, OLD_LEDGER_READ_TIMEOUT_MS,
};
