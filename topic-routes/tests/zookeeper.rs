//! The routing table on a real ZooKeeper (started by `bkswitch-zk-harness`),
//! each test under a chroot of its own; proxies are separate sessions.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_topic_routes::TopicRoutes;

async fn zk_store(chroot: &str) -> Arc<dyn MetadataStore> {
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
async fn routes_resolve_most_specific_first() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    common::routes_resolve_most_specific_first(zk_store(&chroot).await, "/routes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_writes_nothing() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    common::bad_input_writes_nothing(zk_store(&chroot).await, "/routes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_are_serialized() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    common::concurrent_changes_are_serialized(zk_store(&chroot).await, "/routes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn writers_on_separate_sessions_are_serialized() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let setup = TopicRoutes::with_root(zk_store(&chroot).await, "/routes").unwrap();
    setup
        .register_cluster(common::cluster("east"))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..6 {
        let store = zk_store(&chroot).await;
        tasks.push(tokio::spawn(async move {
            let routes = TopicRoutes::with_root(store, "/routes").unwrap();
            routes.set_route(&format!("tenant:t{i}"), "east").await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let table = setup.table().await.unwrap();
    assert_eq!((table.routes.len(), table.version), (6, 7));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_acknowledge_versions_and_a_dead_proxy_leaves_the_barrier() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let routes = TopicRoutes::with_root(zk_store(&chroot).await, "/routes").unwrap();
    let proxy_a = TopicRoutes::with_root(zk_store(&chroot).await, "/routes").unwrap();
    common::a_dead_proxy_leaves_the_barrier(
        &routes,
        &proxy_a,
        zk_store(&chroot).await,
        Duration::from_secs(10),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_table_is_sharded_and_read_back() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    common::sharded::a_large_table_is_sharded_and_read_back(zk_store(&chroot).await, "/routes")
        .await;
}
