//! The REST API of one node on an in-memory store: every endpoint, its status
//! codes, auth, hostile input — and no metadata change on any 4xx.

mod common;

use std::sync::Arc;

use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use common::*;
use serde_json::json;

struct Fixture {
    clusters: bkswitch_bk_client::MemoryClusters,
    store: Arc<MemoryStore>,
    node: bkswitch_admin::Node,
    url: String,
}

async fn fixture() -> Fixture {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let node = start("node-1", Arc::new(store.new_session()), &clusters).await;
    let url = format!("{}{BASE}", node.url());
    Fixture {
        clusters,
        store,
        node,
        url,
    }
}

/// Sends a request that must be refused with `status`, and checks that the
/// metadata store did not change.
async fn refused(
    f: &Fixture,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
    status: u16,
) -> serde_json::Value {
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let (got, answer) = raw(method, &format!("{}{path}", f.url), token, body).await;
    assert_eq!(got, status, "{method} {path}: {answer}");
    assert!(
        answer["error"].as_str().is_some_and(|m| !m.is_empty()),
        "{answer}"
    );
    assert!(answer["code"].is_string(), "{answer}");
    let after = tree(f.store.as_ref() as &dyn MetadataStore).await;
    assert_eq!(before, after, "{method} {path} changed the metadata store");
    answer
}

#[tokio::test]
async fn every_endpoint_requires_the_right_token() {
    let f = fixture().await;
    let endpoints: &[(&str, &str, Option<&[u8]>)] = &[
        ("GET", "/", None),
        ("GET", "/old", None),
        (
            "POST",
            "/new",
            Some(br#"{"metadataServiceUri":"memory://new"}"#),
        ),
        ("DELETE", "/old", None),
        ("GET", "/precheck/new", None),
        ("POST", "/switch", Some(br#"{"target":"new"}"#)),
        ("GET", "/status", None),
        (
            "POST",
            "/read-mode",
            Some(br#"{"mode":"NEW_CLUSTER_ONLY"}"#),
        ),
        ("GET", "/cleanup-targets", None),
        (
            "POST",
            "/cleanup",
            Some(br#"{"dryRun":false,"force":true}"#),
        ),
        ("POST", "/close-client/old", None),
        ("POST", "/rollback", Some(b"{}")),
    ];
    for (method, path, body) in endpoints {
        refused(&f, method, path, None, *body, 401).await;
        refused(&f, method, path, Some("wrong"), *body, 401).await;
        // The node-to-node token is not an admin token.
        refused(&f, method, path, Some(INTERNAL), *body, 401).await;
    }
    let promote = br#"{"topic":"t","cursorName":"c","targetClusterName":"new","expectedCursorsLedgerId":1,"copiedLastEntryId":0}"#;
    refused(
        &f,
        "POST",
        "/internal/promote-cursor",
        None,
        Some(promote),
        401,
    )
    .await;
    refused(
        &f,
        "POST",
        "/internal/promote-cursor",
        Some(ADMIN),
        Some(promote),
        401,
    )
    .await;
    assert_eq!(f.node.storage().read_mode().as_str(), "DUAL_READ");
    f.node.stop().await;
}

#[tokio::test]
async fn registry_endpoints_and_their_errors() {
    let f = fixture().await;
    let t = Some(ADMIN);
    let (s, list) = raw("GET", &format!("{}/", f.url), t, None).await;
    assert_eq!(s, 200);
    assert_eq!(
        list,
        json!([{"name": "old", "metadataServiceUri": "memory://old", "status": "ACTIVE"}])
    );
    let (s, rec) = raw(
        "POST",
        &format!("{}/new", f.url),
        t,
        Some(br#"{"metadataServiceUri":"memory://new"}"#),
    )
    .await;
    assert_eq!(s, 200, "{rec}");
    assert_eq!(rec["status"], "STANDBY");
    let (s, rec) = raw("GET", &format!("{}/new", f.url), t, None).await;
    assert_eq!(
        (s, rec["metadataServiceUri"].as_str()),
        (200, Some("memory://new"))
    );

    // 404 unknown cluster.
    refused(&f, "GET", "/nope", t, None, 404).await;
    refused(&f, "DELETE", "/nope", t, None, 404).await;
    refused(&f, "GET", "/precheck/nope", t, None, 404).await;
    // 400: URI collision, invalid name, invalid URI, traversal, malformed JSON,
    // unknown and missing fields, wrong types, oversized bodies.
    let e = refused(
        &f,
        "POST",
        "/other",
        t,
        Some(br#"{"metadataServiceUri":"memory://new"}"#),
        400,
    )
    .await;
    assert_eq!(e["field"], "metadataServiceUri", "{e}");
    assert!(e["error"].as_str().unwrap().contains("new"), "{e}");
    refused(
        &f,
        "POST",
        "/bad%20name",
        t,
        Some(br#"{"metadataServiceUri":"memory://x"}"#),
        400,
    )
    .await;
    refused(
        &f,
        "POST",
        "/..%2F..%2Fetc",
        t,
        Some(br#"{"metadataServiceUri":"memory://x"}"#),
        400,
    )
    .await;
    refused(&f, "GET", "/..%2Fschemas", t, None, 400).await;
    refused(
        &f,
        "POST",
        "/x1",
        t,
        Some(br#"{"metadataServiceUri":"http://x"}"#),
        400,
    )
    .await;
    refused(&f, "POST", "/x2", t, Some(b"{not json"), 400).await;
    let e = refused(
        &f,
        "POST",
        "/x3",
        t,
        Some(br#"{"metadataServiceUri":"memory://x3","extra":1}"#),
        400,
    )
    .await;
    assert_eq!(e["field"], "extra", "{e}");
    let e = refused(&f, "POST", "/x4", t, Some(b"{}"), 400).await;
    assert_eq!(e["field"], "metadataServiceUri", "{e}");
    refused(
        &f,
        "POST",
        "/x5",
        t,
        Some(br#"{"metadataServiceUri":7}"#),
        400,
    )
    .await;
    refused(
        &f,
        "POST",
        "/x6",
        t,
        Some(br#"{"metadataServiceUri":"memory://x6","status":"SUPREME"}"#),
        400,
    )
    .await;
    let huge = format!(
        r#"{{"metadataServiceUri":"memory://{}"}}"#,
        "a".repeat(200 * 1024)
    );
    refused(&f, "POST", "/x7", t, Some(huge.as_bytes()), 400).await;
    // A reserved name is refused.
    refused(
        &f,
        "POST",
        "/bootstrap",
        t,
        Some(br#"{"metadataServiceUri":"memory://b"}"#),
        400,
    )
    .await;
    // 409: registering ACTIVE while another is, unregistering ACTIVE.
    refused(
        &f,
        "POST",
        "/x8",
        t,
        Some(br#"{"metadataServiceUri":"memory://x8","status":"ACTIVE"}"#),
        409,
    )
    .await;
    refused(&f, "DELETE", "/old", t, None, 409).await;
    refused(
        &f,
        "POST",
        "/new",
        t,
        Some(br#"{"metadataServiceUri":"memory://new"}"#),
        409,
    )
    .await;

    let (s, _) = raw("DELETE", &format!("{}/new", f.url), t, None).await;
    assert_eq!(s, 204);
    refused(&f, "GET", "/new", t, None, 404).await;
    f.node.stop().await;
}

#[tokio::test]
async fn switch_status_read_mode_cleanup_and_rollback_endpoints() {
    let f = fixture().await;
    let t = Some(ADMIN);
    let topic = f
        .node
        .open_topic("public/default/persistent/api-topic")
        .await
        .unwrap();
    let cursor = topic
        .open_cursor_at("sub", bkswitch_managed_ledger::InitialPosition::Earliest)
        .await
        .unwrap();
    let p = topic.append(b"hello".to_vec()).await.unwrap();
    cursor.mark_delete(p).await.unwrap();
    f.node
        .schemas()
        .put("public/default/api-topic", b"schema-1", b"h1")
        .await
        .unwrap();

    // Nothing recorded yet.
    refused(&f, "GET", "/cleanup-targets", t, None, 404).await;
    refused(&f, "POST", "/rollback", t, Some(b"{}"), 404).await;
    // Switch refusals: unknown target (404), missing/invalid target (400),
    // the active cluster (409), an unregistered-yet target (404).
    refused(&f, "POST", "/switch", t, Some(br#"{"target":"nope"}"#), 404).await;
    refused(&f, "POST", "/switch", t, Some(b"{}"), 400).await;
    refused(&f, "POST", "/switch", t, Some(br#"{"target":"../x"}"#), 400).await;
    refused(&f, "POST", "/switch", t, Some(br#"{"target":"old"}"#), 409).await;
    refused(
        &f,
        "POST",
        "/read-mode",
        t,
        Some(br#"{"mode":"SOMETIMES"}"#),
        400,
    )
    .await;

    let (s, _) = raw(
        "POST",
        &format!("{}/new", f.url),
        t,
        Some(br#"{"metadataServiceUri":"memory://new"}"#),
    )
    .await;
    assert_eq!(s, 200);
    let (s, pre) = raw("GET", &format!("{}/precheck/new", f.url), t, None).await;
    assert_eq!(s, 200);
    assert_eq!(pre["ready"], true, "{pre}");
    assert_eq!(pre["targetClusterName"], "new");
    assert_eq!(pre["targetNextLedgerId"], 1_000_000);

    let (s, sw) = raw(
        "POST",
        &format!("{}/switch", f.url),
        t,
        Some(br#"{"target":"new"}"#),
    )
    .await;
    assert_eq!(s, 200, "{sw}");
    assert_eq!(sw["target"], "new");
    let epoch = sw["epoch"].as_i64().unwrap();
    // Idempotent: the same target again answers the same switch.
    let (s, again) = raw(
        "POST",
        &format!("{}/switch", f.url),
        t,
        Some(br#"{"target":"new"}"#),
    )
    .await;
    assert_eq!((s, again["epoch"].as_i64()), (200, Some(epoch)), "{again}");

    // The node coordinates (it is the origin): wait for SWITCHED.
    let status = loop {
        let (s, st) = raw("GET", &format!("{}/status", f.url), t, None).await;
        assert_eq!(s, 200);
        if st["switch"]["phase"] == "SWITCHED" {
            break st;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    };
    assert_eq!(status["activeCluster"], "new", "{status}");
    assert_eq!(status["bootstrapCluster"], "old");
    assert_eq!(status["readMode"], "DUAL_READ");
    assert_eq!(status["epoch"], epoch);
    assert_eq!(status["directive"]["target"], "new");
    assert_eq!(status["switch"]["counts"]["promoted"], 2, "{status}");
    // When the node applied the directive, against its write.
    let applied = &status["applied"];
    assert_eq!(applied["epoch"], epoch, "{status}");
    assert_eq!(applied["target"], "new");
    assert_eq!(applied["writtenAt"], status["directive"]["ts"]);
    let visible = applied["appliedAt"].as_i64().unwrap() - applied["writtenAt"].as_i64().unwrap();
    assert_eq!(applied["visibleAfterMs"], visible.max(0));

    // Read mode.
    let (s, rm) = raw(
        "POST",
        &format!("{}/read-mode", f.url),
        t,
        Some(br#"{"mode":"NEW_CLUSTER_ONLY"}"#),
    )
    .await;
    assert_eq!(
        (s, rm["readMode"].as_str()),
        (200, Some("NEW_CLUSTER_ONLY"))
    );
    let (s, _) = raw(
        "POST",
        &format!("{}/read-mode", f.url),
        t,
        Some(br#"{"mode":"DUAL_READ"}"#),
    )
    .await;
    assert_eq!(s, 200);

    // Cleanup targets and refusals inside the window; dry run changes nothing.
    let (s, ct) = raw("GET", &format!("{}/cleanup-targets", f.url), t, None).await;
    assert_eq!(s, 200);
    assert_eq!(ct["targets"].as_array().unwrap().len(), 2, "{ct}");
    refused(&f, "POST", "/cleanup", t, Some(br#"{"dryRun":false}"#), 409).await;
    refused(
        &f,
        "POST",
        "/cleanup",
        t,
        Some(br#"{"dryRun":false,"bogus":1}"#),
        400,
    )
    .await;
    refused(
        &f,
        "POST",
        "/cleanup",
        t,
        Some(br#"{"maxDeletions":-1}"#),
        400,
    )
    .await;
    refused(
        &f,
        "POST",
        "/cleanup",
        t,
        Some(br#"{"srcClusterFilter":"../old"}"#),
        400,
    )
    .await;
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let (s, dry) = raw(
        "POST",
        &format!("{}/cleanup", f.url),
        t,
        Some(br#"{"force":true}"#),
    )
    .await;
    assert_eq!(s, 200, "{dry}");
    assert_eq!(dry["outcome"], "DRY_RUN");
    assert_eq!(dry["targets"].as_array().unwrap().len(), 2);
    assert_eq!(before, tree(f.store.as_ref() as &dyn MetadataStore).await);

    // Close-client of the old cluster: refused while it is needed? It has no
    // open handle, so it closes; the active one never closes.
    refused(&f, "POST", "/close-client/new", t, None, 409).await;
    refused(&f, "POST", "/close-client/nope", t, None, 404).await;

    // Rollback inside the window: refused while old's id generator is behind
    // new's (positions would go backwards), with the precheck as details.
    let e = refused(&f, "POST", "/rollback", t, Some(b"{}"), 409).await;
    assert_eq!(e["details"]["targetClusterName"], "old", "{e}");
    assert_eq!(e["details"]["ready"], false, "{e}");
    f.clusters
        .get("old")
        .unwrap()
        .advance_ledger_id_to(3_000_000)
        .unwrap();
    let (s, rb) = raw("POST", &format!("{}/rollback", f.url), t, Some(b"{}")).await;
    assert_eq!(s, 200, "{rb}");
    assert_eq!(rb["phase"], "ROLLED_BACK");
    let (s, st) = raw("GET", &format!("{}/status", f.url), t, None).await;
    assert_eq!(
        (s, st["activeCluster"].as_str()),
        (200, Some("old")),
        "{st}"
    );
    // Switching again after a rollback is allowed once new's id generator is
    // beyond old's again; cleanup then rollback after cleanup is refused.
    refused(&f, "POST", "/switch", t, Some(br#"{"target":"new"}"#), 409).await;
    f.clusters
        .get("new")
        .unwrap()
        .advance_ledger_id_to(5_000_000)
        .unwrap();
    let (s, sw2) = raw(
        "POST",
        &format!("{}/switch", f.url),
        t,
        Some(br#"{"target":"new"}"#),
    )
    .await;
    assert_eq!(s, 200, "{sw2}");
    loop {
        let (_, st) = raw("GET", &format!("{}/status", f.url), t, None).await;
        if st["switch"]["phase"] == "SWITCHED" {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let (s, done) = raw(
        "POST",
        &format!("{}/cleanup", f.url),
        t,
        Some(br#"{"dryRun":false,"force":true,"maxDeletions":18446744073709551615}"#),
    )
    .await;
    assert_eq!(s, 200, "{done}");
    assert_eq!(done["outcome"], "DONE", "{done}");
    refused(&f, "POST", "/rollback", t, Some(b"{}"), 409).await;
    let (_, list) = raw("GET", &format!("{}/", f.url), t, None).await;
    let statuses: Vec<_> = list
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    assert_eq!(
        statuses,
        vec![
            ("new".into(), "ACTIVE".into()),
            ("old".into(), "DEPRECATED".into())
        ]
    );
    // A DEPRECATED cluster is never a target again.
    refused(&f, "POST", "/switch", t, Some(br#"{"target":"old"}"#), 409).await;
    // The topic still reads its old data and the cursor survived.
    assert_eq!(cursor.mark_delete_position(), p);
    assert_eq!(
        topic.read_entries(p, 1).await.unwrap()[0].data.as_ref(),
        b"hello"
    );
    f.node.stop().await;
}

#[tokio::test]
async fn internal_promote_cursor_answers_owner_outcomes() {
    let f = fixture().await;
    let url = format!("{}/internal/promote-cursor", f.url);
    let body = br#"{"topic":"public/default/persistent/none","cursorName":"c","targetClusterName":"new","expectedCursorsLedgerId":3,"copiedLastEntryId":0}"#;
    let (s, e) = raw("POST", &url, Some(INTERNAL), Some(body)).await;
    assert_eq!(s, 404, "not owned here: {e}");
    let (s, _) = raw("POST", &url, Some(INTERNAL), Some(b"{\"topic\":1}")).await;
    assert_eq!(s, 400);

    let topic = f
        .node
        .open_topic("public/default/persistent/owned")
        .await
        .unwrap();
    let cursor = topic
        .open_cursor_at("c", bkswitch_managed_ledger::InitialPosition::Earliest)
        .await
        .unwrap();
    let p = topic.append(b"x".to_vec()).await.unwrap();
    cursor.mark_delete(p).await.unwrap();
    let ledger = cursor.cursor_ledger_id();
    let wrong = format!(
        r#"{{"topic":"public/default/persistent/owned","cursorName":"c","targetClusterName":"new","expectedCursorsLedgerId":{},"copiedLastEntryId":0}}"#,
        ledger + 1
    );
    let before = tree(f.store.as_ref() as &dyn MetadataStore).await;
    let (s, e) = raw("POST", &url, Some(INTERNAL), Some(wrong.as_bytes())).await;
    assert_eq!(s, 409, "rolled over: {e}");
    assert_eq!(before, tree(f.store.as_ref() as &dyn MetadataStore).await);
    f.node.stop().await;
}
