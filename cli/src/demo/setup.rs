//! The demo's world: two bookie clusters `old` and `new` (in memory, or real:
//! see `bookies.rs`), the metadata store (in memory, or a fresh chroot on
//! ZooKeeper), the nodes, and the topics with their consumers and schemas.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MemoryStore, MetadataStore, ZkStore, ZkStoreOptions};
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
    /// The in-memory store every node has a session of (unused with `zk`).
    shared: MemoryStore,
    /// The ZooKeeper URL, if the metadata lives there.
    zk: Option<String>,
    /// The fresh chroot under `zk`.
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
        let bookies = Bookies::start(
            opts.bookkeeper,
            opts.zk.as_deref(),
            &run_id,
            NEW_CLUSTER_FIRST_ID,
        )
        .await?;
        // Real clusters keep their metadata on a real ZooKeeper: the nodes'
        // too, unless `--zk` named one already.
        let zk = opts.zk.clone().or_else(|| {
            bookies
                .zk_connect()
                .map(|c| format!("zk://{}", c.split(',').next().unwrap_or(c)))
        });
        let q = bookies.quorum();
        let mut stack = Stack {
            shared: MemoryStore::new(),
            zk,
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

    /// Whether the metadata lives on ZooKeeper.
    pub(super) fn on_zookeeper(&self) -> bool {
        self.zk.is_some()
    }

    /// What the report calls the metadata store: `memory` or the ZooKeeper
    /// URL with the run's chroot.
    pub(super) fn metadata_store(&self) -> String {
        match &self.zk {
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
        match &self.zk {
            None => Ok(Arc::new(self.shared.new_session())),
            Some(url) => {
                let url = format!("{}{}", url.trim_end_matches('/'), self.chroot);
                let store = ZkStore::connect(&url, ZkStoreOptions::default())
                    .await
                    .map_err(step_err("connecting to ZooKeeper"))?;
                Ok(Arc::new(store))
            }
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
