//! The Pulsar routing endpoints, under [`PULSAR_PATH`](crate::wire::PULSAR_PATH):
//! clusters, routes (and why a topic goes where it goes), the live lookup
//! proxies, and topic moves. Bad input is refused before anything is
//! written (the library checks every change against the table it replaces).

use axum::extract::{Path, Query};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use bkswitch_topic_routes::{PulsarCluster, RoutesError};
use bkswitch_topic_switch::{Plan, SwitchError};
use serde::Deserialize;

use super::error::ApiError;
use super::extract::{ApiJson, Live};
use crate::wire::{PulsarClusterRequest, RemoveRouteRequest, RouteRequest, TopicSwitchRequest};

type ApiResult<T> = Result<T, ApiError>;

impl From<RoutesError> for ApiError {
    fn from(e: RoutesError) -> ApiError {
        let message = e.to_string();
        match e {
            RoutesError::InvalidClusterName { .. } => ApiError::invalid(Some("name"), message),
            RoutesError::InvalidUrl { field, .. } => ApiError::invalid(Some(field), message),
            RoutesError::InvalidRoute { .. } => ApiError::invalid(Some("route"), message),
            RoutesError::InvalidTopic { .. } => ApiError::invalid(Some("topic"), message),
            RoutesError::InvalidProxyId { .. } => ApiError::invalid(None, message),
            RoutesError::UnknownCluster { .. } | RoutesError::UnknownRoute { .. } => {
                ApiError::not_found(message)
            }
            RoutesError::RouteToUnknownCluster { .. } => {
                ApiError::invalid(Some("cluster"), message)
            }
            RoutesError::ClusterExists { .. }
            | RoutesError::ClusterInUse { .. }
            | RoutesError::Conflict { .. }
            | RoutesError::NotAcknowledged { .. } => ApiError::conflict(message),
            RoutesError::Corrupt { .. } => ApiError::internal(message),
            _ => ApiError::unavailable(message),
        }
    }
}

impl From<SwitchError> for ApiError {
    fn from(e: SwitchError) -> ApiError {
        let message = e.to_string();
        match e {
            SwitchError::Refused { reports } => ApiError::conflict(message)
                .with_details(serde_json::to_value(reports).unwrap_or_default()),
            SwitchError::AlreadyRunning { .. }
            | SwitchError::AbortRefused { .. }
            | SwitchError::LeaseHeld { .. }
            | SwitchError::LostOwnership { .. } => ApiError::conflict(message),
            SwitchError::NoSwitch => ApiError::not_found(message),
            SwitchError::Invalid(_) => ApiError::invalid(None, message),
            SwitchError::Routes(e) => e.into(),
            SwitchError::Corrupt { .. } => ApiError::internal(message),
            _ => ApiError::unavailable(message),
        }
    }
}

/// `GET /clusters`.
pub(super) async fn clusters(Live(node): Live) -> ApiResult<Response> {
    Ok(Json(node.pulsar_table().await?.clusters).into_response())
}

/// `PUT /clusters/{name}`.
pub(super) async fn put_cluster(
    Live(node): Live,
    Path(name): Path<String>,
    ApiJson(body): ApiJson<PulsarClusterRequest>,
) -> ApiResult<Response> {
    let cluster = PulsarCluster {
        admin_url: body
            .admin_url
            .unwrap_or_else(|| body.web_service_url.clone()),
        name: name.clone(),
        service_url: body.service_url,
        service_url_tls: body.service_url_tls,
        web_service_url: body.web_service_url,
    };
    let table = node.put_pulsar_cluster(cluster).await?;
    Ok(Json(&table.clusters[&name]).into_response())
}

/// `DELETE /clusters/{name}`.
pub(super) async fn delete_cluster(
    Live(node): Live,
    Path(name): Path<String>,
) -> ApiResult<Response> {
    node.pulsar_routes().unregister_cluster(&name).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// `GET /routes`.
pub(super) async fn routes(Live(node): Live) -> ApiResult<Response> {
    let table = node.pulsar_table().await?;
    Ok(
        Json(serde_json::json!({ "version": table.version, "routes": table.routes }))
            .into_response(),
    )
}

/// `PUT /routes`.
pub(super) async fn set_route(
    Live(node): Live,
    ApiJson(body): ApiJson<RouteRequest>,
) -> ApiResult<Response> {
    let table = node
        .pulsar_routes()
        .set_route(&body.route, &body.cluster)
        .await?;
    Ok(
        Json(serde_json::json!({ "version": table.version, "routes": table.routes }))
            .into_response(),
    )
}

/// `POST /routes/remove`.
pub(super) async fn remove_route(
    Live(node): Live,
    ApiJson(body): ApiJson<RemoveRouteRequest>,
) -> ApiResult<Response> {
    let table = node.pulsar_routes().remove_route(&body.route).await?;
    Ok(
        Json(serde_json::json!({ "version": table.version, "routes": table.routes }))
            .into_response(),
    )
}

#[derive(Debug, Deserialize)]
pub(super) struct ExplainQuery {
    topic: Option<String>,
}

/// `GET /explain?topic=…`.
pub(super) async fn explain(
    Live(node): Live,
    Query(q): Query<ExplainQuery>,
) -> ApiResult<Response> {
    let Some(topic) = q.topic else {
        return Err(ApiError::invalid(
            Some("topic"),
            "give the topic to explain: ?topic=persistent://tenant/ns/topic",
        ));
    };
    let table = node.pulsar_table().await?;
    match table.resolve(&topic)? {
        Some(r) => Ok(Json(serde_json::json!({
            "topic": topic,
            "cluster": r.cluster.name,
            "route": r.route.to_string(),
            "serviceUrl": r.cluster.service_url,
            "tableVersion": table.version,
        }))
        .into_response()),
        None => Err(ApiError::not_found(format!(
            "no route matches `{topic}`: set one for it, its namespace or tenant, or a default route"
        ))),
    }
}

/// `GET /proxies`.
pub(super) async fn proxies(Live(node): Live) -> ApiResult<Response> {
    Ok(Json(node.pulsar_proxies().await?).into_response())
}

/// `POST /topic-switch`.
pub(super) async fn start_switch(
    Live(node): Live,
    ApiJson(body): ApiJson<TopicSwitchRequest>,
) -> ApiResult<Response> {
    let id = body.id.unwrap_or_else(|| "topic-move".to_owned());
    let plan = Plan {
        to: body.to,
        batches: body.batches,
    };
    let record = node
        .start_topic_switch(&id, plan, body.options.unwrap_or_default())
        .await?;
    Ok(Json(record).into_response())
}

/// `GET /topic-switch`.
pub(super) async fn switch_status(Live(node): Live) -> ApiResult<Response> {
    match node.topic_switcher().status().await? {
        Some(r) => Ok(Json(r).into_response()),
        None => Err(SwitchError::NoSwitch.into()),
    }
}

/// `POST /topic-switch/rollback`.
pub(super) async fn switch_rollback(Live(node): Live) -> ApiResult<Response> {
    Ok(Json(node.rollback_topic_switch().await?).into_response())
}

/// `POST /topic-switch/abort`.
pub(super) async fn switch_abort(Live(node): Live) -> ApiResult<Response> {
    Ok(Json(node.abort_topic_switch().await?).into_response())
}
