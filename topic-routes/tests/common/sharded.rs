//! A table large enough to be sharded, on every backend: written and read
//! back whole, a change rewriting only its shard, concurrent writers, bad
//! input writing nothing, shrinking back to one node, damage reported.

use std::collections::BTreeSet;
use std::sync::Arc;

use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use bkswitch_topic_routes::{Change, Layout, RouteKey, RoutesError, TopicRoutes};
use serde_json::Value;

use super::{cluster, snapshot};

/// A layout that shards small tables (2 KB) into 8 shards.
pub const SMALL: Layout = Layout {
    inline_limit: 2_000,
    shards: 8,
};

fn topic(i: usize) -> RouteKey {
    RouteKey::Topic(format!("persistent://acme/orders/t-{i:05}"))
}

/// The head as JSON.
async fn head(store: &dyn MetadataStore, routes: &TopicRoutes) -> Value {
    let r = store.get(&routes.table_path()).await.unwrap().unwrap();
    serde_json::from_slice(&r.value).unwrap()
}

/// The shard nodes the head names, and the children of the shards folder.
async fn nodes(
    store: &dyn MetadataStore,
    routes: &TopicRoutes,
) -> (BTreeSet<String>, BTreeSet<String>) {
    let h = head(store, routes).await;
    let named = h["shardNodes"]
        .as_object()
        .map(|m| m.values().map(|v| v.as_str().unwrap().to_owned()).collect())
        .unwrap_or_default();
    let children = store
        .children(&routes.shards_path())
        .await
        .unwrap()
        .into_iter()
        .collect();
    (named, children)
}

pub async fn a_large_table_is_sharded_and_read_back(store: Arc<dyn MetadataStore>, root: &str) {
    let routes = TopicRoutes::with_root(Arc::clone(&store), root)
        .unwrap()
        .with_layout(SMALL);
    routes.register_cluster(cluster("east")).await.unwrap();
    routes.register_cluster(cluster("west")).await.unwrap();
    // Still small: whole in the head.
    routes
        .set_route("namespace:acme/orders", "east")
        .await
        .unwrap();
    let h = head(&*store, &routes).await;
    assert!(
        h.get("routes").is_some() && h.get("shards").is_none(),
        "{h}"
    );

    // 200 topic routes, in four changes: sharded.
    for batch in 0..4 {
        let changes: Vec<Change> = (batch * 50..batch * 50 + 50)
            .map(|i| Change::SetRoute(topic(i), if i % 2 == 0 { "east" } else { "west" }.into()))
            .collect();
        routes.apply(&changes).await.unwrap();
    }
    let h = head(&*store, &routes).await;
    assert!(h.get("routes").is_none(), "{h}");
    assert_eq!(h["shards"], 8);
    assert_eq!(h["version"], 7);
    let (named, children) = nodes(&*store, &routes).await;
    assert_eq!(named.len(), 8, "every shard holds some of 201 routes");
    assert_eq!(named, children, "old shard nodes are collected");

    // Read back whole: every route, each topic where it was sent.
    let table = routes.table().await.unwrap();
    assert_eq!(table.routes.len(), 201);
    assert_eq!(table.version, 7);
    for i in [0, 1, 77, 199] {
        let r = table
            .resolve(&format!("persistent://acme/orders/t-{i:05}-partition-3"))
            .unwrap()
            .unwrap();
        assert_eq!(r.cluster.name, if i % 2 == 0 { "east" } else { "west" });
    }
    assert_eq!(
        table
            .resolve("persistent://acme/orders/other")
            .unwrap()
            .unwrap()
            .cluster
            .name,
        "east"
    );

    // One route changed: one shard node replaced, the others kept.
    routes
        .set_route(&topic(5).to_string(), "east")
        .await
        .unwrap();
    let (after, children) = nodes(&*store, &routes).await;
    assert_eq!(after.difference(&named).count(), 1, "{named:?} → {after:?}");
    assert_eq!(after, children);

    // Bad input on a sharded table writes nothing.
    let before = snapshot(&*store, root).await;
    let refused = routes
        .apply(&[
            Change::SetRoute(topic(500), "east".into()),
            Change::SetRoute(topic(501), "nowhere".into()),
        ])
        .await;
    assert!(
        matches!(refused, Err(RoutesError::RouteToUnknownCluster { .. })),
        "{refused:?}"
    );
    assert_eq!(
        snapshot(&*store, root).await,
        before,
        "a refused change wrote"
    );

    // Concurrent writers on the sharded table: every change lands once.
    let mut tasks = Vec::new();
    for w in 0..4 {
        let r = routes.clone();
        tasks.push(tokio::spawn(async move {
            for i in 0..5 {
                r.set_route(&topic(1_000 + w * 10 + i).to_string(), "west")
                    .await
                    .unwrap();
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    let table = routes.table().await.unwrap();
    assert_eq!(table.routes.len(), 221);
    assert_eq!(table.version, 8 + 20);
    let (named, children) = nodes(&*store, &routes).await;
    assert_eq!(named, children, "no shard node left behind by lost races");

    // Damage is reported, naming the node.
    let victim = named.iter().next().unwrap().clone();
    let node = format!("{}/{victim}", routes.shards_path());
    let kept = store.get(&node).await.unwrap().unwrap().value;
    store.delete(&node, ExpectedVersion::Any).await.unwrap();
    let err = routes.table().await.unwrap_err();
    assert!(
        matches!(&err, RoutesError::Corrupt { reason, .. } if reason.contains(&victim)),
        "{err}"
    );
    // A route in the wrong shard.
    let mut wrong: serde_json::Map<String, Value> = serde_json::from_slice(&kept).unwrap();
    wrong.insert("tenant:misplaced".into(), "east".into());
    let wrong_bytes = serde_json::to_vec(&wrong).unwrap();
    store
        .put(&node, &wrong_bytes, ExpectedVersion::Any)
        .await
        .unwrap();
    match routes.table().await {
        // `tenant:misplaced` may hash to this very shard (1 in 8): then it
        // is read as a route, which is fine.
        Ok(t) => assert!(t.routes.contains_key("tenant:misplaced")),
        Err(e) => assert!(
            matches!(&e, RoutesError::Corrupt { path, reason } if *path == node && reason.contains("tenant:misplaced")),
            "{e}"
        ),
    }
    store.put(&node, &kept, ExpectedVersion::Any).await.unwrap();
    assert_eq!(routes.table().await.unwrap().routes.len(), 221);

    // Shrinking back under the limit: whole in the head again, no shard node left.
    let all: Vec<Change> = routes
        .table()
        .await
        .unwrap()
        .routes
        .keys()
        .filter(|k| k.starts_with("topic:"))
        .map(|k| Change::RemoveRoute(k.parse().unwrap()))
        .collect();
    routes.apply(&all).await.unwrap();
    let h = head(&*store, &routes).await;
    assert!(
        h.get("routes").is_some() && h.get("shards").is_none(),
        "{h}"
    );
    assert!(store
        .children(&routes.shards_path())
        .await
        .unwrap()
        .is_empty());
    assert_eq!(routes.table().await.unwrap().routes.len(), 1);
}
