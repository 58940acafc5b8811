#![doc = include_str!("../README.md")]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::node::{Node, NodeConfig};
use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_registry::MemoryIdgenSource;
use bkswitch_switch_orchestrator::{Orchestrator, SwitchStatus};

/// Admin token of test nodes.
pub const ADMIN: &str = "admin-secret";
/// Node-to-node token of test nodes.
pub const INTERNAL: &str = "internal-secret";
/// Base path of the REST API.
pub const BASE: &str = "/admin/v2/bookie-clusters";

/// Two in-memory clusters, `old` and `new` (new ids start at 1,000,000, as if
/// the operator advanced its id generator).
pub fn clusters() -> MemoryClusters {
    let clusters = MemoryClusters::new();
    clusters.get_or_create("old");
    clusters
        .get_or_create("new")
        .advance_ledger_id_to(1_000_000)
        .expect("fresh cluster");
    clusters
}

/// A node configuration on `store` and `clusters`, starting on `old`, with
/// small ledgers (quorums of 1) and forced rollover after a switch.
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
    cfg.idgen = Some(Arc::new(MemoryIdgenSource {
        clusters: clusters.clone(),
    }));
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
/// When the node cannot start.
pub async fn start_node(
    id: &str,
    store: Arc<dyn MetadataStore>,
    clusters: &MemoryClusters,
) -> Node {
    Node::start(node_config(id, store, clusters))
        .await
        .expect("node starts")
}

/// A new session on the shared test ZooKeeper under `chroot`.
///
/// # Panics
///
/// When ZooKeeper cannot be reached.
pub async fn zk_store(chroot: &str) -> Arc<ZkStore> {
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    Arc::new(
        ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .expect("ZooKeeper session"),
    )
}

/// Every node of the metadata tree with its value and version, sorted by path.
pub async fn tree(store: &dyn MetadataStore) -> BTreeMap<String, (Vec<u8>, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        if let Ok(Some(r)) = store.get(&p).await {
            out.insert(p.clone(), (r.value, r.stat.version));
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

/// Waits until `f` holds, polling every 20 ms.
///
/// # Panics
///
/// After `timeout`, naming `what`.
pub async fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the latest switch known to `orch` reached a phase past
/// BUILD/PROMOTE and returns its status.
///
/// # Panics
///
/// After `timeout`.
pub async fn wait_switched(orch: &Orchestrator, timeout: Duration) -> SwitchStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = orch.current_status().await {
            if st.phase.is_built() {
                return st;
            }
        }
        assert!(Instant::now() < deadline, "switch did not reach SWITCHED");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
