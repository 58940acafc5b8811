//! Three nodes on a real ZooKeeper, each with its own session and storage,
//! following one registry: directives reach every node, exactly one node
//! coordinates each, and an expired leader session changes neither.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, ReadMode, RegistrySync};
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_mledger_spi::{ManagedLedgerStorage, StorageSettings};
use bkswitch_registry::{ClusterStatus, Registry};
use bkswitch_zk_harness::ZkServer;
use common::{applied, settle};
use tokio::sync::mpsc::UnboundedReceiver;

fn options(session_secs: u64, reconnect_delay_ms: u64) -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(session_secs),
        operation_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(30),
        reconnect_delay: Duration::from_millis(reconnect_delay_ms),
        auth: None,
        tls: None,
    }
}

struct Node {
    storage: MultiClusterManagedLedgerStorage,
    sync: RegistrySync,
    duties: UnboundedReceiver<bkswitch_bk_router::CoordinatorDuty>,
}

async fn node(url: &str, opts: ZkStoreOptions, id: &str, factory: &MemoryClientFactory) -> Node {
    let store: Arc<dyn MetadataStore> = Arc::new(ZkStore::connect(url, opts).await.unwrap());
    let storage = MultiClusterManagedLedgerStorage::default();
    storage
        .initialize(
            &StorageSettings::new("memory://bk-a"),
            store.clone(),
            Arc::new(factory.clone()),
        )
        .await
        .unwrap();
    let sync = RegistrySync::start(storage.clone(), Registry::new(store), id)
        .await
        .unwrap();
    let duties = sync.take_duties().unwrap();
    Node {
        storage,
        sync,
        duties,
    }
}

/// Waits until exactly one node, other than `not`, leads and every node names
/// it; returns it.
async fn one_leader(nodes: &[Node], not: Option<usize>) -> usize {
    settle("one leader every node agrees on", || {
        let leaders: Vec<usize> = (0..nodes.len())
            .filter(|i| nodes[*i].sync.is_leader())
            .collect();
        let seen = nodes[0].sync.leader();
        leaders.len() == 1
            && Some(leaders[0]) != not
            && seen.is_some()
            && nodes.iter().all(|n| n.sync.leader() == seen)
    })
    .await;
    nodes.iter().position(|n| n.sync.is_leader()).unwrap()
}

/// Waits for every node to apply `epoch` on `target`; returns who got a duty.
async fn applied_everywhere(nodes: &mut [Node], epoch: i64, target: &str) -> Vec<usize> {
    for n in nodes.iter() {
        applied(&mut n.sync.applied_epoch_watch(), epoch).await;
        assert_eq!(n.storage.active_cluster().as_deref(), Some(target));
        assert_eq!(n.storage.read_mode(), ReadMode::DualRead);
    }
    let mut got = Vec::new();
    for (i, n) in nodes.iter_mut().enumerate() {
        while let Ok(duty) = n.duties.try_recv() {
            assert_eq!((duty.epoch, duty.target.as_str()), (epoch, target));
            got.push(i);
        }
    }
    got
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_nodes_follow_one_registry_across_a_leader_session_expiry() {
    // Own server: it is restarted to expire one session.
    let server = ZkServer::start();
    let url = format!(
        "zk://{}{}",
        server.connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let clusters = MemoryClusters::new();
    let factory = MemoryClientFactory::with_clusters(clusters);
    let admin_store: Arc<dyn MetadataStore> =
        Arc::new(ZkStore::connect(&url, options(20, 100)).await.unwrap());
    let admin = Registry::new(admin_store);
    admin
        .register("bk-a", "memory://bk-a", ClusterStatus::Active)
        .await
        .unwrap();
    for name in ["bk-b", "bk-c", "bk-d"] {
        admin
            .register(name, &format!("memory://{name}"), ClusterStatus::Standby)
            .await
            .unwrap();
    }

    // node-1 joins the election first, so it leads; its session is short and
    // it reconnects late, so that a server restart expires it.
    let mut nodes = vec![node(&url, options(2, 6_000), "node-1", &factory).await];
    assert!(nodes[0].sync.is_leader(), "node-1 joined first");
    for id in ["node-2", "node-3"] {
        nodes.push(node(&url, options(20, 100), id, &factory).await);
    }
    assert_eq!(one_leader(&nodes, None).await, 0);

    // One directive reaches every node.
    let d1 = admin.write_directive("bk-b", None).await.unwrap();
    assert_eq!(applied_everywhere(&mut nodes, d1.epoch, "bk-b").await, [0]);

    // Origin names node-2: only node-2 coordinates.
    let d2 = admin.write_directive("bk-c", Some("node-2")).await.unwrap();
    assert_eq!(applied_everywhere(&mut nodes, d2.epoch, "bk-c").await, [1]);

    // The leader's session expires: a new leader is elected.
    server.stop();
    server.start_again();
    // node-1's session expired: it cannot lead, and it re-joins last.
    let leader = one_leader(&nodes, Some(0)).await;

    // A new origin-less directive: applied everywhere, exactly one coordinator,
    // the new leader.
    let d3 = admin.write_directive("bk-d", None).await.unwrap();
    assert_eq!(
        applied_everywhere(&mut nodes, d3.epoch, "bk-d").await,
        [leader]
    );
    let m = nodes[0].sync.metrics().snapshot();
    assert!(m.registry_resyncs >= 1, "{m:?}");
    assert_eq!(m.directives_applied, 3);

    for n in &nodes {
        n.sync.stop().await;
        n.storage.close().await.unwrap();
    }
}
