//! The demo's world: two bookie clusters `old` and `new` (in memory, or real:
//! see `bookies.rs`), the metadata store (in memory, or a fresh chroot on
//! ZooKeeper or key prefix on etcd), the nodes, and the topics with their
//! consumers and schemas.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{open_store, MemoryStore, MetadataStore, StoreTimeouts};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_switch_orchestrator::OrchestratorConfig;

use super::bookies::Bookies;
use super::error::{step_err, DemoError};
use super::options::DemoOptions;
use crate::traffic::TopicHandle;
use bkswitch_admin::{Node, NodeConfig};

/// The admin token of the demo's nodes.
pub(super) const ADMIN_TOKEN: &str = "demo-admin-token";
const INTERNAL_TOKEN: &str = "demo-internal-token";
/// First ledger id of the `new` cluster: the operator advanced its id
/// generator beyond the old cluster's ids, which the precheck
/// ([I11](bkswitch_docs::invariants::I11)) verifies.
pub(super) const NEW_CLUSTER_FIRST_ID: i64 = 1_000_000;

/// Everything a demo run starts.
pub(super) struct Stack {
    /// The in-memory store every node has a session of (unused with
    /// `metadata`).
    shared: MemoryStore,
    /// The ZooKeeper or etcd URL, if the metadata lives there.
    metadata: Option<String>,
    /// The fresh chroot (key prefix) under `metadata`.
    chroot: String,
    /// The bookie clusters `old` and `new`.
    pub(super) bookies: Bookies,
    ledger_config: ManagedLedgerConfig,
    /// `node-1` … `node-N`; `node-1` is the one the operator talks to.
    pub(super) nodes: Vec<Node>,
    /// One per topic, owned round-robin by the nodes.
    pub(super) topics: Vec<TopicHandle>,
}

impl Stack {
    /// Prepares the clusters, starts the nodes and opens the topics, each with
    /// a consumer and `schema_versions` schema versions.
    pub(super) async fn start(opts: &DemoOptions) -> Result<Stack, DemoError> {
        let run_id = format!("bkswitch-demo-{}", now_ms());
        let metadata = opts.metadata.clone().filter(|url| url != "memory");
        // Real clusters register in the ZooKeeper `--metadata` names, if it
        // names one; else they start their own (with etcd metadata, the bookie
        // clusters still keep their own metadata service, ZooKeeper).
        let zk = metadata.as_deref().filter(|url| url.starts_with("zk://"));
        let bookies = Bookies::start(opts.bookkeeper, zk, &run_id, NEW_CLUSTER_FIRST_ID).await?;
        // The nodes' metadata goes where `--metadata` says; without it, next
        // to the real clusters' metadata on their ZooKeeper.
        let metadata = metadata.or_else(|| {
            bookies
                .zk_connect()
                .map(|c| format!("zk://{}", c.split(',').next().unwrap_or(c)))
        });
        let q = bookies.quorum();
        let mut stack = Stack {
            shared: MemoryStore::new(),
            metadata,
            chroot: format!("/{run_id}"),
            bookies,
            ledger_config: ManagedLedgerConfig::default()
                .with_quorums(q, q, q)
                .with_metadata_quorums(q, q, q)
                .with_max_entries_per_ledger(5_000)
                .with_cursor_rollover(10_000, Duration::from_secs(3600)),
            nodes: Vec::new(),
            topics: Vec::new(),
        };
        stack.start_nodes(opts).await?;
        stack.open_topics(opts).await?;
        Ok(stack)
    }

    /// The metadata store, through `node-1`'s session.
    pub(super) fn store(&self) -> Arc<dyn MetadataStore> {
        self.nodes[0].registry().store().clone()
    }

    /// What kind of metadata store the nodes run on, for the progress lines.
    pub(super) fn metadata_kind(&self) -> &'static str {
        match self.metadata.as_deref() {
            None => "in-memory",
            Some(url) if url.starts_with("etcd://") => "etcd",
            Some(_) => "ZooKeeper",
        }
    }

    /// What the report calls the metadata store: `memory`, or the ZooKeeper
    /// or etcd URL with the run's chroot (key prefix).
    pub(super) fn metadata_store(&self) -> String {
        match &self.metadata {
            None => "memory".to_owned(),
            Some(url) => format!("{}{}", url.trim_end_matches('/'), self.chroot),
        }
    }

    /// Stops every node.
    pub(super) async fn stop_nodes(&self) {
        for n in &self.nodes {
            n.stop().await;
        }
    }

    /// A fresh node on a new session, owning nothing and never rolling over:
    /// it reopens topics to check what they recover.
    pub(super) async fn start_verifier(&self) -> Result<Node, DemoError> {
        let mut cfg = self.node_config("verifier").await?;
        cfg.forced_rollover_rate = None;
        Node::start(cfg)
            .await
            .map_err(step_err("starting the verifier"))
    }

    async fn start_nodes(&mut self, opts: &DemoOptions) -> Result<(), DemoError> {
        for i in 0..opts.nodes {
            let mut cfg = self.node_config(&format!("node-{}", i + 1)).await?;
            cfg.cluster_name = Some("old".into());
            cfg.idgen = Some(self.bookies.idgen());
            cfg.forced_rollover_rate = opts.forced_rollover.then_some(200);
            cfg.orchestrator = OrchestratorConfig::default();
            let node = Node::start(cfg)
                .await
                .map_err(step_err("starting a node"))?;
            self.nodes.push(node);
        }
        Ok(())
    }

    async fn open_topics(&mut self, opts: &DemoOptions) -> Result<(), DemoError> {
        for t in 0..opts.topics {
            let name = format!("public/default/persistent/demo-{t:03}");
            let node = &self.nodes[t % self.nodes.len()];
            let ledger = node
                .open_topic(&name)
                .await
                .map_err(step_err("opening a topic"))?;
            let cursor = ledger
                .open_cursor_at("sub", InitialPosition::Earliest)
                .await
                .map_err(step_err("opening a cursor"))?;
            for v in 0..opts.schema_versions {
                let data = format!("{{\"type\":\"record\",\"name\":\"Demo{t}\",\"v\":{v}}}");
                node.schemas()
                    .put(
                        &schema_id(t),
                        data.as_bytes(),
                        format!("hash-{t}-{v}").as_bytes(),
                    )
                    .await
                    .map_err(step_err("writing a schema"))?;
            }
            self.topics.push(TopicHandle { ledger, cursor });
        }
        Ok(())
    }

    /// A node configuration on a new session, starting on `old`.
    async fn node_config(&self, id: &str) -> Result<NodeConfig, DemoError> {
        let mut cfg = NodeConfig::new(
            id,
            self.open_store().await?,
            self.bookies.factory(),
            &self.bookies.uri("old"),
            ADMIN_TOKEN,
            INTERNAL_TOKEN,
        );
        cfg.ledger_config = self.ledger_config.clone();
        let q = self.bookies.quorum();
        let schema_ledgers = cfg
            .schema_options
            .ledger_config
            .clone()
            .with_quorums(q, q, q);
        cfg.schema_options = cfg
            .schema_options
            .clone()
            .with_ledger_config(schema_ledgers);
        Ok(cfg)
    }

    /// A new session of the metadata store.
    async fn open_store(&self) -> Result<Arc<dyn MetadataStore>, DemoError> {
        match &self.metadata {
            None => Ok(Arc::new(self.shared.new_session())),
            Some(_) => open_store(&self.metadata_store(), StoreTimeouts::default())
                .await
                .map_err(step_err(match self.metadata_kind() {
                    "etcd" => "connecting to etcd",
                    _ => "connecting to ZooKeeper",
                })),
        }
    }
}

/// The schema id of topic `t`.
pub(super) fn schema_id(t: usize) -> String {
    format!("public/default/demo-{t:03}")
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}
