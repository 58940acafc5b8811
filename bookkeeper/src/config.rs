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
    /// Bytes of adds in flight (sent and not yet acknowledged) the client
    /// allows across all its ledgers: an add over the budget waits until
    /// earlier adds are acknowledged (backpressure) instead of growing the
    /// connections' buffers. Default 256 MiB. (The Java client has no such
    /// bound; Pulsar bounds pending adds per managed ledger.)
    pub max_add_bytes_in_flight: usize,
    /// Bytes of adds in flight to one bookie (sent on its connection and not
    /// answered by it yet): an add whose write set has a bookie over this
    /// waits (backpressure), so that a slow bookie does not make its
    /// connection's buffers grow. Default 64 MiB. (Java has Netty's
    /// `clientWriteBufferHighWaterMark` with `waitTimeoutOnBackpressureMs`,
    /// off by default.)
    pub max_add_bytes_in_flight_per_bookie: usize,
    /// Adds per second one write handle sends at most (Java's `throttle`, a
    /// rate limiter per `LedgerHandle`, 5,000 by default in Java, turned off
    /// by Pulsar's broker): an add over the rate waits for its slot, in
    /// order, with up to a second of unused slots saved for a burst. Zero (the
    /// default, as in Pulsar) turns it off. Recovery's write-back is not
    /// throttled.
    pub throttle: u32,
    /// Entries a range read asks for at once: the next entry is asked for as
    /// soon as one arrives. Default 256.
    pub read_window: usize,
    /// Whether range reads ask a bookie for consecutive entries in one
    /// request (BookKeeper 4.17's batched read, Java's `batchReadEnabled`,
    /// on by default as there): the whole range from one bookie when the
    /// write quorum is the ensemble; otherwise runs of write-quorum-size
    /// entries, which one bookie of the ensemble holds together (when the
    /// ensemble and write quorum sizes have no common factor, so that the runs
    /// spread over every bookie; other ledgers are read entry by entry). The
    /// Java client batches only the first kind, and only through its
    /// `batchReadAsync`. Entries an answer leaves out are read one by one from
    /// their replicas, as without batches. Bookies before 4.17 close the
    /// connection on a batched read, failing whatever else was pending on it
    /// (adds too, which then change their ensemble): the client reads such a
    /// bookie entry by entry from then on, but **turn this off for clusters
    /// with bookies before 4.17**. A connection lost for another reason
    /// while a batch was pending has the same effect on that bookie until the
    /// client is restarted (slower reads, never wrong ones).
    pub batch_reads: bool,
    /// Entries a recovery reads ahead and writes back at once (Java's
    /// `recoveryReadBatchSize` bounds the reads only). Default 64. A recovery's
    /// memory is bounded by this many entries, whatever the ledger's length.
    pub recovery_window: usize,
    /// Whether reads of a ledger whose write quorum is its ensemble ask the
    /// same bookie first for every entry (Java's `stickyReadsEnabled`, Pulsar's
    /// `bookkeeperEnableStickyReads`, on by default in Pulsar, as here), which
    /// lets the bookie's read-ahead serve sequential reads.
    pub sticky_reads: bool,
    /// How long a read waits for a replica before also asking the next one
    /// (Java's `speculativeReadTimeout`, Pulsar's
    /// `bookkeeperClientSpeculativeReadTimeoutInMillis`); the first good answer
    /// wins. Zero (the default, as Pulsar's) turns speculative reads off: the
    /// next replica is asked only when one fails or times out (`read_timeout`).
    pub speculative_read_timeout: Duration,
    /// Where the bookies' rack information is in the metadata store, for
    /// rack-aware placement (Pulsar's `bookkeeperClientRackawarePolicyEnabled`
    /// with its `BookieRackAffinityMapping`, which reads `/bookies`: JSON
    /// `{"<group>": {"<bookie id>": {"rack": "/r1", …}, …}, …}`). New ensembles
    /// and replacements then spread over racks: each next bookie comes from the
    /// rack least used so far. `None` (the default) or a missing node: random
    /// placement. Re-read when older than 30 s.
    pub rack_info_path: Option<String>,
    /// TLS to the bookies: a PEM file of the CA certificates that signed the
    /// bookies' certificates (Java's `tlsTrustStore` with
    /// `tlsTrustStoreType=PEM`; TLS is on in Java when
    /// `tlsProviderFactoryClass` is set). Every new connection then sends
    /// BookKeeper's `START_TLS` and runs a TLS handshake before its requests.
    /// `None` (the default): plain TCP.
    pub tls_trust_store: Option<std::path::PathBuf>,
    /// Whether a bookie's certificate must also name the address it is
    /// reached at (Java's `tlsHostnameVerificationEnabled`, off by default as
    /// here: the chain is always checked against the trust store).
    pub tls_hostname_verification: bool,
    /// Add coalescing: with at least this many adds written to a bookie and
    /// not yet answered, requests for it wait for its next answer (or until
    /// this many of them are queued, or a timeout sweep) and then leave
    /// together, in one write that the bookie reads in one wake-up of its
    /// threads — Nagle's rule at the level of requests. Many adds unanswered
    /// means an answer is near; a lone request never waits. Fewer, larger
    /// writes cost the bookies less per entry (fewer wake-ups of their I/O
    /// and journal threads) at the price of up to one answer's interval of
    /// latency for the requests held. Default 0: off (every request leaves
    /// as soon as the connection's writer runs). `bench/RESULTS.md` has the
    /// measured effect at 256 and 1,024 adds in flight.
    pub add_coalescing: usize,
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
            max_add_bytes_in_flight: 256 << 20,
            max_add_bytes_in_flight_per_bookie: 64 << 20,
            throttle: 0,
            read_window: 256,
            batch_reads: true,
            recovery_window: 64,
            sticky_reads: true,
            speculative_read_timeout: Duration::ZERO,
            rack_info_path: None,
            tls_trust_store: None,
            tls_hostname_verification: false,
            add_coalescing: 0,
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

    /// Set the bytes of adds in flight the client allows (at least one entry is
    /// always let through).
    pub fn with_max_add_bytes_in_flight(mut self, bytes: usize) -> Self {
        self.max_add_bytes_in_flight = bytes;
        self
    }

    /// Set the bytes of adds in flight allowed to one bookie.
    pub fn with_max_add_bytes_in_flight_per_bookie(mut self, bytes: usize) -> Self {
        self.max_add_bytes_in_flight_per_bookie = bytes;
        self
    }

    /// Set the adds per second of one write handle (zero: no throttle).
    pub fn with_throttle(mut self, adds_per_second: u32) -> Self {
        self.throttle = adds_per_second;
        self
    }

    /// Set how many entries a range read asks for at once.
    pub fn with_read_window(mut self, entries: usize) -> Self {
        self.read_window = entries;
        self
    }

    /// Set add coalescing ([`add_coalescing`](Self::add_coalescing)): the
    /// adds unanswered by a bookie from which its requests wait for its next
    /// answer; 0 turns it off.
    pub fn with_add_coalescing(mut self, unanswered_adds: usize) -> Self {
        self.add_coalescing = unanswered_adds;
        self
    }

    /// Set whether range reads use batched reads ([`batch_reads`](Self::batch_reads)).
    pub fn with_batch_reads(mut self, on: bool) -> Self {
        self.batch_reads = on;
        self
    }

    /// Set how many entries a recovery reads ahead and writes back at once.
    pub fn with_recovery_window(mut self, entries: usize) -> Self {
        self.recovery_window = entries;
        self
    }

    /// Turn sticky reads on or off.
    pub fn with_sticky_reads(mut self, on: bool) -> Self {
        self.sticky_reads = on;
        self
    }

    /// Set the speculative read timeout (zero: off).
    pub fn with_speculative_read_timeout(mut self, timeout: Duration) -> Self {
        self.speculative_read_timeout = timeout;
        self
    }

    /// Place ensembles over racks, reading the bookies' racks from `path`
    /// (Pulsar keeps them at `/bookies`).
    pub fn with_rack_info_path(mut self, path: impl Into<String>) -> Self {
        self.rack_info_path = Some(path.into());
        self
    }

    /// Turn TLS to the bookies on, trusting the CA certificates in the PEM
    /// file at `path`.
    pub fn with_tls_trust_store(mut self, path: impl Into<std::path::PathBuf>) -> Self {
        self.tls_trust_store = Some(path.into());
        self
    }

    /// Also check that a bookie's certificate names its address.
    pub fn with_tls_hostname_verification(mut self, on: bool) -> Self {
        self.tls_hostname_verification = on;
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
