//! The routing table on a real etcd (started by `bkswitch-etcd-harness`),
//! laid out as Pulsar's etcd store lays out its nodes: the same suite as on
//! the memory store and ZooKeeper, and a proxy whose lease ends leaving the
//! barrier.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{EtcdStore, EtcdStoreOptions, MetadataStore};
use bkswitch_topic_routes::TopicRoutes;

async fn etcd_store(prefix: &str) -> Arc<dyn MetadataStore> {
    let url = bkswitch_etcd_harness::shared().url(prefix);
    let options = EtcdStoreOptions {
        session_timeout: Duration::from_secs(5),
        ..EtcdStoreOptions::default()
    };
    Arc::new(EtcdStore::connect(&url, options).await.expect("connect"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routes_resolve_most_specific_first() {
    let prefix = bkswitch_etcd_harness::unique_prefix();
    common::routes_resolve_most_specific_first(etcd_store(&prefix).await, "/routes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_input_writes_nothing() {
    let prefix = bkswitch_etcd_harness::unique_prefix();
    common::bad_input_writes_nothing(etcd_store(&prefix).await, "/routes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_changes_are_serialized() {
    let prefix = bkswitch_etcd_harness::unique_prefix();
    common::concurrent_changes_are_serialized(etcd_store(&prefix).await, "/routes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxies_acknowledge_versions_and_a_dead_proxy_leaves_the_barrier() {
    let prefix = bkswitch_etcd_harness::unique_prefix();
    let routes = TopicRoutes::with_root(etcd_store(&prefix).await, "/routes").unwrap();
    let proxy_a = TopicRoutes::with_root(etcd_store(&prefix).await, "/routes").unwrap();
    common::a_dead_proxy_leaves_the_barrier(
        &routes,
        &proxy_a,
        etcd_store(&prefix).await,
        Duration::from_secs(15),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_large_table_is_sharded_and_read_back() {
    let prefix = bkswitch_etcd_harness::unique_prefix();
    common::sharded::a_large_table_is_sharded_and_read_back(etcd_store(&prefix).await, "/routes")
        .await;
}
