#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod error;
mod init;
mod metrics;
mod mode;
mod routed;
mod storage;
mod sync;

pub use error::RouterError;
pub use init::{CONFIG_PATH, DEFAULT_CONFIG_PATH};
pub use metrics::{RouterMetrics, RouterMetricsSnapshot};
pub use mode::ReadMode;
pub use routed::RoutedClient;
pub use storage::{
    ClusterRouter, MultiClusterManagedLedgerStorage, RouterConfig, BOOTSTRAP_CLUSTER_NAME,
    CURRENT_CLUSTER_NAME, DEFAULT_OLD_LEDGER_READ_TIMEOUT, MAX_CLUSTERS,
    OLD_LEDGER_READ_TIMEOUT_MS,
};
pub use sync::{CoordinatorDuty, RegistrySync, SYNC_RETRY_MAX, SYNC_RETRY_MIN};
