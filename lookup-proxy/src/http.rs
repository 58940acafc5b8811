//! The HTTP listener: Pulsar's HTTP lookup endpoints answered with a
//! `307 Temporary Redirect` to the same path on the cluster the topic's
//! route names (Java's and C++'s HTTP lookup services follow redirects),
//! plus the proxy's own `/metrics` and `/status`.

use std::sync::Arc;

use axum::extract::{Path, State};
use axum::http::Uri;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use bkswitch_pulsar_wire::proto::ServerError;

use crate::metrics::{Listener, LookupResult};
use crate::route::{namespace_clusters, topic_cluster, Refusal};
use crate::Shared;

pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route(
            "/lookup/v2/topic/{domain}/{tenant}/{namespace}/{topic}",
            get(topic_redirect),
        )
        .route(
            "/admin/v2/{domain}/{tenant}/{namespace}/{topic}/partitions",
            get(topic_redirect),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema",
            get(schema_redirect),
        )
        .route(
            "/admin/v2/schemas/{tenant}/{namespace}/{topic}/schema/{version}",
            get(schema_redirect),
        )
        .route(
            "/admin/v2/namespaces/{tenant}/{namespace}/topics",
            get(namespace_redirect),
        )
        .route("/metrics", get(metrics))
        .route("/status", get(status))
        .with_state(shared)
}

fn refused(shared: &Shared, r: &Refusal) -> Response {
    let (status, result) = if r.error == ServerError::InvalidTopicName {
        (StatusCode::BAD_REQUEST, LookupResult::Invalid)
    } else {
        (StatusCode::SERVICE_UNAVAILABLE, LookupResult::Unavailable)
    };
    shared.metrics.lookup("", Listener::Http, result);
    let mut response = (status, Json(serde_json::json!({ "reason": r.message }))).into_response();
    if status == StatusCode::SERVICE_UNAVAILABLE {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

fn redirect(base: &str, uri: &axum::http::Uri) -> Response {
    let path = uri.path_and_query().map_or("/", |p| p.as_str());
    let location = format!("{}{path}", base.trim_end_matches('/'));
    match header::HeaderValue::from_str(&location) {
        Ok(v) => (StatusCode::TEMPORARY_REDIRECT, [(header::LOCATION, v)]).into_response(),
        Err(_) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("cannot redirect to {location}"),
        )
            .into_response(),
    }
}

async fn redirect_topic(shared: &Shared, topic: &str, uri: &axum::http::Uri) -> Response {
    let serving = shared.view.serving().await;
    match topic_cluster(&serving.snapshot, &shared.home, topic) {
        Ok(cluster) => {
            shared
                .metrics
                .lookup(&cluster.name, Listener::Http, LookupResult::Redirect);
            redirect(&cluster.web_service_url, uri)
        }
        Err(r) => refused(shared, &r),
    }
}

async fn topic_redirect(
    State(shared): State<Arc<Shared>>,
    Path((domain, tenant, namespace, topic)): Path<(String, String, String, String)>,
    uri: Uri,
) -> Response {
    redirect_topic(
        &shared,
        &format!("{domain}://{tenant}/{namespace}/{topic}"),
        &uri,
    )
    .await
}

/// The schema endpoints, with or without a version: the topic is
/// persistent (schemas are).
async fn schema_redirect(
    State(shared): State<Arc<Shared>>,
    Path(p): Path<std::collections::HashMap<String, String>>,
    uri: Uri,
) -> Response {
    let part = |k: &str| p.get(k).map_or("", String::as_str);
    let topic = format!(
        "persistent://{}/{}/{}",
        part("tenant"),
        part("namespace"),
        part("topic")
    );
    redirect_topic(&shared, &topic, &uri).await
}

async fn namespace_redirect(
    State(shared): State<Arc<Shared>>,
    Path((tenant, namespace)): Path<(String, String)>,
    uri: Uri,
) -> Response {
    let snapshot = shared.view.snapshot();
    let namespace = format!("{tenant}/{namespace}");
    match namespace_clusters(&snapshot, &shared.home, &namespace) {
        Ok(clusters) if clusters.len() == 1 => redirect(&clusters[0].web_service_url, &uri),
        Ok(clusters) => (
            StatusCode::CONFLICT,
            Json(serde_json::json!({
                "reason": format!(
                    "namespace `{namespace}` is split across clusters {}: list it with the binary protocol (the proxy merges the lists there) or on each cluster",
                    clusters.iter().map(|c| c.name.as_str()).collect::<Vec<_>>().join(", ")
                )
            })),
        )
            .into_response(),
        Err(r) => refused(&shared, &r),
    }
}

/// `GET /metrics`: OpenMetrics when asked for (Prometheus does), else the
/// classic Prometheus text format.
async fn metrics(State(shared): State<Arc<Shared>>, headers: header::HeaderMap) -> Response {
    let (content_type, body) = bkswitch_metrics_text::negotiate(
        headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|v| v.to_str().ok()),
        shared.metrics.encode(),
    );
    ([(header::CONTENT_TYPE, content_type)], body).into_response()
}

async fn status(State(shared): State<Arc<Shared>>) -> Response {
    let snapshot = shared.view.snapshot();
    Json(serde_json::json!({
        "proxyId": shared.proxy_id,
        "tableVersion": snapshot.table.version,
        "acknowledged": shared.view.acknowledged(),
        "serving": snapshot.closed.is_none(),
        "closedReason": snapshot.closed,
        "clusters": snapshot.table.clusters.keys().collect::<Vec<_>>(),
        "routes": snapshot.table.routes.len(),
    }))
    .into_response()
}
