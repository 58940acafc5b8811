#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod config;
mod error;
mod hook_errors;
mod hooks;
mod init;
mod metrics;
mod mode;
mod not_initialized;
mod routed;
mod state;
mod storage;
mod sync;
mod table;

pub use config::{
    RouterConfig, BOOTSTRAP_CLUSTER_NAME, CONFIG_PATH, CURRENT_CLUSTER_NAME, DEFAULT_CONFIG_PATH,
    DEFAULT_OLD_LEDGER_READ_TIMEOUT, OLD_LEDGER_READ_TIMEOUT_MS,
};
pub use error::RouterError;
pub use hooks::ClusterRouter;
pub use metrics::{RouterMetrics, RouterMetricsSnapshot};
pub use mode::ReadMode;
pub use routed::RoutedClient;
pub use storage::MultiClusterManagedLedgerStorage;
pub use sync::{AppliedDirective, CoordinatorDuty, RegistrySync, SYNC_RETRY_MAX, SYNC_RETRY_MIN};
pub use table::MAX_CLUSTERS;
