//! Registration refuses clusters that cannot exist, with nothing written:
//! on a node built like `bookie-switch serve` (the standard client factory),
//! a `memory://` name that is not a cluster of the process and a scheme no
//! client handles are refused (400) and the registry is left as it was.
//! (Real clusters — a missing root, no bookies, an unreachable ZooKeeper — are
//! tried in `real_bookkeeper.rs`.)

mod common;

use std::sync::Arc;

use bkswitch_admin::{standard_client_factory, standard_idgen_source, Node, NodeConfig};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_bookkeeper::ClientConfig;
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghost_clusters_and_unknown_schemes_are_refused_with_nothing_written() {
    let memory = MemoryClusters::new();
    memory.get_or_create("old");
    memory.get_or_create("new");
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let mut cfg = NodeConfig::new(
        "node-1",
        store.clone(),
        standard_client_factory(memory.clone(), ClientConfig::default()),
        "memory://old",
        ADMIN,
        INTERNAL,
    );
    cfg.cluster_name = Some("old".into());
    cfg.idgen = Some(standard_idgen_source(memory.clone()));
    let node = Node::start(cfg).await.unwrap();
    let before = tree(store.as_ref()).await;
    for (uri, needle) in [
        ("memory://ghost", "no in-memory bookie cluster 'ghost'"),
        (
            "zk+flat://127.0.0.1:2181/ledgers",
            "no client for scheme 'zk+flat'",
        ),
        ("etcd://127.0.0.1:2379/ledgers", "unknown scheme `etcd`"),
    ] {
        let (code, body) = raw(
            "POST",
            &format!("{}{BASE}/ghost", node.url()),
            Some(ADMIN),
            Some(format!(r#"{{"metadataServiceUri":"{uri}"}}"#).as_bytes()),
        )
        .await;
        assert_eq!(code, 400, "{uri}: {body}");
        assert_eq!(body["field"], "metadataServiceUri", "{body}");
        let msg = body["error"].as_str().unwrap_or_default();
        assert!(msg.contains(needle), "{msg}");
        assert_eq!(tree(store.as_ref()).await, before, "{uri} wrote");
    }
    assert!(memory.get("ghost").is_none(), "no cluster was created");
    // A cluster of the process registers.
    let (code, body) = raw(
        "POST",
        &format!("{}{BASE}/new", node.url()),
        Some(ADMIN),
        Some(br#"{"metadataServiceUri":"memory://new"}"#),
    )
    .await;
    assert_eq!(code, 200, "{body}");
    node.stop().await;
}
