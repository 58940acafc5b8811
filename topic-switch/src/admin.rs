//! What a topic move asks of each Pulsar cluster, through its admin REST
//! API: [`PulsarAdmin`] (a trait, so that a move can be driven against
//! anything that answers like Pulsar) and [`HttpAdmin`], Pulsar's own
//! `/admin/v2` over HTTP.

use std::collections::BTreeMap;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::Value;

/// Why an admin call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{cluster}: {what}: {reason}")]
pub struct AdminError {
    /// The cluster asked.
    pub cluster: String,
    /// The call.
    pub what: String,
    /// Why it failed (the HTTP status and Pulsar's message, or the
    /// transport error).
    pub reason: String,
    /// The HTTP status, when the cluster answered.
    pub status: Option<u16>,
}

impl AdminError {
    /// Whether the cluster answered "not found".
    pub fn is_not_found(&self) -> bool {
        self.status == Some(404)
    }
}

/// One subscription of a topic, as its cluster sees it.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubscriptionStats {
    /// Connected consumers.
    pub consumers: usize,
    /// Whether its state is replicated to the other clusters.
    pub replicated: bool,
    /// Whether it is durable.
    pub durable: bool,
    /// Messages not yet acknowledged.
    pub backlog: u64,
}

/// Replication from this cluster to another.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationStats {
    /// Messages not yet replicated.
    pub backlog: u64,
    /// Whether the replicator is connected.
    pub connected: bool,
}

/// What a move reads of one topic on one cluster (a partitioned topic's
/// partitions summed).
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TopicStats {
    /// Producers other than replicators (whose names start with
    /// `pulsar.repl.`).
    pub producers: usize,
    /// Subscriptions by name (replicator cursors excluded).
    pub subscriptions: BTreeMap<String, SubscriptionStats>,
    /// Outgoing replication by remote cluster.
    pub replication: BTreeMap<String, ReplicationStats>,
}

impl TopicStats {
    /// Connected consumers over every subscription.
    pub fn consumers(&self) -> usize {
        self.subscriptions.values().map(|s| s.consumers).sum()
    }

    /// Whether any client other than a replicator is attached.
    pub fn has_clients(&self) -> bool {
        self.producers > 0 || self.consumers() > 0
    }
}

/// One ledger of a topic's managed ledger.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerEntries {
    /// The ledger id (numbered by the cluster's BookKeeper: two clusters
    /// number theirs independently, so the same id names different data).
    pub id: u64,
    /// Entries written in it.
    pub entries: u64,
}

/// The ledgers and cursors of one managed ledger (a topic, or one partition
/// of it), from Pulsar's internal stats: what decides whether the message
/// ids of two clusters can be told apart by a client.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManagedLedgerIds {
    /// Its ledgers, oldest first; the last is the one written now.
    pub ledgers: Vec<LedgerEntries>,
    /// Each subscription's mark-delete position (ledger, entry), replicator
    /// cursors excluded.
    pub cursors: BTreeMap<String, (u64, i64)>,
}

/// Reads Pulsar's `PersistentTopicInternalStats` JSON.
pub fn parse_internal_stats(v: &Value) -> ManagedLedgerIds {
    let mut ledgers: Vec<LedgerEntries> = v
        .get("ledgers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|l| {
            Some(LedgerEntries {
                id: l.get("ledgerId")?.as_u64()?,
                entries: u64_of(l, "entries"),
            })
        })
        .collect();
    // The ledger written now reports its entries apart.
    if let Some(last) = ledgers.last_mut() {
        last.entries = last.entries.max(u64_of(v, "currentLedgerEntries"));
    }
    let cursors = v
        .get("cursors")
        .and_then(Value::as_object)
        .into_iter()
        .flatten()
        .filter(|(name, _)| !name.starts_with("pulsar.repl."))
        .filter_map(|(name, c)| {
            let (l, e) = c.get("markDeletePosition")?.as_str()?.split_once(':')?;
            Some((name.clone(), (l.parse().ok()?, e.parse().ok()?)))
        })
        .collect();
    ManagedLedgerIds { ledgers, cursors }
}

/// The admin calls a topic move makes on a cluster.
#[async_trait]
pub trait PulsarAdmin: Send + Sync + std::fmt::Debug {
    /// Answers when the cluster's admin API is up.
    async fn ping(&self) -> Result<(), AdminError>;
    /// The clusters a namespace (`tenant/ns`) replicates to.
    async fn replication_clusters(&self, namespace: &str) -> Result<Vec<String>, AdminError>;
    /// The partition count of a topic (0: not partitioned).
    async fn partitions(&self, topic: &str) -> Result<u32, AdminError>;
    /// The topic's stats; `Ok(None)` when it does not exist there.
    async fn stats(&self, topic: &str, partitions: u32) -> Result<Option<TopicStats>, AdminError>;
    /// Unloads the topic (every partition): its clients are disconnected
    /// and look it up again.
    async fn unload(&self, topic: &str) -> Result<(), AdminError>;
    /// The topics of a namespace (whole-topic names, partitioned topics
    /// once).
    async fn topics(&self, namespace: &str) -> Result<Vec<String>, AdminError>;
    /// The latest schema's type and version, `None` without schema.
    async fn schema(&self, topic: &str) -> Result<Option<(String, u64)>, AdminError>;
    /// The ledgers and cursors of the topic's managed ledgers, one per
    /// partition (one for a topic that is not partitioned); reading them
    /// loads the topic.
    async fn ledgers(
        &self,
        topic: &str,
        partitions: u32,
    ) -> Result<Vec<ManagedLedgerIds>, AdminError>;
}

/// Pulsar's admin REST API (`/admin/v2`) over HTTP.
#[derive(Debug, Clone)]
pub struct HttpAdmin {
    cluster: String,
    base: String,
    http: Client<HttpConnector, Full<Bytes>>,
    timeout: Duration,
}

/// `persistent://t/ns/x` → `persistent/t/ns/x` (the admin API's path form).
fn topic_path(topic: &str) -> String {
    topic.replacen("://", "/", 1)
}

impl HttpAdmin {
    /// The admin API of cluster `cluster` at `admin_url`
    /// (`http://host:port`).
    pub fn new(cluster: &str, admin_url: &str, timeout: Duration) -> HttpAdmin {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        HttpAdmin {
            cluster: cluster.to_owned(),
            base: admin_url.trim_end_matches('/').to_owned(),
            http: Client::builder(TokioExecutor::new()).build(connector),
            timeout,
        }
    }

    fn fail(&self, what: &str, reason: String, status: Option<u16>) -> AdminError {
        AdminError {
            cluster: self.cluster.clone(),
            what: what.to_owned(),
            reason,
            status,
        }
    }

    async fn call(&self, method: Method, path: &str, what: &str) -> Result<Value, AdminError> {
        let uri: Uri = format!("{}{path}", self.base)
            .parse()
            .map_err(|e| self.fail(what, format!("bad URL: {e}"), None))?;
        let request = hyper::Request::builder()
            .method(method)
            .uri(uri)
            .header(hyper::header::ACCEPT, "application/json")
            .body(Full::new(Bytes::new()))
            .map_err(|e| self.fail(what, e.to_string(), None))?;
        let response = tokio::time::timeout(self.timeout, self.http.request(request))
            .await
            .map_err(|_| self.fail(what, format!("no answer within {:?}", self.timeout), None))?
            .map_err(|e| self.fail(what, format!("cannot reach {}: {e}", self.base), None))?;
        let status = response.status();
        let body = tokio::time::timeout(self.timeout, response.into_body().collect())
            .await
            .map_err(|_| self.fail(what, "the answer did not complete".to_owned(), None))?
            .map_err(|e| self.fail(what, e.to_string(), None))?
            .to_bytes();
        if !status.is_success() {
            let text = String::from_utf8_lossy(&body);
            let reason = serde_json::from_slice::<Value>(&body)
                .ok()
                .and_then(|v| v.get("reason").and_then(Value::as_str).map(str::to_owned))
                .unwrap_or_else(|| text.chars().take(200).collect());
            return Err(self.fail(
                what,
                format!("HTTP {status}: {reason}"),
                Some(status.as_u16()),
            ));
        }
        if body.is_empty() || status == StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        serde_json::from_slice(&body)
            .map_err(|e| self.fail(what, format!("not JSON: {e}"), Some(status.as_u16())))
    }
}

fn u64_of(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or_default()
}

/// Reads Pulsar's `TopicStats` / `PartitionedTopicStats` JSON.
pub fn parse_stats(v: &Value) -> TopicStats {
    let producers = v
        .get("publishers")
        .and_then(Value::as_array)
        .map_or(0, |ps| {
            ps.iter()
                .filter(|p| {
                    !p.get("producerName")
                        .and_then(Value::as_str)
                        .is_some_and(|n| n.starts_with("pulsar.repl."))
                })
                .count()
        });
    let subscriptions = v
        .get("subscriptions")
        .and_then(Value::as_object)
        .map(|subs| {
            subs.iter()
                .filter(|(name, _)| !name.starts_with("pulsar.repl."))
                .map(|(name, s)| {
                    (
                        name.clone(),
                        SubscriptionStats {
                            consumers: s
                                .get("consumers")
                                .and_then(Value::as_array)
                                .map_or(0, Vec::len),
                            replicated: s
                                .get("isReplicated")
                                .and_then(Value::as_bool)
                                .unwrap_or(false),
                            durable: s.get("isDurable").and_then(Value::as_bool).unwrap_or(true),
                            backlog: u64_of(s, "msgBacklog"),
                        },
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    let replication = v
        .get("replication")
        .and_then(Value::as_object)
        .map(|rs| {
            rs.iter()
                .map(|(cluster, r)| {
                    (
                        cluster.clone(),
                        ReplicationStats {
                            backlog: u64_of(r, "replicationBacklog"),
                            connected: r.get("connected").and_then(Value::as_bool).unwrap_or(false),
                        },
                    )
                })
                .collect()
        })
        .unwrap_or_default();
    TopicStats {
        producers,
        subscriptions,
        replication,
    }
}

#[async_trait]
impl PulsarAdmin for HttpAdmin {
    async fn ping(&self) -> Result<(), AdminError> {
        self.call(Method::GET, "/admin/v2/clusters", "list clusters")
            .await
            .map(drop)
    }

    async fn replication_clusters(&self, namespace: &str) -> Result<Vec<String>, AdminError> {
        let v = self
            .call(
                Method::GET,
                &format!("/admin/v2/namespaces/{namespace}/replication"),
                &format!("read the replication clusters of {namespace}"),
            )
            .await?;
        Ok(v.as_array()
            .map(|a| {
                a.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn partitions(&self, topic: &str) -> Result<u32, AdminError> {
        let v = self
            .call(
                Method::GET,
                &format!("/admin/v2/{}/partitions", topic_path(topic)),
                &format!("read the partitions of {topic}"),
            )
            .await?;
        Ok(u32::try_from(u64_of(&v, "partitions")).unwrap_or(u32::MAX))
    }

    async fn stats(&self, topic: &str, partitions: u32) -> Result<Option<TopicStats>, AdminError> {
        let path = if partitions > 0 {
            format!("/admin/v2/{}/partitioned-stats", topic_path(topic))
        } else {
            format!("/admin/v2/{}/stats", topic_path(topic))
        };
        match self
            .call(Method::GET, &path, &format!("read the stats of {topic}"))
            .await
        {
            Ok(v) => Ok(Some(parse_stats(&v))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn unload(&self, topic: &str) -> Result<(), AdminError> {
        self.call(
            Method::PUT,
            &format!("/admin/v2/{}/unload", topic_path(topic)),
            &format!("unload {topic}"),
        )
        .await
        .map(drop)
    }

    async fn topics(&self, namespace: &str) -> Result<Vec<String>, AdminError> {
        let mut out = std::collections::BTreeSet::new();
        for domain in ["persistent", "non-persistent"] {
            let v = self
                .call(
                    Method::GET,
                    &format!("/admin/v2/{domain}/{namespace}"),
                    &format!("list the topics of {namespace}"),
                )
                .await?;
            for t in v.as_array().into_iter().flatten().filter_map(Value::as_str) {
                let whole = match t.rsplit_once("-partition-") {
                    Some((base, n)) if n.bytes().all(|b| b.is_ascii_digit()) => base,
                    _ => t,
                };
                out.insert(whole.to_owned());
            }
        }
        Ok(out.into_iter().collect())
    }

    async fn schema(&self, topic: &str) -> Result<Option<(String, u64)>, AdminError> {
        let rest = topic.split_once("://").map_or(topic, |(_, rest)| rest);
        match self
            .call(
                Method::GET,
                &format!("/admin/v2/schemas/{rest}/schema"),
                &format!("read the schema of {topic}"),
            )
            .await
        {
            Ok(v) => Ok(Some((
                v.get("type")
                    .and_then(Value::as_str)
                    .unwrap_or("NONE")
                    .to_owned(),
                u64_of(&v, "version"),
            ))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn ledgers(
        &self,
        topic: &str,
        partitions: u32,
    ) -> Result<Vec<ManagedLedgerIds>, AdminError> {
        let names: Vec<String> = if partitions == 0 {
            vec![topic.to_owned()]
        } else {
            (0..partitions)
                .map(|i| format!("{topic}-partition-{i}"))
                .collect()
        };
        let mut out = Vec::with_capacity(names.len());
        for name in names {
            let v = self
                .call(
                    Method::GET,
                    &format!("/admin/v2/{}/internalStats", topic_path(&name)),
                    &format!("read the ledgers of {name}"),
                )
                .await?;
            out.push(parse_internal_stats(&v));
        }
        Ok(out)
    }
}
