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
//!   over every topic it owns at a bounded rate
//!   ([design §5.2](bkswitch_docs::design)).
//! - When the sync hands this node a coordinator duty (it is the directive's
//!   origin, or the elected leader), the node runs the orchestrator for it.
//! - Topics opened through [`Node::open_topic`] are owned by this node (see
//!   [`Ownership`]), so a coordinator elsewhere sends cursor promotions here
//!   over HTTP, which the REST API serves through
//!   [`Node::serve_cursor_promotion`].
//!
//! Files: `config.rs` (settings and errors), `ownership.rs` (who owns a
//! topic, how a coordinator reaches it), `duties.rs` (the background loops),
//! `registration.rs` (the node id's registration); this file is the running
//! node's handle. Start-up, where the node meets the REST server, is
//! the `start` module, above both.

mod config;
pub(crate) mod duties;
mod fail_stop;
pub(crate) mod migration;
pub(crate) mod ownership;
mod pulsar;
pub(crate) mod registration;
mod start_lock;
mod switches;
mod verbs;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bkswitch_bk_client::BkError;
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, RegistrySync};
use bkswitch_managed_ledger::schema::SchemaStorage;
use bkswitch_managed_ledger::{ManagedLedger, ManagedLedgerFactory};
use bkswitch_mledger_spi::ManagedLedgerStorage;
use bkswitch_registry::{ClusterRecord, ClusterStatus, ClusterUri, Registry, RegistryError};
use bkswitch_switch_orchestrator::adapters::LocalTopics;
use bkswitch_switch_orchestrator::{
    CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, Orchestrator, OrchestratorError,
    Phase, PromoteError,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use config::{standard_client_factory, standard_idgen_source, NodeConfig, NodeError};
pub use migration::MigrationHandle;
pub use start_lock::START_LOCK_PATH;
pub use switches::Switches;

/// How long [`Node::probe_cluster`] waits for a cluster's client to start.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(15);
pub use ownership::{Ownership, DEFAULT_OWNERS_ROOT};
pub use registration::DEFAULT_NODES_ROOT;

use crate::wire::NodeStatus;

/// Everything a running node holds. The background tasks hold only the parts
/// they use, and the REST server a [`WeakNode`], so dropping every [`Node`]
/// drops this, closes `stop` and ends them all.
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
    /// This node's node-id registration (given up by [`Node::stop`]).
    pub(crate) registration: registration::Registration,
    /// Cursor promotions this node executed for a coordinator over HTTP.
    pub(crate) promotions_served: AtomicU64,
    /// Topic loads from the metadata (a first open, or a reload after an
    /// unload or a fence).
    pub(crate) topic_loads: AtomicU64,
    pub(crate) metrics: Arc<crate::metrics::NodeMetrics>,
    pub(crate) tasks: parking_lot::Mutex<Vec<JoinHandle<()>>>,
    pub(crate) stop: watch::Sender<bool>,
    /// Why the node stopped by itself ([`Node::fail_stopped`]).
    pub(crate) fail_stopped: watch::Sender<Option<String>>,
}

/// A running broker-like node: the multi-cluster storage, the registry sync,
/// the coordinator, topic ownership and the REST API, put together. Cheap to
/// clone.
///
/// [`Node::start`] is what `bookie-switch serve` runs, and what the demo and
/// the end-to-end tests start several times in one process.
///
/// - The storage is initialized through the registry (registry ACTIVE →
///   `cluster_name` hint → the name the client reports, auto-registered
///   ACTIVE) and records the bootstrap marker.
/// - A [`RegistrySync`] follows the registry: on every directive the node
///   swaps its active cluster, enters dual-read and, when configured, rolls
///   over every topic it owns at a bounded rate
///   ([design §5.2](bkswitch_docs::design)).
/// - When the sync hands this node a coordinator duty (it is the directive's
///   origin, or the elected leader), the node runs the orchestrator for it.
/// - Topics opened through [`Node::open_topic`] are owned by this node (see
///   [`Ownership`]), so a coordinator elsewhere sends cursor promotions here
///   over HTTP, which the REST API serves through
///   [`Node::serve_cursor_promotion`].
#[derive(Clone)]
pub struct Node {
    pub(crate) inner: Arc<NodeInner>,
}

/// A handle to a [`Node`] that does not keep it running: the REST server holds
/// one, so dropping every [`Node`] still stops the node.
#[derive(Debug, Clone)]
pub struct WeakNode(Weak<NodeInner>);

impl WeakNode {
    /// The node, unless every [`Node`] handle is gone.
    pub fn upgrade(&self) -> Option<Node> {
        self.0.upgrade().map(|inner| Node { inner })
    }
}

impl std::fmt::Debug for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Node")
            .field("node_id", &self.inner.config.node_id)
            .field("url", &self.inner.url)
            .finish_non_exhaustive()
    }
}

impl Node {
    /// A handle that does not keep this node running.
    pub fn downgrade(&self) -> WeakNode {
        WeakNode(Arc::downgrade(&self.inner))
    }

    /// The settings the node was started with.
    pub fn config(&self) -> &NodeConfig {
        &self.inner.config
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

    /// This node's long-lived metrics (ledger operations per cluster, switch
    /// events); the `/metrics` exposition adds the rest at scrape time.
    pub fn metrics(&self) -> &crate::metrics::NodeMetrics {
        &self.inner.metrics
    }

    /// What this node's switches and canaries are doing (read only). To
    /// start, roll back or clean up, call [`start_switch`](Self::start_switch),
    /// [`rollback`](Self::rollback), [`cleanup`](Self::cleanup),
    /// [`set_override`](Self::set_override) and
    /// [`remove_override`](Self::remove_override): they own the rules.
    pub fn orchestrator(&self) -> Switches {
        Switches::new(self.inner.orchestrator.clone())
    }

    /// The coordinator itself, for the verbs and duties of this crate.
    pub(crate) fn coordinator(&self) -> &Orchestrator {
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

    /// Whether this node's metadata session is up, as its managed ledgers
    /// see it, and how many trims and rollovers they deferred while it was
    /// lost ([`MetadataSession`](bkswitch_managed_ledger::MetadataSession)).
    pub fn metadata_session(&self) -> std::sync::Arc<bkswitch_managed_ledger::MetadataSession> {
        self.inner.factory.metadata_session()
    }

    /// How many cursor promotions this node executed for a coordinator through
    /// `POST /internal/promote-cursor`.
    pub fn cursor_promotions_served(&self) -> u64 {
        self.inner.promotions_served.load(Ordering::Relaxed)
    }

    /// How many times this node loaded a topic from the metadata
    /// ([`open_topic`](Self::open_topic) of a topic it did not have open): one
    /// per topic unless a topic was unloaded, fenced or reloaded.
    pub fn topic_loads(&self) -> u64 {
        self.inner.topic_loads.load(Ordering::Relaxed)
    }

    /// How many of the topics this node has open are fenced (another owner,
    /// or a metadata version conflict, took them away).
    pub fn fenced_topics(&self) -> u64 {
        let topics = &self.inner.topics;
        topics
            .list()
            .iter()
            .filter(|name| topics.get(name).is_some_and(|ml| ml.is_fenced()))
            .count() as u64
    }

    /// Promotes a cursor of a topic this node owns, as a coordinator asked
    /// over HTTP (`POST /internal/promote-cursor`), and counts it in
    /// [`cursor_promotions_served`](Self::cursor_promotions_served).
    ///
    /// # Errors
    ///
    /// The [`PromoteError`] of the owned topics: not owned here, rolled over
    /// since the copy, temporarily impossible.
    pub async fn serve_cursor_promotion(
        &self,
        req: &CursorPromoteRequest,
    ) -> Result<CursorPromoteOutcome, PromoteError> {
        let outcome = self.inner.topics.promote_cursor(req).await?;
        self.inner.promotions_served.fetch_add(1, Ordering::Relaxed);
        Ok(outcome)
    }

    /// Opens (or returns the already open) managed ledger `name` with the
    /// routing hooks, after claiming it for this node (an ephemeral ownership
    /// node, taken by compare-and-set before the topic is loaded).
    ///
    /// # Errors
    ///
    /// [`NodeError::TopicOwned`] when another live node owns it (nothing
    /// loaded, nothing written); [`NodeError::FailStopped`] once the node
    /// stopped by itself; [`NodeError::DedicatedCoordinator`] on a
    /// node that serves no topics; [`NodeError::Metadata`] when the ownership
    /// cannot be recorded; managed-ledger errors of opening (the claim is
    /// released again).
    pub async fn open_topic(&self, name: &str) -> Result<ManagedLedger, NodeError> {
        if let Some(reason) = self.fail_stopped() {
            return Err(NodeError::FailStopped {
                node: self.inner.config.node_id.clone(),
                reason,
            });
        }
        if self.inner.config.dedicated_coordinator {
            return Err(NodeError::DedicatedCoordinator {
                node: self.inner.config.node_id.clone(),
                topic: name.to_owned(),
            });
        }
        if let Some(ml) = self.inner.topics.get(name) {
            return Ok(ml);
        }
        // Ownership first: loading the topic recovers (fences) its last
        // ledger, which must never happen to a topic another node serves.
        let owner = Ownership {
            node_id: self.inner.config.node_id.clone(),
            url: self.inner.url.clone(),
        };
        let store = self.inner.config.store.as_ref();
        let path = ownership::owner_path(&self.inner.config.owners_root, name);
        if let ownership::Claim::OwnedBy(other) = ownership::claim(store, &path, &owner).await? {
            return Err(NodeError::TopicOwned {
                topic: name.to_owned(),
                owner: other.node_id,
                url: other.url,
            });
        }
        let mut config = self.inner.config.ledger_config.clone();
        self.inner.storage.configure(&mut config);
        // Loading a topic whose ledgers live on a cluster whose client is not
        // started yet (or is down) fails with a retryable error: retried for
        // a while, with the ownership given up between attempts. Holding it
        // while nothing is loaded would keep a switch or rollback from
        // flipping the topic's cursors for as long as clients keep asking
        // for the topic (found by the nemesis: a rollback with its target
        // dead never converged under concurrent consumers).
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        let mut pause = Duration::from_millis(50);
        let ml = loop {
            match self.inner.factory.open(name, config.clone()).await {
                Ok(ml) => break ml,
                Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                    tracing::debug!(topic = name, error = %e, "topic load retried");
                    ownership::release(store, &path, &owner.node_id).await;
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(Duration::from_secs(1));
                    if let ownership::Claim::OwnedBy(other) =
                        ownership::claim(store, &path, &owner).await?
                    {
                        return Err(NodeError::TopicOwned {
                            topic: name.to_owned(),
                            owner: other.node_id,
                            url: other.url,
                        });
                    }
                }
                Err(e) => {
                    ownership::release(store, &path, &owner.node_id).await;
                    return Err(e.into());
                }
            }
        };
        self.inner.topics.insert(ml.clone());
        self.inner.topic_loads.fetch_add(1, Ordering::Relaxed);
        Ok(ml)
    }

    /// Closes a topic this node owns and gives up its ownership.
    ///
    /// # Errors
    ///
    /// Managed-ledger errors of closing (ownership is released anyway).
    pub async fn unload_topic(&self, name: &str) -> Result<(), NodeError> {
        let config = &self.inner.config;
        let path = ownership::owner_path(&config.owners_root, name);
        ownership::release(config.store.as_ref(), &path, &config.node_id).await;
        if let Some(ml) = self.inner.topics.remove(name) {
            ml.close().await?;
        }
        Ok(())
    }

    /// Registers the bookie cluster `name` at `metadata_service_uri` with
    /// `status`, after [probing](Self::probe_cluster) that it can serve: a
    /// malformed URI, a scheme no client handles, an unreachable ZooKeeper or a
    /// cluster without a writable bookie is refused and nothing is recorded.
    ///
    /// # Errors
    /// [`NodeError::Registry`] for a bad name or URI and the registry's own
    /// refusals (name or URI taken, another ACTIVE cluster);
    /// [`NodeError::ClusterProbe`] when the probe fails.
    pub async fn register_cluster(
        &self,
        name: &str,
        metadata_service_uri: &str,
        status: ClusterStatus,
    ) -> Result<ClusterRecord, NodeError> {
        bkswitch_registry::validate_name(name)?;
        ClusterUri::parse(metadata_service_uri).map_err(RegistryError::from)?;
        if let Some(existing) = self.registry().get(name).await? {
            return Err(NodeError::Registry(RegistryError::AlreadyExists {
                name: existing.name,
            }));
        }
        self.probe_cluster(name, metadata_service_uri).await?;
        Ok(self
            .registry()
            .register(name, metadata_service_uri, status)
            .await?)
    }

    /// Starts the canary of `prefix`: new ledgers of the managed ledgers
    /// under it are created on `cluster` (every node applies the registry's
    /// override), and their schema and cursor ledgers are copied and promoted
    /// by this node (a switch scoped to the prefix, see
    /// [`Orchestrator::for_prefix`]). Everything else stays where it is.
    /// Returns the canary's status once started; the copy runs in the
    /// background.
    ///
    /// # Errors
    ///
    /// As [`Orchestrator::start_switch`], scoped: a bad prefix, an unknown or
    /// deprecated cluster, a canary of the prefix in progress, the precheck.
    pub async fn set_override(
        &self,
        prefix: &str,
        cluster: &str,
    ) -> Result<bkswitch_switch_orchestrator::SwitchStatus, NodeError> {
        bkswitch_registry::validate_prefix(prefix).map_err(|e| NodeError::Invalid {
            field: "prefix",
            message: e.to_string(),
        })?;
        bkswitch_registry::validate_name(cluster).map_err(|e| NodeError::Invalid {
            field: "cluster",
            message: e.to_string(),
        })?;
        let canary = self.coordinator().for_prefix(prefix);
        let what = format!("the canary of `{prefix}` on `{cluster}`");
        // Read only, before the lock: most refusals write nothing at all.
        self.refuse_during_migration(&format!("start {what}"))
            .await?;
        let status = self
            .exclusive_start(&what, async {
                // Under the start lock: a migration started meanwhile is seen.
                self.refuse_during_migration(&format!("start {what}"))
                    .await?;
                Ok(canary.start_switch(cluster, Some(self.node_id())).await?)
            })
            .await?;
        let node_id = self.node_id().to_owned();
        let metrics = self.inner.metrics.clone();
        let stop = self.inner.stop.subscribe();
        let epoch = status.epoch;
        self.inner.tasks.lock().push(tokio::spawn(async move {
            duties::run_switch(&node_id, &canary, &metrics, epoch, &stop).await;
        }));
        Ok(status)
    }

    /// Ends the canary of `prefix` by rolling it back: the override is
    /// removed (new ledgers of the prefix go to the active cluster again) and
    /// its promoted stamps flip back. Inside the rollback window, like any
    /// rollback.
    ///
    /// # Errors
    ///
    /// [`OrchestratorError::NoSuchSwitch`] when the prefix has no canary; as
    /// [`Orchestrator::rollback`].
    pub async fn remove_override(
        &self,
        prefix: &str,
    ) -> Result<bkswitch_switch_orchestrator::SwitchStatus, NodeError> {
        let canary = self.coordinator().for_prefix(prefix);
        let Some(st) = canary.current_status().await? else {
            return Err(OrchestratorError::NoSuchSwitch {
                switch_id: format!("canary of `{prefix}`"),
            }
            .into());
        };
        Ok(canary.rollback(&st.switch_id).await?)
    }

    /// The per-prefix overrides with their canary's status.
    ///
    /// # Errors
    ///
    /// Registry and orchestrator read errors.
    pub async fn overrides(
        &self,
    ) -> Result<
        Vec<(
            String,
            bkswitch_registry::PrefixOverride,
            Option<bkswitch_switch_orchestrator::SwitchStatus>,
        )>,
        NodeError,
    > {
        let (map, _) = self.registry().prefix_overrides().await?;
        let mut out = Vec::new();
        for (prefix, o) in map {
            let st = self
                .orchestrator()
                .for_prefix(&prefix)
                .current_status()
                .await?;
            out.push((prefix, o, st));
        }
        Ok(out)
    }

    /// Unregisters the bookie cluster `name`. Refused, with nothing written:
    ///
    /// - a cluster that is the source or the target of a switch that has not
    ///   finished (neither DONE nor rolled back): its ledgers are still being
    ///   copied, promoted or created there;
    /// - a cluster that still holds a recorded ledger — a data, cursor or
    ///   schema ledger stamped with its name, or, for the bootstrap cluster,
    ///   an unstamped one ([I2](bkswitch_docs::invariants::I2),
    ///   [I17](bkswitch_docs::invariants::I17)): without its record no node
    ///   could read them again. Data ledgers are never copied, so the old
    ///   cluster of a finished switch stays registered (DEPRECATED) until its
    ///   data ledgers are trimmed or deleted. The check streams the metadata
    ///   ([`Orchestrator::cluster_usage`](bkswitch_switch_orchestrator::Orchestrator::cluster_usage)).
    ///
    /// - a cluster that a per-prefix override names (new ledgers of its
    ///   prefix are created there), or that is the source or the target of a
    ///   canary that has not finished (its records under
    ///   `<registry root>/canaries/…`, even when its override is gone);
    /// - any cluster while some managed-ledger or schema metadata cannot be
    ///   decoded: which cluster that record's ledgers are on cannot be told.
    ///
    /// The registry itself refuses the ACTIVE cluster. The switch check runs
    /// again after the ledger scan, right before the delete, so a switch
    /// started while the scan ran is seen; a switch started in the few
    /// milliseconds between that check and the delete is not (the metadata
    /// store has no multi-node transaction here); such a switch fails at
    /// BUILD with the target unknown and can be rolled back.
    ///
    /// # Errors
    /// [`NodeError::ClusterInUse`], [`NodeError::ClusterOverridden`],
    /// [`NodeError::ClusterInCanary`], [`NodeError::ClusterHoldsLedgers`],
    /// [`NodeError::UndecodableMetadata`] (nothing written); the registry's
    /// errors.
    pub async fn unregister_cluster(&self, name: &str) -> Result<(), NodeError> {
        bkswitch_registry::validate_name(name)?;
        if self.registry().get(name).await?.is_none() {
            return Err(RegistryError::NotFound {
                name: name.to_owned(),
            }
            .into());
        }
        self.refuse_holds(name).await?;
        let usage = self.orchestrator().cluster_usage(name).await?;
        if !usage.is_empty() {
            return Err(NodeError::ClusterHoldsLedgers {
                name: name.to_owned(),
                usage: Box::new(usage),
            });
        }
        if usage.undecodable > 0 {
            return Err(NodeError::UndecodableMetadata {
                name: name.to_owned(),
                count: usage.undecodable,
                paths: usage.undecodable_paths,
            });
        }
        self.refuse_holds(name).await?;
        Ok(self.registry().unregister(name).await?)
    }

    /// Refuses to unregister `name` while something beside recorded ledgers
    /// holds it: a side of an unfinished switch, an override naming it, a
    /// side of an unfinished canary.
    async fn refuse_holds(&self, name: &str) -> Result<(), NodeError> {
        self.refuse_switch_side(name).await?;
        let (overrides, _) = self.registry().prefix_overrides().await?;
        let prefixes: Vec<String> = overrides
            .into_iter()
            .filter(|(_, o)| o.cluster == name)
            .map(|(p, _)| p)
            .collect();
        if !prefixes.is_empty() {
            return Err(NodeError::ClusterOverridden {
                name: name.to_owned(),
                prefixes,
            });
        }
        for prefix in self.orchestrator().canary_prefixes().await? {
            let canary = self.coordinator().for_prefix(&prefix);
            let Some(st) = canary.current_status().await? else {
                continue;
            };
            if let Some(side) = unfinished_side(&st, name) {
                return Err(NodeError::ClusterInCanary {
                    name: name.to_owned(),
                    side,
                    prefix,
                    switch_id: st.switch_id,
                    phase: st.phase.to_string(),
                });
            }
        }
        Ok(())
    }

    /// [`NodeError::ClusterInUse`] when `name` is a side of an unfinished switch.
    async fn refuse_switch_side(&self, name: &str) -> Result<(), NodeError> {
        let Some(st) = self.orchestrator().current_status().await? else {
            return Ok(());
        };
        match unfinished_side(&st, name) {
            Some(side) => Err(NodeError::ClusterInUse {
                name: name.to_owned(),
                side,
                switch_id: st.switch_id,
                phase: st.phase.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// Starts a client of `metadata_service_uri` through the node's factory,
    /// checks that the cluster has at least one writable bookie (when the
    /// client knows its bookies), and closes it again. Bounded by
    /// [`PROBE_TIMEOUT`]. Writes nothing to the broker's metadata; a real
    /// BookKeeper client creates the cluster's `LAYOUT` node when it is
    /// missing, as BookKeeper's own client does.
    ///
    /// # Errors
    /// [`NodeError::ClusterProbe`] naming the cluster, the URI and the cause.
    pub async fn probe_cluster(
        &self,
        name: &str,
        metadata_service_uri: &str,
    ) -> Result<(), NodeError> {
        let failed = |reason: String, source: Option<BkError>| NodeError::ClusterProbe {
            name: name.to_owned(),
            uri: metadata_service_uri.to_owned(),
            reason,
            source: source.map(Box::new),
        };
        let started = tokio::time::timeout(
            PROBE_TIMEOUT,
            self.config()
                .client_factory
                .create_named(name, metadata_service_uri),
        )
        .await;
        let client = match started {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => return Err(failed(format!("its client does not start: {e}"), Some(e))),
            Err(_) => {
                return Err(failed(
                    format!("its client did not start within {PROBE_TIMEOUT:?}"),
                    None,
                ))
            }
        };
        let writable = client.writable_bookies();
        if let Err(e) = client.close().await {
            tracing::debug!(cluster = name, error = %e, "closing the probe client");
        }
        match writable {
            Some(0) => Err(failed(
                "the cluster has no writable bookie (none registered under the ledgers root's \
                 `available` node)"
                    .to_owned(),
                None,
            )),
            _ => Ok(()),
        }
    }

    /// This node's status (what `GET /status` answers), with when it applied
    /// which directive and the latest switch's copy progress: live on the
    /// node that copies it, read from the ledger records elsewhere while the
    /// switch is in BUILD or PROMOTE
    /// ([`Orchestrator::copy_progress`]).
    ///
    /// # Errors
    ///
    /// Registry and orchestrator read errors.
    pub async fn status(&self) -> Result<NodeStatus, NodeError> {
        let inner = &self.inner;
        let switch = inner.orchestrator.current_status().await?;
        // The copy progress is an extra: a failure to read it leaves it out
        // rather than failing the status.
        let progress = match &switch {
            Some(st) => inner
                .orchestrator
                .copy_progress(&st.switch_id)
                .await
                .unwrap_or_else(|e| {
                    tracing::warn!(switch = %st.switch_id, error = %e,
                        "reading the copy progress; left out of the status");
                    None
                }),
            None => None,
        };
        Ok(NodeStatus::new(
            &inner.config.node_id,
            inner.storage.active_cluster(),
            inner.storage.bootstrap_cluster(),
            inner.storage.read_mode(),
            inner.sync.applied_epoch(),
            inner.registry.switch_directive().await?,
            switch,
        )
        .with_applied(inner.sync.last_applied().as_ref())
        .with_copy_progress(progress.as_ref()))
    }

    /// Stops the REST server and background tasks, unloads the owned topics
    /// (closing them and giving their ownership up), stops the registry sync
    /// and closes the clients. The metadata store is left open
    /// (it belongs to the caller).
    pub async fn stop(&self) {
        let _ = self.inner.stop.send(true);
        let tasks: Vec<_> = std::mem::take(&mut *self.inner.tasks.lock());
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
        let config = &self.inner.config;
        registration::deregister(
            config.store.as_ref(),
            &config.nodes_root,
            &self.inner.registration,
        )
        .await;
    }
}

/// Which side (`source` or `target`) of the switch or canary `st` the
/// cluster `name` is, while it has not finished (neither final nor rolled
/// back).
fn unfinished_side(
    st: &bkswitch_switch_orchestrator::SwitchStatus,
    name: &str,
) -> Option<&'static str> {
    if st.phase.is_final() || st.phase == Phase::RolledBack {
        return None;
    }
    if st.source == name {
        Some("source")
    } else if st.target == name {
        Some("target")
    } else {
        None
    }
}
