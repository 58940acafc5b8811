//! The REST API (axum) under `/admin/v2/bookie-clusters`; see `API.md`.
//!
//! Every endpoint needs a bearer token: the admin token for the public ones,
//! the node-to-node token for `/internal/*`. Request bodies are limited to
//! [`MAX_BODY_BYTES`] and unknown JSON fields are rejected. Every 4xx answer is
//! given before anything is written to the metadata store.

use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{DefaultBodyLimit, FromRequest, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use bkswitch_bk_router::ReadMode;
use bkswitch_registry::{validate_name, ClusterStatus};
use bkswitch_switch_orchestrator::{
    CleanupOptions, CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, OrchestratorError,
    Phase, PromoteError,
};
use serde::de::DeserializeOwned;
use serde_json::json;

use crate::client::{
    AdminClient, CleanupRequest, ClientError, PromoteCursorRequest, PromoteCursorResponse,
    PromoteOutcome, ReadModeRequest, RegisterRequest, SwitchRequest,
};
use crate::error::ApiError;
use crate::node::{node_status, NodeError, NodeInner};

/// Base path of the API.
pub const BASE_PATH: &str = "/admin/v2/bookie-clusters";

/// Largest accepted request body.
pub const MAX_BODY_BYTES: usize = 64 * 1024;

type AppState = Arc<NodeInner>;
type ApiResult<T> = Result<T, ApiError>;

/// The axum router of a node (public and internal endpoints, with auth).
pub(crate) fn router(node: Arc<NodeInner>) -> Router {
    let p = |suffix: &str| format!("{BASE_PATH}{suffix}");
    let public = Router::new()
        .route(BASE_PATH, get(list))
        .route(&p("/"), get(list))
        .route(&p("/status"), get(status))
        .route(&p("/switch"), post(switch))
        .route(&p("/rollback"), post(rollback))
        .route(&p("/read-mode"), post(read_mode))
        .route(&p("/cleanup-targets"), get(cleanup_targets))
        .route(&p("/cleanup"), post(cleanup))
        .route(&p("/precheck/{name}"), get(precheck))
        .route(&p("/close-client/{name}"), post(close_client))
        .route(
            &p("/{name}"),
            get(get_cluster).post(register).delete(unregister),
        )
        .route_layer(middleware::from_fn_with_state(node.clone(), admin_auth));
    let internal = Router::new()
        .route(&p("/internal/promote-cursor"), post(promote_cursor))
        .route_layer(middleware::from_fn_with_state(node.clone(), internal_auth));
    internal
        .merge(public)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(node)
}

fn bearer(req: &Request) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// Compares without an early exit on the first differing byte.
fn token_matches(given: Option<&str>, expected: &str) -> bool {
    let Some(given) = given else { return false };
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

async fn admin_auth(State(node): State<AppState>, req: Request, next: Next) -> Response {
    if token_matches(bearer(&req), &node.config.admin_token) {
        next.run(req).await
    } else {
        ApiError::unauthorized(
            "missing or wrong admin token: send 'Authorization: Bearer <admin token>'",
        )
        .into_response()
    }
}

async fn internal_auth(State(node): State<AppState>, req: Request, next: Next) -> Response {
    if token_matches(bearer(&req), &node.config.internal_token) {
        next.run(req).await
    } else {
        ApiError::unauthorized(
            "missing or wrong node-to-node token: internal endpoints need the internal token",
        )
        .into_response()
    }
}

/// A JSON body whose rejections become 400 answers naming the field.
struct ApiJson<T>(T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(r: JsonRejection) -> ApiError {
    let text = r.body_text();
    let field = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|p| text.split(p).nth(1))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_owned);
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::invalid(
            None,
            format!("request body larger than {MAX_BODY_BYTES} bytes"),
        );
    }
    let mut e = ApiError::invalid(
        field.as_deref(),
        format!("invalid request body: {text}; see API.md for the expected JSON"),
    );
    e.body.field = field;
    e
}

fn checked_name(name: &str) -> ApiResult<()> {
    validate_name(name).map_err(ApiError::from)
}

impl From<OrchestratorError> for ApiError {
    fn from(e: OrchestratorError) -> ApiError {
        let msg = e.to_string();
        match e {
            OrchestratorError::UnknownCluster { .. } | OrchestratorError::NoSuchSwitch { .. } => {
                ApiError::not_found(msg)
            }
            OrchestratorError::PrecheckFailed(result) => ApiError::conflict(msg)
                .with_details(serde_json::to_value(&*result).unwrap_or_default()),
            OrchestratorError::Registry(r) => ApiError::from(r),
            OrchestratorError::Metadata { ref source, .. } if source.is_retryable() => {
                ApiError::unavailable(msg)
            }
            OrchestratorError::Client { .. } => ApiError::unavailable(msg),
            OrchestratorError::Corrupt { .. } | OrchestratorError::Metadata { .. } => {
                ApiError::internal(msg)
            }
            _ => ApiError::conflict(msg),
        }
    }
}

impl From<NodeError> for ApiError {
    fn from(e: NodeError) -> ApiError {
        match e {
            NodeError::Registry(r) => r.into(),
            NodeError::Orchestrator(o) => o.into(),
            NodeError::Router(r) => r.into(),
            other => ApiError::internal(other.to_string()),
        }
    }
}

async fn list(State(node): State<AppState>) -> ApiResult<Response> {
    Ok(Json(node.registry.list().await?).into_response())
}

async fn get_cluster(
    State(node): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    checked_name(&name)?;
    match node.registry.get(&name).await? {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(ApiError::not_found(format!(
            "bookie cluster `{name}` is not registered; register it with POST {BASE_PATH}/{name}"
        ))),
    }
}

async fn register(
    State(node): State<AppState>,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<RegisterRequest>,
) -> ApiResult<Response> {
    checked_name(&name)?;
    let status = body.status.unwrap_or(ClusterStatus::Standby);
    let record = node
        .registry
        .register(&name, &body.metadata_service_uri, status)
        .await?;
    Ok(Json(record).into_response())
}

async fn unregister(State(node): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    checked_name(&name)?;
    node.registry.unregister(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn precheck(State(node): State<AppState>, Path(name): Path<String>) -> ApiResult<Response> {
    checked_name(&name)?;
    let result = node.orchestrator.precheck(&name).await?;
    Ok(Json(result).into_response())
}

async fn switch(
    State(node): State<AppState>,
    ApiJson(body): ApiJson<SwitchRequest>,
) -> ApiResult<Response> {
    if body.target.is_empty() {
        return Err(ApiError::invalid(
            Some("target"),
            "`target` must name a registered cluster",
        ));
    }
    checked_name(&body.target).map_err(|mut e| {
        e.body.field = Some("target".into());
        e
    })?;
    let status = node
        .orchestrator
        .start_switch(&body.target, Some(&node.config.node_id))
        .await?;
    Ok(Json(status).into_response())
}

async fn status(State(node): State<AppState>) -> ApiResult<Response> {
    Ok(Json(node_status(&node).await?).into_response())
}

async fn read_mode(
    State(node): State<AppState>,
    body: Result<ApiJson<ReadModeRequest>, ApiError>,
) -> ApiResult<Response> {
    let ApiJson(body) = body.map_err(|mut e| {
        if e.body.field.is_none() {
            e.body.field = Some("mode".into());
            e.body.error = format!(
                "{}; the read mode is DUAL_READ, NEW_CLUSTER_ONLY or OLD_CLUSTER_ONLY",
                e.body.error
            );
        }
        e
    })?;
    let mode: ReadMode = body.mode;
    node.storage.set_read_mode(mode);
    Ok(Json(json!({ "readMode": mode.as_str() })).into_response())
}

async fn current_switch(node: &NodeInner) -> ApiResult<String> {
    match node.orchestrator.current_status().await? {
        Some(s) => Ok(s.switch_id),
        None => Err(ApiError::not_found(
            "no switch is recorded; start one with POST /switch",
        )),
    }
}

async fn cleanup_targets(State(node): State<AppState>) -> ApiResult<Response> {
    let id = current_switch(&node).await?;
    let targets = node.orchestrator.cleanup_targets(&id).await?;
    Ok(Json(json!({ "switchId": id, "targets": targets })).into_response())
}

async fn cleanup(
    State(node): State<AppState>,
    ApiJson(body): ApiJson<CleanupRequest>,
) -> ApiResult<Response> {
    if let Some(f) = &body.src_cluster_filter {
        checked_name(f).map_err(|mut e| {
            e.body.field = Some("srcClusterFilter".into());
            e
        })?;
    }
    let id = current_switch(&node).await?;
    let opts = CleanupOptions {
        dry_run: body.dry_run,
        src_cluster_filter: body.src_cluster_filter.clone(),
        max_deletions: match body.max_deletions {
            0 => None,
            n => Some(usize::try_from(n).unwrap_or(usize::MAX)),
        },
        force: body.force,
    };
    let report = node.orchestrator.cleanup(&id, opts).await?;
    let outcome = if report.dry_run {
        "DRY_RUN"
    } else {
        match report.phase {
            Phase::Done => "DONE",
            Phase::DoneWithFailures => "DONE_WITH_FAILURES",
            _ => "IN_PROGRESS",
        }
    };
    let failed: Vec<_> = report
        .errors
        .iter()
        .map(|(cluster, ledger_id, reason)| {
            json!({ "cluster": cluster, "ledgerId": ledger_id, "reason": reason })
        })
        .collect();
    Ok(Json(json!({
        "dryRun": report.dry_run,
        "switchId": id,
        "targets": report.targets,
        "deleted": if report.dry_run { 0 } else { report.targets.len() },
        "remaining": report.remaining,
        "failed": failed,
        "phase": report.phase,
        "outcome": outcome,
    }))
    .into_response())
}

async fn close_client(
    State(node): State<AppState>,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    checked_name(&name)?;
    node.storage.close_client(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

async fn rollback(State(node): State<AppState>) -> ApiResult<Response> {
    let id = current_switch(&node).await?;
    let status = node.orchestrator.rollback(&id).await?;
    Ok(Json(status).into_response())
}

async fn promote_cursor(
    State(node): State<AppState>,
    ApiJson(body): ApiJson<PromoteCursorRequest>,
) -> ApiResult<Response> {
    let req = CursorPromoteRequest {
        managed_ledger: body.topic.clone(),
        cursor_name: body.cursor_name.clone(),
        target_cluster_name: body.target_cluster_name.clone(),
        expected_cursors_ledger_id: body.expected_cursors_ledger_id,
        copied_last_entry_id: body.copied_last_entry_id,
    };
    match node.topics.promote_cursor(&req).await {
        Ok(outcome) => {
            node.promotions_served
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            Ok(Json(to_wire(outcome)).into_response())
        }
        Err(e) => {
            let msg = e.to_string();
            let details = serde_json::to_value(&e).unwrap_or_default();
            Err(match e {
                PromoteError::RolledOver { .. } => ApiError::conflict(msg),
                PromoteError::NotOwner { .. } => ApiError::not_found(msg),
                PromoteError::Unavailable { .. } => ApiError::unavailable(msg),
                _ => ApiError::internal(msg),
            }
            .with_details(details))
        }
    }
}

fn to_wire(outcome: CursorPromoteOutcome) -> PromoteCursorResponse {
    match outcome {
        CursorPromoteOutcome::Promoted => PromoteCursorResponse {
            outcome: PromoteOutcome::Promoted,
            new_ledger_id: None,
        },
        CursorPromoteOutcome::AlreadyOnTarget => PromoteCursorResponse {
            outcome: PromoteOutcome::AlreadyOnTarget,
            new_ledger_id: None,
        },
        CursorPromoteOutcome::RolledOver { new_ledger_id } => PromoteCursorResponse {
            outcome: PromoteOutcome::RolledOver,
            new_ledger_id: Some(new_ledger_id),
        },
    }
}

fn from_wire(resp: &PromoteCursorResponse) -> Option<CursorPromoteOutcome> {
    Some(match resp.outcome {
        PromoteOutcome::Promoted => CursorPromoteOutcome::Promoted,
        PromoteOutcome::AlreadyOnTarget => CursorPromoteOutcome::AlreadyOnTarget,
        PromoteOutcome::RolledOver => CursorPromoteOutcome::RolledOver {
            new_ledger_id: resp.new_ledger_id?,
        },
    })
}

/// The coordinator side of `POST /internal/promote-cursor`: maps the owner's
/// answer back onto [`CursorPromoteOutcome`] / [`PromoteError`].
pub(crate) async fn promote_over_http(
    client: &AdminClient,
    wire: &PromoteCursorRequest,
    req: &CursorPromoteRequest,
    owner: &str,
) -> Result<CursorPromoteOutcome, PromoteError> {
    match client.promote_cursor(wire).await {
        Ok(resp) => from_wire(&resp).ok_or_else(|| PromoteError::Other {
            reason: format!("owner node {owner} answered ROLLED_OVER without newLedgerId"),
        }),
        Err(ClientError::Api {
            status,
            details,
            message,
            ..
        }) => {
            if let Some(e) = details.and_then(|d| serde_json::from_value::<PromoteError>(d).ok()) {
                return Err(e);
            }
            Err(match status {
                409 => PromoteError::RolledOver {
                    managed_ledger: req.managed_ledger.clone(),
                    cursor: req.cursor_name.clone(),
                    expected: req.expected_cursors_ledger_id,
                    actual: -1,
                },
                404 => PromoteError::NotOwner {
                    managed_ledger: req.managed_ledger.clone(),
                    cursor: req.cursor_name.clone(),
                },
                _ => PromoteError::Unavailable {
                    reason: format!("owner node {owner}: {message}"),
                },
            })
        }
        Err(e) => Err(PromoteError::Unavailable {
            reason: format!("owner node {owner} unreachable: {e}"),
        }),
    }
}
