//! One handler per endpoint. Each checks its input first, so that every 4xx
//! answer is given before anything is written.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{extract::Path, Json};
use bkswitch_registry::validate_name;

use super::error::ApiError;
use super::extract::{ApiJson, Live};
use crate::wire::{
    CleanupReportDoc, CleanupRequest, CleanupTargets, ClusterStatus, MigrationPlanDoc,
    MigrationStartRequest, PromoteCursorRequest, PromoteCursorResponse, ReadModeRequest,
    ReadModeResponse, RegisterRequest, SwitchRequest, SwitchStatusDoc, WipeTarget,
};

type ApiResult<T> = Result<T, ApiError>;

fn checked_name(name: &str) -> ApiResult<()> {
    validate_name(name).map_err(ApiError::from)
}

/// `GET /`.
pub(super) async fn list(Live(node): Live) -> ApiResult<Response> {
    Ok(Json(node.registry().list().await?).into_response())
}

/// `GET /{name}`.
pub(super) async fn get_cluster(Live(node): Live, Path(name): Path<String>) -> ApiResult<Response> {
    Ok(Json(node.cluster(&name).await?).into_response())
}

/// `POST /{name}`.
pub(super) async fn register(
    Live(node): Live,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<RegisterRequest>,
) -> ApiResult<Response> {
    let status = body.status.unwrap_or(ClusterStatus::Standby);
    let record = node
        .register_cluster(&name, &body.metadata_service_uri, status)
        .await?;
    Ok(Json(record).into_response())
}

/// `DELETE /{name}`.
pub(super) async fn unregister(Live(node): Live, Path(name): Path<String>) -> ApiResult<Response> {
    node.unregister_cluster(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /precheck/{name}`.
pub(super) async fn precheck(Live(node): Live, Path(name): Path<String>) -> ApiResult<Response> {
    Ok(Json(node.precheck(&name).await?).into_response())
}

/// `POST /switch`.
pub(super) async fn switch(
    Live(node): Live,
    ApiJson(body): ApiJson<SwitchRequest>,
) -> ApiResult<Response> {
    let status = node.start_switch(&body.target).await?;
    Ok(Json(SwitchStatusDoc::from(status)).into_response())
}

/// `GET /status`.
pub(super) async fn status(Live(node): Live) -> ApiResult<Response> {
    Ok(Json(node.status().await?).into_response())
}

/// `POST /read-mode`.
pub(super) async fn read_mode(
    Live(node): Live,
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
    node.storage().set_read_mode(body.mode);
    Ok(Json(ReadModeResponse {
        read_mode: body.mode,
    })
    .into_response())
}

/// `GET /cleanup-targets`.
pub(super) async fn cleanup_targets(Live(node): Live) -> ApiResult<Response> {
    let (switch_id, targets) = node.cleanup_targets().await?;
    Ok(Json(CleanupTargets { switch_id, targets }).into_response())
}

/// `POST /cleanup`.
pub(super) async fn cleanup(
    Live(node): Live,
    ApiJson(body): ApiJson<CleanupRequest>,
) -> ApiResult<Response> {
    let (id, report) = node.cleanup(body.options()).await?;
    Ok(Json(CleanupReportDoc::new(&id, &report)).into_response())
}

/// `POST /close-client/{name}`.
pub(super) async fn close_client(
    Live(node): Live,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    checked_name(&name)?;
    node.storage().close_client(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `POST /rollback`.
pub(super) async fn rollback(Live(node): Live) -> ApiResult<Response> {
    let status = node.rollback().await?;
    Ok(Json(SwitchStatusDoc::from(status)).into_response())
}

/// `POST /internal/promote-cursor`.
pub(super) async fn promote_cursor(
    Live(node): Live,
    ApiJson(body): ApiJson<PromoteCursorRequest>,
) -> ApiResult<Response> {
    let outcome = node.serve_cursor_promotion(&body.into()).await?;
    Ok(Json(PromoteCursorResponse::from(outcome)).into_response())
}

/// `GET /metrics`: every metric, in OpenMetrics when the client asks for it
/// (Prometheus does), else in the classic Prometheus text format.
pub(super) async fn metrics(Live(node): Live, headers: axum::http::HeaderMap) -> Response {
    let body = super::exposition::render(&node).await;
    let (content_type, body) = bkswitch_metrics_text::negotiate(
        headers
            .get_all(axum::http::header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok()),
        body,
    );
    ([(axum::http::header::CONTENT_TYPE, content_type)], body).into_response()
}

/// `GET /overrides`: every per-prefix override with its canary's status.
pub(super) async fn list_overrides(Live(node): Live) -> ApiResult<Response> {
    let list: Vec<serde_json::Value> = node
        .overrides()
        .await?
        .into_iter()
        .map(|(prefix, o, st)| {
            serde_json::json!({
                "prefix": prefix,
                "cluster": o.cluster,
                "epoch": o.epoch,
                "origin": o.origin,
                "ts": o.ts,
                "switch": st.map(SwitchStatusDoc::from),
            })
        })
        .collect();
    Ok(Json(list).into_response())
}

/// `POST /overrides`: starts the canary of a prefix.
pub(super) async fn set_override(
    Live(node): Live,
    ApiJson(body): ApiJson<crate::wire::OverrideRequest>,
) -> ApiResult<Response> {
    let status = node.set_override(&body.prefix, &body.cluster).await?;
    Ok(Json(SwitchStatusDoc::from(status)).into_response())
}

/// `POST /overrides/remove`: ends (rolls back) the canary of a prefix.
pub(super) async fn remove_override(
    Live(node): Live,
    ApiJson(body): ApiJson<crate::wire::RemoveOverrideRequest>,
) -> ApiResult<Response> {
    let status = node.remove_override(&body.prefix).await?;
    Ok(Json(SwitchStatusDoc::from(status)).into_response())
}

/// `GET /admin/v2/metadata/migration`: the current (or, after the flip, the
/// last seen) migration; 404 when there is none.
pub(super) async fn migration_status(Live(node): Live) -> ApiResult<Response> {
    match node.metadata_migration().await? {
        Some(record) => Ok(Json(node.migration_doc(&record)).into_response()),
        None => Err(crate::node::NodeError::NoMetadataMigration.into()),
    }
}

/// `POST /admin/v2/metadata/migration`: starts a migration.
pub(super) async fn start_migration(
    Live(node): Live,
    ApiJson(body): ApiJson<MigrationStartRequest>,
) -> ApiResult<Response> {
    let wipe = match &body.wipe_target {
        None | Some(WipeTarget::Flag(false)) => None,
        Some(WipeTarget::Flag(true)) => {
            // A target that may not be wiped at all says so first.
            let plan = node.plan_metadata_migration(&body.target_url).await?;
            return Err(ApiError::invalid(
                Some("wipeTarget"),
                format!(
                    "wipeTarget must name the root of `{}` that the wipe empties (here \
                     \"{}\"), not `true`: it would delete {} nodes ({}); see them with \
                     {{\"dryRun\": true}}. Nothing was written",
                    body.target_url,
                    plan.root,
                    plan.nodes(),
                    plan.entries
                        .iter()
                        .map(|e| e.path.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            ));
        }
        Some(WipeTarget::Root(root)) => Some(root.as_str()),
    };
    if body.dry_run {
        let plan = node.plan_metadata_migration(&body.target_url).await?;
        return Ok(Json(MigrationPlanDoc::new(&plan)).into_response());
    }
    let record = node
        .start_metadata_migration(&body.target_url, wipe)
        .await?;
    Ok(Json(node.migration_doc(&record)).into_response())
}

/// `POST /admin/v2/metadata/migration/abort`: aborts the current migration.
pub(super) async fn abort_migration(Live(node): Live) -> ApiResult<Response> {
    let reason = format!("by an operator through node `{}`", node.node_id());
    let record = node.abort_metadata_migration(&reason).await?;
    Ok(Json(node.migration_doc(&record)).into_response())
}
