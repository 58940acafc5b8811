//! [`RegistrySync`] on the in-memory store: directives, retries, coordinator
//! choice and resynchronisation after a session expiry.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::MemoryClusters;
use bkswitch_bk_router::{
    CoordinatorDuty, MultiClusterManagedLedgerStorage, ReadMode, RegistrySync,
};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::{ManagedLedgerStorage, StorageSettings};
use bkswitch_registry::{ClusterStatus, Registry};
use common::{applied, settle, FlakyFactory};

struct Node {
    store: MemoryStore,
    storage: MultiClusterManagedLedgerStorage,
    sync: RegistrySync,
}

/// A registry with bk-a ACTIVE and bk-b, bk-c STANDBY, and `n` nodes
/// (one store session each) started on it.
async fn cluster_of(n: usize, factory: &Arc<FlakyFactory>) -> (MemoryStore, Vec<Node>) {
    let first = MemoryStore::new();
    let admin = Registry::new(Arc::new(first.new_session()));
    admin
        .register("bk-a", "memory://bk-a", ClusterStatus::Active)
        .await
        .unwrap();
    for name in ["bk-b", "bk-c"] {
        admin
            .register(name, &format!("memory://{name}"), ClusterStatus::Standby)
            .await
            .unwrap();
    }
    let mut nodes = Vec::new();
    for i in 1..=n {
        let store = first.new_session();
        let shared: Arc<dyn MetadataStore> = Arc::new(store.clone());
        let storage = MultiClusterManagedLedgerStorage::default();
        storage
            .initialize(
                &StorageSettings::new("memory://bk-a"),
                shared.clone(),
                factory.clone(),
            )
            .await
            .unwrap();
        let sync =
            RegistrySync::start(storage.clone(), Registry::new(shared), &format!("node-{i}"))
                .await
                .unwrap();
        nodes.push(Node {
            store,
            storage,
            sync,
        });
    }
    (first, nodes)
}

#[tokio::test]
async fn directive_switches_every_node_to_dual_read_and_origin_coordinates() {
    let factory = Arc::new(FlakyFactory::new(MemoryClusters::new()));
    let (first, nodes) = cluster_of(2, &factory).await;
    let admin = Registry::new(Arc::new(first));
    let mut duties: Vec<_> = nodes
        .iter()
        .map(|n| n.sync.take_duties().unwrap())
        .collect();
    assert!(nodes[0].sync.take_duties().is_none(), "taken once");
    nodes[0].storage.set_read_mode(ReadMode::NewClusterOnly);
    assert!(
        nodes[0].sync.last_applied().is_none(),
        "nothing applied yet"
    );

    let d = admin.write_directive("bk-b", Some("node-2")).await.unwrap();
    for n in &nodes {
        applied(&mut n.sync.applied_epoch_watch(), d.epoch).await;
        assert_eq!(n.storage.active_cluster().as_deref(), Some("bk-b"));
        assert_eq!(n.storage.read_mode(), ReadMode::DualRead);
        assert_eq!(n.sync.applied_epoch(), d.epoch);
        let m = n.sync.metrics().snapshot();
        assert_eq!((m.directives_applied, m.last_applied_epoch), (1, d.epoch));
        // When it was applied, against when it was written.
        let a = n.sync.last_applied().expect("applied");
        assert_eq!(
            (a.epoch, a.target.as_str(), a.written_at_ms),
            (d.epoch, "bk-b", d.ts)
        );
        assert!(a.applied_at_ms >= d.ts, "{a:?}");
        assert_eq!(a.visible_after_ms(), a.applied_at_ms - d.ts);
    }
    assert!(duties[0].try_recv().is_err(), "node-1 is not the origin");
    assert_eq!(
        duties[1].try_recv().unwrap(),
        CoordinatorDuty {
            epoch: d.epoch,
            target: "bk-b".into(),
            origin: Some("node-2".into()),
        }
    );

    // A cluster registered later becomes routable on every node.
    admin
        .register("bk-d", "memory://bk-d", ClusterStatus::Standby)
        .await
        .unwrap();
    for n in &nodes {
        settle("bk-d routable", || {
            n.storage.clusters().iter().any(|(c, _)| c == "bk-d")
        })
        .await;
    }
    for n in &nodes {
        n.sync.stop().await;
        n.sync.stop().await;
    }
}

#[tokio::test]
async fn failed_switch_keeps_the_old_cluster_and_retries_until_it_starts() {
    let factory = Arc::new(FlakyFactory::new(MemoryClusters::new()));
    let (first, nodes) = cluster_of(1, &factory).await;
    let admin = Registry::new(Arc::new(first));
    let node = &nodes[0];
    factory.fail("memory://bk-b");
    let d = admin.write_directive("bk-b", Some("node-1")).await.unwrap();
    let metrics = node.sync.metrics();
    settle("two failed attempts", || {
        metrics.snapshot().directive_failures >= 2
    })
    .await;
    assert_eq!(node.storage.active_cluster().as_deref(), Some("bk-a"));
    assert_eq!(node.sync.applied_epoch(), 0);
    assert_eq!(metrics.snapshot().directives_applied, 0);

    factory.heal("memory://bk-b");
    applied(&mut node.sync.applied_epoch_watch(), d.epoch).await;
    assert_eq!(node.storage.active_cluster().as_deref(), Some("bk-b"));

    // A newer directive replaces one that keeps failing.
    factory.fail("memory://bk-c");
    let stuck = admin.write_directive("bk-c", None).await.unwrap();
    settle("bk-c attempted", || {
        metrics.snapshot().directive_failures >= 3
    })
    .await;
    let d3 = admin.write_directive("bk-a", None).await.unwrap();
    assert!(d3.epoch > stuck.epoch);
    applied(&mut node.sync.applied_epoch_watch(), d3.epoch).await;
    assert_eq!(node.storage.active_cluster().as_deref(), Some("bk-a"));
    assert_eq!(metrics.snapshot().directives_applied, 2);
    node.sync.stop().await;
}

#[tokio::test]
async fn origin_less_directive_goes_to_the_leader_only() {
    let factory = Arc::new(FlakyFactory::new(MemoryClusters::new()));
    let (first, nodes) = cluster_of(3, &factory).await;
    let admin = Registry::new(Arc::new(first));
    settle("one leader", || {
        nodes.iter().filter(|n| n.sync.is_leader()).count() == 1
            && nodes
                .iter()
                .all(|n| n.sync.leader().is_some() && n.sync.leader() == nodes[0].sync.leader())
    })
    .await;
    let mut duties: Vec<_> = nodes
        .iter()
        .map(|n| n.sync.take_duties().unwrap())
        .collect();
    let d = admin.write_directive("bk-c", None).await.unwrap();
    for n in &nodes {
        applied(&mut n.sync.applied_epoch_watch(), d.epoch).await;
    }
    let got: Vec<usize> = (0..3).filter(|i| duties[*i].try_recv().is_ok()).collect();
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(nodes[got[0]].sync.is_leader());
}

#[tokio::test]
async fn directive_written_while_the_session_expired_is_applied_after_resync() {
    let factory = Arc::new(FlakyFactory::new(MemoryClusters::new()));
    let (first, nodes) = cluster_of(1, &factory).await;
    let admin = Registry::new(Arc::new(first));
    let node = &nodes[0];
    node.store.expire_session().unwrap();
    let d = admin.write_directive("bk-b", Some("node-1")).await.unwrap();
    applied(&mut node.sync.applied_epoch_watch(), d.epoch).await;
    assert_eq!(node.storage.active_cluster().as_deref(), Some("bk-b"));
    let metrics = node.sync.metrics();
    settle("resync counted", || {
        metrics.snapshot().registry_resyncs >= 1
    })
    .await;
    let mut duties = node.sync.take_duties().unwrap();
    assert_eq!(duties.try_recv().unwrap().epoch, d.epoch);
}

/// Per-prefix overrides written in the registry reach every node's router:
/// a refused write (bad prefix, unknown or deprecated cluster) changes
/// nothing; a cluster whose client does not start is retried; removing the
/// override clears it everywhere.
#[tokio::test]
async fn prefix_overrides_reach_every_node_and_are_retried() {
    let factory = Arc::new(FlakyFactory::new(MemoryClusters::new()));
    let (first, nodes) = cluster_of(2, &factory).await;
    let admin = Registry::new(Arc::new(first));
    for (prefix, cluster) in [
        ("tenant", "bk-b"),
        ("/tenant/ns/", "bk-b"),
        ("tenant/ns/", "ghost"),
    ] {
        assert!(admin
            .set_prefix_override(prefix, cluster, None, 0)
            .await
            .is_err());
    }
    assert!(admin.prefix_overrides().await.unwrap().0.is_empty());

    factory.fail("memory://bk-b");
    let o = admin
        .set_prefix_override("tenant/canary/", "bk-b", Some("node-1"), 0)
        .await
        .unwrap();
    assert_eq!(o.epoch, 1);
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    for n in &nodes {
        assert!(
            n.storage.prefix_overrides().is_empty(),
            "not applied while bk-b is down"
        );
    }
    factory.heal("memory://bk-b");
    for n in &nodes {
        let mut w = n.sync.overrides_applied_watch();
        tokio::time::timeout(std::time::Duration::from_secs(10), w.wait_for(|e| *e >= 1))
            .await
            .expect("applied")
            .unwrap();
        assert_eq!(
            n.storage.prefix_overrides(),
            vec![("tenant/canary/".to_owned(), "bk-b".to_owned())]
        );
    }
    let removed = admin
        .remove_prefix_override("tenant/canary/")
        .await
        .unwrap();
    assert_eq!(removed.map(|o| o.cluster).as_deref(), Some("bk-b"));
    assert!(admin
        .remove_prefix_override("tenant/canary/")
        .await
        .unwrap()
        .is_none());
    for n in &nodes {
        settle("override removed", || {
            n.storage.prefix_overrides().is_empty()
        })
        .await;
        n.sync.stop().await;
    }
}
