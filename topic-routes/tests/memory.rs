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
async fn a_large_table_is_sharded_and_read_back() {
    common::sharded::a_large_table_is_sharded_and_read_back(
        Arc::new(MemoryStore::new()),
        "/routes",
    )
    .await;
}

/// A million routes: written in one change, read back, resolved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_routes_fit() {
    use bkswitch_topic_routes::{Change, RouteIndex, RouteKey};
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let routes = TopicRoutes::new(Arc::clone(&store));
    routes
        .register_cluster(common::cluster("east"))
        .await
        .unwrap();
    let changes: Vec<Change> = (0..1_000_000)
        .map(|i| {
            Change::SetRoute(
                RouteKey::Topic(format!("persistent://acme/ns-{}/t-{i:07}", i % 100)),
                "east".into(),
            )
        })
        .collect();
    routes.apply(&changes).await.unwrap();
    let mut largest = 0;
    for c in store.children(&routes.shards_path()).await.unwrap() {
        let node = format!("{}/{c}", routes.shards_path());
        largest = largest.max(store.get(&node).await.unwrap().unwrap().value.len());
    }
    assert!(
        largest < bkswitch_metadata_store::MAX_VALUE_LEN / 2,
        "{largest}"
    );
    let table = routes.table().await.unwrap();
    assert_eq!(table.routes.len(), 1_000_000);
    let index = RouteIndex::new(&table);
    let r = index
        .resolve(&table, "persistent://acme/ns-42/t-0000042-partition-1")
        .unwrap()
        .unwrap();
    assert_eq!(r.cluster.name, "east");
}

/// A shard that would pass the store's largest value is refused, with
/// nothing written.
#[tokio::test]
async fn a_full_table_is_refused_with_nothing_written() {
    use bkswitch_topic_routes::{Change, Layout, RouteKey, RoutesError};
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let routes = TopicRoutes::new(Arc::clone(&store)).with_layout(Layout {
        inline_limit: 0,
        shards: 1,
    });
    routes
        .register_cluster(common::cluster("east"))
        .await
        .unwrap();
    let before = common::snapshot(&*store, "/admin").await;
    let changes: Vec<Change> = (0..20_000)
        .map(|i| {
            Change::SetRoute(
                RouteKey::Topic(format!(
                    "persistent://acme/ns/a-rather-long-topic-name-{i:07}"
                )),
                "east".into(),
            )
        })
        .collect();
    let err = routes.apply(&changes).await.unwrap_err();
    assert!(
        matches!(
            err,
            RoutesError::TableFull {
                shard: 0,
                shards: 1,
                ..
            }
        ),
        "{err}"
    );
    assert!(err.to_string().contains("Nothing was written"), "{err}");
    assert_eq!(common::snapshot(&*store, "/admin").await, before);
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
