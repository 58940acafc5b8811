//! Shared helpers of the admin and CLI tests (the CLI's `tests/common` uses
//! this file): nodes on shared in-memory clusters, raw HTTP requests and
//! metadata-tree snapshots.
#![allow(dead_code, unused_imports, unreachable_pub, missing_docs)]

use std::sync::Arc;

use bkswitch_admin::Node;
use bkswitch_bk_client::MemoryClusters;
use bkswitch_metadata_store::MetadataStore;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub use bkswitch_admin::testkit::{clusters, tree, ADMIN, INTERNAL};
pub use bkswitch_admin::wire::BASE_PATH as BASE;

pub async fn start(id: &str, store: Arc<dyn MetadataStore>, clusters: &MemoryClusters) -> Node {
    bkswitch_admin::testkit::start_node(id, store, clusters).await
}

/// A raw request: (status, body as JSON or string).
pub async fn raw(
    method: &str,
    url: &str,
    token: Option<&str>,
    body: Option<&[u8]>,
) -> (u16, serde_json::Value) {
    let client = Client::builder(TokioExecutor::new()).build_http::<Full<Bytes>>();
    let mut req = hyper::Request::builder().method(method).uri(url);
    if let Some(t) = token {
        req = req.header("authorization", format!("Bearer {t}"));
    }
    if body.is_some() {
        req = req.header("content-type", "application/json");
    }
    let req = req
        .body(Full::new(Bytes::copy_from_slice(body.unwrap_or_default())))
        .unwrap();
    let resp = client.request(req).await.unwrap();
    let status = resp.status().as_u16();
    let bytes = resp.into_body().collect().await.unwrap().to_bytes();
    let value = serde_json::from_slice(&bytes)
        .unwrap_or_else(|_| serde_json::Value::String(String::from_utf8_lossy(&bytes).into()));
    (status, value)
}
