//! Switch verbs: switch, status (and its watch), read mode, cleanup,
//! close client and open reads, rollback.

use super::*;

#[tokio::test]
async fn switch_posts_target_and_renders_status() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["switch", "--target", "b"]).await;
    r.unwrap();
    assert_eq!(
        stub.take_requests(),
        vec![admin_request(
            "POST",
            "/switch",
            Some(json!({"target": "b"}))
        )]
    );
    let expected_head = "switch to 'b' accepted\n\
         switch id          sw-1\n\
         epoch              2\n\
         source             a\n\
         target             b\n\
         phase              BUILD\n\
         build              0/4 (built 0, failed 0)\n\
         promote            0/0 (promoted 0, rollover fallback 0)\n\
         deleted            0\n\
         created            2024-05-01T12:00:00.000Z\n\
         updated            2024-05-01T12:00:01.000Z\n\
         rollback deadline  2024-05-02T12:00:00.000Z\n\
         failures:\n\
         KIND    LEDGER  PATH                  REASON\n\
         cursor  9       /managed-ledgers/t/c  bookies down\n";
    assert_eq!(out, expected_head);

    let (r, out) = cli(&stub, &["switch", "--target", "b", "--json"]).await;
    r.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        switch_json("b", 0)
    );
}

#[tokio::test]
async fn refused_switch_shows_message_and_precheck_details() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["switch", "--target", "risky"]).await;
    assert!(out.is_empty());
    let err = r.unwrap_err();
    assert_eq!(err.exit_code(), EXIT_FAILURE);
    match &err {
        CliError::Client(ClientError::Api {
            status,
            code,
            details,
            ..
        }) => {
            assert_eq!((*status, code.as_str()), (409, "CONFLICT"));
            assert_eq!(details.as_ref(), Some(&precheck_json("risky", false)));
        }
        other => panic!("unexpected {other:?}"),
    }
    let text = rendered_error(&err);
    assert!(
        text.starts_with(
            "error: precheck failed for a switch to 'risky': 2 copied ledger ids are at risk"
        ),
        "{text}"
    );
    assert!(text.contains("\"atRiskLedgerIds\": ["), "{text}");
    assert!(stub.state.lock().unwrap().switch_target.is_none());
}

#[tokio::test]
async fn status_renders_node_view_without_switch_and_as_json() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["status"]).await;
    r.unwrap();
    assert_eq!(
        out,
        "node               node-1\n\
         active cluster     a\n\
         bootstrap cluster  a\n\
         read mode          DUAL_READ\n\
         epoch              2\n\
         directive          none\n\
         switch             none\n"
    );
    let (r, out) = cli(&stub, &["status", "--json"]).await;
    r.unwrap();
    let v: Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["nodeId"], "node-1");
    assert_eq!(v["switch"], Value::Null);
    assert_eq!(
        stub.take_requests(),
        vec![
            admin_request("GET", "/status", None),
            admin_request("GET", "/status", None)
        ]
    );
}

#[tokio::test]
async fn status_watch_prints_progress_until_switched() {
    let stub = Stub::start().await;
    stub.client().switch("b").await.unwrap();
    stub.take_requests();
    let (r, out) = cli(&stub, &["status", "--watch", "--interval-ms", "1"]).await;
    r.unwrap();
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(
        lines[..5],
        [
            "phase BUILD: build 0/4 (built 0, failed 0), promote 0/0 (promoted 0, rollover fallback 0)",
            "phase BUILD: build 3/4 (built 2, failed 1), promote 0/2 (promoted 0, rollover fallback 0)",
            "phase PROMOTE: build 4/4 (built 3, failed 1), promote 1/3 (promoted 1, rollover fallback 0)",
            "phase PROMOTE: build 4/4 (built 3, failed 1), promote 2/3 (promoted 2, rollover fallback 0)",
            "phase SWITCHED: build 4/4 (built 3, failed 1), promote 3/3 (promoted 2, rollover fallback 1)",
        ]
    );
    // Then the final node view, and no more polling after SWITCHED.
    assert_eq!(lines[5], "node               node-1");
    assert!(lines.contains(
        &"directive          switch to b, epoch 2, origin node-1, at 2024-05-01T12:00:00.000Z"
    ));
    assert!(lines.contains(&"phase              SWITCHED"));
    let requests = stub.take_requests();
    assert_eq!(requests.len(), 5);
    assert!(requests
        .iter()
        .all(|r| *r == admin_request("GET", "/status", None)));
}

#[tokio::test]
async fn status_watch_json_prints_one_document_per_poll() {
    let stub = Stub::start().await;
    stub.client().switch("b").await.unwrap();
    let (r, out) = cli(
        &stub,
        &["status", "--watch", "--interval-ms", "1", "--json"],
    )
    .await;
    r.unwrap();
    let phases: Vec<String> = out
        .lines()
        .map(|l| {
            serde_json::from_str::<Value>(l).unwrap()["switch"]["phase"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(phases, ["BUILD", "BUILD", "PROMOTE", "PROMOTE", "SWITCHED"]);
}

#[tokio::test]
async fn status_watch_without_switch_stops_at_once() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["status", "--watch"]).await;
    r.unwrap();
    assert!(
        out.starts_with("no switch in progress\nnode               node-1\n"),
        "{out}"
    );
    assert_eq!(stub.take_requests().len(), 1);
}

#[tokio::test]
async fn interval_without_watch_is_a_usage_error() {
    let err = Cli::try_parse_from(["bookie-clusters", "status", "--interval-ms", "5"]).unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::MissingRequiredArgument);
}

#[tokio::test]
async fn set_read_mode_posts_mode() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["set-read-mode", "--mode", "OLD_CLUSTER_ONLY"]).await;
    r.unwrap();
    assert_eq!(out, "read mode set to OLD_CLUSTER_ONLY\n");
    assert_eq!(
        stub.take_requests(),
        vec![admin_request(
            "POST",
            "/read-mode",
            Some(json!({"mode": "OLD_CLUSTER_ONLY"}))
        )]
    );
    assert_eq!(stub.state.lock().unwrap().read_mode, "OLD_CLUSTER_ONLY");
    let (r, out) = cli(
        &stub,
        &["--json", "set-read-mode", "--mode", "NEW_CLUSTER_ONLY"],
    )
    .await;
    r.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap(),
        json!({"readMode": "NEW_CLUSTER_ONLY"})
    );
}

#[tokio::test]
async fn invalid_read_mode_is_rejected_before_any_request() {
    let stub = Stub::start().await;
    let url = stub.url();
    let err = Cli::try_parse_from([
        "bookie-clusters",
        "--url",
        &url,
        "--token",
        ADMIN_TOKEN,
        "set-read-mode",
        "--mode",
        "FAST_READ",
    ])
    .unwrap_err();
    assert_eq!(err.kind(), clap::error::ErrorKind::InvalidValue);
    let text = err.to_string();
    assert!(
        text.contains("DUAL_READ") && text.contains("OLD_CLUSTER_ONLY"),
        "{text}"
    );
    assert!(stub.take_requests().is_empty());
    assert_eq!(stub.state.lock().unwrap().read_mode, "DUAL_READ");
}

#[tokio::test]
async fn list_cleanup_targets_renders_table() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["list-cleanup-targets"]).await;
    r.unwrap();
    assert_eq!(
        out,
        "switch sw-1: 2 cleanup target(s)\n\
         CLUSTER  LEDGER  KIND    PATH\n\
         a        12      schema  /schemas/t\n\
         a        345     cursor  /managed-ledgers/t/c\n"
    );
    assert_eq!(
        stub.take_requests(),
        vec![admin_request("GET", "/cleanup-targets", None)]
    );
    let (r, out) = cli(&stub, &["list-cleanup-targets", "--json"]).await;
    r.unwrap();
    let parsed: CleanupTargets = serde_json::from_str(&out).unwrap();
    assert_eq!(parsed.targets.len(), 2);
    assert_eq!(parsed.targets[1].ledger_id, 345);
}

#[tokio::test]
async fn cleanup_defaults_to_dry_run() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["cleanup"]).await;
    r.unwrap();
    assert_eq!(
        stub.take_requests(),
        vec![admin_request(
            "POST",
            "/cleanup",
            Some(
                json!({"dryRun": true, "srcClusterFilter": null, "maxDeletions": 0, "force": false})
            )
        )]
    );
    assert_eq!(
        out,
        "switch id  sw-1\n\
         outcome    DRY_RUN\n\
         dry run    yes\n\
         targets    1\n\
         deleted    0\n\
         failed     0\n\
         CLUSTER  LEDGER  KIND    PATH\n\
         a        12      schema  /schemas/t\n"
    );
}

#[tokio::test]
async fn cleanup_with_every_option_and_failures() {
    let stub = Stub::start().await;
    let (r, out) = cli(
        &stub,
        &[
            "cleanup",
            "--dry-run",
            "false",
            "--src-cluster",
            "a",
            "--max-deletions",
            "5",
            "--force",
        ],
    )
    .await;
    r.unwrap();
    assert_eq!(
        stub.take_requests()[0].body,
        Some(json!({"dryRun": false, "srcClusterFilter": "a", "maxDeletions": 5, "force": true}))
    );
    assert!(out.contains("outcome    DONE_WITH_FAILURES\n"), "{out}");
    assert!(
        out.ends_with("failed deletions:\nLEDGER  REASON\n345     bookie unreachable\n"),
        "{out}"
    );

    let (r, out) = cli(&stub, &["cleanup", "--dry-run", "false", "--json"]).await;
    assert!(out.is_empty());
    let err = r.unwrap_err();
    assert_eq!(err_status(&err), Some(409));
    assert!(rendered_error(&err).contains("inside its rollback window"));

    let (r, out) = cli(&stub, &["cleanup", "--dry-run", "--json"]).await;
    r.unwrap();
    assert_eq!(
        serde_json::from_str::<Value>(&out).unwrap()["outcome"],
        "DRY_RUN"
    );
}

#[tokio::test]
async fn close_client_and_open_reads_conflict() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["close-client", "--name", "a"]).await;
    r.unwrap();
    assert_eq!(out, "closed the client of cluster 'a'\n");
    assert_eq!(
        stub.take_requests(),
        vec![admin_request("POST", "/close-client/a", None)]
    );

    let (r, _) = cli(&stub, &["close-client", "--name", "busy"]).await;
    let err = r.unwrap_err();
    match &err {
        CliError::Client(ClientError::Api { details, .. }) => {
            assert_eq!(details.as_ref().unwrap()["ledgerIds"], json!([7, 8]));
        }
        other => panic!("unexpected {other:?}"),
    }
    let text = rendered_error(&err);
    assert!(text.contains("still has open reads"), "{text}");
    assert!(text.contains("\"ledgerIds\""), "{text}");
}

#[tokio::test]
async fn rollback_posts_empty_object() {
    let stub = Stub::start().await;
    let (r, out) = cli(&stub, &["rollback"]).await;
    r.unwrap();
    assert_eq!(
        stub.take_requests(),
        vec![admin_request("POST", "/rollback", Some(json!({})))]
    );
    assert!(
        out.starts_with("rollback accepted\nswitch id          sw-1\n"),
        "{out}"
    );
    assert!(out.contains("phase              ROLLING_BACK\n"), "{out}");
    let status = stub.client().rollback().await.unwrap();
    assert_eq!(status.phase(), Some(Phase::RollingBack));
}
