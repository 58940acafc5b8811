//! What crosses the wire: tokens, not-installed and unreachable brokers,
//! timeouts, base URLs, percent-encoding, the internal token, request
//! bodies, and the binary's exit codes.

use super::*;

#[tokio::test]
async fn wrong_or_missing_token_is_unauthorized() {
    let stub = Stub::start().await;
    let url = stub.url();
    for argv in [
        vec!["bookie-clusters", "--url", &url, "--token", "guess", "list"],
        vec!["bookie-clusters", "--url", &url, "list"],
    ] {
        let (r, out) = cli_raw(&argv).await;
        assert!(out.is_empty());
        let err = r.unwrap_err();
        assert!(
            matches!(err, CliError::Client(ClientError::Unauthorized { .. })),
            "{err:?}"
        );
        assert_eq!(err.exit_code(), EXIT_FAILURE);
        let text = rendered_error(&err);
        assert!(
            text.contains("rejected the token: missing or wrong bearer token"),
            "{text}"
        );
        assert!(text.contains("--token or BOOKIE_CLUSTERS_TOKEN"), "{text}");
    }
    let requests = stub.take_requests();
    assert_eq!(requests[0].auth.as_deref(), Some("Bearer guess"));
    assert_eq!(requests[1].auth, None);
}

#[tokio::test]
async fn missing_api_is_reported_as_not_installed() {
    let addr = serve(Router::new()).await;
    let url = format!("http://{addr}");
    let (r, _) = cli_raw(&[
        "bookie-clusters",
        "--url",
        &url,
        "--token",
        ADMIN_TOKEN,
        "list",
    ])
    .await;
    let err = r.unwrap_err();
    assert!(
        matches!(err, CliError::Client(ClientError::NotInstalled { .. })),
        "{err:?}"
    );
    assert_eq!(err.exit_code(), EXIT_NOT_INSTALLED);
    assert!(rendered_error(&err)
        .contains("the bookie-clusters feature is not installed on this broker"));
    // Any other endpoint answering a bare 404 means the same.
    let client = AdminClient::new(&url, ADMIN_TOKEN).unwrap();
    assert!(matches!(
        client.status().await,
        Err(ClientError::NotInstalled { .. })
    ));
}

#[tokio::test]
async fn slow_server_times_out() {
    let stub = Stub::start().await;
    stub.state.lock().unwrap().hang = true;
    let client = stub.client().with_timeout(Duration::from_millis(100));
    let err = client.status().await.unwrap_err();
    assert!(matches!(err, ClientError::Timeout { .. }), "{err:?}");
    assert!(err.is_retryable());
    assert!(
        err.to_string().contains("did not answer within 100ms"),
        "{err}"
    );
}

#[tokio::test]
async fn unreachable_broker_is_a_connect_error() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    let client = AdminClient::new(&format!("http://{addr}"), ADMIN_TOKEN).unwrap();
    let err = client.list().await.unwrap_err();
    assert!(matches!(err, ClientError::Connect { .. }), "{err:?}");
    assert!(err
        .to_string()
        .contains(&format!("cannot reach the admin API at http://{addr}")));
}

#[test]
fn base_url_must_be_http_or_https() {
    for bad in [
        "ftp://127.0.0.1:8080",
        "127.0.0.1:8080",
        "http://h:1/?x=1",
        "not a url",
    ] {
        let err = AdminClient::new(bad, "t").unwrap_err();
        assert!(
            matches!(err, ClientError::InvalidUrl { .. }),
            "{bad}: {err:?}"
        );
    }
    let c = AdminClient::new("http://127.0.0.1:8080/", "t").unwrap();
    assert_eq!(
        c.base_url(),
        "http://127.0.0.1:8080/admin/v2/bookie-clusters"
    );
    let c = AdminClient::new("https://127.0.0.1:8443", "t").unwrap();
    assert_eq!(
        c.base_url(),
        "https://127.0.0.1:8443/admin/v2/bookie-clusters"
    );
    let c = AdminClient::new("http://127.0.0.1:8080/broker/", "t").unwrap();
    assert_eq!(
        c.base_url(),
        "http://127.0.0.1:8080/broker/admin/v2/bookie-clusters"
    );
}

#[tokio::test]
async fn cluster_names_are_percent_encoded_in_paths() {
    let stub = Stub::start().await;
    let _ = stub.client().get("x y/z").await;
    assert_eq!(stub.take_requests()[0].path, format!("{BASE}/x%20y%2Fz"));
}

#[tokio::test]
async fn promote_cursor_uses_the_internal_token() {
    let stub = Stub::start().await;
    let request = PromoteCursorRequest {
        topic: "persistent://t/n/topic".into(),
        cursor_name: "sub".into(),
        target_cluster_name: "b".into(),
        expected_cursors_ledger_id: 55,
        copied_last_entry_id: 3,
    };
    let err = stub.client().promote_cursor(&request).await.unwrap_err();
    assert!(matches!(err, ClientError::Unauthorized { .. }), "{err:?}");

    let internal = stub.client().with_token(INTERNAL_TOKEN);
    let answer = internal.promote_cursor(&request).await.unwrap();
    assert_eq!(
        answer,
        PromoteCursorResponse {
            outcome: PromoteOutcome::RolledOver,
            new_ledger_id: Some(777)
        }
    );
    let recorded = stub.take_requests();
    assert_eq!(recorded[1].auth.as_deref(), Some("Bearer internal-secret"));
    assert_eq!(recorded[1].path, format!("{BASE}/internal/promote-cursor"));
    assert_eq!(
        recorded[1].body,
        Some(json!({
            "topic": "persistent://t/n/topic",
            "cursorName": "sub",
            "targetClusterName": "b",
            "expectedCursorsLedgerId": 55,
            "copiedLastEntryId": 3,
        }))
    );
}

#[test]
fn request_structs_reject_unknown_fields_and_fill_defaults() {
    assert!(serde_json::from_value::<RegisterRequest>(
        json!({"metadataServiceUri": "zk://h/l", "colour": "red"})
    )
    .is_err());
    assert!(
        serde_json::from_value::<SwitchRequest>(json!({"target": "b", "force": true})).is_err()
    );
    assert!(
        serde_json::from_value::<ReadModeRequest>(json!({"mode": "DUAL_READ", "x": 1})).is_err()
    );
    assert!(serde_json::from_value::<ReadModeRequest>(json!({"mode": "FAST"})).is_err());
    assert!(
        serde_json::from_value::<CleanupRequest>(json!({"dryRun": false, "all": true})).is_err()
    );
    assert!(serde_json::from_value::<RollbackRequest>(json!({"now": true})).is_err());
    assert!(serde_json::from_value::<PromoteCursorRequest>(json!({
        "topic": "t", "cursorName": "c", "targetClusterName": "b",
        "expectedCursorsLedgerId": 1, "copiedLastEntryId": 2, "extra": 0,
    }))
    .is_err());

    assert_eq!(
        serde_json::from_value::<CleanupRequest>(json!({})).unwrap(),
        CleanupRequest {
            dry_run: true,
            src_cluster_filter: None,
            max_deletions: 0,
            force: false
        }
    );
    assert_eq!(
        serde_json::from_value::<RegisterRequest>(json!({"metadataServiceUri": "zk://h/l"}))
            .unwrap(),
        RegisterRequest {
            metadata_service_uri: "zk://h/l".into(),
            status: None
        }
    );
    assert_eq!(
        serde_json::from_value::<ReadModeRequest>(json!({"mode": "NEW_CLUSTER_ONLY"}))
            .unwrap()
            .mode,
        ReadMode::NewClusterOnly
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_exit_codes() {
    let stub = Stub::start().await;
    let url = stub.url();

    // Success, URL and token from the environment.
    let out = run_binary(
        strings(&["list", "--json"]),
        vec![
            ("BOOKIE_CLUSTERS_URL", url.clone()),
            ("BOOKIE_CLUSTERS_TOKEN", ADMIN_TOKEN.into()),
        ],
    )
    .await;
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        printed,
        Value::Array(stub.clusters().into_values().collect())
    );
    assert_eq!(stub.take_requests(), vec![admin_request("GET", "", None)]);

    // Server error: exit 1, the server's message on stderr, nothing on stdout.
    let out = run_binary(
        strings(&[
            "--url",
            &url,
            "--token",
            ADMIN_TOKEN,
            "unregister",
            "--name",
            "a",
        ]),
        vec![],
    )
    .await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_FAILURE)));
    assert!(out.stdout.is_empty());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("error: cluster 'a' is ACTIVE"), "{stderr}");

    // Wrong token: exit 1.
    let out = run_binary(strings(&["--url", &url, "--token", "nope", "list"]), vec![]).await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_FAILURE)));
    assert!(String::from_utf8_lossy(&out.stderr).contains("rejected the token"));

    // Usage error: exit 2, no request sent.
    stub.take_requests();
    let out = run_binary(
        strings(&[
            "--url",
            &url,
            "--token",
            ADMIN_TOKEN,
            "set-read-mode",
            "--mode",
            "FAST_READ",
        ]),
        vec![],
    )
    .await;
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("FAST_READ"));
    assert!(stub.take_requests().is_empty());

    // No API on that broker: its own exit status.
    let bare = serve(Router::new()).await;
    let out = run_binary(
        strings(&[
            "--url",
            &format!("http://{bare}"),
            "--token",
            ADMIN_TOKEN,
            "list",
        ]),
        vec![],
    )
    .await;
    assert_eq!(out.status.code(), Some(i32::from(EXIT_NOT_INSTALLED)));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not installed on this broker"));
}
