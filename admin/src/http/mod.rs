//! The REST API of a node (axum) under [`BASE_PATH`]; the contract is `API.md`
//! next to this crate's manifest, the bodies are the [`wire`](crate::wire)
//! types.
//!
//! Every endpoint needs a bearer token: the admin token for the public ones,
//! the node-to-node token for `/internal/*` (`auth.rs`); `GET /metrics` only
//! when a metrics token is configured. Request bodies are
//! limited to [`MAX_BODY_BYTES`] and unknown JSON fields are rejected
//! (`extract.rs`). Every 4xx answer is given before anything is written to the
//! metadata store (`handlers.rs`); `error.rs` maps every library error onto
//! the error body; `exposition.rs` renders `GET /metrics`.
//!
//! The layer uses only [`Node`]'s public API, and holds the node through a
//! [`WeakNode`](crate::node::WeakNode): dropping every [`Node`] handle still
//! stops the node, its server included.

mod auth;
mod error;
pub(crate) use error::answer_of;
pub mod exposition;
mod extract;
mod handlers;
mod pulsar;
mod tls_serve;

use std::future::Future;
use std::sync::Arc;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post, put};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::node::Node;
use crate::wire::{BASE_PATH, MAX_BODY_BYTES, METRICS_PATH, MIGRATION_PATH, PULSAR_PATH};
use auth::{require_token, Token};
use handlers::*;

/// Serves the REST API of `node` on `listener` until `stop` turns `true` (or
/// its sender is dropped): over TLS with `tls`, plain HTTP without.
pub(crate) fn serve(
    listener: TcpListener,
    node: &Node,
    tls: Option<Arc<rustls::ServerConfig>>,
    mut stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let app = router(node);
    async move {
        if let Some(config) = tls {
            return tls_serve::serve_tls(listener, app, config, stop).await;
        }
        let shutdown = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(shutdown)
            .await
        {
            tracing::error!(error = %e, "admin REST server stopped");
        }
    }
}

/// The axum router of a node: public and internal endpoints, with auth.
///
/// What the node's REST server serves; tests and the nemesis call it in
/// process as a tower service (`oneshot`), without a socket. It holds the
/// node through a [`WeakNode`](crate::node::WeakNode): once every [`Node`]
/// handle is gone it answers 503.
pub fn router(node: &Node) -> Router {
    let p = |suffix: &str| format!("{BASE_PATH}{suffix}");
    let q = |suffix: &str| format!("{PULSAR_PATH}{suffix}");
    let config = node.config();
    let jwt = config
        .jwt
        .as_ref()
        .and_then(|s| crate::auth::JwtVerifier::new(s).ok())
        .map(Arc::new);
    let superusers: &[String] = config.jwt.as_ref().map_or(&[], |s| &s.superuser_roles);
    let internals: &[String] = config.jwt.as_ref().map_or(&[], |s| &s.internal_roles);
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
        .route(&p("/overrides"), get(list_overrides).post(set_override))
        .route(&p("/overrides/remove"), post(remove_override))
        .route(MIGRATION_PATH, get(migration_status).post(start_migration))
        .route(&format!("{MIGRATION_PATH}/abort"), post(abort_migration))
        .route(&q("/clusters"), get(pulsar::clusters))
        .route(
            &q("/clusters/{name}"),
            put(pulsar::put_cluster).delete(pulsar::delete_cluster),
        )
        .route(&q("/routes"), get(pulsar::routes).put(pulsar::set_route))
        .route(&q("/routes/remove"), post(pulsar::remove_route))
        .route(&q("/explain"), get(pulsar::explain))
        .route(&q("/proxies"), get(pulsar::proxies))
        .route(
            &q("/topic-switch"),
            get(pulsar::switch_status).post(pulsar::start_switch),
        )
        .route(&q("/topic-switch/rollback"), post(pulsar::switch_rollback))
        .route(&q("/topic-switch/abort"), post(pulsar::switch_abort))
        .route(
            &p("/{name}"),
            get(get_cluster).post(register).delete(unregister),
        )
        .route_layer(middleware::from_fn_with_state(
            Token::admin(&config.admin_token).with_jwt(jwt.clone(), superusers),
            require_token,
        ));
    let internal = Router::new()
        .route(&p("/internal/promote-cursor"), post(promote_cursor))
        .route_layer(middleware::from_fn_with_state(
            Token::internal(&config.internal_token).with_jwt(jwt.clone(), internals),
            require_token,
        ));
    // `GET /metrics` (outside the API's base path, where Prometheus looks)
    // needs no token unless one is configured, as in Pulsar.
    let mut metrics = Router::new().route(METRICS_PATH, get(metrics));
    if let Some(token) = &config.metrics_token {
        metrics = metrics.route_layer(middleware::from_fn_with_state(
            Token::metrics(token),
            require_token,
        ));
    }
    internal
        .merge(public)
        .merge(metrics)
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(node.downgrade())
}
