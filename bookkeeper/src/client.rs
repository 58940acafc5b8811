//! [`BookKeeperClient`]: a client of one BookKeeper cluster, implementing the
//! bkswitch [`BookKeeper`] SPI, and [`BookKeeperClientFactory`].

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, ClientFactory, DigestType, Ensemble, LedgerConfig, LedgerId,
    LedgerState, ReadHandle, WriteHandle,
};
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use tokio::runtime::Handle;
use tracing::info;

use crate::bookies::{BookieSet, Bookies};
use crate::config::ClientConfig;
use crate::errors::zk_error;
pub use crate::errors::MAX_ENSEMBLE_SIZE;
use crate::inner::ClientInner;
use crate::ledger::read::{length_at_lac, read_lac, LedgerReader};
use crate::ledger::recovery::recover;
use crate::ledger::write::LedgerWriter;
use crate::ledger::LedgerCtx;
use crate::meta::format::LedgerRecord;
use crate::meta::layout::LedgerManagerKind;
use crate::meta::ClusterMeta;
use crate::uri::MetadataServiceUri;

/// A client of one Apache BookKeeper cluster (4.16/4.17), implementing the
/// bkswitch [`BookKeeper`] SPI with BookKeeper's own semantics: ledger metadata
/// and ids in the cluster's ZooKeeper exactly as the Java client keeps them,
/// and the bookie wire protocol version 2 (Pulsar's default) over one pipelined
/// connection per bookie.
///
/// Rust and Java clients can share a cluster: they draw ledger ids from the
/// same generator, read each other's ledgers with any digest type, and fence
/// each other's writers.
///
/// ```no_run
/// use bkswitch_bk_client::{BookKeeper, LedgerConfig, ReadHandle, WriteHandle};
/// use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
/// use bytes::Bytes;
///
/// # async fn run() -> Result<(), bkswitch_bk_client::BkError> {
/// let bk = BookKeeperClient::connect(
///     "zk+hierarchical://127.0.0.1:2181/ledgers",
///     ClientConfig::default().with_cluster_name("bk-a"),
/// )
/// .await?;
/// let w = bk.create_ledger(&LedgerConfig::default()).await?;
/// w.add_entry(Bytes::from("hello")).await?;
/// w.close().await?;
/// let r = bk.open_ledger(w.id(), Default::default(), b"").await?;
/// assert_eq!(r.read_entries(0, 0).await?[0].data, Bytes::from("hello"));
/// bk.close().await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct BookKeeperClient {
    inner: Arc<ClientInner>,
}

impl std::fmt::Debug for BookKeeperClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BookKeeperClient")
            .field("cluster", &self.inner.name)
            .field("uri", &self.inner.uri.as_str())
            .field("closed", &self.inner.is_closed())
            .finish()
    }
}

impl BookKeeperClient {
    /// Connects to the cluster behind `uri` with its own ZooKeeper session.
    ///
    /// Must be called within a Tokio runtime; the client's tasks run on it.
    ///
    /// # Errors
    /// - A malformed URI or unsupported scheme → `InvalidArgument` (-14).
    /// - ZooKeeper unreachable → `ZKException` (-9, retryable).
    /// - No cluster at the ledgers root, or an unsupported layout → an error
    ///   naming the URI and what to do.
    pub async fn connect(uri: &str, config: ClientConfig) -> Result<BookKeeperClient, BkError> {
        let parsed = MetadataServiceUri::parse(uri)?;
        let name = config
            .cluster_name
            .clone()
            .unwrap_or_else(|| uri.to_owned());
        let options = ZkStoreOptions {
            session_timeout: config.zk_session_timeout,
            operation_timeout: config.zk_operation_timeout,
            connect_timeout: config.zk_operation_timeout.max(Duration::from_secs(5)),
            ..ZkStoreOptions::default()
        };
        let store = ZkStore::connect(&parsed.zk_url(), options)
            .await
            .map_err(|e| zk_error(&name, &format!("connecting to ZooKeeper for `{uri}`"), e))?;
        let store: Arc<dyn MetadataStore> = Arc::new(store);
        match Self::build(store.clone(), parsed, name, config, true).await {
            Ok(client) => Ok(client),
            Err(e) => {
                let _ = store.close().await;
                Err(e)
            }
        }
    }

    /// A client over an existing metadata store holding the cluster's
    /// ZooKeeper tree (e.g. a shared [`ZkStore`] without chroot, or a
    /// `MemoryStore` in tests). The store is not closed with the client.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), without the connection errors.
    pub async fn with_store(
        store: Arc<dyn MetadataStore>,
        uri: &str,
        config: ClientConfig,
    ) -> Result<BookKeeperClient, BkError> {
        let parsed = MetadataServiceUri::parse(uri)?;
        let name = config
            .cluster_name
            .clone()
            .unwrap_or_else(|| uri.to_owned());
        Self::build(store, parsed, name, config, false).await
    }

    async fn build(
        store: Arc<dyn MetadataStore>,
        uri: MetadataServiceUri,
        name: String,
        config: ClientConfig,
        owns_store: bool,
    ) -> Result<BookKeeperClient, BkError> {
        let runtime = Handle::try_current().map_err(|_| {
            BkError::new(
                BkErrorKind::InvalidArgument,
                "BookKeeperClient must be created within a Tokio runtime",
            )
        })?;
        let tls = match &config.tls_trust_store {
            None => None,
            Some(path) => Some(
                crate::wire::tls::Tls::new(path, config.tls_hostname_verification).map_err(
                    |e| BkError::new(BkErrorKind::InvalidArgument, e).with_cluster(&name),
                )?,
            ),
        };
        let meta = ClusterMeta::open(store.clone(), &name, &uri).await?;
        let bookies = Bookies::start(store, meta.root(), &name).await?;
        info!(cluster = %name, uri = %uri, layout = ?meta.kind(), bookies = ?bookies.current().writable, "BookKeeper client ready");
        let inner = Arc::new(ClientInner::new(
            name, uri, config, meta, bookies, runtime, owns_store, tls,
        ));
        inner.refresh_racks().await;
        Ok(BookKeeperClient { inner })
    }

    /// The metadata-service URI.
    pub fn uri(&self) -> &MetadataServiceUri {
        &self.inner.uri
    }

    /// The settings.
    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// What this client's bookie connections have written so far: requests,
    /// write system calls and bytes (requests per write shows how well they
    /// are coalesced).
    pub fn wire_counts(&self) -> crate::WireCounts {
        self.inner.wire_stats.snapshot()
    }

    /// Requests this client has sent so far, by bookie id.
    pub fn requests_by_bookie(&self) -> std::collections::BTreeMap<String, u64> {
        self.inner.requests_by_bookie()
    }

    /// Bytes of adds in flight now (sent or waiting to be, not yet
    /// acknowledged), bounded by [`ClientConfig::max_add_bytes_in_flight`].
    pub fn add_bytes_in_flight(&self) -> usize {
        self.inner.add_budget.in_flight()
    }

    /// The most add bytes in flight to one bookie now (sent on its connection
    /// and not answered by it yet), bounded by
    /// [`ClientConfig::max_add_bytes_in_flight_per_bookie`].
    pub fn max_bookie_bytes_in_flight(&self) -> usize {
        self.inner.max_conn_bytes_in_flight()
    }

    /// The bookies as last seen (kept current by a watch on their registrations).
    pub fn bookies(&self) -> BookieSet {
        (*self.inner.bookies.current()).clone()
    }

    /// Re-reads the bookie registrations now.
    ///
    /// # Errors
    /// ZooKeeper errors (-9, retryable).
    pub async fn refresh_bookies(&self) -> Result<BookieSet, BkError> {
        Ok((*self.inner.bookies.refresh().await?).clone())
    }

    /// The ledger manager the cluster uses.
    pub fn ledger_manager(&self) -> LedgerManagerKind {
        self.inner.meta.kind()
    }

    /// The znode path of a ledger's metadata.
    pub fn ledger_path(&self, ledger_id: LedgerId) -> String {
        self.inner.meta.ledger_path(ledger_id)
    }

    /// The raw metadata value of a ledger (format version 3 bytes), `None` when
    /// missing.
    ///
    /// # Errors
    /// ZooKeeper errors.
    pub async fn ledger_metadata_bytes(
        &self,
        ledger_id: LedgerId,
    ) -> Result<Option<Vec<u8>>, BkError> {
        self.inner
            .meta
            .store()
            .get(&self.ledger_path(ledger_id))
            .await
            .map(|r| r.map(|g| g.value))
            .map_err(|e| zk_error(&self.inner.name, "reading ledger metadata", e))
    }

    fn validate(&self, config: &LedgerConfig) -> Result<(), BkError> {
        let (e, w, a) = (
            config.ensemble_size,
            config.write_quorum_size,
            config.ack_quorum_size,
        );
        let invalid = if a == 0 {
            Some(format!("ack quorum {a} must be at least 1"))
        } else if a > w {
            Some(format!("ack quorum {a} must be <= write quorum {w}"))
        } else if w > e {
            Some(format!("write quorum {w} must be <= ensemble size {e}"))
        } else if e > MAX_ENSEMBLE_SIZE {
            Some(format!(
                "ensemble size {e} is above the {MAX_ENSEMBLE_SIZE} this client supports"
            ))
        } else {
            None
        };
        match invalid {
            Some(m) => {
                Err(BkError::new(BkErrorKind::InvalidArgument, m).with_cluster(&self.inner.name))
            }
            None => Ok(()),
        }
    }

    fn new_record(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
        bookies: Vec<String>,
    ) -> LedgerRecord {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as i64)
            .unwrap_or(0);
        LedgerRecord {
            ledger_id,
            ensemble_size: config.ensemble_size,
            write_quorum_size: config.write_quorum_size,
            ack_quorum_size: config.ack_quorum_size,
            state: LedgerState::Open,
            last_entry_id: -1,
            length: 0,
            ensembles: vec![Ensemble {
                first_entry_id: 0,
                bookies,
            }],
            digest_type: Some(config.digest_type),
            password: config.password.clone(),
            stored_ctime: self.inner.config.store_ctime.then_some(now),
            ctime: now,
            custom_metadata: config.custom_metadata.clone(),
            // As BookKeeper: a random non-negative long.
            ctoken: fastrand::i64(0..i64::MAX),
        }
    }

    /// Creates the metadata and the handle (`LedgerExists` when the id is taken).
    async fn create_at(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
        adv: bool,
    ) -> Result<Arc<dyn WriteHandle>, BkError> {
        let bookies = self
            .inner
            .place(config.ensemble_size as usize, &[])
            .map_err(|e| e.with_ledger(ledger_id))?;
        let mut record = self.new_record(ledger_id, config, bookies);
        let znode_ctime = self.inner.meta.create(&record).await?;
        if !self.inner.config.store_ctime {
            // The creation time is the znode's, as other clients will see it.
            record.ctime = znode_ctime;
        }
        let ctx = LedgerCtx::new(
            self.inner.clone(),
            ledger_id,
            config.digest_type,
            &config.password,
        );
        Ok(Arc::new(LedgerWriter::new(ctx, adv, record, 0)))
    }

    async fn open(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
        recovery: bool,
    ) -> Result<Arc<dyn ReadHandle>, BkError> {
        self.inner.check_open()?;
        let (record, version) = self.inner.meta.read_existing(ledger_id).await?;
        if record.digest_type.is_some() && record.password != password {
            return Err(BkError::new(
                BkErrorKind::UnauthorizedAccess,
                "the password does not match the one the ledger was created with",
            )
            .with_cluster(&self.inner.name)
            .with_ledger(ledger_id));
        }
        let digest = match record.digest_type {
            Some(stored) if stored != digest_type && !self.inner.config.digest_autodetection => {
                return Err(BkError::new(
                    BkErrorKind::DigestMismatch,
                    format!(
                        "digest {digest_type:?} requested but the ledger uses {stored:?} \
                         (digest autodetection is off)"
                    ),
                )
                .with_cluster(&self.inner.name)
                .with_ledger(ledger_id));
            }
            Some(stored) => stored,
            None => digest_type,
        };
        let ctx = LedgerCtx::new(self.inner.clone(), ledger_id, digest, password);
        if record.state == LedgerState::Closed {
            return Ok(Arc::new(LedgerReader::closed(ctx, record)));
        }
        if recovery {
            return Ok(Arc::new(recover(ctx, record, version).await?));
        }
        let found = read_lac(&ctx, &record, false).await?;
        let length = length_at_lac(&ctx, &record, found).await?;
        Ok(Arc::new(LedgerReader::new(ctx, record, found.lac, length)))
    }
}

#[async_trait]
impl BookKeeper for BookKeeperClient {
    async fn advance_ledger_ids_beyond(&self, above: LedgerId) -> Result<(), BkError> {
        self.inner.check_open()?;
        self.inner
            .meta
            .advance_beyond(above)
            .await
            .map(|_| ())
            .map_err(|e| e.with_cluster(&self.inner.name))
    }

    fn cluster_name(&self) -> &str {
        &self.inner.name
    }

    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>, BkError> {
        self.validate(config)?;
        self.inner.check_open()?;
        // Fail before consuming an id when the ensemble cannot be placed.
        self.inner.place(config.ensemble_size as usize, &[])?;
        for _ in 0..100 {
            let id = self.inner.meta.generate_id().await?;
            match self.create_at(id, config, false).await {
                Err(e) if e.kind() == BkErrorKind::LedgerExists => continue,
                other => return other,
            }
        }
        Err(BkError::new(
            BkErrorKind::LedgerExists,
            "100 generated ledger ids in a row were already taken by create_ledger_adv",
        )
        .with_cluster(&self.inner.name))
    }

    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>, BkError> {
        if ledger_id < 0 {
            return Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!("ledger id {ledger_id} is negative"),
            )
            .with_cluster(&self.inner.name));
        }
        self.validate(config)?;
        self.inner.check_open()?;
        if ledger_id >= i64::from(i32::MAX) && !self.inner.meta.kind().supports_long_ids() {
            return Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!("ledger id {ledger_id} needs a long ledger layout; this cluster uses the legacy one"),
            )
            .with_cluster(&self.inner.name));
        }
        self.create_at(ledger_id, config, true).await
    }

    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>, BkError> {
        self.open(ledger_id, digest_type, password, true).await
    }

    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>, BkError> {
        self.open(ledger_id, digest_type, password, false).await
    }

    async fn delete_ledger(&self, ledger_id: LedgerId) -> Result<(), BkError> {
        if ledger_id < 0 {
            return Err(BkError::new(
                BkErrorKind::InvalidArgument,
                format!("ledger id {ledger_id} is negative"),
            )
            .with_cluster(&self.inner.name));
        }
        self.inner.check_open()?;
        self.inner.meta.delete(ledger_id).await
    }

    async fn close(&self) -> Result<(), BkError> {
        self.inner.close().await
    }

    fn writable_bookies(&self) -> Option<usize> {
        Some(self.inner.bookies.current().writable.len())
    }
}

/// Builds [`BookKeeperClient`]s from metadata-service URIs, so that the router
/// can open real clusters by their registered URI.
///
/// Handles the schemes of [`MetadataServiceUri`] (`zk://`,
/// `zk+hierarchical://`, `zk+longhierarchical://`, `zk+null://`); each client
/// reports the name given for its URI with [`with_name`](Self::with_name), else
/// the URI itself.
#[derive(Debug, Clone, Default)]
pub struct BookKeeperClientFactory {
    config: ClientConfig,
    names: HashMap<String, String>,
}

impl BookKeeperClientFactory {
    /// A factory creating clients with `config` (its `cluster_name` is ignored).
    pub fn new(config: ClientConfig) -> BookKeeperClientFactory {
        BookKeeperClientFactory {
            config,
            names: HashMap::new(),
        }
    }

    /// Clients of `uri` report `name` as their cluster name.
    pub fn with_name(mut self, uri: impl Into<String>, name: impl Into<String>) -> Self {
        self.names.insert(uri.into(), name.into());
        self
    }
}

#[async_trait]
impl ClientFactory for BookKeeperClientFactory {
    async fn create(&self, metadata_service_uri: &str) -> Result<Arc<dyn BookKeeper>, BkError> {
        let mut config = self.config.clone();
        config.cluster_name = self.names.get(metadata_service_uri).cloned();
        Ok(Arc::new(
            BookKeeperClient::connect(metadata_service_uri, config).await?,
        ))
    }

    /// As [`create`](ClientFactory::create), the client reporting `cluster_name`
    /// (unless [`with_name`](Self::with_name) named the URI).
    async fn create_named(
        &self,
        cluster_name: &str,
        metadata_service_uri: &str,
    ) -> Result<Arc<dyn BookKeeper>, BkError> {
        let mut config = self.config.clone();
        config.cluster_name = Some(
            self.names
                .get(metadata_service_uri)
                .cloned()
                .unwrap_or_else(|| cluster_name.to_owned()),
        );
        Ok(Arc::new(
            BookKeeperClient::connect(metadata_service_uri, config).await?,
        ))
    }
}
