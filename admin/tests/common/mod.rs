//! Shared helpers of the admin tests: nodes on shared in-memory clusters, raw
//! HTTP requests and metadata-tree snapshots.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;

use bkswitch_admin::node::{Node, NodeConfig};
use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_registry::MemoryIdgenSource;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

pub const ADMIN: &str = "admin-secret";
pub const INTERNAL: &str = "internal-secret";
pub const BASE: &str = "/admin/v2/bookie-clusters";

/// Two in-memory clusters, `old` and `new` (new ids start at 1,000,000).
pub fn clusters() -> MemoryClusters {
    let clusters = MemoryClusters::new();
    clusters.get_or_create("old");
    clusters
        .get_or_create("new")
        .advance_ledger_id_to(1_000_000)
        .unwrap();
    clusters
}

pub fn node_config(
    id: &str,
    store: Arc<dyn MetadataStore>,
    clusters: &MemoryClusters,
) -> NodeConfig {
    let mut cfg = NodeConfig::new(
        id,
        store,
        Arc::new(MemoryClientFactory::with_clusters(clusters.clone())),
        "memory://old",
        ADMIN,
        INTERNAL,
    );
    cfg.cluster_name = Some("old".into());
    cfg.idgen = Some(Arc::new(MemoryIdgenSource {
        clusters: clusters.clone(),
    }));
    cfg.ledger_config = ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1)
        .with_max_entries_per_ledger(1000);
    cfg
}

pub async fn start(id: &str, store: Arc<dyn MetadataStore>, clusters: &MemoryClusters) -> Node {
    Node::start(node_config(id, store, clusters)).await.unwrap()
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

/// Every node of the metadata tree with its value and version, sorted by path.
pub async fn tree(store: &dyn MetadataStore) -> BTreeMap<String, (Vec<u8>, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec!["/".to_string()];
    while let Some(p) = stack.pop() {
        if let Ok(Some(r)) = store.get(&p).await {
            out.insert(p.clone(), (r.value, r.stat.version));
        }
        if let Ok(children) = store.children(&p).await {
            for c in children {
                stack.push(if p == "/" {
                    format!("/{c}")
                } else {
                    format!("{p}/{c}")
                });
            }
        }
    }
    out
}
