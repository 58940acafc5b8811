//! An embedded stack for tests and experiments, without HTTP: two in-memory
//! bookie clusters (`old`, ACTIVE and bootstrap, and `new`, STANDBY) behind a
//! [`MultiClusterManagedLedgerStorage`], the cluster registry, schema storage
//! routed through the storage, the locally open topics and orchestrators —
//! all on one metadata store of your choice.
//!
//! ```
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! use std::sync::Arc;
//! use bkswitch_metadata_store::MemoryStore;
//! use bkswitch_switch_orchestrator::testkit::{EmbeddedStack, NEW};
//!
//! let stack = EmbeddedStack::start(Arc::new(MemoryStore::new()), true).await.unwrap();
//! let orchestrator = stack.orchestrator(Default::default());
//! let switch = orchestrator.start_switch(NEW, None).await.unwrap();
//! stack.storage.switch_active_cluster(NEW).await.unwrap();
//! let status = orchestrator.run(&switch.switch_id).await.unwrap();
//! assert_eq!(status.phase.as_str(), "SWITCHED");
//! # });
//! ```

use std::sync::Arc;

use bkswitch_bk_client::{LedgerConfig, MemoryClientFactory, MemoryClusters};
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, RouterConfig};
use bkswitch_managed_ledger::schema::{SchemaStorage, SchemaStorageOptions};
use bkswitch_managed_ledger::ManagedLedgerFactory;
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{ManagedLedgerConfig, ManagedLedgerStorage};
use bkswitch_registry::{ClusterStatus, Registry};

use crate::adapters::LocalTopics;
use crate::{Orchestrator, OrchestratorConfig, TopicOwners};

/// The cluster the stack starts on (ACTIVE, bootstrap).
pub const OLD: &str = "old";
/// The STANDBY cluster a switch moves to.
pub const NEW: &str = "new";
/// Where [`EmbeddedStack::start`] starts `new`'s ledger ids when asked to
/// advance them (as an operator does before a switch,
/// [I11](bkswitch_docs::invariants::I11)).
pub const NEW_FIRST_LEDGER_ID: i64 = 1_000_000;

/// Why an [`EmbeddedStack`] could not start or be changed.
#[derive(Debug, thiserror::Error)]
#[error("embedded stack: {0}")]
pub struct StackError(String);

fn err(what: &str) -> impl FnOnce(String) -> StackError + '_ {
    move |e| StackError(format!("{what}: {e}"))
}

/// The parts of an embedded stack; see the [module docs](self).
pub struct EmbeddedStack {
    /// The broker metadata store.
    pub store: Arc<dyn MetadataStore>,
    /// The in-memory bookie clusters (`old` and `new`).
    pub clusters: MemoryClusters,
    /// The multi-cluster storage (ACTIVE on `old` at start).
    pub storage: Arc<MultiClusterManagedLedgerStorage>,
    /// The cluster registry on `store`.
    pub registry: Registry,
    /// The topics open in this process (owners for cursor promotion).
    pub topics: LocalTopics,
    /// Schema storage routed through the storage (quorums of 1).
    pub schemas: SchemaStorage,
}

impl std::fmt::Debug for EmbeddedStack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EmbeddedStack")
            .field("storage", &self.storage)
            .finish_non_exhaustive()
    }
}

impl EmbeddedStack {
    /// Builds the stack on `store`: both clusters registered (`old` ACTIVE,
    /// `new` STANDBY), `old` recorded as bootstrap and active in the storage.
    /// With `advance_new`, `new` hands out ids from [`NEW_FIRST_LEDGER_ID`]
    /// so that a switch passes the idgen precheck.
    ///
    /// # Errors
    ///
    /// [`StackError`] naming the step that failed (the store refused a write,
    /// the registry is not empty, …).
    pub async fn start(
        store: Arc<dyn MetadataStore>,
        advance_new: bool,
    ) -> Result<EmbeddedStack, StackError> {
        Self::start_with(store, advance_new, SchemaStorageOptions::default()).await
    }

    /// As [`start`](Self::start), with schema storage options (their ledger
    /// quorums are set to 1).
    ///
    /// # Errors
    ///
    /// As [`start`](Self::start).
    pub async fn start_with(
        store: Arc<dyn MetadataStore>,
        advance_new: bool,
        schema_options: SchemaStorageOptions,
    ) -> Result<EmbeddedStack, StackError> {
        let clusters = MemoryClusters::new();
        let storage = Arc::new(MultiClusterManagedLedgerStorage::new(
            RouterConfig::default(),
        ));
        storage.set_client_factory(Arc::new(MemoryClientFactory::with_clusters(
            clusters.clone(),
        )));
        let e = |e: bkswitch_bk_router::RouterError| e.to_string();
        storage
            .add_cluster(OLD, "memory://old")
            .map_err(e)
            .map_err(err("adding old"))?;
        storage
            .add_cluster(NEW, "memory://new")
            .map_err(e)
            .map_err(err("adding new"))?;
        storage
            .set_bootstrap(OLD)
            .map_err(e)
            .map_err(err("recording the bootstrap cluster"))?;
        clusters.get_or_create(OLD);
        let new = clusters.get_or_create(NEW);
        if advance_new {
            new.advance_ledger_id_to(NEW_FIRST_LEDGER_ID)
                .map_err(|e| e.to_string())
                .map_err(err("advancing new's ledger ids"))?;
        }
        storage
            .switch_active_cluster(OLD)
            .await
            .map_err(e)
            .map_err(err("activating old"))?;
        let registry = Registry::new(store.clone());
        let r = |e: bkswitch_registry::RegistryError| e.to_string();
        registry
            .register(OLD, "memory://old", ClusterStatus::Active)
            .await
            .map_err(r)
            .map_err(err("registering old"))?;
        registry
            .register(NEW, "memory://new", ClusterStatus::Standby)
            .await
            .map_err(r)
            .map_err(err("registering new"))?;
        registry
            .ensure_bootstrap(OLD)
            .await
            .map_err(r)
            .map_err(err("writing the bootstrap marker"))?;
        let schemas = SchemaStorage::new(
            store.clone(),
            storage.schema_provider(),
            schema_options.with_ledger_config(LedgerConfig::default().with_quorums(1, 1, 1)),
        );
        Ok(EmbeddedStack {
            store,
            clusters,
            storage,
            registry,
            topics: LocalTopics::new(),
            schemas,
        })
    }

    /// A managed-ledger configuration with quorums of 1 and the storage's
    /// routing hooks installed.
    pub fn ledger_config(&self, base: ManagedLedgerConfig) -> ManagedLedgerConfig {
        let mut config = base.with_quorums(1, 1, 1).with_metadata_quorums(1, 1, 1);
        self.storage.configure(&mut config);
        config
    }

    /// A new managed-ledger factory (as after a broker restart) on the
    /// storage's current default class.
    ///
    /// # Errors
    ///
    /// [`StackError`] when the storage has no active cluster.
    pub fn factory(&self) -> Result<ManagedLedgerFactory, StackError> {
        let class = self
            .storage
            .default_storage_class()
            .map_err(|e| StackError(e.to_string()))?;
        Ok(ManagedLedgerFactory::from_storage_class(
            self.store.clone(),
            &*class,
        ))
    }

    /// An orchestrator whose cursor owners are this stack's open topics.
    pub fn orchestrator(&self, config: OrchestratorConfig) -> Orchestrator {
        self.orchestrator_with(Arc::new(self.topics.clone()), config)
    }

    /// An orchestrator with other cursor owners.
    pub fn orchestrator_with(
        &self,
        owners: Arc<dyn TopicOwners>,
        config: OrchestratorConfig,
    ) -> Orchestrator {
        Orchestrator::new(
            self.store.clone(),
            self.registry.clone(),
            self.storage.clone(),
            owners,
            config,
        )
        .with_idgen(Arc::new(self.clusters.clone()))
    }

    /// What an operator does before switching (or rolling back) from `from`
    /// to `to`: advance `to`'s id generator beyond every id `from` handed
    /// out (and beyond its own), with a margin of `margin`.
    ///
    /// # Errors
    ///
    /// [`StackError`] for an unknown cluster name.
    pub fn advance_beyond(&self, to: &str, from: &str, margin: i64) -> Result<(), StackError> {
        let get = |n: &str| {
            self.clusters
                .get(n)
                .ok_or_else(|| StackError(format!("no cluster named '{n}' (use old or new)")))
        };
        let from_next = get(from)?.next_ledger_id();
        let to_cluster = get(to)?;
        let target = from_next.max(to_cluster.next_ledger_id()) + margin;
        to_cluster
            .advance_ledger_id_to(target)
            .map_err(|e| StackError(e.to_string()))
    }
}
