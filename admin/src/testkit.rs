//! Helpers for tests of code built on [`Node`]: two in-memory bookie clusters,
//! a node configuration on them, and a snapshot of the whole metadata tree
//! (used by this crate's tests, the demo's checks and `bkswitch-hardening`,
//! which still reaches it under its old name `testing`).

use std::collections::BTreeMap;
use std::sync::Arc;

use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::ManagedLedgerConfig;

use crate::node::{Node, NodeConfig};

/// Admin token of test nodes.
pub const ADMIN: &str = "admin-secret";
/// Node-to-node token of test nodes.
pub const INTERNAL: &str = "internal-secret";

/// Two in-memory clusters, `old` and `new`; `new` hands out ids from
/// 1,000,000, as if the operator advanced its id generator for the switch.
pub fn clusters() -> MemoryClusters {
    let clusters = MemoryClusters::new();
    clusters.get_or_create("old");
    if let Err(e) = clusters
        .get_or_create("new")
        .advance_ledger_id_to(1_000_000)
    {
        unreachable!("a fresh cluster accepts any id: {e}");
    }
    clusters
}

/// A node configuration on `store` and `clusters`, starting on `old`
/// (`memory://old`), with the precheck reading the in-memory clusters and
/// managed ledgers with quorums of 1.
pub fn node_config(
    id: &str,
    store: Arc<dyn MetadataStore>,
    clusters: &MemoryClusters,
) -> NodeConfig {
    let mut cfg = NodeConfig::new(
        id,
        store,
        Arc::new(MemoryClientFactory::with_clusters(clusters.clone())),
        "memory://old",
        ADMIN,
        INTERNAL,
    );
    cfg.cluster_name = Some("old".into());
    cfg.idgen = Some(Arc::new(clusters.clone()));
    cfg.ledger_config = ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1)
        .with_max_entries_per_ledger(1000);
    cfg
}

/// Starts a node with [`node_config`].
///
/// # Panics
///
/// When the node cannot start (a test failure).
pub async fn start_node(
    id: &str,
    store: Arc<dyn MetadataStore>,
    clusters: &MemoryClusters,
) -> Node {
    match Node::start(node_config(id, store, clusters)).await {
        Ok(n) => n,
        Err(e) => panic!("node {id} did not start: {e}"),
    }
}

/// Every node of the metadata tree with its value and version, sorted by path.
/// Nodes that vanish while it walks are skipped.
pub async fn tree(store: &dyn MetadataStore) -> BTreeMap<String, (Vec<u8>, i64)> {
    tree_with_child_versions(store)
        .await
        .into_iter()
        .map(|(p, (value, version, _, _))| (p, (value, version)))
        .collect()
}

/// Every node of the metadata tree with its value, version, child version
/// and number of children, sorted by path: what "nothing was written"
/// compares (a node created and deleted again still moves its parent's
/// child version). Nodes that vanish while it walks are skipped.
pub async fn tree_with_child_versions(
    store: &dyn MetadataStore,
) -> BTreeMap<String, (Vec<u8>, i64, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        if let Ok(Some(r)) = store.get(&p).await {
            let s = r.stat;
            out.insert(p.clone(), (r.value, s.version, s.cversion, s.num_children));
        }
        if let Ok(children) = store.children(&p).await {
            for c in children {
                stack.push(if p == "/" {
                    format!("/{c}")
                } else {
                    format!("{p}/{c}")
                });
            }
        }
    }
    out
}

/// The node's coordinator itself, around [`Node`]'s rules (no validation, no
/// start lock, no migration check, no events): for tests of the
/// coordinator's own recovery only, such as a switch started with no origin
/// so that the leader's duty runs it. Behind the `testkit` feature, which no
/// published crate enables.
pub fn unchecked_orchestrator(node: &Node) -> bkswitch_switch_orchestrator::Orchestrator {
    node.coordinator().clone()
}

/// Runs `start` under the node's start lock, as its verbs do
/// ([`START_LOCK_PATH`](crate::START_LOCK_PATH)): for tests of the lock
/// itself.
///
/// # Errors
///
/// As the verbs: [`NodeError::StartInProgress`](crate::NodeError::StartInProgress)
/// when another start holds the lock, and the errors of `start`.
pub async fn exclusive_start<T>(
    node: &Node,
    what: &str,
    start: impl std::future::Future<Output = Result<T, crate::NodeError>>,
) -> Result<T, crate::NodeError> {
    node.exclusive_start(what, start).await
}
