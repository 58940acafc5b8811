//! [`RouterConfig`] and the [`StorageSettings`] properties the storage reads.

use std::time::Duration;

use bkswitch_mledger_spi::StorageSettings;

/// Default of [`RouterConfig::old_ledger_read_timeout`] (`oldLedgerReadTimeoutMs`).
pub const DEFAULT_OLD_LEDGER_READ_TIMEOUT: Duration = Duration::from_millis(5000);

/// [`StorageSettings`] property naming the cluster the configured URI belongs to.
pub const CURRENT_CLUSTER_NAME: &str = "currentClusterName";
/// [`StorageSettings`] property naming the bootstrap cluster
/// ([I17](bkswitch_docs::invariants::I17)).
pub const BOOTSTRAP_CLUSTER_NAME: &str = "bootstrapClusterName";
/// [`StorageSettings`] property overriding the old-ledger read timeout, in ms.
pub const OLD_LEDGER_READ_TIMEOUT_MS: &str = "oldLedgerReadTimeoutMs";
/// [`StorageSettings`] property naming the registry root in the metadata store.
pub const CONFIG_PATH: &str = "configPath";
/// Default of [`CONFIG_PATH`].
pub const DEFAULT_CONFIG_PATH: &str = bkswitch_registry::DEFAULT_ROOT;

/// Settings of a [`MultiClusterManagedLedgerStorage`](crate::MultiClusterManagedLedgerStorage).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// Bound on every open, delete and read of a ledger on a cluster that is not
    /// the active one (`oldLedgerReadTimeoutMs`, default 5000 ms).
    pub old_ledger_read_timeout: Duration,
    /// Whether [`initialize`](bkswitch_mledger_spi::ManagedLedgerStorage::initialize)
    /// resolves the active and bootstrap clusters through the cluster registry
    /// in the metadata store (default `true`,
    /// [design §3](bkswitch_docs::design)). With `false` the metadata store is
    /// not used: the configured cluster becomes active and the bootstrap
    /// cluster is the `bootstrapClusterName` property, else the one already
    /// recorded, else the configured cluster.
    pub use_registry: bool,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            old_ledger_read_timeout: DEFAULT_OLD_LEDGER_READ_TIMEOUT,
            use_registry: true,
        }
    }
}

impl RouterConfig {
    /// Set the old-ledger read timeout.
    pub fn with_old_ledger_read_timeout(mut self, timeout: Duration) -> Self {
        self.old_ledger_read_timeout = timeout;
        self
    }

    /// Set whether `initialize` goes through the cluster registry.
    pub fn with_registry(mut self, use_registry: bool) -> Self {
        self.use_registry = use_registry;
        self
    }
}

/// The value of the property `key`, unless it is absent or empty.
pub(crate) fn property<'a>(settings: &'a StorageSettings, key: &str) -> Option<&'a str> {
    settings
        .properties
        .get(key)
        .map(String::as_str)
        .filter(|v| !v.is_empty())
}
