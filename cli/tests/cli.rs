//! The `bookie-clusters` CLI and [`AdminClient`] against a stub of the REST
//! API (an in-memory fake on 127.0.0.1) that records every request.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use axum::{Json, Router};
use bkswitch_admin::wire::{
    CleanupRequest, CleanupTargets, Phase, PromoteCursorRequest, PromoteCursorResponse,
    PromoteOutcome, ReadModeRequest, ReadModeResponse, RegisterRequest, RollbackRequest,
    SwitchRequest, BASE_PATH as BASE,
};
use bkswitch_admin::{AdminClient, ClientError};
use bkswitch_bk_router::ReadMode;
use bkswitch_cli::cli::{run, write_error, Cli, CliError, EXIT_FAILURE, EXIT_NOT_INSTALLED};
use bkswitch_registry::{ClusterStatus, PrecheckResult};
use clap::Parser;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

const ADMIN_TOKEN: &str = "admin-secret";
const INTERNAL_TOKEN: &str = "internal-secret";

/// One request as the stub saw it.
#[derive(Debug, Clone, PartialEq)]
struct Recorded {
    method: String,
    path: String,
    auth: Option<String>,
    body: Option<Value>,
}

/// The switch progress the stub reports: one step per `GET /status`.
fn step_counts(step: usize) -> (&'static str, Value) {
    match step {
        0 => ("BUILD", json!({"toBuild": 4, "built": 0, "failed": 0})),
        1 => ("BUILD", json!({"toBuild": 4, "built": 2, "failed": 1})),
        2 => (
            "PROMOTE",
            json!({"toBuild": 4, "built": 3, "failed": 1, "promoted": 1, "rolloverFallback": 0}),
        ),
        3 => (
            "PROMOTE",
            json!({"toBuild": 4, "built": 3, "failed": 1, "promoted": 2, "rolloverFallback": 0}),
        ),
        _ => (
            "SWITCHED",
            json!({"toBuild": 4, "built": 3, "failed": 1, "promoted": 2, "rolloverFallback": 1, "deleted": 0}),
        ),
    }
}

fn switch_json(target: &str, step: usize) -> Value {
    let (phase, counts) = step_counts(step);
    json!({
        "switchId": "sw-1",
        "epoch": 2,
        "source": "a",
        "target": target,
        "phase": phase,
        "counts": counts,
        "createdAt": 1_714_564_800_000_i64,
        "updatedAt": 1_714_564_801_000_i64,
        "rollbackDeadline": 1_714_651_200_000_i64,
        "failures": [{"kind": "cursor", "ledgerId": 9, "path": "/managed-ledgers/t/c", "reason": "bookies down"}],
    })
}

fn precheck_json(target: &str, ready: bool) -> Value {
    json!({
        "ready": ready,
        "idgenAdvancedBeyondSource": ready,
        "sourceClusterName": "a",
        "targetClusterName": target,
        "sourceMaxLedgerId": 41,
        "sourceNextLedgerId": 42,
        "targetNextLedgerId": if ready { 100 } else { 40 },
        "atRiskLedgerIds": if ready { json!([]) } else { json!([40, 41]) },
        "atRiskLedgerCount": if ready { 0 } else { 2 },
    })
}

#[derive(Debug)]
struct StubState {
    clusters: BTreeMap<String, Value>,
    read_mode: String,
    switch_target: Option<String>,
    status_calls: usize,
    hang: bool,
    requests: Vec<Recorded>,
}

type Shared = Arc<Mutex<StubState>>;

struct Stub {
    addr: SocketAddr,
    state: Shared,
}

impl Stub {
    /// A stub with clusters `a` (ACTIVE) and `b` (STANDBY).
    async fn start() -> Stub {
        let mut clusters = BTreeMap::new();
        clusters.insert(
            "a".to_owned(),
            json!({"name": "a", "metadataServiceUri": "zk://127.0.0.1:2181/ledgers-a", "status": "ACTIVE"}),
        );
        clusters.insert(
            "b".to_owned(),
            json!({"name": "b", "metadataServiceUri": "zk://127.0.0.1:2181/ledgers-b", "status": "STANDBY"}),
        );
        let state = Arc::new(Mutex::new(StubState {
            clusters,
            read_mode: "DUAL_READ".to_owned(),
            switch_target: None,
            status_calls: 0,
            hang: false,
            requests: Vec::new(),
        }));
        let app = Router::new().fallback(handle).with_state(state.clone());
        let addr = serve(app).await;
        Stub { addr, state }
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn take_requests(&self) -> Vec<Recorded> {
        std::mem::take(&mut self.state.lock().unwrap().requests)
    }

    fn clusters(&self) -> BTreeMap<String, Value> {
        self.state.lock().unwrap().clusters.clone()
    }

    fn client(&self) -> AdminClient {
        AdminClient::new(&self.url(), ADMIN_TOKEN).unwrap()
    }
}

async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({"error": message, "code": code}))).into_response()
}

fn error_with(status: StatusCode, code: &str, message: &str, extra: Value) -> Response {
    let mut body = json!({"error": message, "code": code});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    (status, Json(body)).into_response()
}

fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            &format!("invalid request body: {e}"),
        ))
    })
}

async fn handle(
    State(state): State<Shared>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = uri.path().to_owned();
    let auth = headers
        .get("authorization")
        .map(|v| v.to_str().unwrap().to_owned());
    let hang = {
        let mut st = state.lock().unwrap();
        st.requests.push(Recorded {
            method: method.to_string(),
            path: path.clone(),
            auth: auth.clone(),
            body: if body.is_empty() {
                None
            } else {
                Some(
                    serde_json::from_slice(&body)
                        .unwrap_or(Value::String(String::from_utf8_lossy(&body).into_owned())),
                )
            },
        });
        st.hang
    };
    let Some(rest) = path.strip_prefix(BASE) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let segments: Vec<&str> = rest.split('/').filter(|s| !s.is_empty()).collect();
    let internal = segments.first() == Some(&"internal");
    let expected = format!(
        "Bearer {}",
        if internal {
            INTERNAL_TOKEN
        } else {
            ADMIN_TOKEN
        }
    );
    if auth.as_deref() != Some(expected.as_str()) {
        return error(
            StatusCode::UNAUTHORIZED,
            "UNAUTHORIZED",
            "missing or wrong bearer token",
        );
    }
    if hang {
        tokio::time::sleep(Duration::from_secs(30)).await;
    }
    let mut st = state.lock().unwrap();
    match (method.as_str(), segments.as_slice()) {
        ("GET", []) => Json(Value::Array(st.clusters.values().cloned().collect())).into_response(),
        ("GET", ["status"]) => {
            let step = st.status_calls;
            st.status_calls += 1;
            let switch = st
                .switch_target
                .as_deref()
                .map_or(Value::Null, |t| switch_json(t, step));
            Json(json!({
                "nodeId": "node-1",
                "activeCluster": "a",
                "bootstrapCluster": "a",
                "readMode": st.read_mode,
                "epoch": 2,
                "directive": if st.switch_target.is_some() {
                    json!({"target": "b", "origin": "node-1", "epoch": 2, "ts": 1_714_564_800_000_i64})
                } else { Value::Null },
                "switch": switch,
            }))
            .into_response()
        }
        ("GET", ["cleanup-targets"]) => Json(json!({
            "switchId": "sw-1",
            "targets": [
                {"cluster": "a", "ledgerId": 12, "kind": "schema", "path": "/schemas/t"},
                {"cluster": "a", "ledgerId": 345, "kind": "cursor", "path": "/managed-ledgers/t/c"},
            ],
        }))
        .into_response(),
        ("GET", ["precheck", name]) => {
            if !st.clusters.contains_key(*name) {
                return error(
                    StatusCode::NOT_FOUND,
                    "NOT_FOUND",
                    &format!("cluster '{name}' is not registered"),
                );
            }
            Json(precheck_json(name, *name != "risky")).into_response()
        }
        ("GET", [name]) => match st.clusters.get(*name) {
            Some(r) => Json(r.clone()).into_response(),
            None => error(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                &format!("cluster '{name}' is not registered; list the clusters with `list`"),
            ),
        },
        ("POST", ["switch"]) => {
            let req: SwitchRequest = match parse(&body) {
                Ok(r) => r,
                Err(e) => return *e,
            };
            if req.target == "risky" {
                return error_with(
                    StatusCode::CONFLICT,
                    "CONFLICT",
                    "precheck failed for a switch to 'risky': 2 copied ledger ids are at risk; advance the id generator of 'risky'",
                    json!({"details": precheck_json("risky", false)}),
                );
            }
            st.switch_target = Some(req.target.clone());
            st.status_calls = 0;
            Json(switch_json(&req.target, 0)).into_response()
        }
        ("POST", ["read-mode"]) => {
            let req: ReadModeRequest = match parse(&body) {
                Ok(r) => r,
                Err(e) => return *e,
            };
            st.read_mode = req.mode.as_str().to_owned();
            Json(ReadModeResponse {
                read_mode: req.mode,
            })
            .into_response()
        }
        ("POST", ["cleanup"]) => {
            let req: CleanupRequest = match parse(&body) {
                Ok(r) => r,
                Err(e) => return *e,
            };
            if !req.dry_run && !req.force {
                return error(
                    StatusCode::CONFLICT,
                    "CONFLICT",
                    "switch 'sw-1' is inside its rollback window; wait for the deadline or pass force",
                );
            }
            Json(json!({
                "dryRun": req.dry_run,
                "switchId": "sw-1",
                "targets": [{"cluster": "a", "ledgerId": 12, "kind": "schema", "path": "/schemas/t"}],
                "deleted": if req.dry_run { 0 } else { 1 },
                "failed": if req.dry_run { json!([]) } else { json!([{"ledgerId": 345, "reason": "bookie unreachable"}]) },
                "outcome": if req.dry_run { "DRY_RUN" } else { "DONE_WITH_FAILURES" },
            }))
            .into_response()
        }
        ("POST", ["rollback"]) => {
            if !body.is_empty() {
                if let Err(e) = parse::<RollbackRequest>(&body) {
                    return *e;
                }
            }
            let mut s = switch_json("b", 4);
            s["phase"] = json!("ROLLING_BACK");
            Json(s).into_response()
        }
        ("POST", ["close-client", name]) => {
            if *name == "busy" {
                return error_with(
                    StatusCode::CONFLICT,
                    "CONFLICT",
                    "the client of cluster 'busy' still has open reads; retry when they finish",
                    json!({"details": {"ledgerIds": [7, 8]}}),
                );
            }
            StatusCode::NO_CONTENT.into_response()
        }
        ("POST", ["internal", "promote-cursor"]) => {
            let req: PromoteCursorRequest = match parse(&body) {
                Ok(r) => r,
                Err(e) => return *e,
            };
            Json(PromoteCursorResponse {
                outcome: if req.copied_last_entry_id < 10 {
                    PromoteOutcome::RolledOver
                } else {
                    PromoteOutcome::Promoted
                },
                new_ledger_id: (req.copied_last_entry_id < 10).then_some(777),
            })
            .into_response()
        }
        ("POST", [name]) => {
            let req: RegisterRequest = match parse(&body) {
                Ok(r) => r,
                Err(e) => return *e,
            };
            if let Some(other) = st
                .clusters
                .values()
                .find(|r| r["metadataServiceUri"] == json!(req.metadata_service_uri))
            {
                return error_with(
                    StatusCode::BAD_REQUEST,
                    "INVALID_ARGUMENT",
                    &format!(
                        "metadata service URI '{}' is already registered as cluster '{}'",
                        req.metadata_service_uri,
                        other["name"].as_str().unwrap()
                    ),
                    json!({"field": "metadataServiceUri"}),
                );
            }
            let record = json!({
                "name": name,
                "metadataServiceUri": req.metadata_service_uri,
                "status": req.status.unwrap_or(ClusterStatus::Standby),
            });
            st.clusters.insert((*name).to_owned(), record.clone());
            Json(record).into_response()
        }
        ("DELETE", [name]) => match st.clusters.get(*name) {
            None => error(
                StatusCode::NOT_FOUND,
                "NOT_FOUND",
                &format!("cluster '{name}' is not registered"),
            ),
            Some(r) if r["status"] == "ACTIVE" => error(
                StatusCode::CONFLICT,
                "CONFLICT",
                &format!(
                    "cluster '{name}' is ACTIVE; switch to another cluster before unregistering it"
                ),
            ),
            Some(_) => {
                st.clusters.remove(*name);
                StatusCode::NO_CONTENT.into_response()
            }
        },
        _ => error(StatusCode::NOT_FOUND, "NOT_FOUND", "no such endpoint"),
    }
}

/// Runs the CLI in-process with the stub's URL and the admin token.
async fn cli(stub: &Stub, args: &[&str]) -> (Result<(), CliError>, String) {
    let url = stub.url();
    let mut argv = vec!["bookie-clusters", "--url", &url, "--token", ADMIN_TOKEN];
    argv.extend_from_slice(args);
    cli_raw(&argv).await
}

async fn cli_raw(argv: &[&str]) -> (Result<(), CliError>, String) {
    let parsed = Cli::try_parse_from(argv).unwrap();
    let mut out = Vec::new();
    let result = run(parsed, &mut out).await;
    (result, String::from_utf8(out).unwrap())
}

fn rendered_error(e: &CliError) -> String {
    let mut w = Vec::new();
    write_error(e, &mut w).unwrap();
    String::from_utf8(w).unwrap()
}

fn admin_request(method: &str, path: &str, body: Option<Value>) -> Recorded {
    Recorded {
        method: method.to_owned(),
        path: format!("{BASE}{path}"),
        auth: Some(format!("Bearer {ADMIN_TOKEN}")),
        body,
    }
}

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

fn err_status(e: &CliError) -> Option<u16> {
    match e {
        CliError::Client(c) => c.status(),
        _ => None,
    }
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
fn base_url_must_be_plain_http() {
    for bad in [
        "https://127.0.0.1:8080",
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

/// Runs the real binary (blocking) with `args` and `envs`.
async fn run_binary(args: Vec<String>, envs: Vec<(&'static str, String)>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_bookie-clusters"))
            .args(args)
            .env_remove("BOOKIE_CLUSTERS_URL")
            .env_remove("BOOKIE_CLUSTERS_TOKEN")
            .envs(envs)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
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
