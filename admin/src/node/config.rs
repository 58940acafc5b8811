//! The settings of a [`Node`](super::Node) and why it can fail.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{ClientFactory, MemoryClientFactory, MemoryClusters, SchemeClientFactory};
use bkswitch_bk_router::RouterError;
use bkswitch_bookkeeper::{BookKeeperClientFactory, ClientConfig, ZOOKEEPER_SCHEMES};
use bkswitch_bookkeeper::{ClusterIdgenSource, ZkIdgenSource};
use bkswitch_managed_ledger::schema::SchemaStorageOptions;
use bkswitch_managed_ledger::{Clock, ManagedLedgerError, SystemClock};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_registry::IdgenSource;
use bkswitch_switch_orchestrator::{OrchestratorConfig, OrchestratorError};

use super::ownership::DEFAULT_OWNERS_ROOT;

/// Settings of a [`Node`](super::Node).
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
    /// Root of the node-id registrations (one ephemeral node per live node,
    /// refusing a second node with the same id).
    pub nodes_root: String,
    /// Bearer token of the public admin endpoints.
    pub admin_token: String,
    /// Bearer token of `/internal/*` (node to node).
    pub internal_token: String,
    /// Where the REST API listens (`127.0.0.1:0` picks a free port).
    pub listen: SocketAddr,
    /// Coordinator settings.
    pub orchestrator: OrchestratorConfig,
    /// Where the precheck reads next ledger ids (default: BookKeeper's ZooKeeper
    /// layout through `bkswitch_bookkeeper::ZkIdgenSource`; `memory://`
    /// clusters need their `MemoryClusters`, see [`standard_idgen_source`]).
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
    /// The bearer token `GET /metrics` requires; `None` (the default): none,
    /// as Pulsar serves its metrics.
    pub metrics_token: Option<String>,
    /// A dedicated coordinator (`bookie-switch coordinator`): it takes part
    /// in the election and coordinates switches, with the same lease, but
    /// serves no topics, so operators can give it a machine of its own.
    pub dedicated_coordinator: bool,
    /// The clock of the node's managed ledgers (ledger timestamps, rollover
    /// ages, retention) and of its coordinator (switch records, the rollback
    /// window, the dual-read timeout of the automatic cleanup). The system
    /// clock by default; a test moves a manual clock past the windows.
    pub clock: Arc<dyn Clock>,
    /// The metadata-migration participant below every metadata user of the
    /// node (`None`, the default: the node takes no part in migrations and
    /// behaves as without this crate's migration support). With one,
    /// [`store`](Self::store) must be the participant itself (or a store on
    /// top of it): [`with_migration`](Self::with_migration) sets both.
    pub migration: Option<super::MigrationHandle>,
    /// HTTPS for the REST API: `None` (the default) serves plain HTTP. With
    /// it, plain HTTP is refused and the node's URL is `https://…`.
    pub tls: Option<crate::tls::TlsServerSettings>,
    /// The TLS client settings of this node's calls to other nodes
    /// (`/internal/promote-cursor` on an `https://` node); `None`: the
    /// system's roots. See [`client_config`](crate::tls::client_config).
    pub tls_client: Option<Arc<rustls::ClientConfig>>,
    /// JWT authentication besides the static tokens (Pulsar's
    /// `AuthenticationProviderToken`); with it, the static tokens may be
    /// empty (not accepted then). The node still sends
    /// [`internal_token`](Self::internal_token) to other nodes: a JWT of an
    /// internal role then.
    pub jwt: Option<crate::auth::JwtSettings>,
}

impl std::fmt::Debug for NodeConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeConfig")
            .field("node_id", &self.node_id)
            .field("bookkeeper_uri", &self.bookkeeper_uri)
            .field("cluster_name", &self.cluster_name)
            .field("registry_root", &self.registry_root)
            .field("listen", &self.listen)
            .field("tls", &self.tls)
            .field("jwt", &self.jwt)
            .finish_non_exhaustive()
    }
}

/// The client factory `bookie-switch serve` uses: `memory://<name>` clusters
/// from `memory` (living in this process; a name that is not there is refused,
/// never created), and real BookKeeper clusters for
/// every scheme of [`bkswitch_bookkeeper::ZOOKEEPER_SCHEMES`] (`zk://`,
/// `zk+hierarchical://`, `zk+longhierarchical://`, `zk+null://`,
/// `metadata-store:zk:`) through the
/// Rust BookKeeper client with `config`. Each client reports its registered
/// name.
pub fn standard_client_factory(
    memory: MemoryClusters,
    config: ClientConfig,
) -> Arc<dyn ClientFactory> {
    let real: Arc<dyn ClientFactory> = Arc::new(BookKeeperClientFactory::new(config));
    Arc::new(
        SchemeClientFactory::new()
            .with_scheme(
                "memory",
                Arc::new(MemoryClientFactory::with_clusters(memory).existing_only()),
            )
            .with_schemes(ZOOKEEPER_SCHEMES, &real),
    )
}

/// The id-generator source matching [`standard_client_factory`]: `memory://`
/// clusters from `memory`, BookKeeper clusters from their own ZooKeeper layout
/// (`idgen`, `idgen-long/HOB-*`).
pub fn standard_idgen_source(memory: MemoryClusters) -> Arc<dyn IdgenSource> {
    Arc::new(ClusterIdgenSource {
        memory,
        zk: ZkIdgenSource::default(),
    })
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
            nodes_root: super::registration::DEFAULT_NODES_ROOT.to_owned(),
            admin_token: admin_token.to_owned(),
            internal_token: internal_token.to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            orchestrator: OrchestratorConfig::default(),
            idgen: None,
            ledger_config: ManagedLedgerConfig::default(),
            schema_options: SchemaStorageOptions::default(),
            forced_rollover_rate: Some(100),
            old_ledger_read_timeout: Duration::from_millis(5000),
            metrics_token: None,
            dedicated_coordinator: false,
            clock: Arc::new(SystemClock),
            migration: None,
            tls: None,
            tls_client: None,
            jwt: None,
        }
    }

    /// Puts the node's metadata on `handle`'s participant: [`store`](Self::store)
    /// becomes the participant and [`migration`](Self::migration) the handle.
    pub fn with_migration(mut self, handle: super::MigrationHandle) -> NodeConfig {
        self.store = Arc::new(handle.participant().clone());
        self.migration = Some(handle);
        self
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
    /// Another live node owns the topic.
    #[error(
        "topic `{topic}` is owned by node `{owner}` ({url}); open it there, or unload it there \
         (or stop that node) first"
    )]
    TopicOwned {
        /// The topic.
        topic: String,
        /// The owning node.
        owner: String,
        /// Its REST base URL.
        url: String,
    },
    /// The node stopped by itself: another live node holds its id
    /// ([`Node::fail_stopped`](crate::Node::fail_stopped)).
    #[error(
        "node `{node}` stopped by itself and claims nothing any more: {reason}. Restart it \
         with a unique node id"
    )]
    FailStopped {
        /// The node.
        node: String,
        /// Why it stopped.
        reason: String,
    },
    /// A dedicated coordinator was asked to serve a topic.
    #[error(
        "node `{node}` is a dedicated coordinator and serves no topics; open `{topic}` on a \
         broker node"
    )]
    DedicatedCoordinator {
        /// The coordinator.
        node: String,
        /// The topic asked for.
        topic: String,
    },
    /// The cluster is needed by a switch that has not finished.
    #[error(
        "cannot unregister bookie cluster `{name}`: it is the {side} of switch `{switch_id}` \
         (phase {phase}); finish the switch (cleanup) or roll it back first. Nothing was \
         unregistered"
    )]
    ClusterInUse {
        /// The cluster.
        name: String,
        /// `source` or `target`.
        side: &'static str,
        /// The switch.
        switch_id: String,
        /// Its phase.
        phase: String,
    },
    /// The cluster is the source or the target of a canary that has not
    /// finished (its records under `<registry root>/canaries/…`).
    #[error(
        "cannot unregister bookie cluster `{name}`: it is the {side} of the canary of \
         `{prefix}` (switch `{switch_id}`, phase {phase}); let the canary finish (a \
         cluster-wide switch to its cluster, then cleanup) or roll it back \
         (`remove-override {prefix}`) first. Nothing was unregistered"
    )]
    ClusterInCanary {
        /// The cluster.
        name: String,
        /// `source` or `target`.
        side: &'static str,
        /// The canary's prefix.
        prefix: String,
        /// Its switch.
        switch_id: String,
        /// Its phase.
        phase: String,
    },
    /// A per-prefix override routes new ledgers to the cluster.
    #[error(
        "cannot unregister bookie cluster `{name}`: the override of {} routes new ledgers \
         there; finish its canary (a cluster-wide switch to `{name}`) or remove it \
         (`remove-override <prefix>`) first. Nothing was unregistered",
        prefixes.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
    )]
    ClusterOverridden {
        /// The cluster.
        name: String,
        /// The prefixes whose override names it.
        prefixes: Vec<String>,
    },
    /// Some metadata cannot be decoded, so whether the cluster still holds
    /// ledgers cannot be told.
    #[error(
        "cannot unregister bookie cluster `{name}`: {count} metadata value(s) decode as no \
         known record (e.g. {}), so which cluster their ledgers are on cannot be told; repair \
         or remove them, then retry. Nothing was unregistered",
        paths.iter().map(|p| format!("`{p}`")).collect::<Vec<_>>().join(", ")
    )]
    UndecodableMetadata {
        /// The cluster.
        name: String,
        /// How many values cannot be decoded.
        count: u64,
        /// The paths of the first ones.
        paths: Vec<String>,
    },
    /// Another live node runs with this node id.
    #[error(
        "node id `{node_id}` is taken by a live node at {url} (registered at `{path}`); two \
         nodes with one id would both own the same topics. Give every node a unique id \
         (`--node-id` / `bkswitchNodeId`), or stop that node first"
    )]
    DuplicateNodeId {
        /// The id.
        node_id: String,
        /// The live node's REST base URL.
        url: String,
        /// Its registration node.
        path: String,
    },
    /// A metadata migration was asked of a node started without a
    /// migration participant.
    #[error(
        "node `{node}` was started without a metadata-migration participant, so it cannot \
         start a metadata migration; send the request to a node started by `bookie-switch \
         serve` or `coordinator` (they all have one)"
    )]
    NoMigrationParticipant {
        /// The node.
        node: String,
    },
    /// `refused` was asked while a metadata migration is unfinished.
    #[error(
        "cannot {refused}: metadata migration `{id}` to {target_url} is unfinished (phase \
         {phase}); wait until it COMPLETES or abort it (`bookie-clusters metadata-migration \
         abort`) first. Nothing was written"
    )]
    MigrationInProgress {
        /// What was refused.
        refused: String,
        /// The migration.
        id: String,
        /// Its phase.
        phase: String,
        /// Its target.
        target_url: String,
    },
    /// A metadata migration was asked while a bookie-cluster switch or a
    /// canary is unfinished.
    #[error(
        "cannot start a metadata migration: {switch} to `{target}` is unfinished (phase \
         {phase}); finish it (cleanup until DONE) or roll it back first. Nothing was written"
    )]
    SwitchUnfinished {
        /// The switch or canary, named.
        switch: String,
        /// Its target cluster.
        target: String,
        /// Its phase.
        phase: String,
    },
    /// Another node (or this one) is starting a switch, a canary or a
    /// metadata migration right now: starts are taken one at a time, so that
    /// two that exclude each other never both begin.
    #[error(
        "cannot {refused}: {other} is in progress (node `{node}` is starting it at this \
         moment); read the status and retry in a moment. Nothing was written"
    )]
    StartInProgress {
        /// What was refused.
        refused: String,
        /// The start under way.
        other: String,
        /// The node starting it.
        node: String,
    },
    /// No bookie-cluster switch is recorded (to roll back or clean up).
    #[error("no switch is recorded; start one with POST /switch (`bookie-clusters switch`)")]
    NoSwitch,
    /// A request field is invalid (nothing was read or written).
    #[error("{field}: {message}")]
    Invalid {
        /// The field, as the REST API names it (`target`, `prefix`,
        /// `cluster`, `srcClusterFilter`).
        field: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The migration's target cannot be used.
    #[error("cannot start a metadata migration to `{target_url}` (targetUrl): {reason}")]
    InvalidMigration {
        /// The target URL as given.
        target_url: String,
        /// Why (the store's message: a bad URL, the source itself, a
        /// non-empty target without `wipeTarget`).
        reason: String,
    },
    /// No metadata migration is recorded.
    #[error(
        "no metadata migration is recorded; start one with `bookie-clusters metadata-migration \
         start --target-url URL`"
    )]
    NoMetadataMigration,
    /// The metadata migration has already ended.
    #[error("metadata migration `{id}` has already ended ({phase}); nothing to abort")]
    MigrationEnded {
        /// The migration.
        id: String,
        /// Its final phase.
        phase: String,
    },
    /// The cluster still holds recorded ledgers.
    #[error(
        "cannot unregister bookie cluster `{name}`: it still holds {}; their reads would have \
         nowhere to go. Keep it registered until those ledgers are trimmed or deleted. Nothing \
         was unregistered",
        usage.summary()
    )]
    ClusterHoldsLedgers {
        /// The cluster.
        name: String,
        /// What it holds, per kind, with samples.
        usage: Box<bkswitch_switch_orchestrator::ClusterUsage>,
    },
    /// A cluster offered for registration cannot serve: its client does not
    /// start, or it has no writable bookie. Nothing was recorded.
    #[error(
        "cannot register bookie cluster `{name}` at `{uri}`: {reason}; check the URI (scheme, \
         ZooKeeper address, ledgers root) and that the cluster's ZooKeeper and bookies are up. \
         Nothing was registered"
    )]
    ClusterProbe {
        /// The cluster's name.
        name: String,
        /// Its metadata-service URI.
        uri: String,
        /// What the probe found.
        reason: String,
        /// The client's error, when it did not start.
        #[source]
        source: Option<Box<bkswitch_bk_client::BkError>>,
    },
}

impl NodeError {
    /// Whether the cause may go away by itself (the cluster unreachable now),
    /// as opposed to a request that cannot succeed as written.
    pub fn is_retryable(&self) -> bool {
        match self {
            NodeError::ClusterProbe { source, .. } => {
                source.as_ref().is_none_or(|e| e.is_retryable())
            }
            NodeError::Metadata(e) => e.is_retryable(),
            NodeError::Registry(e) => e.is_retryable(),
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use bkswitch_registry::RegistryError;

    use super::*;

    #[test]
    fn registry_errors_keep_their_retryability() {
        let lost = NodeError::Registry(RegistryError::Conflict {
            path: "/admin/bookie-clusters/new".into(),
            attempts: 3,
        });
        assert!(lost.is_retryable());
        let bad = NodeError::Registry(RegistryError::NotFound { name: "new".into() });
        assert!(!bad.is_retryable());
    }
}
