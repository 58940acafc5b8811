//! Operator calls that would strand data or clash are refused, with nothing
//! written (on a real ZooKeeper). Registration refuses clusters that cannot exist:
//! on a node built like `bookie-switch serve` (the standard client factory),
//! a `memory://` name that is not a cluster of the process and a scheme no
//! client handles are refused (400) and the registry is left as it was.
//! (Real clusters — a missing root, no bookies, an unreachable ZooKeeper — are
//! tried in `real_bookkeeper.rs`.) Neither side of an unfinished switch can be
//! unregistered, and a topic a live node owns is never taken over.

mod common;

use std::sync::Arc;

use bkswitch_admin::{standard_client_factory, standard_idgen_source, Node, NodeConfig};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_bookkeeper::ClientConfig;
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use common::*;

/// A new session on the shared real ZooKeeper under `chroot`.
async fn zk(chroot: &str) -> Arc<dyn MetadataStore> {
    bkswitch_zk_harness::require_zk();
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    Arc::new(
        ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ghost_clusters_and_unknown_schemes_are_refused_with_nothing_written() {
    let memory = MemoryClusters::new();
    memory.get_or_create("old");
    memory.get_or_create("new");
    let store = zk(&bkswitch_zk_harness::unique_chroot()).await;
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
            "the `zk+flat` ledger layout is not supported",
        ),
        ("etcd://127.0.0.1:2379/ledgers", "unsupported scheme `etcd`"),
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

/// Unregistering either side of a switch that has not finished is refused
/// (409, nothing written): the issue's first stranding call, where `DELETE
/// …/new` after SWITCHED answered 204 and a restarted node could no longer
/// open a ledger stamped `new`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn neither_side_of_an_unfinished_switch_can_be_unregistered() {
    let clusters = clusters();
    let store = zk(&bkswitch_zk_harness::unique_chroot()).await;
    let node = start("node-1", store.clone(), &clusters).await;
    let ml = node.open_topic("tenant/ns/persistent/t").await.unwrap();
    ml.append(&b"x"[..]).await.unwrap();
    let admin = bkswitch_admin::AdminClient::new(node.url(), ADMIN).unwrap();
    admin
        .register(
            "new",
            "memory://new",
            Some(bkswitch_registry::ClusterStatus::Standby),
        )
        .await
        .unwrap();
    admin.switch("new").await.unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let st = node.orchestrator().current_status().await.unwrap().unwrap();
        if st.phase.is_built() {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let before = tree(store.as_ref()).await;
    for (name, side) in [("new", "target"), ("old", "")] {
        let (code, body) = raw(
            "DELETE",
            &format!("{}{BASE}/{name}", node.url()),
            Some(ADMIN),
            None,
        )
        .await;
        assert_eq!(code, 409, "{name}: {body}");
        let msg = body["error"].as_str().unwrap_or_default().to_owned();
        assert!(msg.contains(name) && msg.contains(side), "{msg}");
        assert_eq!(
            tree(store.as_ref()).await,
            before,
            "{name}: nothing written"
        );
    }
    assert!(node.registry().get("new").await.unwrap().is_some());
    node.stop().await;
}

/// Topic ownership is taken by compare-and-set: a node never takes over a
/// topic another live node serves (it used to overwrite the ownership node
/// and fence the owner's ledger), and takes it once the owner unloads it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_owned_by_a_live_node_is_not_taken_over() {
    let clusters = clusters();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let store = zk(&chroot).await;
    let n1 = start("node-1", store.clone(), &clusters).await;
    let n2 = start("node-2", zk(&chroot).await, &clusters).await;
    let topic = "tenant/ns/persistent/owned";
    let ml = n1.open_topic(topic).await.unwrap();
    ml.append(&b"one"[..]).await.unwrap();
    let before = tree(store.as_ref()).await;
    let e = n2.open_topic(topic).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, bkswitch_admin::NodeError::TopicOwned { .. }) && msg.contains("node-1"),
        "{msg}"
    );
    assert_eq!(tree(store.as_ref()).await, before, "nothing written");
    // The owner was not fenced: it keeps writing to the same ledger.
    let p = ml.append(&b"two"[..]).await.unwrap();
    assert_eq!(p.ledger_id, ml.current_ledger_id().unwrap());
    n1.unload_topic(topic).await.unwrap();
    let taken = n2.open_topic(topic).await.unwrap();
    taken.append(&b"three"[..]).await.unwrap();
    n1.stop().await;
    n2.stop().await;
}

/// Two nodes with the same node id would both own a topic (ownership
/// replaces a node left by "an earlier session of the same id"). The second
/// is refused at start, naming the id and the live node's URL and telling
/// the operator to set a unique one; nothing of it keeps running and the
/// first keeps its topic. A registration left by a node that is gone (its
/// REST address no longer answers: a crash and a restart before its session
/// expired) is taken over, and a stopped node's id is free again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_node_with_the_same_id_is_refused_at_start() {
    const NODES_ROOT: &str = "/bkswitch/nodes";
    let clusters = clusters();
    let store = bkswitch_metadata_store::MemoryStore::new();
    let first = start("node-1", Arc::new(store.new_session()), &clusters).await;
    let topic = "tenant/ns/persistent/dup";
    let ml = first.open_topic(topic).await.unwrap();
    ml.append(&b"one"[..]).await.unwrap();

    let second_store = Arc::new(store.new_session());
    let cfg = bkswitch_admin::testkit::node_config("node-1", second_store.clone(), &clusters);
    let e = match Node::start(cfg).await {
        Ok(n) => panic!(
            "a second node `node-1` started next to the first ({})",
            n.url()
        ),
        Err(e) => e,
    };
    let msg = e.to_string();
    assert!(
        msg.contains("`node-1`") && msg.contains(first.url()) && msg.contains("unique"),
        "{msg}"
    );
    // The first still owns its topic and writes to the same ledger.
    let p = ml.append(&b"two"[..]).await.unwrap();
    assert_eq!(p.ledger_id, ml.current_ledger_id().unwrap());
    let owner = second_store
        .get(&format!(
            "{}/{}",
            bkswitch_admin::DEFAULT_OWNERS_ROOT,
            "tenant%2Fns%2Fpersistent%2Fdup"
        ))
        .await
        .unwrap()
        .unwrap();
    let owner: serde_json::Value = serde_json::from_slice(&owner.value).unwrap();
    assert_eq!(owner["url"], first.url());

    // Another id starts next to it.
    let other = start("node-2", Arc::new(store.new_session()), &clusters).await;
    other.stop().await;

    // A registration whose node is gone (simulated: its URL points at a
    // closed port) is taken over by a restart with that id.
    first.stop().await;
    let dead = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let stale_session = Arc::new(store.new_session());
    stale_session
        .create(
            &format!("{}/node-1", NODES_ROOT),
            serde_json::json!({"nodeId": "node-1", "url": dead, "instance": "gone"})
                .to_string()
                .as_bytes(),
            bkswitch_metadata_store::CreateMode::EPHEMERAL,
        )
        .await
        .unwrap();
    let restarted = start("node-1", Arc::new(store.new_session()), &clusters).await;
    let ml = restarted.open_topic(topic).await.unwrap();
    ml.append(&b"three"[..]).await.unwrap();
    // The stale registration was replaced by the restarted node's.
    let reg = store
        .get(&format!("{}/node-1", NODES_ROOT))
        .await
        .unwrap()
        .unwrap();
    let reg: serde_json::Value = serde_json::from_slice(&reg.value).unwrap();
    assert_eq!(reg["url"], restarted.url());
    restarted.stop().await;
    // Stopped: the id is free, nothing registered.
    assert!(store
        .get(&format!("{}/node-1", NODES_ROOT))
        .await
        .unwrap()
        .is_none());
}

/// A node whose metadata session expires loses its node-id registration
/// (an ephemeral node) with the session; it takes it back on the new
/// session, so a second node started with its id afterwards is still
/// refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_node_id_is_registered_again_after_a_session_expiry() {
    const PATH: &str = "/bkswitch/nodes/node-1";
    let clusters = clusters();
    let store = bkswitch_metadata_store::MemoryStore::new();
    let session = store.new_session();
    let node = start("node-1", Arc::new(session.clone()), &clusters).await;
    assert!(store.get(PATH).await.unwrap().is_some());
    session.expire_session().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    let reg = loop {
        if let Some(r) = store.get(PATH).await.unwrap() {
            break r;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the node id was not registered again after the session expired"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    let reg: serde_json::Value = serde_json::from_slice(&reg.value).unwrap();
    assert_eq!(reg["url"], node.url());
    let cfg =
        bkswitch_admin::testkit::node_config("node-1", Arc::new(store.new_session()), &clusters);
    match Node::start(cfg).await {
        Ok(n) => panic!("a second node `node-1` started ({})", n.url()),
        Err(e) => assert!(e.to_string().contains("`node-1`"), "{e}"),
    }
    node.stop().await;
}
