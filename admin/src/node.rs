//! A broker-like node: the multi-cluster storage, the registry sync, the
//! coordinator, topic ownership and the REST API, put together.
//!
//! [`Node::start`] is what `bookie-switch serve` runs, and what the demo and
//! the end-to-end tests start several times in one process.
//!
//! - The storage is initialized through the registry (registry ACTIVE →
//!   `cluster_name` hint → the name the client reports, auto-registered
//!   ACTIVE) and records the bootstrap marker.
//! - A [`RegistrySync`] follows the registry: on every directive the node
//!   swaps its active cluster, enters dual-read and, when configured, rolls
//!   over every topic it owns at a bounded rate (SPEC §5.2).
//! - When the sync hands this node a coordinator duty (it is the directive's
//!   origin, or the elected leader), the node runs the orchestrator for it.
//! - Topics opened through [`Node::open_topic`] are owned by this node: an
//!   ephemeral node `<owners root>/<encoded topic>` names the node and its URL,
//!   so a coordinator elsewhere sends cursor promotions here over HTTP
//!   (`POST /internal/promote-cursor`). The ephemeral node disappears with the
//!   node's session, and then the coordinator promotes the cursor itself.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::ClientFactory;
use bkswitch_bk_router::{
    MultiClusterManagedLedgerStorage, RegistrySync, RouterConfig, RouterError,
};
use bkswitch_managed_ledger::schema::{SchemaStorage, SchemaStorageOptions};
use bkswitch_managed_ledger::{ManagedLedger, ManagedLedgerError, ManagedLedgerFactory};
use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MetadataStore};
use bkswitch_mledger_spi::{ManagedLedgerConfig, ManagedLedgerStorage, StorageSettings};
use bkswitch_registry::{IdgenSource, Registry, SwitchDirective};
use bkswitch_switch_orchestrator::{
    CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, LocalTopics, Orchestrator,
    OrchestratorConfig, OrchestratorError, PromoteError, SwitchStatus, TopicOwners,
};
use serde::{Deserialize, Serialize};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::client::{AdminClient, PromoteCursorRequest};

/// Default root of the topic-ownership nodes.
pub const DEFAULT_OWNERS_ROOT: &str = "/bkswitch/topic-owners";

/// Settings of a [`Node`].
#[derive(Clone)]
pub struct NodeConfig {
    /// This node's id (unique among live nodes).
    pub node_id: String,
    /// The broker metadata store (this node's own session).
    pub store: Arc<dyn MetadataStore>,
    /// Creates BookKeeper clients from metadata-service URIs.
    pub client_factory: Arc<dyn ClientFactory>,
    /// The metadata-service URI this node was configured with (Pulsar's
    /// `bookkeeperMetadataServiceUri`): used when the registry has no ACTIVE
    /// cluster yet.
    pub bookkeeper_uri: String,
    /// The `currentClusterName` hint.
    pub cluster_name: Option<String>,
    /// Registry root (`configPath`).
    pub registry_root: String,
    /// Root of the topic-ownership nodes.
    pub owners_root: String,
    /// Bearer token of the public admin endpoints.
    pub admin_token: String,
    /// Bearer token of `/internal/*` (node to node).
    pub internal_token: String,
    /// Where the REST API listens (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// Coordinator settings.
    pub orchestrator: OrchestratorConfig,
    /// Where the precheck reads next ledger ids (default: BookKeeper's ZooKeeper
    /// layout; `memory://` clusters need a `MemoryIdgenSource`).
    pub idgen: Option<Arc<dyn IdgenSource>>,
    /// Settings of the managed ledgers this node opens (the routing hooks are
    /// added by the storage).
    pub ledger_config: ManagedLedgerConfig,
    /// Settings of schema storage.
    pub schema_options: SchemaStorageOptions,
    /// After applying a directive, roll over every owned topic at this many
    /// topics per second (`None`: wait for natural rollovers).
    pub forced_rollover_rate: Option<u32>,
    /// `oldLedgerReadTimeoutMs`.
    pub old_ledger_read_timeout: Duration,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("node_id", &self.node_id)
            .field("bookkeeper_uri", &self.bookkeeper_uri)
            .field("cluster_name", &self.cluster_name)
            .field("registry_root", &self.registry_root)
            .field("listen", &self.listen)
            .finish_non_exhaustive()
    }
}

impl NodeConfig {
    /// A configuration with the documented defaults: registry at
    /// `/admin/bookie-clusters`, listening on a free loopback port, forced
    /// rollover at 100 topics/s, old-ledger read timeout 5 s.
    pub fn new(
        node_id: &str,
        store: Arc<dyn MetadataStore>,
        client_factory: Arc<dyn ClientFactory>,
        bookkeeper_uri: &str,
        admin_token: &str,
        internal_token: &str,
    ) -> NodeConfig {
        NodeConfig {
            node_id: node_id.to_owned(),
            store,
            client_factory,
            bookkeeper_uri: bookkeeper_uri.to_owned(),
            cluster_name: None,
            registry_root: bkswitch_registry::DEFAULT_ROOT.to_owned(),
            owners_root: DEFAULT_OWNERS_ROOT.to_owned(),
            admin_token: admin_token.to_owned(),
            internal_token: internal_token.to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            orchestrator: OrchestratorConfig::default(),
            idgen: None,
            ledger_config: ManagedLedgerConfig::default(),
            schema_options: SchemaStorageOptions::default(),
            forced_rollover_rate: Some(100),
            old_ledger_read_timeout: Duration::from_millis(5000),
        }
    }
}

/// Why a node could not start or an operation on it failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NodeError {
    /// Invalid settings.
    #[error("invalid node settings: {0}")]
    InvalidSettings(String),
    /// The storage or the registry sync failed.
    #[error(transparent)]
    Router(#[from] RouterError),
    /// The storage failed to initialize.
    #[error("initializing the multi-cluster storage: {0}")]
    Storage(#[from] bkswitch_mledger_spi::StorageError),
    /// A registry operation failed.
    #[error(transparent)]
    Registry(#[from] bkswitch_registry::RegistryError),
    /// A managed-ledger operation failed.
    #[error(transparent)]
    ManagedLedger(#[from] ManagedLedgerError),
    /// A metadata-store operation failed.
    #[error(transparent)]
    Metadata(#[from] bkswitch_metadata_store::MetadataError),
    /// The orchestrator failed.
    #[error(transparent)]
    Orchestrator(#[from] OrchestratorError),
    /// The REST listener could not be bound.
    #[error("cannot listen on {addr}: {source}; pick another address")]
    Listen {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        source: std::io::Error,
    },
}

/// What `GET /status` answers.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeStatus {
    /// This node.
    pub node_id: String,
    /// Where new ledgers are created on this node.
    pub active_cluster: Option<String>,
    /// The legacy fallback (I17).
    pub bootstrap_cluster: Option<String>,
    /// This node's read mode (`DUAL_READ`, …).
    pub read_mode: String,
    /// The last directive epoch this node applied.
    pub epoch: i64,
    /// The current directive.
    pub directive: Option<SwitchDirective>,
    /// The latest switch's progress.
    pub switch: Option<SwitchStatus>,
}

/// The value of a topic-ownership node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ownership {
    /// The owning node.
    pub node_id: String,
    /// Its REST base URL.
    pub url: String,
}

pub(crate) struct NodeInner {
    pub(crate) config: NodeConfig,
    pub(crate) storage: MultiClusterManagedLedgerStorage,
    pub(crate) registry: Registry,
    pub(crate) sync: RegistrySync,
    pub(crate) orchestrator: Orchestrator,
    pub(crate) topics: Arc<LocalTopics>,
    pub(crate) factory: ManagedLedgerFactory,
    pub(crate) schemas: SchemaStorage,
    pub(crate) url: String,
    /// Cursor promotions this node executed for a coordinator over HTTP.
    pub(crate) promotions_served: std::sync::atomic::AtomicU64,
}

/// A running node; see the [module docs](self). Cheap to clone.
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
    tasks: Arc<parking_lot::Mutex<Vec<JoinHandle<()>>>>,
    stop: watch::Sender<bool>,
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_id", &self.inner.config.node_id)
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

/// `/` in topic names becomes `%2F` in the ownership node name.
fn encode_topic(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len());
    for b in topic.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl Node {
    /// Starts the node: storage, registry sync, REST API, coordinator loop and
    /// forced-rollover reaction. Must run inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`NodeError`] naming what could not start; nothing is left running.
    pub async fn start(config: NodeConfig) -> Result<Node, NodeError> {
        if config.node_id.is_empty() || config.node_id.contains('/') {
            return Err(NodeError::InvalidSettings(format!(
                "node id '{}' must be non-empty and without '/'",
                config.node_id
            )));
        }
        if config.admin_token.is_empty() || config.internal_token.is_empty() {
            return Err(NodeError::InvalidSettings(
                "the admin and internal tokens must not be empty: every endpoint needs one".into(),
            ));
        }
        let registry = Registry::with_root(config.store.clone(), &config.registry_root)?;
        let storage = MultiClusterManagedLedgerStorage::new(
            RouterConfig::default().with_old_ledger_read_timeout(config.old_ledger_read_timeout),
        );
        let mut settings = StorageSettings::new(&config.bookkeeper_uri);
        if let Some(name) = &config.cluster_name {
            settings.properties.insert(
                bkswitch_bk_router::CURRENT_CLUSTER_NAME.into(),
                name.clone(),
            );
        }
        settings.properties.insert(
            bkswitch_bk_router::CONFIG_PATH.into(),
            config.registry_root.clone(),
        );
        storage
            .initialize(
                &settings,
                config.store.clone(),
                config.client_factory.clone(),
            )
            .await?;
        let sync = RegistrySync::start(storage.clone(), registry.clone(), &config.node_id).await?;

        let listener =
            TcpListener::bind(config.listen)
                .await
                .map_err(|source| NodeError::Listen {
                    addr: config.listen,
                    source,
                })?;
        let addr = listener.local_addr().map_err(|source| NodeError::Listen {
            addr: config.listen,
            source,
        })?;
        let url = format!("http://{addr}");

        let topics = Arc::new(LocalTopics::new());
        let owners = Arc::new(NodeOwners {
            store: config.store.clone(),
            root: config.owners_root.clone(),
            node_id: config.node_id.clone(),
            local: topics.clone(),
            internal_token: config.internal_token.clone(),
        });
        let mut orchestrator = Orchestrator::new(
            config.store.clone(),
            registry.clone(),
            Arc::new(storage.clone()),
            owners,
            config.orchestrator.clone(),
        );
        if let Some(idgen) = &config.idgen {
            orchestrator = orchestrator.with_idgen(idgen.clone());
        }
        let factory = ManagedLedgerFactory::from_storage_class(
            config.store.clone(),
            &*storage.default_storage_class()?,
        );
        let schemas = SchemaStorage::new(
            config.store.clone(),
            storage.schema_provider(),
            config.schema_options.clone(),
        );
        let inner = Arc::new(NodeInner {
            config,
            storage,
            registry,
            sync,
            orchestrator,
            topics,
            factory,
            schemas,
            url,
            promotions_served: std::sync::atomic::AtomicU64::new(0),
        });
        let (stop, stop_rx) = watch::channel(false);
        let mut tasks = Vec::new();
        let app = crate::api::router(inner.clone());
        let mut srv_stop = stop_rx.clone();
        tasks.push(tokio::spawn(async move {
            let shutdown = async move {
                let _ = srv_stop.wait_for(|s| *s).await;
            };
            if let Err(e) = axum::serve(listener, app)
                .with_graceful_shutdown(shutdown)
                .await
            {
                tracing::error!(error = %e, "admin REST server stopped");
            }
        }));
        tasks.push(tokio::spawn(coordinate(inner.clone(), stop_rx.clone())));
        tasks.push(tokio::spawn(roll_after_switch(inner.clone(), stop_rx)));
        tracing::info!(node = %inner.config.node_id, url = %inner.url, "node started");
        Ok(Node {
            inner,
            tasks: Arc::new(parking_lot::Mutex::new(tasks)),
            stop,
        })
    }

    /// This node's id.
    pub fn node_id(&self) -> &str {
        &self.inner.config.node_id
    }

    /// The REST base URL (`http://127.0.0.1:port`).
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The multi-cluster storage.
    pub fn storage(&self) -> &MultiClusterManagedLedgerStorage {
        &self.inner.storage
    }

    /// The cluster registry.
    pub fn registry(&self) -> &Registry {
        &self.inner.registry
    }

    /// The registry sync (applied epoch, metrics).
    pub fn sync(&self) -> &RegistrySync {
        &self.inner.sync
    }

    /// The coordinator of this node.
    pub fn orchestrator(&self) -> &Orchestrator {
        &self.inner.orchestrator
    }

    /// The topics this node owns.
    pub fn topics(&self) -> &Arc<LocalTopics> {
        &self.inner.topics
    }

    /// Schema storage routed through the storage's S3 provider.
    pub fn schemas(&self) -> &SchemaStorage {
        &self.inner.schemas
    }

    /// How many cursor promotions this node executed for a coordinator through
    /// `POST /internal/promote-cursor`.
    pub fn cursor_promotions_served(&self) -> u64 {
        self.inner
            .promotions_served
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Opens (or returns the already open) managed ledger `name` with the
    /// routing hooks, and records this node as its owner.
    ///
    /// # Errors
    ///
    /// Managed-ledger errors of opening; [`NodeError::Metadata`] when the
    /// ownership cannot be recorded (the ledger is closed again).
    pub async fn open_topic(&self, name: &str) -> Result<ManagedLedger, NodeError> {
        if let Some(ml) = self.inner.topics.get(name) {
            return Ok(ml);
        }
        let mut config = self.inner.config.ledger_config.clone();
        self.inner.storage.configure(&mut config);
        // Loading a topic whose ledgers live on a cluster whose client is not
        // started yet fails with a retryable error while the client starts.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let ml = loop {
            match self.inner.factory.open(name, config.clone()).await {
                Ok(ml) => break ml,
                Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(topic = name, error = %e, "topic load retried");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
                Err(e) => return Err(e.into()),
            }
        };
        let path = format!("{}/{}", self.inner.config.owners_root, encode_topic(name));
        let value = serde_json::to_vec(&Ownership {
            node_id: self.inner.config.node_id.clone(),
            url: self.inner.url.clone(),
        })
        .unwrap_or_default();
        let store = &self.inner.config.store;
        let recorded = match store.create(&path, &value, CreateMode::EPHEMERAL).await {
            Ok(_) => Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                // A previous owner's session may still hold it; take it over.
                match store.put(&path, &value, ExpectedVersion::Any).await {
                    Ok(_) => Ok(()),
                    Err(e) => Err(e),
                }
            }
            Err(e) => Err(e),
        };
        if let Err(e) = recorded {
            let _ = ml.close().await;
            return Err(e.into());
        }
        self.inner.topics.insert(ml.clone());
        Ok(ml)
    }

    /// Closes a topic this node owns and gives up its ownership.
    ///
    /// # Errors
    ///
    /// Managed-ledger errors of closing (ownership is released anyway).
    pub async fn unload_topic(&self, name: &str) -> Result<(), NodeError> {
        let path = format!("{}/{}", self.inner.config.owners_root, encode_topic(name));
        if let Ok(Some(r)) = self.inner.config.store.get(&path).await {
            if serde_json::from_slice::<Ownership>(&r.value)
                .map(|o| o.node_id == self.inner.config.node_id)
                .unwrap_or(false)
            {
                let _ = self
                    .inner
                    .config
                    .store
                    .delete(&path, ExpectedVersion::Exactly(r.stat.version))
                    .await;
            }
        }
        if let Some(ml) = self.inner.topics.remove(name) {
            ml.close().await?;
        }
        Ok(())
    }

    /// This node's status (what `GET /status` answers).
    ///
    /// # Errors
    ///
    /// Registry and orchestrator read errors.
    pub async fn status(&self) -> Result<NodeStatus, NodeError> {
        node_status(&self.inner).await
    }

    /// Stops the REST server and background tasks, unloads the owned topics
    /// (closing them and giving their ownership up), stops the registry sync
    /// and closes the clients. The metadata store is left open
    /// (it belongs to the caller).
    pub async fn stop(&self) {
        let _ = self.stop.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.tasks.lock());
        for t in tasks {
            t.abort();
            let _ = t.await;
        }
        for name in self.inner.topics.list() {
            // Gives the ownership up, so a coordinator promotes these cursors
            // itself (or through their next owner) rather than calling here.
            let _ = self.unload_topic(&name).await;
        }
        self.inner.sync.stop().await;
        let _ = self.inner.storage.close().await;
    }
}

pub(crate) async fn node_status(inner: &NodeInner) -> Result<NodeStatus, NodeError> {
    Ok(NodeStatus {
        node_id: inner.config.node_id.clone(),
        active_cluster: inner.storage.active_cluster(),
        bootstrap_cluster: inner.storage.bootstrap_cluster(),
        read_mode: inner.storage.read_mode().as_str().to_owned(),
        epoch: inner.sync.applied_epoch(),
        directive: inner.registry.switch_directive().await?,
        switch: inner.orchestrator.current_status().await?,
    })
}

/// Runs the orchestrator for every duty the registry sync hands this node.
async fn coordinate(inner: Arc<NodeInner>, mut stop: watch::Receiver<bool>) {
    let Some(mut duties) = inner.sync.take_duties() else {
        return;
    };
    loop {
        let duty = tokio::select! {
            d = duties.recv() => match d { Some(d) => d, None => return },
            _ = stop.wait_for(|s| *s) => return,
        };
        let id = duty.epoch.to_string();
        tracing::info!(node = %inner.config.node_id, epoch = duty.epoch, target = %duty.target,
            "coordinating switch");
        let mut delay = Duration::from_millis(100);
        let mut missing = 0;
        loop {
            match inner.orchestrator.resume(&id).await {
                // The origin writes the directive, then the switch record: the
                // record may not be there yet. A directive without any record
                // (written by hand, or the origin crashed in between) is left
                // alone after a while; the operator re-issues the switch.
                Err(OrchestratorError::NoSuchSwitch { .. }) if missing < 100 => {
                    missing += 1;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Ok(status) => {
                    tracing::info!(node = %inner.config.node_id, switch = %id,
                        phase = %status.phase, "switch coordinated");
                    break;
                }
                Err(e) if e.is_retryable() => {
                    tracing::warn!(node = %inner.config.node_id, switch = %id, error = %e,
                        "switch run failed; resuming");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(5));
                }
                Err(e) => {
                    tracing::error!(node = %inner.config.node_id, switch = %id, error = %e,
                        "switch run stopped; an operator must look at it");
                    break;
                }
            }
            if *stop.borrow() {
                return;
            }
        }
    }
}

/// Rolls over every owned topic after each applied directive (SPEC §5.2).
async fn roll_after_switch(inner: Arc<NodeInner>, mut stop: watch::Receiver<bool>) {
    let Some(rate) = inner.config.forced_rollover_rate else {
        return;
    };
    let mut applied = inner.sync.applied_epoch_watch();
    let mut last = *applied.borrow_and_update();
    loop {
        tokio::select! {
            r = applied.changed() => if r.is_err() { return },
            _ = stop.wait_for(|s| *s) => return,
        }
        let epoch = *applied.borrow_and_update();
        if epoch == last {
            continue;
        }
        last = epoch;
        let report = inner.topics.force_rollover(rate).await;
        tracing::info!(node = %inner.config.node_id, epoch, ?report,
            "forced rollover after the switch");
    }
}

/// Topic ownership from the ownership nodes: this node's topics are promoted
/// in process, other nodes' over HTTP.
struct NodeOwners {
    store: Arc<dyn MetadataStore>,
    root: String,
    node_id: String,
    local: Arc<LocalTopics>,
    internal_token: String,
}

#[async_trait]
impl TopicOwners for NodeOwners {
    async fn owner(
        &self,
        managed_ledger: &str,
    ) -> bkswitch_switch_orchestrator::Result<Option<Arc<dyn CursorPromoter>>> {
        let path = format!("{}/{}", self.root, encode_topic(managed_ledger));
        let found = self
            .store
            .get(&path)
            .await
            .map_err(|e| OrchestratorError::Metadata {
                what: format!("reading the owner of '{managed_ledger}' at '{path}'"),
                source: e,
            })?;
        let Some(r) = found else {
            return Ok(None);
        };
        let Ok(o) = serde_json::from_slice::<Ownership>(&r.value) else {
            tracing::warn!(path = %path, "unreadable ownership node; treating the topic as unowned");
            return Ok(None);
        };
        if o.node_id == self.node_id {
            return Ok(Some(self.local.clone()));
        }
        Ok(Some(Arc::new(HttpPromoter {
            url: o.url,
            node_id: o.node_id,
            token: self.internal_token.clone(),
        })))
    }
}

/// The HTTP [`CursorPromoter`]: `POST <owner>/admin/v2/bookie-clusters/internal/promote-cursor`.
struct HttpPromoter {
    url: String,
    node_id: String,
    token: String,
}

#[async_trait]
impl CursorPromoter for HttpPromoter {
    async fn promote_cursor(
        &self,
        req: &CursorPromoteRequest,
    ) -> Result<CursorPromoteOutcome, PromoteError> {
        let unavailable = |reason: String| PromoteError::Unavailable { reason };
        let client = AdminClient::new(&self.url, &self.token).map_err(|e| {
            unavailable(format!("owner node {} at {}: {e}", self.node_id, self.url))
        })?;
        let wire = PromoteCursorRequest {
            topic: req.managed_ledger.clone(),
            cursor_name: req.cursor_name.clone(),
            target_cluster_name: req.target_cluster_name.clone(),
            expected_cursors_ledger_id: req.expected_cursors_ledger_id,
            copied_last_entry_id: req.copied_last_entry_id,
        };
        crate::api::promote_over_http(&client, &wire, req, &self.node_id).await
    }
}
