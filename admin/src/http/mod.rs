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

use std::future::Future;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::{get, post};
use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::node::Node;
use crate::wire::{BASE_PATH, MAX_BODY_BYTES, METRICS_PATH, MIGRATION_PATH};
use auth::{require_token, Token};
use handlers::*;

/// Serves the REST API of `node` on `listener` until `stop` turns `true` (or
/// its sender is dropped).
pub(crate) fn serve(
    listener: TcpListener,
    node: &Node,
    mut stop: watch::Receiver<bool>,
) -> impl Future<Output = ()> + Send + 'static {
    let app = router(node);
    async move {
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
    let config = node.config();
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
        .route(
            &p("/{name}"),
            get(get_cluster).post(register).delete(unregister),
        )
        .route_layer(middleware::from_fn_with_state(
            Token::admin(&config.admin_token),
            require_token,
        ));
    let internal = Router::new()
        .route(&p("/internal/promote-cursor"), post(promote_cursor))
        .route_layer(middleware::from_fn_with_state(
            Token::internal(&config.internal_token),
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
