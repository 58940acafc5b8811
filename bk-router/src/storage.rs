//! [`MultiClusterManagedLedgerStorage`] and its routing hooks ([`ClusterRouter`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicI64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::{BkError, BkErrorKind, BookKeeper, ClientFactory, LedgerId};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{
    ActiveClientSupplier, CursorResolver, HookError, HookErrorKind, LedgerResolver,
    ManagedLedgerConfig, ManagedLedgerStorage, ManagedLedgerStorageClass, NewLedgerContext,
    NewLedgerPropertiesProvider, StorageError, StorageSettings,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedCursorInfo;
use bkswitch_proto::schema::PositionInfo;
use bkswitch_proto::{StampError, Stamped, ATTR_KEY};
use bkswitch_schema_spi::SchemaClientProvider;
use parking_lot::Mutex;

use crate::routed::{ClusterState, RoutedClient};
use crate::{ReadMode, RouterError, RouterMetrics};

/// Default of [`RouterConfig::old_ledger_read_timeout`] (`oldLedgerReadTimeoutMs`).
pub const DEFAULT_OLD_LEDGER_READ_TIMEOUT: Duration = Duration::from_millis(5000);

/// [`StorageSettings`] property naming the cluster the configured URI belongs to.
pub const CURRENT_CLUSTER_NAME: &str = "currentClusterName";
/// [`StorageSettings`] property naming the bootstrap cluster (I17).
pub const BOOTSTRAP_CLUSTER_NAME: &str = "bootstrapClusterName";
/// [`StorageSettings`] property overriding the old-ledger read timeout, in ms.
pub const OLD_LEDGER_READ_TIMEOUT_MS: &str = "oldLedgerReadTimeoutMs";

/// How long [`HookErrorKind::ClusterUnavailable`] errors ask callers to wait.
const RETRY_AFTER: Duration = Duration::from_secs(1);

/// Most clusters one storage can route to (registered clusters are never
/// removed from routing, so that every stamped ledger stays readable).
pub const MAX_CLUSTERS: usize = 64;

/// Slot index meaning "none".
const NONE: usize = usize::MAX;

/// Settings of a [`MultiClusterManagedLedgerStorage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// Bound on every open, delete and read of a ledger on a cluster that is not
    /// the active one (`oldLedgerReadTimeoutMs`, default 5000 ms).
    pub old_ledger_read_timeout: Duration,
    /// Whether [`initialize`](ManagedLedgerStorage::initialize) resolves the
    /// active and bootstrap clusters through the cluster registry in the
    /// metadata store (default `true`, SPEC §3). With `false` the metadata
    /// store is not used: the configured cluster becomes active and the
    /// bootstrap cluster is the `bootstrapClusterName` property, else the one
    /// already recorded, else the configured cluster.
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

/// One registered cluster in the routing table. Never removed or replaced once
/// published.
pub(crate) struct Slot {
    /// The cluster name, inline (compared on every stamped resolve).
    name: Box<str>,
    pub(crate) state: Arc<ClusterState>,
    /// The cluster's client, for the life of the storage (its started client
    /// is installed and taken out inside).
    pub(crate) client: Arc<RoutedClient>,
}

/// The authoritative state, changed under a lock; the hot paths read the
/// append-only slot table and a few atomics instead.
#[derive(Default)]
pub(crate) struct Book {
    pub(crate) clusters: BTreeMap<String, Entry>,
    pub(crate) bootstrap: Option<String>,
    pub(crate) active: Option<String>,
}

pub(crate) struct Entry {
    pub(crate) uri: String,
    pub(crate) slot: usize,
}

pub(crate) struct Inner {
    pub(crate) config: Mutex<RouterConfig>,
    pub(crate) factory: Mutex<Option<Arc<dyn ClientFactory>>>,
    pub(crate) book: Mutex<Book>,
    /// Append-only: slot `i` is set once, before `len` covers it.
    slots: Box<[OnceLock<Slot>]>,
    len: AtomicUsize,
    /// Slot of the active cluster, or [`NONE`].
    active: AtomicUsize,
    /// Slot of the bootstrap cluster, or [`NONE`] (unrecorded or unregistered).
    bootstrap: AtomicUsize,
    /// Lowest ledger id known to have been created stamped on the bootstrap
    /// cluster (I17); `i64::MAX` while none is known.
    lowest_stamped_on_bootstrap: AtomicI64,
    pub(crate) read_mode: AtomicU8,
    pub(crate) metrics: Arc<RouterMetrics>,
    pub(crate) admin: tokio::sync::Mutex<()>,
    not_initialized: Arc<dyn BookKeeper>,
}

/// `a == b`, comparing the length first and short names (the usual cluster
/// names) as one or two machine words instead of calling `memcmp`.
#[inline(always)]
fn same_bytes(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    if n != b.len() {
        return false;
    }
    let word8 = |s: &[u8], i: usize| {
        s.get(i..i + 8)
            .map(|w| u64::from_le_bytes([w[0], w[1], w[2], w[3], w[4], w[5], w[6], w[7]]))
    };
    let word4 = |s: &[u8], i: usize| {
        s.get(i..i + 4)
            .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
    };
    match n {
        8..=16 => word8(a, 0) == word8(b, 0) && word8(a, n - 8) == word8(b, n - 8),
        4..=7 => word4(a, 0) == word4(b, 0) && word4(a, n - 4) == word4(b, n - 4),
        _ => a == b,
    }
}

impl Inner {
    #[inline]
    fn slot(&self, index: usize) -> Option<&Slot> {
        self.slots.get(index).and_then(OnceLock::get)
    }

    /// The slot (and its index) of the cluster called `name` (length first,
    /// then bytes).
    #[inline]
    fn find(&self, name: &str) -> Option<(usize, &Slot)> {
        let len = self.len.load(Ordering::Acquire);
        let wanted = name.as_bytes();
        for (i, cell) in self.slots.iter().take(len).enumerate() {
            if let Some(slot) = cell.get() {
                if same_bytes(slot.name.as_bytes(), wanted) {
                    return Some((i, slot));
                }
            }
        }
        None
    }

    /// Recomputes the bootstrap slot index from the book.
    fn publish_bootstrap(&self, book: &Book) {
        let index = book
            .bootstrap
            .as_deref()
            .and_then(|b| book.clusters.get(b))
            .map_or(NONE, |e| e.slot);
        self.bootstrap.store(index, Ordering::Release);
    }

    pub(crate) fn factory(
        &self,
        operation: &'static str,
    ) -> Result<Arc<dyn ClientFactory>, RouterError> {
        self.factory
            .lock()
            .clone()
            .ok_or(RouterError::NotInitialized { operation })
    }

    pub(crate) fn unknown(&self, name: &str) -> RouterError {
        RouterError::UnknownCluster {
            name: name.to_owned(),
            registered: self.book.lock().clusters.keys().cloned().collect(),
        }
    }

    pub(crate) fn add_cluster(&self, name: &str, uri: &str) -> Result<(), RouterError> {
        if name.trim().is_empty() || name.chars().any(char::is_whitespace) {
            return Err(RouterError::InvalidSettings(format!(
                "bookie cluster name '{name}' must be non-empty and without whitespace"
            )));
        }
        let mut book = self.book.lock();
        if let Some(e) = book.clusters.get(name) {
            if e.uri == uri {
                return Ok(());
            }
            return Err(RouterError::Conflict {
                name: name.to_owned(),
                uri: uri.to_owned(),
                reason: format!("'{name}' is already registered at '{}'", e.uri),
            });
        }
        if let Some((other, _)) = book.clusters.iter().find(|(_, e)| e.uri == uri) {
            return Err(RouterError::Conflict {
                name: name.to_owned(),
                uri: uri.to_owned(),
                reason: format!("the URI is already registered as cluster '{other}'"),
            });
        }
        let index = self.len.load(Ordering::Relaxed);
        if index >= self.slots.len() {
            return Err(RouterError::InvalidSettings(format!(
                "cannot register bookie cluster '{name}': at most {MAX_CLUSTERS} clusters can be \
                 registered with one storage"
            )));
        }
        let state = Arc::new(ClusterState::new(name));
        let slot = Slot {
            name: name.into(),
            client: Arc::new(RoutedClient::new(state.clone())),
            state,
        };
        if self.slots[index].set(slot).is_err() {
            // Unreachable: slots are only set here, under the book lock.
            return Err(RouterError::InvalidSettings(format!(
                "routing slot {index} is already taken"
            )));
        }
        self.len.store(index + 1, Ordering::Release);
        book.clusters.insert(
            name.to_owned(),
            Entry {
                uri: uri.to_owned(),
                slot: index,
            },
        );
        self.publish_bootstrap(&book);
        Ok(())
    }

    /// The registered cluster's slot, or `UnknownCluster`.
    fn registered(&self, name: &str) -> Result<(&Slot, String), RouterError> {
        let book = self.book.lock();
        match book.clusters.get(name) {
            Some(e) => match self.slot(e.slot) {
                Some(slot) => Ok((slot, e.uri.clone())),
                None => Err(RouterError::UnknownCluster {
                    name: name.to_owned(),
                    registered: book.clusters.keys().cloned().collect(),
                }),
            },
            None => Err(RouterError::UnknownCluster {
                name: name.to_owned(),
                registered: book.clusters.keys().cloned().collect(),
            }),
        }
    }

    /// The cluster's client, started through the factory if needed. Callers
    /// hold the admin lock.
    pub(crate) async fn connect(&self, name: &str) -> Result<Arc<RoutedClient>, RouterError> {
        let (slot, uri) = self.registered(name)?;
        if slot.state.is_connected() {
            return Ok(slot.client.clone());
        }
        let factory = self.factory("connecting a cluster")?;
        let raw = factory
            .create(&uri)
            .await
            .map_err(|source| RouterError::ClientStart {
                name: name.to_owned(),
                uri: uri.clone(),
                source: Box::new(source),
            })?;
        self.install(name, raw)
    }

    /// Installs an already started client for a registered cluster (replacing
    /// nothing: a connected cluster keeps its client and `raw` is dropped).
    pub(crate) fn install(
        &self,
        name: &str,
        raw: Arc<dyn BookKeeper>,
    ) -> Result<Arc<RoutedClient>, RouterError> {
        let (slot, uri) = self.registered(name)?;
        if !slot.state.is_connected() {
            let timeout = self.config.lock().old_ledger_read_timeout;
            slot.client.install(raw, timeout);
            tracing::info!(cluster = name, uri = %uri, "bookie cluster client started");
        }
        Ok(slot.client.clone())
    }

    pub(crate) fn activate(&self, name: &str) -> Result<Option<String>, RouterError> {
        let mut book = self.book.lock();
        let Some(index) = book.clusters.get(name).map(|e| e.slot) else {
            drop(book);
            return Err(self.unknown(name));
        };
        let previous = book.active.replace(name.to_owned());
        if let Some(prev) = previous.as_deref() {
            if let Some(slot) = book.clusters.get(prev).and_then(|e| self.slot(e.slot)) {
                slot.state.set_active(false);
            }
        }
        if let Some(slot) = self.slot(index) {
            slot.state.set_active(true);
        }
        self.active.store(index, Ordering::Release);
        Ok(previous)
    }

    pub(crate) fn set_bootstrap(&self, name: &str) -> Result<(), RouterError> {
        if name.is_empty() {
            return Err(RouterError::InvalidSettings(
                "the bootstrap cluster name must not be empty".into(),
            ));
        }
        let mut book = self.book.lock();
        match book.bootstrap.as_deref() {
            Some(current) if current == name => return Ok(()),
            Some(current) => {
                return Err(RouterError::BootstrapAlreadySet {
                    current: current.to_owned(),
                    requested: name.to_owned(),
                })
            }
            None => book.bootstrap = Some(name.to_owned()),
        }
        self.publish_bootstrap(&book);
        tracing::info!(cluster = name, "bootstrap bookie cluster recorded");
        Ok(())
    }

    /// I17 learning: `ledger_id` was created stamped on the bootstrap cluster.
    #[inline]
    fn learn_stamped_on_bootstrap(&self, ledger_id: LedgerId) {
        if ledger_id < self.lowest_stamped_on_bootstrap.load(Ordering::Relaxed) {
            self.lowest_stamped_on_bootstrap
                .fetch_min(ledger_id, Ordering::Relaxed);
        }
    }
}

/// A [`ManagedLedgerStorage`] over several BookKeeper clusters (PIP-477).
///
/// - One storage class per connected cluster; clients are created through the
///   [`ClientFactory`] when first needed and cached.
/// - The active cluster (where new ledgers are created, S1) is hot-swapped by
///   [`switch_active_cluster`](Self::switch_active_cluster) without locks on the
///   read side.
/// - [`configure`](ManagedLedgerStorage::configure) installs the routing hooks
///   of [`ClusterRouter`] (S1, S2, S4) into every managed-ledger config;
///   [`schema_provider`](Self::schema_provider) gives the S3 provider.
/// - Unstamped (legacy) ledgers resolve to the bootstrap cluster (I17).
///
/// Cheap to clone: clones share the same state.
#[derive(Clone)]
pub struct MultiClusterManagedLedgerStorage {
    pub(crate) inner: Arc<Inner>,
    router: Arc<ClusterRouter>,
}

impl fmt::Debug for MultiClusterManagedLedgerStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let book = self.inner.book.lock();
        f.debug_struct("MultiClusterManagedLedgerStorage")
            .field("clusters", &book.clusters.keys().collect::<Vec<_>>())
            .field("active", &book.active)
            .field("bootstrap", &book.bootstrap)
            .field("read_mode", &self.read_mode())
            .finish()
    }
}

impl Default for MultiClusterManagedLedgerStorage {
    fn default() -> Self {
        MultiClusterManagedLedgerStorage::new(RouterConfig::default())
    }
}

impl MultiClusterManagedLedgerStorage {
    /// An empty storage; call [`initialize`](ManagedLedgerStorage::initialize),
    /// or [`set_client_factory`](Self::set_client_factory) and register clusters
    /// yourself.
    pub fn new(config: RouterConfig) -> MultiClusterManagedLedgerStorage {
        let inner = Arc::new(Inner {
            config: Mutex::new(config),
            factory: Mutex::new(None),
            book: Mutex::new(Book::default()),
            slots: (0..MAX_CLUSTERS).map(|_| OnceLock::new()).collect(),
            len: AtomicUsize::new(0),
            active: AtomicUsize::new(NONE),
            bootstrap: AtomicUsize::new(NONE),
            lowest_stamped_on_bootstrap: AtomicI64::new(i64::MAX),
            read_mode: AtomicU8::new(ReadMode::DualRead.to_u8()),
            metrics: Arc::new(RouterMetrics::default()),
            admin: tokio::sync::Mutex::new(()),
            not_initialized: Arc::new(NotInitializedClient),
        });
        let router = Arc::new(ClusterRouter {
            inner: inner.clone(),
        });
        MultiClusterManagedLedgerStorage { inner, router }
    }

    /// Use `factory` to create clients (also done by `initialize`).
    pub fn set_client_factory(&self, factory: Arc<dyn ClientFactory>) {
        *self.inner.factory.lock() = Some(factory);
    }

    /// Register a cluster by name and metadata-service URI. Its client is created
    /// when first needed (a switch, [`connect_cluster`](Self::connect_cluster), or
    /// a resolve of a ledger stamped to it). Registering the same pair again is a
    /// no-op.
    ///
    /// # Errors
    ///
    /// [`RouterError::InvalidSettings`] for an empty name or one with whitespace;
    /// [`RouterError::Conflict`] when the name is registered with another URI or
    /// the URI under another name.
    pub fn add_cluster(&self, name: &str, metadata_service_uri: &str) -> Result<(), RouterError> {
        self.inner.add_cluster(name, metadata_service_uri)
    }

    /// Create (or return the cached) client of a registered cluster.
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`], [`RouterError::NotInitialized`] without a
    /// factory, [`RouterError::ClientStart`] when the factory fails.
    pub async fn connect_cluster(&self, name: &str) -> Result<Arc<dyn BookKeeper>, RouterError> {
        let _admin = self.inner.admin.lock().await;
        Ok(self.inner.connect(name).await?)
    }

    /// The counters of this storage (shared with its
    /// [`RegistrySync`](crate::RegistrySync), if any).
    pub fn metrics(&self) -> Arc<RouterMetrics> {
        self.inner.metrics.clone()
    }

    /// The lowest ledger id known to have been created stamped on the
    /// bootstrap cluster (see [`ClusterRouter`] on I17), once one is known.
    pub fn lowest_stamped_on_bootstrap(&self) -> Option<LedgerId> {
        match self
            .inner
            .lowest_stamped_on_bootstrap
            .load(Ordering::Relaxed)
        {
            i64::MAX => None,
            id => Some(id),
        }
    }

    /// Record the bootstrap cluster: the cluster legacy (unstamped) ledgers are
    /// on (invariant I17). Recorded once: setting the same name again is a no-op.
    ///
    /// # Errors
    ///
    /// [`RouterError::BootstrapAlreadySet`] when another name is recorded;
    /// [`RouterError::InvalidSettings`] for an empty name.
    pub fn set_bootstrap(&self, name: &str) -> Result<(), RouterError> {
        self.inner.set_bootstrap(name)
    }

    /// The bootstrap cluster, once recorded.
    pub fn bootstrap_cluster(&self) -> Option<String> {
        self.inner.book.lock().bootstrap.clone()
    }

    /// The active cluster (where new ledgers are created), once set.
    pub fn active_cluster(&self) -> Option<String> {
        self.inner.book.lock().active.clone()
    }

    /// The registered clusters, by name, with their URIs.
    pub fn clusters(&self) -> Vec<(String, String)> {
        let reg = self.inner.book.lock();
        reg.clusters
            .iter()
            .map(|(n, e)| (n.clone(), e.uri.clone()))
            .collect()
    }

    /// Make `name` the active cluster: every ledger created from now on (data,
    /// cursor and schema ledgers) is created on it and stamped with it. Ledgers
    /// already recorded keep routing by their stamp. Switching to the active
    /// cluster is a no-op.
    ///
    /// The client is started first; if it cannot start, the switch is rejected
    /// and the previous cluster stays active.
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`], [`RouterError::NotInitialized`],
    /// [`RouterError::ClientStart`]; in every case nothing changed.
    pub async fn switch_active_cluster(&self, name: &str) -> Result<(), RouterError> {
        let _admin = self.inner.admin.lock().await;
        let result = self.inner.connect(name).await;
        if let Err(e) = result {
            tracing::warn!(target_cluster = name, error = %e, "bookie cluster switch rejected");
            return Err(e);
        }
        let previous = self.inner.activate(name)?;
        if previous.as_deref() != Some(name) {
            tracing::info!(
                from = previous.as_deref().unwrap_or("<none>"),
                to = name,
                "active bookie cluster switched"
            );
        }
        Ok(())
    }

    /// The current read mode.
    pub fn read_mode(&self) -> ReadMode {
        ReadMode::from_u8(self.inner.read_mode.load(Ordering::Acquire))
    }

    /// Change the read mode; takes effect for the next resolve.
    pub fn set_read_mode(&self, mode: ReadMode) {
        let old = ReadMode::from_u8(self.inner.read_mode.swap(mode.to_u8(), Ordering::AcqRel));
        tracing::info!(from = %old, to = %mode, "bookie cluster read mode changed");
    }

    /// The old-ledger read timeout applied to clients of non-active clusters.
    pub fn old_ledger_read_timeout(&self) -> Duration {
        self.inner.config.lock().old_ledger_read_timeout
    }

    /// The ledger ids of the handles open through the router on `name` (one
    /// entry per handle, sorted).
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`].
    pub fn open_handles(&self, name: &str) -> Result<Vec<LedgerId>, RouterError> {
        let state = {
            let book = self.inner.book.lock();
            book.clusters
                .get(name)
                .and_then(|e| self.inner.slot(e.slot))
                .map(|s| s.state.clone())
        };
        match state {
            Some(s) => Ok(s.open_handles()),
            None => Err(self.inner.unknown(name)),
        }
    }

    /// Close and drop the client of a non-active cluster that has no handle open
    /// through the router (invariant I5). The cluster stays registered: a later
    /// resolve of a ledger stamped to it starts a new client in the background
    /// and fails with a retryable error until it is ready. Closing a cluster
    /// without a client is a no-op.
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`]; [`RouterError::CloseRefused`] for the
    /// active cluster or while handles are open (listing their ledgers);
    /// [`RouterError::Close`] when the client reports a failure (it is dropped
    /// anyway).
    pub async fn close_client(&self, name: &str) -> Result<(), RouterError> {
        let _admin = self.inner.admin.lock().await;
        let client = {
            let book = self.inner.book.lock();
            let is_active = book.active.as_deref() == Some(name);
            let Some(slot) = book
                .clusters
                .get(name)
                .and_then(|e| self.inner.slot(e.slot))
            else {
                drop(book);
                return Err(self.inner.unknown(name));
            };
            if is_active {
                return Err(RouterError::CloseRefused {
                    name: name.to_owned(),
                    reason: "it is the active cluster; switch to another cluster first".into(),
                    open_handles: 0,
                    ledger_ids: Vec::new(),
                });
            }
            let open = slot.state.open_handles();
            if !open.is_empty() {
                return Err(RouterError::CloseRefused {
                    name: name.to_owned(),
                    reason: "reads are still active on it (I5)".into(),
                    open_handles: open.len(),
                    ledger_ids: open,
                });
            }
            slot.client.uninstall()
        };
        let Some(client) = client else {
            return Ok(());
        };
        tracing::info!(cluster = name, "bookie cluster client closed");
        client.close().await.map_err(|source| RouterError::Close {
            name: name.to_owned(),
            source: Box::new(source),
        })
    }

    /// The routing hooks (S1, S2, S3, S4) over this storage.
    pub fn router(&self) -> Arc<ClusterRouter> {
        self.router.clone()
    }

    /// The S3 provider for schema storage.
    pub fn schema_provider(&self) -> Arc<dyn SchemaClientProvider> {
        self.router.clone()
    }

    fn class(&self, name: &str) -> Option<Arc<dyn ManagedLedgerStorageClass>> {
        let book = self.inner.book.lock();
        let slot = self.inner.slot(book.clusters.get(name)?.slot)?;
        if !slot.state.is_connected() {
            return None;
        }
        Some(Arc::new(ClusterClass {
            name: name.to_owned(),
            client: slot.client.clone(),
        }))
    }
}

#[async_trait]
impl ManagedLedgerStorage for MultiClusterManagedLedgerStorage {
    /// Resolves the active cluster, starts its client and makes it active.
    ///
    /// With [`RouterConfig::use_registry`] (the default), through the cluster
    /// registry at the `configPath` property (default `/admin/bookie-clusters`)
    /// in `metadata_store` (SPEC §3):
    ///
    /// 1. the registry's ACTIVE cluster, if any (every registered cluster that
    ///    is not DEPRECATED is registered for routing too);
    /// 2. else the `currentClusterName` property: registered in the registry
    ///    as ACTIVE (URI = the configured metadata-service URI), or promoted
    ///    when already registered;
    /// 3. else the name the configured cluster's client reports, registered
    ///    ACTIVE.
    ///
    /// Then the bootstrap marker is recorded if absent (the
    /// `bootstrapClusterName` property, else the active cluster) and the
    /// recorded one is used: a property that disagrees with a recorded marker
    /// fails with [`RouterError::BootstrapMismatch`] before anything is written.
    ///
    /// The active cluster's client is started before anything is written to
    /// the registry or to this storage: if it cannot start, `initialize` fails
    /// with [`RouterError::ClientStart`] and nothing changed.
    ///
    /// Without the registry, the configured cluster (named by
    /// `currentClusterName`, else by its client) becomes active and the
    /// bootstrap cluster is the property, else the one already recorded, else
    /// this cluster. `oldLedgerReadTimeoutMs` overrides the configured timeout.
    async fn initialize(
        &self,
        settings: &StorageSettings,
        metadata_store: Arc<dyn MetadataStore>,
        client_factory: Arc<dyn ClientFactory>,
    ) -> Result<(), StorageError> {
        if let Some(ms) = settings.properties.get(OLD_LEDGER_READ_TIMEOUT_MS) {
            let ms: u64 = ms.parse().map_err(|_| {
                RouterError::InvalidSettings(format!(
                    "{OLD_LEDGER_READ_TIMEOUT_MS} must be a number of milliseconds, got '{ms}'"
                ))
            })?;
            self.inner.config.lock().old_ledger_read_timeout = Duration::from_millis(ms);
        }
        let use_registry = self.inner.config.lock().use_registry;
        if use_registry {
            self.initialize_with_registry(settings, metadata_store, client_factory)
                .await?;
        } else {
            self.initialize_without_registry(settings, client_factory)
                .await?;
        }
        Ok(())
    }

    fn storage_classes(&self) -> Vec<Arc<dyn ManagedLedgerStorageClass>> {
        let (active, names): (Option<String>, Vec<String>) = {
            let reg = self.inner.book.lock();
            (reg.active.clone(), reg.clusters.keys().cloned().collect())
        };
        let mut out = Vec::new();
        if let Some(a) = active.as_deref() {
            out.extend(self.class(a));
        }
        for n in names
            .iter()
            .filter(|n| Some(n.as_str()) != active.as_deref())
        {
            out.extend(self.class(n));
        }
        out
    }

    fn default_storage_class(&self) -> Result<Arc<dyn ManagedLedgerStorageClass>, StorageError> {
        let active = self.active_cluster();
        active.and_then(|a| self.class(&a)).ok_or_else(|| {
            RouterError::NotInitialized {
                operation: "default_storage_class",
            }
            .into()
        })
    }

    fn storage_class(&self, name: &str) -> Option<Arc<dyn ManagedLedgerStorageClass>> {
        self.class(name)
    }

    fn configure(&self, config: &mut ManagedLedgerConfig) {
        let r = &self.router;
        config.hooks.active_client = Some(r.clone());
        config.hooks.ledger_resolver = Some(r.clone());
        config.hooks.cursor_resolver = Some(r.clone());
        config.hooks.new_ledger_properties = vec![r.clone()];
        config.hooks.new_cursor_ledger_properties = vec![r.clone()];
    }

    async fn close(&self) -> Result<(), StorageError> {
        let _admin = self.inner.admin.lock().await;
        let clients: Vec<(String, Arc<dyn BookKeeper>)> = {
            let book = self.inner.book.lock();
            book.clusters
                .iter()
                .filter_map(|(n, e)| {
                    let slot = self.inner.slot(e.slot)?;
                    slot.client.uninstall().map(|c| (n.clone(), c))
                })
                .collect()
        };
        let mut first = None;
        for (name, c) in clients {
            if let Err(source) = c.close().await {
                first.get_or_insert(RouterError::Close {
                    name,
                    source: Box::new(source),
                });
            }
        }
        match first {
            Some(e) => Err(e.into()),
            None => Ok(()),
        }
    }
}

/// The storage class of one cluster: its name and its routed client.
#[derive(Debug)]
struct ClusterClass {
    name: String,
    client: Arc<RoutedClient>,
}

impl ManagedLedgerStorageClass for ClusterClass {
    fn name(&self) -> &str {
        &self.name
    }

    fn client(&self) -> Arc<dyn BookKeeper> {
        self.client.clone()
    }
}

/// The routing hooks of a [`MultiClusterManagedLedgerStorage`]: S1 (active
/// client), S2 (ledger and cursor resolvers), S3 (schema provider) and S4
/// (stamper).
///
/// Every resolve reads an append-only table of cluster slots (clusters are
/// never removed from routing) and a few atomics: no lock, no snapshot, no
/// allocation on success; the returned client is one `Arc` clone.
///
/// # Unstamped ledgers created after bootstrap (I17)
///
/// A ledger without a stamp is legacy and resolves to the bootstrap cluster.
/// Ledger ids of one BookKeeper cluster increase, and every ledger stamped to
/// the bootstrap cluster was created after the bootstrap marker (the plugin
/// only stamps once it runs). So the router keeps the lowest ledger id known to
/// have been created stamped on the bootstrap cluster, learned from S4 stamping
/// by a client of the bootstrap cluster and from resolving ledgers stamped to
/// it. An unstamped ledger whose id is greater than that id was created after
/// bootstrap by a writer running without the plugin: resolving it fails with
/// [`HookErrorKind::CorruptMetadata`] (never guessed around) and counts in
/// [`RouterMetrics::unstamped_after_bootstrap`].
///
/// Limitations: the lowest id is learned in memory only (a restarted node
/// detects nothing until it sees a stamped bootstrap ledger again); an
/// unstamped ledger created after bootstrap but before the first stamped one
/// that this node learned of has a smaller id and is not detected; and ledgers
/// created on the bootstrap cluster with a chosen id (`createLedgerAdv`, as the
/// ledger copy does) are assumed to carry ids beyond the legacy ones, as the
/// idgen precheck (I11) guarantees for copies.
pub struct ClusterRouter {
    inner: Arc<Inner>,
}

impl fmt::Debug for ClusterRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRouter").finish_non_exhaustive()
    }
}

/// The stamp among `props` (`Err(())` when it appears more than once): compares
/// each key by length, then bytes.
macro_rules! scan_stamp {
    ($props:expr, $key:ident) => {{
        let mut found: Option<&str> = None;
        let mut duplicate = false;
        for p in $props.iter() {
            let k = p.$key.as_bytes();
            if k.len() == ATTR_KEY.len() && k == ATTR_KEY.as_bytes() {
                duplicate |= found.is_some();
                found = Some(p.value.as_str());
            }
        }
        if duplicate {
            Err(())
        } else {
            Ok(found)
        }
    }};
}

impl ClusterRouter {
    /// The client that holds the ledger stamped with `stamp` (`Ok(None)`: legacy).
    ///
    /// # Errors
    ///
    /// See [`LedgerResolver::resolve_ledger`] on this type.
    #[inline]
    pub fn route(
        &self,
        stamp: Result<Option<&str>, StampError>,
        ledger_id: LedgerId,
    ) -> Result<Arc<dyn BookKeeper>, HookError> {
        match stamp {
            Ok(s) => self.route_scanned(s, ledger_id),
            Err(e) => Err(corrupt(e, ledger_id)),
        }
    }

    #[inline(always)]
    fn route_scanned(
        &self,
        stamp: Option<&str>,
        ledger_id: LedgerId,
    ) -> Result<Arc<dyn BookKeeper>, HookError> {
        let inner = &*self.inner;
        let slot = match stamp {
            Some(name) => {
                let Some((index, slot)) = inner.find(name) else {
                    return Err(unknown_cluster(name, ledger_id));
                };
                if index == inner.bootstrap.load(Ordering::Relaxed) {
                    inner.learn_stamped_on_bootstrap(ledger_id);
                }
                slot
            }
            None => {
                let index = inner.bootstrap.load(Ordering::Acquire);
                if ledger_id > inner.lowest_stamped_on_bootstrap.load(Ordering::Relaxed) {
                    return Err(self.unstamped_after_bootstrap(ledger_id));
                }
                match inner.slot(index) {
                    Some(slot) => slot,
                    None => return Err(self.no_bootstrap_slot(ledger_id)),
                }
            }
        };
        let mode = inner.read_mode.load(Ordering::Relaxed);
        if mode != 0 {
            let active = slot.state.is_active();
            let refused = match ReadMode::from_u8(mode) {
                ReadMode::NewClusterOnly => !active,
                ReadMode::OldClusterOnly => active,
                ReadMode::DualRead => false,
            };
            if refused {
                return Err(refused_by_mode(&slot.state.name, ledger_id, mode));
            }
        }
        if !slot.state.is_connected() {
            return Err(self.not_connected(&slot.state, ledger_id));
        }
        Ok(slot.client.clone())
    }

    /// The duplicate-stamp error, from the proto crate's own check.
    #[cold]
    fn duplicate<T: Stamped>(info: &T, ledger_id: LedgerId) -> HookError {
        match info.cluster_stamp() {
            Err(e) => corrupt(e, ledger_id),
            Ok(_) => HookError::new(
                HookErrorKind::CorruptMetadata,
                format!("ledger {ledger_id} carries the key {ATTR_KEY} more than once"),
            )
            .with_ledger(ledger_id),
        }
    }

    #[cold]
    fn unstamped_after_bootstrap(&self, ledger_id: LedgerId) -> HookError {
        let inner = &*self.inner;
        inner
            .metrics
            .unstamped_after_bootstrap
            .fetch_add(1, Ordering::Relaxed);
        let lowest = inner.lowest_stamped_on_bootstrap.load(Ordering::Relaxed);
        let bootstrap = inner.book.lock().bootstrap.clone().unwrap_or_default();
        tracing::error!(
            ledger_id,
            stamped_ledger_id = lowest,
            bootstrap_cluster = %bootstrap,
            "unstamped ledger created after bootstrap (I17)"
        );
        HookError::new(
            HookErrorKind::CorruptMetadata,
            format!(
                "ledger {ledger_id} has no cluster stamp but is newer than ledger {lowest}, which \
                 was created stamped on the bootstrap cluster '{bootstrap}': it was created after \
                 bootstrap by a writer running without the multi-cluster plugin (I17); it is not \
                 guessed to be on any cluster — find which cluster holds it and stamp it"
            ),
        )
        .with_cluster(bootstrap)
        .with_ledger(ledger_id)
    }

    #[cold]
    fn no_bootstrap_slot(&self, ledger_id: LedgerId) -> HookError {
        match self.inner.book.lock().bootstrap.clone() {
            Some(name) => unknown_bootstrap(&name, ledger_id),
            None => no_bootstrap(ledger_id),
        }
    }

    #[cold]
    fn not_connected(&self, state: &Arc<ClusterState>, ledger_id: LedgerId) -> HookError {
        let started = self.start_connect(state);
        HookError::new(
            HookErrorKind::ClusterUnavailable,
            format!(
                "ledger {ledger_id} is on bookie cluster '{}', whose client is not started{}; \
                 retry in a moment",
                state.name,
                if started {
                    " (starting it now)"
                } else {
                    " and cannot be started here (no async runtime)"
                }
            ),
        )
        .with_cluster(&*state.name)
        .with_ledger(ledger_id)
        .with_retry_after(RETRY_AFTER)
    }

    /// Starts the cluster's client in the background (once at a time).
    fn start_connect(&self, state: &Arc<ClusterState>) -> bool {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        if state.connecting.swap(true, Ordering::AcqRel) {
            return true;
        }
        let inner = self.inner.clone();
        let state = state.clone();
        rt.spawn(async move {
            let name = state.name.to_string();
            let result = {
                let _admin = inner.admin.lock().await;
                inner.connect(&name).await
            };
            if let Err(e) = result {
                tracing::warn!(cluster = %name, error = %e, "lazy bookie cluster client start failed");
            }
            state.connecting.store(false, Ordering::Release);
        });
        true
    }

    fn stamp(client: &dyn BookKeeper) -> Vec<(String, String)> {
        vec![(ATTR_KEY.to_owned(), client.cluster_name().to_owned())]
    }

    /// Whether `client` is a client of the bootstrap cluster.
    fn is_bootstrap_client(&self, client: &dyn BookKeeper) -> bool {
        self.inner
            .slot(self.inner.bootstrap.load(Ordering::Acquire))
            .is_some_and(|s| *s.state.name == *client.cluster_name())
    }
}

#[cold]
fn unknown_cluster(name: &str, ledger_id: LedgerId) -> HookError {
    HookError::new(
        HookErrorKind::UnknownCluster,
        format!(
            "ledger {ledger_id} is stamped with bookie cluster '{name}', which is not registered; \
             register the cluster (it holds the ledger's data) — the ledger is not read from any \
             other cluster"
        ),
    )
    .with_cluster(name)
    .with_ledger(ledger_id)
}

#[cold]
fn unknown_bootstrap(name: &str, ledger_id: LedgerId) -> HookError {
    HookError::new(
        HookErrorKind::UnknownCluster,
        format!(
            "ledger {ledger_id} has no cluster stamp (legacy), so it is on the bootstrap cluster \
             '{name}', which is not registered; register it"
        ),
    )
    .with_cluster(name)
    .with_ledger(ledger_id)
}

#[cold]
fn no_bootstrap(ledger_id: LedgerId) -> HookError {
    HookError::new(
        HookErrorKind::Other,
        format!(
            "ledger {ledger_id} has no cluster stamp (legacy) and no bootstrap cluster is \
             recorded; record the bootstrap cluster before reading legacy ledgers"
        ),
    )
    .with_ledger(ledger_id)
}

#[cold]
fn corrupt(e: StampError, ledger_id: LedgerId) -> HookError {
    HookError::new(HookErrorKind::CorruptMetadata, e.to_string()).with_ledger(ledger_id)
}

#[cold]
fn refused_by_mode(name: &str, ledger_id: LedgerId, mode: u8) -> HookError {
    let mode = ReadMode::from_u8(mode);
    let why = match mode {
        ReadMode::OldClusterOnly => "the active cluster is not read",
        _ => "only the active cluster is read",
    };
    HookError::new(
        HookErrorKind::RefusedByReadMode,
        format!(
            "ledger {ledger_id} is on bookie cluster '{name}' and the read mode is {mode} \
             ({why}); retry after setting the read mode to DUAL_READ"
        ),
    )
    .with_cluster(name)
    .with_ledger(ledger_id)
}

impl ActiveClientSupplier for ClusterRouter {
    /// Before the storage is initialized, a client whose every operation fails.
    #[inline]
    fn active_client(&self) -> Arc<dyn BookKeeper> {
        let inner = &*self.inner;
        match inner.slot(inner.active.load(Ordering::Acquire)) {
            Some(slot) => slot.client.clone(),
            None => inner.not_initialized.clone(),
        }
    }
}

impl LedgerResolver for ClusterRouter {
    /// Stamp → that cluster's client; no stamp → the bootstrap cluster (I17),
    /// unless the ledger is newer than a ledger created stamped on the
    /// bootstrap cluster (→ `CorruptMetadata`, see the [type docs](ClusterRouter));
    /// unknown cluster → `UnknownCluster`; duplicate stamp → `CorruptMetadata`;
    /// refused by the read mode → `RefusedByReadMode`; registered but not
    /// started → `ClusterUnavailable` (retryable, the client is started in the
    /// background).
    #[inline(always)]
    fn resolve_ledger(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        match scan_stamp!(info.properties, key) {
            Ok(stamp) => self.route_scanned(stamp, info.ledger_id),
            Err(()) => Err(Self::duplicate(info, info.ledger_id)),
        }
    }
}

impl CursorResolver for ClusterRouter {
    #[inline(always)]
    fn resolve_cursor(&self, info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        match scan_stamp!(info.cursor_properties, name) {
            Ok(stamp) => self.route_scanned(stamp, info.cursors_ledger_id),
            Err(()) => Err(Self::duplicate(info, info.cursors_ledger_id)),
        }
    }
}

impl NewLedgerPropertiesProvider for ClusterRouter {
    /// `_pulsar.bookieClusterName` = the cluster of the client that created the
    /// ledger (never re-reads the active cluster). A ledger created on the
    /// bootstrap cluster teaches the I17 check its id.
    fn new_ledger_properties(
        &self,
        ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError> {
        if self.is_bootstrap_client(ctx.client) {
            self.inner.learn_stamped_on_bootstrap(ctx.ledger_id);
        }
        Ok(Self::stamp(ctx.client))
    }
}

impl SchemaClientProvider for ClusterRouter {
    #[inline(always)]
    fn resolve(&self, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        match scan_stamp!(position.properties, key) {
            Ok(stamp) => self.route_scanned(stamp, position.ledger_id),
            Err(()) => Err(Self::duplicate(position, position.ledger_id)),
        }
    }

    fn active(&self) -> Arc<dyn BookKeeper> {
        self.active_client()
    }

    fn creation_properties(
        &self,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>, HookError> {
        Ok(Self::stamp(client))
    }
}

/// The S1 answer before the storage is initialized: every operation fails.
#[derive(Debug)]
struct NotInitializedClient;

fn not_initialized<T>() -> bkswitch_bk_client::Result<T> {
    Err(BkError::new(
        BkErrorKind::ClientClosed,
        "the multi-cluster storage is not initialized: call initialize() or switch_active_cluster() first",
    ))
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BookKeeper for NotInitializedClient {
    fn cluster_name(&self) -> &str {
        ""
    }

    async fn create_ledger(
        &self,
        _config: &bkswitch_bk_client::LedgerConfig,
    ) -> bkswitch_bk_client::Result<Arc<dyn bkswitch_bk_client::WriteHandle>> {
        not_initialized()
    }

    async fn create_ledger_adv(
        &self,
        _ledger_id: LedgerId,
        _config: &bkswitch_bk_client::LedgerConfig,
    ) -> bkswitch_bk_client::Result<Arc<dyn bkswitch_bk_client::WriteHandle>> {
        not_initialized()
    }

    async fn open_ledger(
        &self,
        _ledger_id: LedgerId,
        _digest_type: bkswitch_bk_client::DigestType,
        _password: &[u8],
    ) -> bkswitch_bk_client::Result<Arc<dyn bkswitch_bk_client::ReadHandle>> {
        not_initialized()
    }

    async fn open_ledger_no_recovery(
        &self,
        _ledger_id: LedgerId,
        _digest_type: bkswitch_bk_client::DigestType,
        _password: &[u8],
    ) -> bkswitch_bk_client::Result<Arc<dyn bkswitch_bk_client::ReadHandle>> {
        not_initialized()
    }

    async fn delete_ledger(&self, _ledger_id: LedgerId) -> bkswitch_bk_client::Result<()> {
        not_initialized()
    }

    async fn close(&self) -> bkswitch_bk_client::Result<()> {
        Ok(())
    }
}
