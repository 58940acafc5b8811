//! Settings of a [`BookKeeperClient`](crate::BookKeeperClient).

use std::time::Duration;

/// Settings of a [`BookKeeperClient`](crate::BookKeeperClient). The defaults
/// follow BookKeeper's Java client where it has one.
///
/// ```
/// use std::time::Duration;
/// use bkswitch_bookkeeper::ClientConfig;
///
/// let config = ClientConfig::default()
///     .with_cluster_name("bk-east")
///     .with_add_timeout(Duration::from_secs(10));
/// assert_eq!(config.cluster_name.as_deref(), Some("bk-east"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientConfig {
    /// The name the client reports as [`BookKeeper::cluster_name`]
    /// (bkswitch stamps ledgers with it). Default: the metadata-service URI.
    ///
    /// [`BookKeeper::cluster_name`]: bkswitch_bk_client::BookKeeper::cluster_name
    pub cluster_name: Option<String>,
    /// How long a bookie has to acknowledge an add before it is replaced in the
    /// ensemble (Java's `addEntryTimeout`, 5 s).
    pub add_timeout: Duration,
    /// How long a bookie has to answer a read before the next replica is asked
    /// (Java's `readEntryTimeout`, 5 s).
    pub read_timeout: Duration,
    /// Bound of opening a connection to a bookie (5 s).
    pub connect_timeout: Duration,
    /// Whether opens use the digest type recorded in the ledger's metadata
    /// instead of the one asked for (Java's `enableDigestTypeAutodetection`,
    /// which Pulsar turns on). Default `true`. When off, a different digest type
    /// fails the open with `DigestMatchException` (-5).
    pub digest_autodetection: bool,
    /// Whether new ledgers store their creation time in the metadata (field 10,
    /// Java's `storeSystemTimeAsLedgerCreationTime`). Default `false`, as in
    /// BookKeeper and Pulsar: the creation time is then the znode's.
    pub store_ctime: bool,
    /// ZooKeeper session timeout of the client's metadata connection (30 s).
    pub zk_session_timeout: Duration,
    /// Bound of every ZooKeeper operation (10 s).
    pub zk_operation_timeout: Duration,
    /// How many times a writer may change its ensemble after bookie failures
    /// before it gives up (Java's `maxAllowedEnsembleChanges`, unbounded by
    /// default; here 1,000).
    pub max_ensemble_changes: u32,
    /// How long a bookie that could not be reached is placed last when choosing
    /// new ensembles (10 s).
    pub bookie_quarantine: Duration,
}

impl Default for ClientConfig {
    fn default() -> Self {
        ClientConfig {
            cluster_name: None,
            add_timeout: Duration::from_secs(5),
            read_timeout: Duration::from_secs(5),
            connect_timeout: Duration::from_secs(5),
            digest_autodetection: true,
            store_ctime: false,
            zk_session_timeout: Duration::from_secs(30),
            zk_operation_timeout: Duration::from_secs(10),
            max_ensemble_changes: 1_000,
            bookie_quarantine: Duration::from_secs(10),
        }
    }
}

impl ClientConfig {
    /// Set the name the client reports as its cluster name.
    pub fn with_cluster_name(mut self, name: impl Into<String>) -> Self {
        self.cluster_name = Some(name.into());
        self
    }

    /// Set the add timeout.
    pub fn with_add_timeout(mut self, timeout: Duration) -> Self {
        self.add_timeout = timeout;
        self
    }

    /// Set the read timeout.
    pub fn with_read_timeout(mut self, timeout: Duration) -> Self {
        self.read_timeout = timeout;
        self
    }

    /// Set the connect timeout.
    pub fn with_connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Turn digest autodetection on or off.
    pub fn with_digest_autodetection(mut self, on: bool) -> Self {
        self.digest_autodetection = on;
        self
    }

    /// Store (or not) the creation time in new ledgers' metadata.
    pub fn with_store_ctime(mut self, on: bool) -> Self {
        self.store_ctime = on;
        self
    }

    /// Set the ZooKeeper session timeout.
    pub fn with_zk_session_timeout(mut self, timeout: Duration) -> Self {
        self.zk_session_timeout = timeout;
        self
    }

    /// Set the bound of every ZooKeeper operation.
    pub fn with_zk_operation_timeout(mut self, timeout: Duration) -> Self {
        self.zk_operation_timeout = timeout;
        self
    }
}
