//! The Pulsar routing endpoints of a node: clusters, routes, explain, the
//! proxies, and the topic-move verbs — each refusal before anything is
//! written, with the field or object named.

mod common;

use std::sync::Arc;

use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use common::*;

const P: &str = "/admin/v2/pulsar-routes";

struct Fixture {
    store: Arc<MemoryStore>,
    node: bkswitch_admin::Node,
    url: String,
}

async fn fixture() -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let node = start("node-1", Arc::new(store.new_session()), &clusters).await;
    let url = format!("{}{P}", node.url());
    Fixture { store, node, url }
}

async fn call(
    f: &Fixture,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    raw(
        method,
        &format!("{}{path}", f.url),
        Some(ADMIN),
        body.map(str::as_bytes),
    )
    .await
}

/// A call that must be refused with `status`, leaving the store as it was.
async fn refused(
    f: &Fixture,
    method: &str,
    path: &str,
    body: Option<&str>,
    status: u16,
) -> serde_json::Value {
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let (got, answer) = call(f, method, path, body).await;
    assert_eq!(got, status, "{method} {path}: {answer}");
    assert!(
        answer["error"].as_str().is_some_and(|m| !m.is_empty()),
        "{answer}"
    );
    assert_eq!(
        before,
        tree(f.store.as_ref() as &dyn MetadataStore).await,
        "{method} {path} wrote"
    );
    answer
}

const EAST: &str =
    r#"{"serviceUrl":"pulsar://127.0.0.1:6650","webServiceUrl":"http://127.0.0.1:8080"}"#;

#[tokio::test]
async fn clusters_routes_and_explain() {
    let f = fixture().await;
    let (s, c) = call(&f, "PUT", "/clusters/east", Some(EAST)).await;
    assert_eq!(s, 200, "{c}");
    assert_eq!(c["adminUrl"], "http://127.0.0.1:8080");
    let (s, _) = call(
        &f,
        "PUT",
        "/routes",
        Some(r#"{"route":"namespace:geo/ns","cluster":"east"}"#),
    )
    .await;
    assert_eq!(s, 200);
    let (s, e) = call(
        &f,
        "GET",
        "/explain?topic=persistent://geo/ns/orders-partition-1",
        None,
    )
    .await;
    assert_eq!(s, 200, "{e}");
    assert_eq!(e["cluster"], "east");
    assert_eq!(e["route"], "namespace:geo/ns");
    let (s, list) = call(&f, "GET", "/clusters", None).await;
    assert_eq!(s, 200);
    assert!(list["east"].is_object(), "{list}");
    // Updating a cluster keeps its routes.
    let (s, _) = call(
        &f,
        "PUT",
        "/clusters/east",
        Some(r#"{"serviceUrl":"pulsar://127.0.0.1:6651","webServiceUrl":"http://127.0.0.1:8080"}"#),
    )
    .await;
    assert_eq!(s, 200);
    let (_, r) = call(&f, "GET", "/routes", None).await;
    assert_eq!(r["routes"]["namespace:geo/ns"], "east");
    let (s, p) = call(&f, "GET", "/proxies", None).await;
    assert_eq!((s, p), (200, serde_json::json!({})));
    f.node.stop().await;
}

#[tokio::test]
async fn bad_input_is_refused_naming_what_and_writing_nothing() {
    let f = fixture().await;
    call(&f, "PUT", "/clusters/east", Some(EAST)).await;
    call(
        &f,
        "PUT",
        "/routes",
        Some(r#"{"route":"namespace:geo/ns","cluster":"east"}"#),
    )
    .await;
    let e = refused(&f, "PUT", "/clusters/Bad%20Name", Some(EAST), 400).await;
    assert_eq!(e["field"], "name");
    let e = refused(
        &f,
        "PUT",
        "/clusters/west",
        Some(r#"{"serviceUrl":"http://x:1","webServiceUrl":"http://x:2"}"#),
        400,
    )
    .await;
    assert_eq!(e["field"], "serviceUrl");
    refused(
        &f,
        "PUT",
        "/clusters/west",
        Some(r#"{"serviceUrl":"pulsar://x:1"}"#),
        400,
    )
    .await;
    refused(
        &f,
        "PUT",
        "/clusters/west",
        Some(r#"{"serviceUrl":"pulsar://x:1","webServiceUrl":"http://x:2","extra":1}"#),
        400,
    )
    .await;
    let e = refused(
        &f,
        "PUT",
        "/routes",
        Some(r#"{"route":"namespace:geo/ns","cluster":"west"}"#),
        400,
    )
    .await;
    assert!(e["error"].as_str().unwrap().contains("west"), "{e}");
    let e = refused(
        &f,
        "PUT",
        "/routes",
        Some(r#"{"route":"topic:persistent://geo/ns/x-partition-1","cluster":"east"}"#),
        400,
    )
    .await;
    assert_eq!(e["field"], "route");
    refused(
        &f,
        "POST",
        "/routes/remove",
        Some(r#"{"route":"tenant:nobody"}"#),
        404,
    )
    .await;
    let e = refused(&f, "DELETE", "/clusters/east", None, 409).await;
    assert!(
        e["error"].as_str().unwrap().contains("namespace:geo/ns"),
        "{e}"
    );
    refused(
        &f,
        "GET",
        "/explain?topic=persistent://other/ns/x",
        None,
        404,
    )
    .await;
    refused(&f, "GET", "/explain?topic=bad", None, 400).await;
    refused(&f, "GET", "/explain", None, 400).await;
    // Topic moves: nothing started; a target that is not registered; a
    // tenant route; an empty plan.
    refused(&f, "GET", "/topic-switch", None, 404).await;
    refused(&f, "POST", "/topic-switch/rollback", None, 404).await;
    let e = refused(
        &f,
        "POST",
        "/topic-switch",
        Some(r#"{"to":"west","batches":[["topic:persistent://geo/ns/x"]]}"#),
        409,
    )
    .await;
    assert!(
        e["error"]
            .as_str()
            .unwrap()
            .contains("`west` is not registered"),
        "{e}"
    );
    assert!(e["details"].is_array(), "{e}");
    refused(
        &f,
        "POST",
        "/topic-switch",
        Some(r#"{"to":"east","batches":[["tenant:geo"]]}"#),
        400,
    )
    .await;
    refused(
        &f,
        "POST",
        "/topic-switch",
        Some(r#"{"to":"east","batches":[]}"#),
        400,
    )
    .await;
    // Every endpoint needs the admin token.
    for (m, p) in [
        ("GET", "/clusters"),
        ("GET", "/routes"),
        ("GET", "/topic-switch"),
    ] {
        let (s, _) = raw(m, &format!("{}{p}", f.url), None, None).await;
        assert_eq!(s, 401, "{m} {p}");
    }
    f.node.stop().await;
}

#[tokio::test]
async fn the_topic_move_is_in_the_metrics() {
    use bkswitch_metadata_store::CreateMode;
    let f = fixture().await;
    let record = serde_json::json!({
        "id": "m1", "to": "west", "state": "FAILED", "createdAtMs": 1, "updatedAtMs": 5_000,
        "options": {"barrierTimeoutMs": 1, "evictTimeoutMs": 1, "settleTimeoutMs": 1, "soakMs": 0,
                    "maxReplicationBacklog": 1, "autoRollback": true},
        "batches": [
            {"routes": ["topic:persistent://geo/ns/a"], "phase": "DONE"},
            {"routes": ["topic:persistent://geo/ns/b"], "phase": "ROLLED_BACK", "error": "clients still attached"},
        ],
    });
    f.store
        .create(
            "/admin/pulsar-routes/switch",
            &serde_json::to_vec(&record).unwrap(),
            CreateMode::PERSISTENT,
        )
        .await
        .unwrap();
    let text = reqwest_text(&format!("{}/metrics", f.node.url())).await;
    for line in [
        r#"bkswitch_topic_switch_state{state="FAILED"} 1"#,
        r#"bkswitch_topic_switch_batches{phase="DONE"} 1"#,
        r#"bkswitch_topic_switch_batches{phase="ROLLED_BACK"} 1"#,
        "bkswitch_topic_switch_updated_timestamp_seconds 5",
    ] {
        assert!(text.contains(line), "{line} missing:\n{text}");
    }
    f.node.stop().await;
}

/// The body of a `GET` (the metrics are text, not JSON).
async fn reqwest_text(url: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.trim_start_matches("http://");
    let (host, path) = rest.split_once('/').unwrap();
    let mut s = tokio::net::TcpStream::connect(host).await.unwrap();
    s.write_all(
        format!("GET /{path} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    out
}
