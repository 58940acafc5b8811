//! The stub of the REST API: an in-memory fake on 127.0.0.1 that records
//! every request, and the JSON it answers with.

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
    CleanupRequest, PromoteCursorRequest, PromoteCursorResponse, PromoteOutcome, ReadModeRequest,
    ReadModeResponse, RegisterRequest, RollbackRequest, SwitchRequest, BASE_PATH as BASE,
};
use bkswitch_admin::AdminClient;
use bkswitch_registry::ClusterStatus;
use serde::de::DeserializeOwned;
use serde_json::{json, Value};

pub(crate) const ADMIN_TOKEN: &str = "admin-secret";
pub(crate) const INTERNAL_TOKEN: &str = "internal-secret";

/// One request as the stub saw it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Recorded {
    pub(crate) method: String,
    pub(crate) path: String,
    pub(crate) auth: Option<String>,
    pub(crate) body: Option<Value>,
}

/// The switch progress the stub reports: one step per `GET /status`.
pub(crate) fn step_counts(step: usize) -> (&'static str, Value) {
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

pub(crate) fn switch_json(target: &str, step: usize) -> Value {
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

pub(crate) fn precheck_json(target: &str, ready: bool) -> Value {
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
pub(crate) struct StubState {
    pub(crate) clusters: BTreeMap<String, Value>,
    pub(crate) read_mode: String,
    pub(crate) switch_target: Option<String>,
    pub(crate) status_calls: usize,
    pub(crate) hang: bool,
    pub(crate) requests: Vec<Recorded>,
}

pub(crate) type Shared = Arc<Mutex<StubState>>;

pub(crate) struct Stub {
    pub(crate) addr: SocketAddr,
    pub(crate) state: Shared,
}

impl Stub {
    /// A stub with clusters `a` (ACTIVE) and `b` (STANDBY).
    pub(crate) async fn start() -> Stub {
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

    pub(crate) fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub(crate) fn take_requests(&self) -> Vec<Recorded> {
        std::mem::take(&mut self.state.lock().unwrap().requests)
    }

    pub(crate) fn clusters(&self) -> BTreeMap<String, Value> {
        self.state.lock().unwrap().clusters.clone()
    }

    pub(crate) fn client(&self) -> AdminClient {
        AdminClient::new(&self.url(), ADMIN_TOKEN).unwrap()
    }
}

pub(crate) async fn serve(app: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

pub(crate) fn error(status: StatusCode, code: &str, message: &str) -> Response {
    (status, Json(json!({"error": message, "code": code}))).into_response()
}

pub(crate) fn error_with(status: StatusCode, code: &str, message: &str, extra: Value) -> Response {
    let mut body = json!({"error": message, "code": code});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    (status, Json(body)).into_response()
}

pub(crate) fn parse<T: DeserializeOwned>(body: &Bytes) -> Result<T, Box<Response>> {
    serde_json::from_slice(body).map_err(|e| {
        Box::new(error(
            StatusCode::BAD_REQUEST,
            "INVALID_ARGUMENT",
            &format!("invalid request body: {e}"),
        ))
    })
}

pub(crate) async fn handle(
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
