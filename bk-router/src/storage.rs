//! [`MultiClusterManagedLedgerStorage`] and its routing hooks ([`ClusterRouter`]).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
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
use crate::{ReadMode, RouterError};

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

/// Settings of a [`MultiClusterManagedLedgerStorage`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RouterConfig {
    /// Bound on every open, delete and read of a ledger on a cluster that is not
    /// the active one (`oldLedgerReadTimeoutMs`, default 5000 ms).
    pub old_ledger_read_timeout: Duration,
}

impl Default for RouterConfig {
    fn default() -> Self {
        RouterConfig {
            old_ledger_read_timeout: DEFAULT_OLD_LEDGER_READ_TIMEOUT,
        }
    }
}

impl RouterConfig {
    /// Set the old-ledger read timeout.
    pub fn with_old_ledger_read_timeout(mut self, timeout: Duration) -> Self {
        self.old_ledger_read_timeout = timeout;
        self
    }
}

/// One registered cluster in the published routing snapshot.
struct Slot {
    state: Arc<ClusterState>,
    /// The [`RoutedClient`], once connected.
    client: Option<Arc<dyn BookKeeper>>,
}

/// The immutable routing snapshot read by every hook without locks.
///
/// Clusters are few (two or three during a switch), so a linear scan comparing
/// names beats hashing the name.
#[derive(Default)]
struct Routes {
    slots: Vec<Slot>,
    /// Index in `slots` of the bootstrap cluster, or its name when unregistered.
    bootstrap: Option<Result<usize, Box<str>>>,
    /// The active cluster's client.
    active: Option<Arc<dyn BookKeeper>>,
}

impl Routes {
    #[inline]
    fn find(&self, name: &str) -> Option<&Slot> {
        self.slots.iter().find(|s| &*s.state.name == name)
    }
}

/// The authoritative state, changed under a lock and published as [`Routes`].
#[derive(Default)]
struct Registry {
    clusters: BTreeMap<String, Entry>,
    bootstrap: Option<String>,
    active: Option<String>,
}

struct Entry {
    uri: String,
    state: Arc<ClusterState>,
    client: Option<Arc<RoutedClient>>,
}

struct Inner {
    config: Mutex<RouterConfig>,
    factory: Mutex<Option<Arc<dyn ClientFactory>>>,
    registry: Mutex<Registry>,
    routes: ArcSwap<Routes>,
    read_mode: AtomicU8,
    admin: tokio::sync::Mutex<()>,
    not_initialized: Arc<dyn BookKeeper>,
}

impl Inner {
    fn publish(&self, reg: &Registry) {
        let slots: Vec<Slot> = reg
            .clusters
            .values()
            .map(|e| Slot {
                state: e.state.clone(),
                client: e.client.clone().map(|c| c as Arc<dyn BookKeeper>),
            })
            .collect();
        let bootstrap = reg.bootstrap.as_deref().map(|b| {
            slots
                .iter()
                .position(|s| &*s.state.name == b)
                .ok_or_else(|| b.into())
        });
        let active = reg.active.as_deref().and_then(|a| {
            reg.clusters
                .get(a)
                .and_then(|e| e.client.clone().map(|c| c as Arc<dyn BookKeeper>))
        });
        self.routes.store(Arc::new(Routes {
            slots,
            bootstrap,
            active,
        }));
    }

    fn factory(&self, operation: &'static str) -> Result<Arc<dyn ClientFactory>, RouterError> {
        self.factory
            .lock()
            .clone()
            .ok_or(RouterError::NotInitialized { operation })
    }

    fn unknown(&self, name: &str) -> RouterError {
        RouterError::UnknownCluster {
            name: name.to_owned(),
            registered: self.registry.lock().clusters.keys().cloned().collect(),
        }
    }

    fn add_cluster(&self, name: &str, uri: &str) -> Result<(), RouterError> {
        if name.trim().is_empty() || name.chars().any(char::is_whitespace) {
            return Err(RouterError::InvalidSettings(format!(
                "bookie cluster name '{name}' must be non-empty and without whitespace"
            )));
        }
        let mut reg = self.registry.lock();
        if let Some(e) = reg.clusters.get(name) {
            if e.uri == uri {
                return Ok(());
            }
            return Err(RouterError::Conflict {
                name: name.to_owned(),
                uri: uri.to_owned(),
                reason: format!("'{name}' is already registered at '{}'", e.uri),
            });
        }
        if let Some((other, _)) = reg.clusters.iter().find(|(_, e)| e.uri == uri) {
            return Err(RouterError::Conflict {
                name: name.to_owned(),
                uri: uri.to_owned(),
                reason: format!("the URI is already registered as cluster '{other}'"),
            });
        }
        reg.clusters.insert(
            name.to_owned(),
            Entry {
                uri: uri.to_owned(),
                state: Arc::new(ClusterState::new(name)),
                client: None,
            },
        );
        self.publish(&reg);
        Ok(())
    }

    /// The cluster's client, created through the factory if needed.
    async fn connect(&self, name: &str) -> Result<Arc<RoutedClient>, RouterError> {
        let (uri, state) = {
            let reg = self.registry.lock();
            let entry = reg
                .clusters
                .get(name)
                .ok_or_else(|| RouterError::UnknownCluster {
                    name: name.to_owned(),
                    registered: reg.clusters.keys().cloned().collect(),
                })?;
            if let Some(c) = &entry.client {
                return Ok(c.clone());
            }
            (entry.uri.clone(), entry.state.clone())
        };
        let factory = self.factory("connecting a cluster")?;
        let raw = factory
            .create(&uri)
            .await
            .map_err(|source| RouterError::ClientStart {
                name: name.to_owned(),
                uri: uri.clone(),
                source: Box::new(source),
            })?;
        let timeout = self.config.lock().old_ledger_read_timeout;
        let client = Arc::new(RoutedClient::new(state, raw, timeout));
        let mut reg = self.registry.lock();
        let entry = reg
            .clusters
            .get_mut(name)
            .ok_or_else(|| RouterError::UnknownCluster {
                name: name.to_owned(),
                registered: Vec::new(),
            })?;
        if let Some(existing) = &entry.client {
            return Ok(existing.clone());
        }
        entry.client = Some(client.clone());
        self.publish(&reg);
        tracing::info!(cluster = name, uri = %uri, "bookie cluster client started");
        Ok(client)
    }

    fn activate(&self, name: &str) -> Result<Option<String>, RouterError> {
        let mut reg = self.registry.lock();
        if !reg.clusters.contains_key(name) {
            drop(reg);
            return Err(self.unknown(name));
        }
        let previous = reg.active.replace(name.to_owned());
        if let Some(prev) = previous.as_deref() {
            if let Some(e) = reg.clusters.get(prev) {
                e.state.set_active(false);
            }
        }
        if let Some(e) = reg.clusters.get(name) {
            e.state.set_active(true);
        }
        self.publish(&reg);
        Ok(previous)
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
    inner: Arc<Inner>,
    router: Arc<ClusterRouter>,
}

impl fmt::Debug for MultiClusterManagedLedgerStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let reg = self.inner.registry.lock();
        f.debug_struct("MultiClusterManagedLedgerStorage")
            .field("clusters", &reg.clusters.keys().collect::<Vec<_>>())
            .field("active", &reg.active)
            .field("bootstrap", &reg.bootstrap)
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
            registry: Mutex::new(Registry::default()),
            routes: ArcSwap::from_pointee(Routes::default()),
            read_mode: AtomicU8::new(ReadMode::DualRead.to_u8()),
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

    /// Record the bootstrap cluster: the cluster legacy (unstamped) ledgers are
    /// on (invariant I17). Recorded once: setting the same name again is a no-op.
    ///
    /// # Errors
    ///
    /// [`RouterError::BootstrapAlreadySet`] when another name is recorded;
    /// [`RouterError::InvalidSettings`] for an empty name.
    pub fn set_bootstrap(&self, name: &str) -> Result<(), RouterError> {
        if name.is_empty() {
            return Err(RouterError::InvalidSettings(
                "the bootstrap cluster name must not be empty".into(),
            ));
        }
        let mut reg = self.inner.registry.lock();
        match reg.bootstrap.as_deref() {
            Some(current) if current == name => return Ok(()),
            Some(current) => {
                return Err(RouterError::BootstrapAlreadySet {
                    current: current.to_owned(),
                    requested: name.to_owned(),
                })
            }
            None => reg.bootstrap = Some(name.to_owned()),
        }
        self.inner.publish(&reg);
        tracing::info!(cluster = name, "bootstrap bookie cluster recorded");
        Ok(())
    }

    /// The bootstrap cluster, once recorded.
    pub fn bootstrap_cluster(&self) -> Option<String> {
        self.inner.registry.lock().bootstrap.clone()
    }

    /// The active cluster (where new ledgers are created), once set.
    pub fn active_cluster(&self) -> Option<String> {
        self.inner.registry.lock().active.clone()
    }

    /// The registered clusters, by name, with their URIs.
    pub fn clusters(&self) -> Vec<(String, String)> {
        let reg = self.inner.registry.lock();
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
            let reg = self.inner.registry.lock();
            reg.clusters.get(name).map(|e| e.state.clone())
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
            let mut reg = self.inner.registry.lock();
            let is_active = reg.active.as_deref() == Some(name);
            let Some(entry) = reg.clusters.get_mut(name) else {
                drop(reg);
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
            let open = entry.state.open_handles();
            if !open.is_empty() {
                return Err(RouterError::CloseRefused {
                    name: name.to_owned(),
                    reason: "reads are still active on it (I5)".into(),
                    open_handles: open.len(),
                    ledger_ids: open,
                });
            }
            let client = entry.client.take();
            self.inner.publish(&reg);
            client
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
        let reg = self.inner.registry.lock();
        let e = reg.clusters.get(name)?;
        let client = e.client.clone()?;
        Some(Arc::new(ClusterClass {
            name: name.to_owned(),
            client,
        }))
    }
}

#[async_trait]
impl ManagedLedgerStorage for MultiClusterManagedLedgerStorage {
    /// Connects the cluster of `settings.metadata_service_uri` and makes it
    /// active. Its name is the `currentClusterName` property, else the name its
    /// client reports. The bootstrap cluster is the `bootstrapClusterName`
    /// property, else the one already recorded, else this cluster.
    /// `oldLedgerReadTimeoutMs` overrides the configured timeout.
    async fn initialize(
        &self,
        settings: &StorageSettings,
        _metadata_store: Arc<dyn MetadataStore>,
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
        self.set_client_factory(client_factory.clone());
        let uri = settings.metadata_service_uri.as_str();
        let name = match settings
            .properties
            .get(CURRENT_CLUSTER_NAME)
            .filter(|n| !n.is_empty())
        {
            Some(n) => n.clone(),
            None => {
                let probe = client_factory.create(uri).await?;
                let name = probe.cluster_name().to_owned();
                probe.close().await?;
                name
            }
        };
        self.add_cluster(&name, uri)?;
        match settings
            .properties
            .get(BOOTSTRAP_CLUSTER_NAME)
            .filter(|n| !n.is_empty())
        {
            Some(b) => self.set_bootstrap(b)?,
            None if self.bootstrap_cluster().is_none() => self.set_bootstrap(&name)?,
            None => {}
        }
        self.switch_active_cluster(&name).await?;
        Ok(())
    }

    fn storage_classes(&self) -> Vec<Arc<dyn ManagedLedgerStorageClass>> {
        let (active, names): (Option<String>, Vec<String>) = {
            let reg = self.inner.registry.lock();
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
        let clients: Vec<(String, Arc<RoutedClient>)> = {
            let mut reg = self.inner.registry.lock();
            let out = reg
                .clusters
                .iter_mut()
                .filter_map(|(n, e)| e.client.take().map(|c| (n.clone(), c)))
                .collect();
            self.inner.publish(&reg);
            out
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
/// (stamper). Every method reads one lock-free snapshot and allocates nothing
/// on success.
pub struct ClusterRouter {
    inner: Arc<Inner>,
}

impl fmt::Debug for ClusterRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRouter").finish_non_exhaustive()
    }
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
        let routes = self.inner.routes.load();
        let slot = match stamp {
            Ok(Some(name)) => match routes.find(name) {
                Some(slot) => slot,
                None => return Err(unknown_cluster(name, ledger_id)),
            },
            Ok(None) => match &routes.bootstrap {
                Some(Ok(index)) => &routes.slots[*index],
                Some(Err(name)) => return Err(unknown_bootstrap(name, ledger_id)),
                None => return Err(no_bootstrap(ledger_id)),
            },
            Err(e) => return Err(corrupt(e, ledger_id)),
        };
        let mode = self.inner.read_mode.load(Ordering::Relaxed);
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
        match &slot.client {
            Some(c) => Ok(c.clone()),
            None => Err(self.not_connected(&slot.state, ledger_id)),
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
        match &self.inner.routes.load().active {
            Some(c) => c.clone(),
            None => self.inner.not_initialized.clone(),
        }
    }
}

impl LedgerResolver for ClusterRouter {
    /// Stamp → that cluster's client; no stamp → the bootstrap cluster (I17);
    /// unknown cluster → `UnknownCluster`; duplicate stamp → `CorruptMetadata`;
    /// refused by the read mode → `RefusedByReadMode`; registered but not
    /// started → `ClusterUnavailable` (retryable, the client is started in the
    /// background).
    #[inline]
    fn resolve_ledger(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        self.route(info.cluster_stamp(), info.ledger_id)
    }
}

impl CursorResolver for ClusterRouter {
    #[inline]
    fn resolve_cursor(&self, info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        self.route(info.cluster_stamp(), info.cursors_ledger_id)
    }
}

impl NewLedgerPropertiesProvider for ClusterRouter {
    /// `_pulsar.bookieClusterName` = the cluster of the client that created the
    /// ledger (never re-reads the active cluster).
    fn new_ledger_properties(
        &self,
        ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError> {
        Ok(Self::stamp(ctx.client))
    }
}

impl SchemaClientProvider for ClusterRouter {
    #[inline]
    fn resolve(&self, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        self.route(position.cluster_stamp(), position.ledger_id)
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
