//! The routing table on the in-memory store.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_topic_routes::TopicRoutes;

#[tokio::test]
async fn routes_resolve_most_specific_first() {
    common::routes_resolve_most_specific_first(Arc::new(MemoryStore::new()), "/routes").await;
}

#[tokio::test]
async fn bad_input_writes_nothing() {
    common::bad_input_writes_nothing(Arc::new(MemoryStore::new()), "/routes").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_changes_are_serialized() {
    common::concurrent_changes_are_serialized(Arc::new(MemoryStore::new()), "/routes").await;
}

#[tokio::test]
async fn proxies_acknowledge_versions_and_a_dead_proxy_leaves_the_barrier() {
    let store = MemoryStore::new();
    let a = store.new_session();
    let b = store.new_session();
    let routes = TopicRoutes::with_root(Arc::new(store), "/routes").unwrap();
    let proxy_a = TopicRoutes::with_root(Arc::new(a), "/routes").unwrap();
    let b: Arc<dyn MetadataStore> = Arc::new(b);
    let proxy_b = TopicRoutes::with_root(b.clone(), "/routes").unwrap();
    let v = common::proxies_acknowledge_versions(&routes, &proxy_a, &proxy_b).await;

    // proxy-b stays behind, then its session ends: the barrier holds it no
    // longer.
    let v3 = routes
        .set_route("tenant:other", "east")
        .await
        .unwrap()
        .version;
    assert!(v3 > v);
    proxy_a.ack("proxy-a", v3).await.unwrap();
    assert_eq!(routes.lagging(v3).await.unwrap().len(), 1);
    b.close().await.unwrap();
    routes
        .wait_acknowledged(v3, Duration::from_secs(5))
        .await
        .unwrap();
    assert_eq!(routes.acks().await.unwrap().len(), 1);
}

#[tokio::test]
async fn a_table_that_is_not_ours_is_reported_not_overwritten() {
    use bkswitch_metadata_store::ExpectedVersion;
    use bkswitch_topic_routes::RoutesError;

    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let routes = TopicRoutes::with_root(store.clone(), "/routes").unwrap();
    // A route to a cluster that is not there, written behind our back.
    let foreign = br#"{"version":3,"clusters":{},"routes":{"default":"ghost"}}"#;
    store
        .put("/routes/table", foreign, ExpectedVersion::Any)
        .await
        .unwrap();
    let err = routes.table().await.unwrap_err();
    assert!(matches!(err, RoutesError::Corrupt { .. }), "{err}");
    assert!(err.to_string().contains("ghost"), "{err}");
    assert!(routes
        .register_cluster(common::cluster("east"))
        .await
        .is_err());
    let stored = store.get("/routes/table").await.unwrap().unwrap();
    assert_eq!(stored.value, foreign);
    assert!(TopicRoutes::with_root(store, "routes").is_err());
}
