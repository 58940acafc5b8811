//! Scenarios run on every backend (memory here, ZooKeeper in `zk.rs`).
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::MetadataStore;
use bkswitch_topic_routes::{Change, PulsarCluster, RouteKey, RoutesError, TopicRoutes};

pub mod sharded;

/// Every node under `root` as `(path, value, version)`, sorted.
pub async fn snapshot(store: &dyn MetadataStore, root: &str) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        if let Some(r) = store.get(&p).await.unwrap() {
            out.push((p.clone(), r.value, r.stat.version));
        }
        for c in store.children(&p).await.unwrap() {
            stack.push(format!("{p}/{c}"));
        }
    }
    out.sort();
    out
}

pub fn cluster(name: &str) -> PulsarCluster {
    PulsarCluster {
        name: name.to_owned(),
        service_url: format!("pulsar://{name}-broker:6650"),
        service_url_tls: Some(format!("pulsar+ssl://{name}-broker:6651")),
        web_service_url: format!("http://{name}-broker:8080"),
        admin_url: format!("https://{name}-admin:8443/admin"),
    }
}

fn cluster_of(table: &bkswitch_topic_routes::RoutingTable, topic: &str) -> Option<String> {
    table
        .resolve(topic)
        .unwrap()
        .map(|r| r.cluster.name.clone())
}

/// Clusters, routes of every kind, most specific wins, partitions together,
/// one version per change.
pub async fn routes_resolve_most_specific_first(store: Arc<dyn MetadataStore>, root: &str) {
    let routes = TopicRoutes::with_root(store, root).unwrap();
    assert_eq!(routes.table().await.unwrap().version, 0);
    for name in ["east", "west", "north"] {
        routes.register_cluster(cluster(name)).await.unwrap();
    }
    routes.set_route("default", "east").await.unwrap();
    routes.set_route("tenant:acme", "west").await.unwrap();
    routes
        .set_route("namespace:acme/billing", "north")
        .await
        .unwrap();
    routes
        .set_route("prefix:persistent://acme/billing/inv", "east")
        .await
        .unwrap();
    routes
        .set_route("prefix:persistent://acme/billing/invoices-eu", "west")
        .await
        .unwrap();
    let table = routes
        .set_route("topic:persistent://acme/billing/orders", "east")
        .await
        .unwrap();
    assert_eq!(table.version, 9, "3 clusters + 6 routes");
    assert_eq!(
        routes.table().await.unwrap(),
        table,
        "what was written is read"
    );

    let at = |t: &str| cluster_of(&table, t);
    assert_eq!(
        at("persistent://other/ns/x").as_deref(),
        Some("east"),
        "default"
    );
    assert_eq!(
        at("persistent://acme/ops/x").as_deref(),
        Some("west"),
        "tenant"
    );
    assert_eq!(
        at("non-persistent://acme/billing/x").as_deref(),
        Some("north"),
        "namespace, both domains"
    );
    assert_eq!(
        at("persistent://acme/billing/invoices").as_deref(),
        Some("east"),
        "prefix"
    );
    assert_eq!(
        at("persistent://acme/billing/invoices-eu-2").as_deref(),
        Some("west"),
        "longest prefix"
    );
    assert_eq!(
        at("persistent://acme/billing/orders").as_deref(),
        Some("east"),
        "topic"
    );
    for p in 0..4 {
        let partition = format!("persistent://acme/billing/orders-partition-{p}");
        assert_eq!(
            at(&partition).as_deref(),
            Some("east"),
            "partitions go with their topic"
        );
    }
    let resolved = table
        .resolve("persistent://acme/billing/orders-partition-2")
        .unwrap()
        .unwrap();
    assert_eq!(
        resolved.route,
        RouteKey::Topic("persistent://acme/billing/orders".into())
    );
    assert_eq!(resolved.cluster, &cluster("east"));

    // Moving the topic moves every partition; removing its route falls back
    // to the namespace.
    let table = routes
        .set_route("topic:persistent://acme/billing/orders", "west")
        .await
        .unwrap();
    assert_eq!(
        cluster_of(&table, "persistent://acme/billing/orders-partition-3").as_deref(),
        Some("west")
    );
    let table = routes
        .remove_route("topic:persistent://acme/billing/orders")
        .await
        .unwrap();
    assert_eq!(
        cluster_of(&table, "persistent://acme/billing/orders").as_deref(),
        Some("north")
    );
    assert_eq!(table.version, 11);

    // Several changes at once, all or nothing.
    let table = routes
        .apply(&[
            Change::RegisterCluster(cluster("south")),
            Change::SetRoute(RouteKey::Namespace("acme/billing".into()), "south".into()),
        ])
        .await
        .unwrap();
    assert_eq!(table.version, 12);
    assert_eq!(
        cluster_of(&table, "persistent://acme/billing/x").as_deref(),
        Some("south")
    );
    routes.remove_route("default").await.unwrap();
    assert_eq!(
        cluster_of(&routes.table().await.unwrap(), "persistent://other/ns/x"),
        None
    );
}

/// Every bad input is refused with an error naming the object, and the
/// store is unchanged.
pub async fn bad_input_writes_nothing(store: Arc<dyn MetadataStore>, root: &str) {
    let routes = TopicRoutes::with_root(store.clone(), root).unwrap();
    routes.register_cluster(cluster("east")).await.unwrap();
    routes
        .set_route("namespace:acme/billing", "east")
        .await
        .unwrap();
    let before = snapshot(&*store, root).await;

    let mut bad_url = cluster("west");
    bad_url.service_url = "http://west:6650".into();
    let mut no_port = cluster("west");
    no_port.web_service_url = "http://west".into();
    let mut tls_scheme = cluster("west");
    tls_scheme.service_url_tls = Some("pulsar://west:6651".into());
    let mut bad_name = cluster("west");
    bad_name.name = "-west".into();

    let refusals: Vec<(Result<_, RoutesError>, &str)> = vec![
        (routes.register_cluster(cluster("east")).await, "east"),
        (routes.register_cluster(bad_url).await, "http://west:6650"),
        (routes.register_cluster(no_port).await, "http://west"),
        (
            routes.register_cluster(tls_scheme).await,
            "pulsar://west:6651",
        ),
        (routes.register_cluster(bad_name).await, "-west"),
        (
            routes
                .apply(&[Change::UpdateCluster(cluster("nowhere"))])
                .await,
            "nowhere",
        ),
        (routes.unregister_cluster("nowhere").await, "nowhere"),
        (
            routes.unregister_cluster("east").await,
            "namespace:acme/billing",
        ),
        (
            routes.set_route("namespace:acme/ops", "nowhere").await,
            "nowhere",
        ),
        (
            routes
                .set_route("topic:persistent://acme/billing/orders-partition-1", "east")
                .await,
            "partition",
        ),
        (
            routes.set_route("topic:acme/billing/orders", "east").await,
            "acme/billing/orders",
        ),
        (
            routes.set_route("namespace:acme", "east").await,
            "namespace:acme",
        ),
        (
            routes
                .set_route("prefix:persistent://acme/billing/", "east")
                .await,
            "namespace route",
        ),
        (routes.set_route("tenant:ac/me", "east").await, "ac/me"),
        (
            routes.set_route("cluster:east", "east").await,
            "cluster:east",
        ),
        (routes.remove_route("tenant:acme").await, "tenant:acme"),
        (
            // One bad change spoils the batch: the good one is not written.
            routes
                .apply(&[
                    Change::RegisterCluster(cluster("west")),
                    Change::SetRoute(RouteKey::Tenant("acme".into()), "nowhere".into()),
                ])
                .await,
            "nowhere",
        ),
    ];
    for (i, (result, named)) in refusals.into_iter().enumerate() {
        let err = result.expect_err(&format!("refusal {i} ({named}) was accepted"));
        let message = err.to_string();
        assert!(
            message.contains(named),
            "refusal {i}: `{message}` does not name `{named}`"
        );
        assert!(
            message.contains("Nothing was written"),
            "refusal {i}: `{message}`"
        );
    }
    assert!(matches!(
        routes.unregister_cluster("east").await,
        Err(RoutesError::ClusterInUse { routes, .. }) if routes == ["namespace:acme/billing"]
    ));
    assert!(matches!(
        routes.table().await.unwrap().resolve("persistent://acme"),
        Err(RoutesError::InvalidTopic { .. })
    ));
    assert_eq!(
        snapshot(&*store, root).await,
        before,
        "a refused change wrote something"
    );

    // Once its route is gone the cluster can go.
    routes.remove_route("namespace:acme/billing").await.unwrap();
    let table = routes.unregister_cluster("east").await.unwrap();
    assert!(table.clusters.is_empty() && table.routes.is_empty());
}

/// Concurrent writers: every change lands exactly once (compare-and-set),
/// and a route and the unregistration of its cluster never both win.
pub async fn concurrent_changes_are_serialized(store: Arc<dyn MetadataStore>, root: &str) {
    let routes = TopicRoutes::with_root(store, root).unwrap();
    routes.register_cluster(cluster("east")).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..8 {
        let r = routes.clone();
        tasks.push(tokio::spawn(async move {
            r.set_route(&format!("namespace:acme/ns{i}"), "east").await
        }));
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    let table = routes.table().await.unwrap();
    assert_eq!(table.routes.len(), 8);
    assert_eq!(table.version, 9);

    for round in 0..6 {
        let name = format!("c{round}");
        routes.register_cluster(cluster(&name)).await.unwrap();
        let (a, b) = (routes.clone(), routes.clone());
        let (n1, n2) = (name.clone(), name.clone());
        let route =
            tokio::spawn(async move { a.set_route(&format!("tenant:t{round}"), &n1).await });
        let unregister = tokio::spawn(async move { b.unregister_cluster(&n2).await });
        let (route, unregister) = (route.await.unwrap(), unregister.await.unwrap());
        assert!(
            route.is_ok() != unregister.is_ok(),
            "round {round}: exactly one wins"
        );
        let table = routes.table().await.unwrap();
        table.check().expect("no route to an unregistered cluster");
        if route.is_ok() {
            assert!(matches!(unregister, Err(RoutesError::ClusterInUse { .. })));
        } else {
            assert!(matches!(
                route,
                Err(RoutesError::RouteToUnknownCluster { .. })
            ));
        }
    }
}

/// Proxies acknowledge versions; the barrier waits for every live one.
pub async fn proxies_acknowledge_versions(
    routes: &TopicRoutes,
    proxy_a: &TopicRoutes,
    proxy_b: &TopicRoutes,
) -> u64 {
    routes.register_cluster(cluster("east")).await.unwrap();
    let v = routes.set_route("default", "east").await.unwrap().version;
    proxy_a.ack("proxy-a", v).await.unwrap();
    proxy_b.ack("proxy-b", v - 1).await.unwrap();
    assert_eq!(
        routes.lagging(v).await.unwrap(),
        vec![("proxy-b".to_owned(), v - 1)]
    );
    let err = routes
        .wait_acknowledged(v, Duration::from_millis(100))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("proxy-b (at 1)"), "{err}");
    proxy_b.ack("proxy-b", v).await.unwrap();
    routes
        .wait_acknowledged(v, Duration::from_secs(5))
        .await
        .unwrap();
    let acks = routes.acks().await.unwrap();
    assert_eq!(acks.len(), 2);
    assert!(acks.values().all(|a| a.version == v && a.acked_at > 0));
    assert!(matches!(
        proxy_a.ack("proxy/a", v).await,
        Err(RoutesError::InvalidProxyId { .. })
    ));

    // A newer version: proxy-b acknowledges, proxy-a does so later.
    let v2 = routes
        .set_route("tenant:acme", "east")
        .await
        .unwrap()
        .version;
    proxy_b.ack("proxy-b", v2).await.unwrap();
    let waiter = {
        let routes = routes.clone();
        tokio::spawn(async move { routes.wait_acknowledged(v2, Duration::from_secs(10)).await })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiter.is_finished(), "the barrier waits for proxy-a");
    proxy_a.ack("proxy-a", v2).await.unwrap();
    waiter.await.unwrap().unwrap();
    v2
}

/// Two proxies on their own sessions (`b` is proxy-b's store): they
/// acknowledge, one lags behind a newer table, and its session ends — the
/// barrier then no longer waits for it.
pub async fn a_dead_proxy_leaves_the_barrier(
    routes: &TopicRoutes,
    proxy_a: &TopicRoutes,
    b: Arc<dyn MetadataStore>,
    within: Duration,
) {
    let proxy_b = TopicRoutes::with_root(b.clone(), routes.root()).unwrap();
    let v = proxies_acknowledge_versions(routes, proxy_a, &proxy_b).await;
    let v3 = routes
        .set_route("tenant:other", "east")
        .await
        .unwrap()
        .version;
    assert!(v3 > v);
    proxy_a.ack("proxy-a", v3).await.unwrap();
    assert_eq!(routes.lagging(v3).await.unwrap().len(), 1);
    // proxy-b's session ends: its ephemeral acknowledgement goes with it.
    b.close().await.unwrap();
    routes.wait_acknowledged(v3, within).await.unwrap();
    assert_eq!(routes.acks().await.unwrap().len(), 1);
}
