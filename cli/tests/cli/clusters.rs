//! Cluster verbs: list, get, register, unregister, precheck.

use super::*;

#[tokio::test]
async fn list_renders_table_and_json() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["list"]).await;
    r.unwrap();
    assert_eq!(
        out,
        "NAME  STATUS   METADATA SERVICE URI\n\
         a     ACTIVE   zk://127.0.0.1:2181/ledgers-a\n\
         b     STANDBY  zk://127.0.0.1:2181/ledgers-b\n"
    );
    assert_eq!(stub.take_requests(), vec![admin_request("GET", "", None)]);

    let (r, out) = cli(&stub, &["list", "--json"]).await;
    r.unwrap();
    let printed: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        printed,
        Value::Array(stub.clusters().into_values().collect())
    );
}

#[tokio::test]
async fn get_renders_one_cluster_and_reports_unknown() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["get", "--name", "b"]).await;
    r.unwrap();
    assert_eq!(
        out,
        "NAME  STATUS   METADATA SERVICE URI\nb     STANDBY  zk://127.0.0.1:2181/ledgers-b\n"
    );
    let (r, out) = cli(&stub, &["--json", "get", "--name", "b"]).await;
    r.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        stub.clusters()["b"]
    );
    assert_eq!(
        stub.take_requests(),
        vec![
            admin_request("GET", "/b", None),
            admin_request("GET", "/b", None)
        ]
    );

    let (r, out) = cli(&stub, &["get", "--name", "nope"]).await;
    let err = r.unwrap_err();
    assert!(out.is_empty());
    assert_eq!(err.exit_code(), EXIT_FAILURE);
    match &err {
        CliError::Client(ClientError::Api {
            status,
            code,
            message,
            ..
        }) => {
            assert_eq!(*status, 404);
            assert_eq!(code, "NOT_FOUND");
            assert!(
                message.contains("cluster 'nope' is not registered"),
                "{message}"
            );
        }
        other => panic!("unexpected {other:?}"),
    }
    assert!(rendered_error(&err).starts_with(
        "error: cluster 'nope' is not registered; list the clusters with `list` (NOT_FOUND, HTTP 404)"
    ));
}

#[tokio::test]
async fn register_sends_uri_and_optional_status() {
    let stub = Stub::start().await;
    let (r, out) = cli(
        &stub,
        &[
            "register",
            "--name",
            "c",
            "--metadata-service-uri",
            "zk://127.0.0.1:2181/ledgers-c",
        ],
    )
    .await;
    r.unwrap();
    assert_eq!(
        out,
        "registered cluster 'c'\n\
         NAME  STATUS   METADATA SERVICE URI\n\
         c     STANDBY  zk://127.0.0.1:2181/ledgers-c\n"
    );
    assert_eq!(
        stub.take_requests(),
        vec![admin_request(
            "POST",
            "/c",
            Some(json!({"metadataServiceUri": "zk://127.0.0.1:2181/ledgers-c"}))
        )]
    );

    let (r, out) = cli(
        &stub,
        &[
            "--json",
            "register",
            "--name",
            "d",
            "--metadata-service-uri",
            "zk://127.0.0.1:2181/ledgers-d",
            "--status",
            "STANDBY",
        ],
    )
    .await;
    r.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"name": "d", "metadataServiceUri": "zk://127.0.0.1:2181/ledgers-d", "status": "STANDBY"})
    );
    assert_eq!(
        stub.take_requests()[0].body,
        Some(json!({"metadataServiceUri": "zk://127.0.0.1:2181/ledgers-d", "status": "STANDBY"}))
    );
}

#[tokio::test]
async fn register_collision_shows_field_and_changes_nothing() {
    let stub = Stub::start().await;
    let before = stub.clusters();
    let (r, _) = cli(
        &stub,
        &[
            "register",
            "--name",
            "e",
            "--metadata-service-uri",
            "zk://127.0.0.1:2181/ledgers-a",
        ],
    )
    .await;
    let err = r.unwrap_err();
    match &err {
        CliError::Client(ClientError::Api {
            status,
            code,
            field,
            ..
        }) => {
            assert_eq!((*status, code.as_str()), (400, "INVALID_ARGUMENT"));
            assert_eq!(field.as_deref(), Some("metadataServiceUri"));
        }
        other => panic!("unexpected {other:?}"),
    }
    let text = rendered_error(&err);
    assert!(text.contains("already registered as cluster 'a'"), "{text}");
    assert!(text.contains("field: metadataServiceUri"), "{text}");
    assert_eq!(stub.clusters(), before);
}

#[tokio::test]
async fn register_with_unknown_status_is_rejected_by_the_parser() {
    let err = Cli::try_parse_from([
        "bookie-clusters",
        "register",
        "--name",
        "c",
        "--metadata-service-uri",
        "zk://h/l",
        "--status",
        "RETIRED",
    ])
    .unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
}

#[tokio::test]
async fn unregister_deletes_and_refuses_the_active_cluster() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["unregister", "--name", "b"]).await;
    r.unwrap();
    assert_eq!(out, "unregistered cluster 'b'\n");
    assert_eq!(
        stub.take_requests(),
        vec![admin_request("DELETE", "/b", None)]
    );
    assert!(!stub.clusters().contains_key("b"));

    let before = stub.clusters();
    let (r, _) = cli(&stub, &["unregister", "--name", "a"]).await;
    let err = r.unwrap_err();
    assert_eq!(err.exit_code(), EXIT_FAILURE);
    assert_eq!(err_status(&err), Some(409));
    assert!(rendered_error(&err).contains("cluster 'a' is ACTIVE"));
    assert_eq!(stub.clusters(), before);
}

#[tokio::test]
async fn precheck_renders_readiness_and_at_risk_ids() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["precheck", "--name", "b"]).await;
    r.unwrap();
    assert_eq!(
        out,
        "check                         switch\n\
         ready                         yes\n\
         source                        a\n\
         target                        b\n\
         source max ledger id          41\n\
         source next ledger id         42\n\
         target next ledger id         100\n\
         idgen advanced beyond source  yes\n\
         at-risk ledgers               none\n"
    );
    assert_eq!(
        stub.take_requests(),
        vec![admin_request("GET", "/precheck/b", None)]
    );

    stub.state.lock().unwrap().clusters.insert(
        "risky".into(),
        json!({"name": "risky", "metadataServiceUri": "zk://127.0.0.1:2181/r", "status": "STANDBY"}),
    );
    let (r, out) = cli(&stub, &["precheck", "--name", "risky"]).await;
    r.unwrap();
    assert!(out.contains("ready                         no\n"), "{out}");
    assert!(
        out.contains("at-risk ledgers               2 (40, 41)\n"),
        "{out}"
    );
    assert!(
        out.contains("not ready: a switch to 'risky' would be refused"),
        "{out}"
    );

    let (r, out) = cli(&stub, &["precheck", "--name", "risky", "--json"]).await;
    r.unwrap();
    let parsed: PrecheckResult = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed.at_risk_ledger_ids, vec![40, 41]);
    assert!(!parsed.ready);
}
