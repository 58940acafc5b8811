//! [`MultiClusterManagedLedgerStorage`]: the storage facade — registering,
//! connecting, switching and closing clusters, the read mode, and the
//! [`ManagedLedgerStorage`] SPI (storage classes, `configure`, `initialize`).

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::{BookKeeper, ClientFactory, LedgerId};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{
    ManagedLedgerConfig, ManagedLedgerStorage, ManagedLedgerStorageClass, StorageError,
    StorageSettings,
};
use bkswitch_schema_spi::SchemaClientProvider;

use crate::hooks::ClusterRouter;
use crate::init;
use crate::routed::RoutedClient;
use crate::state::State;
use crate::{ReadMode, RouterConfig, RouterError, RouterMetrics};

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
/// - Unstamped (legacy) ledgers resolve to the bootstrap cluster
///   ([I17](bkswitch_docs::invariants::I17)).
///
/// Cheap to clone: clones share the same state.
#[derive(Clone)]
pub struct MultiClusterManagedLedgerStorage {
    state: Arc<State>,
    router: Arc<ClusterRouter>,
}

impl fmt::Debug for MultiClusterManagedLedgerStorage {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let book = self.state.book.lock();
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
        let state = Arc::new(State::new(config));
        let router = Arc::new(ClusterRouter::new(state.clone()));
        MultiClusterManagedLedgerStorage { state, router }
    }

    /// Use `factory` to create clients (also done by `initialize`).
    pub fn set_client_factory(&self, factory: Arc<dyn ClientFactory>) {
        self.state.set_factory(factory);
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
        self.state.add_cluster(name, metadata_service_uri)
    }

    /// Create (or return the cached) client of a registered cluster.
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`], [`RouterError::NotInitialized`] without a
    /// factory, [`RouterError::ClientStart`] when the factory fails.
    pub async fn connect_cluster(&self, name: &str) -> Result<Arc<dyn BookKeeper>, RouterError> {
        let _admin = self.state.admin.lock().await;
        let slot = self.state.connect(name).await?;
        Ok(slot.client.clone())
    }

    /// The counters of this storage (shared with its
    /// [`RegistrySync`](crate::RegistrySync), if any).
    pub fn metrics(&self) -> Arc<RouterMetrics> {
        self.state.metrics.clone()
    }

    /// The lowest ledger id known to have been created stamped on the
    /// bootstrap cluster (see [`ClusterRouter`] on
    /// [I17](bkswitch_docs::invariants::I17)), once one is known.
    pub fn lowest_stamped_on_bootstrap(&self) -> Option<LedgerId> {
        self.state.lowest_stamped_on_bootstrap()
    }

    /// Record the bootstrap cluster: the cluster legacy (unstamped) ledgers are
    /// on (invariant [I17](bkswitch_docs::invariants::I17)). Recorded once:
    /// setting the same name again is a no-op.
    ///
    /// # Errors
    ///
    /// [`RouterError::BootstrapAlreadySet`] when another name is recorded;
    /// [`RouterError::InvalidSettings`] for an empty name.
    pub fn set_bootstrap(&self, name: &str) -> Result<(), RouterError> {
        self.state.set_bootstrap(name)
    }

    /// The bootstrap cluster, once recorded.
    pub fn bootstrap_cluster(&self) -> Option<String> {
        self.state.bootstrap_cluster()
    }

    /// The active cluster (where new ledgers are created), once set.
    pub fn active_cluster(&self) -> Option<String> {
        self.state.book.lock().active.clone()
    }

    /// Per registered cluster, how many operations on it failed fast while
    /// it was not the active cluster (timed out after
    /// [`old_ledger_read_timeout`](Self::old_ledger_read_timeout), or found
    /// it unreachable): reads of a dead old cluster, as the operator sees
    /// them.
    pub fn fail_fast_reads(&self) -> Vec<(String, u64)> {
        let book = self.state.book.lock();
        book.clusters
            .keys()
            .filter_map(|name| {
                let slot = self.state.slot_of(&book, name)?;
                let n = slot
                    .state
                    .fail_fast
                    .load(std::sync::atomic::Ordering::Relaxed);
                Some((name.clone(), n))
            })
            .collect()
    }

    /// The registered clusters, by name, with their URIs.
    pub fn clusters(&self) -> Vec<(String, String)> {
        let reg = self.state.book.lock();
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
        let _admin = self.state.admin.lock().await;
        let result = self.state.connect(name).await;
        if let Err(e) = result {
            tracing::warn!(target_cluster = name, error = %e, "bookie cluster switch rejected");
            return Err(e);
        }
        let previous = self.state.activate(name)?;
        if previous.as_deref() != Some(name) {
            tracing::info!(
                from = previous.as_deref().unwrap_or("<none>"),
                to = name,
                "active bookie cluster switched"
            );
        }
        Ok(())
    }

    /// Routes the creation of new ledgers of managed ledgers whose name
    /// starts with a prefix to that prefix's cluster (the longest prefix
    /// wins), their schema ledgers included (S3: a schema id is under the
    /// prefix when it starts with the prefix without its domain segment,
    /// [`bkswitch_registry::schema_id_prefix`]); every other managed ledger
    /// keeps the active cluster. Replaces
    /// the previous overrides; an empty list removes them. Each cluster's
    /// client is started first: on an error nothing changes. Ledgers already
    /// recorded keep routing by their stamp, and new ones are stamped with
    /// the cluster that created them, as always.
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`] for a cluster not registered; the
    /// client's error when one does not start.
    pub async fn set_prefix_overrides(
        &self,
        overrides: &[(String, String)],
    ) -> Result<(), RouterError> {
        let _admin = self.state.admin.lock().await;
        for (_, cluster) in overrides {
            self.state.connect(cluster).await?;
        }
        let mut table = Vec::with_capacity(overrides.len());
        {
            let book = self.state.book.lock();
            for (prefix, cluster) in overrides {
                let Some(entry) = book.clusters.get(cluster) else {
                    drop(book);
                    return Err(self.state.unknown(cluster));
                };
                table.push((prefix.clone().into_boxed_str(), entry.slot));
            }
        }
        let longest_first = |a: &(Box<str>, usize), b: &(Box<str>, usize)| {
            b.0.len().cmp(&a.0.len()).then_with(|| a.0.cmp(&b.0))
        };
        table.sort_by(longest_first);
        // The schema ids of the same managed ledgers (no domain segment). Two
        // prefixes that differ only by their domain name one schema prefix
        // (a schema id is shared by the persistent and the non-persistent
        // topic of one name): the first in the sorted table keeps it.
        let mut schemas: Vec<(Box<str>, usize)> = Vec::with_capacity(table.len());
        for (prefix, slot) in &table {
            let schema_prefix = bkswitch_registry::schema_id_prefix(prefix).into_boxed_str();
            if !schemas.iter().any(|(p, _)| *p == schema_prefix) {
                schemas.push((schema_prefix, *slot));
            }
        }
        schemas.sort_by(longest_first);
        let any = !table.is_empty();
        *self.state.overrides.write() = crate::state::OverrideTables {
            managed_ledgers: table,
            schemas,
        };
        self.state.has_overrides.store(any, Ordering::Release);
        tracing::info!(?overrides, "per-prefix cluster overrides set");
        Ok(())
    }

    /// The per-prefix overrides: `(prefix, cluster)`, longest prefix first.
    pub fn prefix_overrides(&self) -> Vec<(String, String)> {
        let overrides = self.state.overrides.read();
        overrides
            .managed_ledgers
            .iter()
            .filter_map(|(p, index)| {
                let slot = self.state.table.get(*index)?;
                Some((p.to_string(), slot.name().to_string()))
            })
            .collect()
    }

    /// The current read mode.
    pub fn read_mode(&self) -> ReadMode {
        ReadMode::from_u8(self.state.read_mode.load(Ordering::Acquire))
    }

    /// Change the read mode; takes effect for the next resolve.
    pub fn set_read_mode(&self, mode: ReadMode) {
        let old = ReadMode::from_u8(self.state.read_mode.swap(mode.to_u8(), Ordering::AcqRel));
        tracing::info!(from = %old, to = %mode, "bookie cluster read mode changed");
    }

    /// The old-ledger read timeout applied to clients of non-active clusters.
    pub fn old_ledger_read_timeout(&self) -> Duration {
        self.state.config.lock().old_ledger_read_timeout
    }

    /// The ledger ids of the handles open through the router on `name` (one
    /// entry per handle, sorted).
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`].
    pub fn open_handles(&self, name: &str) -> Result<Vec<LedgerId>, RouterError> {
        let state = {
            let book = self.state.book.lock();
            self.state.slot_of(&book, name).map(|s| s.state.clone())
        };
        match state {
            Some(s) => Ok(s.open_handles()),
            None => Err(self.state.unknown(name)),
        }
    }

    /// Close and drop the client of a non-active cluster that has no handle open
    /// through the router (invariant [I5](bkswitch_docs::invariants::I5)). The
    /// cluster stays registered: a later resolve of a ledger stamped to it
    /// starts a new client in the background and fails with a retryable error
    /// until it is ready. Closing a cluster without a client is a no-op.
    ///
    /// # Errors
    ///
    /// [`RouterError::UnknownCluster`]; [`RouterError::CloseRefused`] for the
    /// active cluster or while handles are open (listing their ledgers);
    /// [`RouterError::Close`] when the client reports a failure (it is dropped
    /// anyway).
    pub async fn close_client(&self, name: &str) -> Result<(), RouterError> {
        let _admin = self.state.admin.lock().await;
        let client = {
            let book = self.state.book.lock();
            let is_active = book.active.as_deref() == Some(name);
            let Some(slot) = self.state.slot_of(&book, name) else {
                drop(book);
                return Err(self.state.unknown(name));
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
        let book = self.state.book.lock();
        let slot = self.state.slot_of(&book, name)?;
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
    /// in `metadata_store` ([design §3](bkswitch_docs::design)):
    ///
    /// 1. the registry's ACTIVE cluster, if any (every registered cluster,
    ///    DEPRECATED ones included, is registered for routing too, its client
    ///    started at the first resolve of a ledger stamped with it);
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
        init::initialize(&self.state, settings, metadata_store, client_factory).await?;
        Ok(())
    }

    fn storage_classes(&self) -> Vec<Arc<dyn ManagedLedgerStorageClass>> {
        let (active, names): (Option<String>, Vec<String>) = {
            let reg = self.state.book.lock();
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
        let _admin = self.state.admin.lock().await;
        let clients: Vec<(String, Arc<dyn BookKeeper>)> = {
            let book = self.state.book.lock();
            book.clusters
                .iter()
                .filter_map(|(n, e)| {
                    let slot = self.state.table.get(e.slot)?;
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
