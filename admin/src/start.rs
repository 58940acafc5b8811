//! [`Node::start`]: every part of a node built and wired, its REST server and
//! background duties spawned.
//!
//! Start-up sits above both the node (`crate::node`) and the HTTP layer
//! (`crate::http`): it is the one module that imports both. The node's handle
//! imports nothing of the HTTP layer or of the metrics exposition, and the HTTP
//! layer uses only [`Node`]'s public API, so no two modules import each other.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, RegistrySync, RouterConfig};
use bkswitch_managed_ledger::schema::SchemaStorage;
use bkswitch_managed_ledger::ManagedLedgerFactory;
use bkswitch_mledger_spi::{ManagedLedgerStorage, StorageSettings};
use bkswitch_registry::Registry;
use bkswitch_switch_orchestrator::adapters::LocalTopics;
use bkswitch_switch_orchestrator::Orchestrator;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::metrics::{metered, NodeMetrics};
use crate::node::duties::{clean_up_by_itself, coordinate, roll_after_switch};
use crate::node::migration::{coordinate_migrations, follow_pause};
use crate::node::ownership::NodeOwners;
use crate::node::registration::{deregister, keep, register, Registration};
use crate::node::{Node, NodeConfig, NodeError, NodeInner};

impl Node {
    /// Starts the node: storage, registry sync, REST API, coordinator loop and
    /// forced-rollover reaction. Must run inside a Tokio runtime.
    ///
    /// # Errors
    ///
    /// [`NodeError`] naming what could not start; nothing is left running.
    pub async fn start(mut config: NodeConfig) -> Result<Node, NodeError> {
        check(&config)?;
        let tls = match &config.tls {
            Some(settings) => Some(
                crate::tls::server_config(settings)
                    .map_err(|e| NodeError::InvalidSettings(e.to_string()))?,
            ),
            None => None,
        };
        let metrics = Arc::new(NodeMetrics::default());
        config.client_factory = metered(config.client_factory.clone(), metrics.clone());
        let registry = Registry::with_root(config.store.clone(), &config.registry_root)?;
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
        let scheme = if tls.is_some() { "https" } else { "http" };
        let url = format!("{scheme}://{addr}");
        // The node id first: a second node with the same id opens nothing.
        let registration = Registration::new(&config.node_id, &url);
        register(config.store.as_ref(), &config.nodes_root, &registration).await?;
        let started = async {
            let storage = start_storage(&config).await?;
            let sync =
                RegistrySync::start(storage.clone(), registry.clone(), &config.node_id).await?;
            Ok::<_, NodeError>((storage, sync))
        }
        .await;
        let (storage, sync) = match started {
            Ok(parts) => parts,
            Err(e) => {
                deregister(config.store.as_ref(), &config.nodes_root, &registration).await;
                return Err(e);
            }
        };

        let topics = Arc::new(LocalTopics::new());
        let orchestrator = orchestrator(&config, &registry, &storage, &topics);
        let default_class = match storage.default_storage_class() {
            Ok(class) => class,
            Err(e) => {
                sync.stop().await;
                let _ = storage.close().await;
                deregister(config.store.as_ref(), &config.nodes_root, &registration).await;
                return Err(e.into());
            }
        };
        let factory =
            ManagedLedgerFactory::from_storage_class(config.store.clone(), &*default_class)
                .with_clock(config.clock.clone());
        let schemas = SchemaStorage::new(
            config.store.clone(),
            storage.schema_provider(),
            config.schema_options.clone(),
        );
        let (stop, stop_rx) = watch::channel(false);
        let node = Node {
            inner: Arc::new(NodeInner {
                config,
                storage,
                registry,
                sync,
                orchestrator,
                topics,
                factory,
                schemas,
                url,
                registration,
                promotions_served: AtomicU64::new(0),
                topic_loads: AtomicU64::new(0),
                metrics,
                tasks: parking_lot::Mutex::new(Vec::new()),
                stop,
                fail_stopped: watch::channel(None).0,
            }),
        };
        node.spawn_tasks(listener, tls, stop_rx);
        tracing::info!(node = %node.node_id(), url = %node.url(), "node started");
        Ok(node)
    }

    /// Spawns the REST server and the background duties.
    fn spawn_tasks(
        &self,
        listener: TcpListener,
        tls: Option<Arc<rustls::ServerConfig>>,
        stop: watch::Receiver<bool>,
    ) {
        let inner = &self.inner;
        let node_id = inner.config.node_id.clone();
        let mut tasks = inner.tasks.lock();
        tasks.push(tokio::spawn(crate::http::serve(
            listener,
            self,
            tls,
            stop.clone(),
        )));
        let weak = self.downgrade();
        tasks.push(tokio::spawn(keep(
            inner.config.store.clone(),
            inner.config.nodes_root.clone(),
            inner.registration.clone(),
            stop.clone(),
            Box::new(move |reason| {
                // Its own task: the stop aborts the task that found it.
                if let Some(node) = weak.upgrade() {
                    tokio::spawn(async move { node.fail_stop(reason).await });
                }
            }),
        )));
        if let Some(duties) = inner.sync.take_duties() {
            tasks.push(tokio::spawn(coordinate(
                node_id.clone(),
                inner.orchestrator.clone(),
                inner.metrics.clone(),
                duties,
                stop.clone(),
            )));
        }
        if let Some(h) = &inner.config.migration {
            // The pause of a metadata migration is a lost session to the
            // managed ledgers: no trim, rollover or deletion in it.
            tasks.push(tokio::spawn(follow_pause(
                node_id.clone(),
                h.participant().paused_watch(),
                inner.factory.metadata_session(),
                stop.clone(),
            )));
            if h.coordinate {
                tasks.push(tokio::spawn(coordinate_migrations(
                    self.downgrade(),
                    stop.clone(),
                )));
            }
        }
        // Also without a dual-read timeout (no automatic cleanup then): the
        // leader takes unfinished canaries over in the same loop.
        tasks.push(tokio::spawn(clean_up_by_itself(
            self.downgrade(),
            inner.config.orchestrator.auto_cleanup_interval,
            stop.clone(),
        )));
        if let Some(rate) = inner.config.forced_rollover_rate {
            // After a canary's override changes too: the topics under its
            // prefix move at their next ledger.
            tasks.push(tokio::spawn(roll_after_switch(
                node_id.clone(),
                inner.topics.clone(),
                rate,
                inner.sync.overrides_applied_watch(),
                stop.clone(),
            )));
            tasks.push(tokio::spawn(roll_after_switch(
                node_id,
                inner.topics.clone(),
                rate,
                inner.sync.applied_epoch_watch(),
                stop,
            )));
        }
    }
}

/// Refuses settings a node cannot run with.
fn check(config: &NodeConfig) -> Result<(), NodeError> {
    if config.node_id.is_empty() || config.node_id.contains('/') {
        return Err(NodeError::InvalidSettings(format!(
            "node id '{}' must be non-empty and without '/'",
            config.node_id
        )));
    }
    match &config.jwt {
        Some(jwt) => {
            crate::auth::JwtVerifier::new(jwt).map_err(|e| {
                NodeError::InvalidSettings(format!("the JWT verification key: {e}"))
            })?;
        }
        None if config.admin_token.is_empty() || config.internal_token.is_empty() => {
            return Err(NodeError::InvalidSettings(
                "the admin and internal tokens must not be empty: every endpoint needs one".into(),
            ));
        }
        None => {}
    }
    Ok(())
}

/// The multi-cluster storage, initialized through the registry.
async fn start_storage(config: &NodeConfig) -> Result<MultiClusterManagedLedgerStorage, NodeError> {
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
    Ok(storage)
}

/// The coordinator, promoting cursors on their owners.
fn orchestrator(
    config: &NodeConfig,
    registry: &Registry,
    storage: &MultiClusterManagedLedgerStorage,
    topics: &Arc<LocalTopics>,
) -> Orchestrator {
    let owners = Arc::new(NodeOwners {
        store: config.store.clone(),
        root: config.owners_root.clone(),
        node_id: config.node_id.clone(),
        local: topics.clone(),
        internal_token: config.internal_token.clone(),
        tls: config.tls_client.clone(),
    });
    let orchestrator = Orchestrator::new(
        config.store.clone(),
        registry.clone(),
        Arc::new(storage.clone()),
        owners,
        config.orchestrator.clone(),
    )
    .with_clock(config.clock.clone());
    orchestrator.with_idgen(match &config.idgen {
        Some(idgen) => idgen.clone(),
        None => Arc::new(bkswitch_bookkeeper::ZkIdgenSource::default()),
    })
}
