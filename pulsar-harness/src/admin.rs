//! A small client of the broker's admin REST API (`/admin/v2/…`), for what
//! the tests need: clusters, tenants, namespaces, topics, subscriptions,
//! unloads, topic stats and PIP-188 cluster migration.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{header, Method, Request, StatusCode};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde_json::{json, Value};

use crate::HarnessError;

/// How long one admin request may take.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The prefix of the producers a broker's replicators open on the remote
/// cluster (`replicatorPrefix`): they are not the application's publishers.
pub const REPLICATOR_PREFIX: &str = "pulsar.repl";

/// An admin REST client of one broker (`http://127.0.0.1:<web port>`).
///
/// Every call is a fresh HTTP/1 connection (no pool), so one `Admin` can be
/// used from any Tokio runtime, such as the one of each `#[tokio::test]`
/// sharing a broker.
#[derive(Clone)]
pub struct Admin {
    base: String,
    client: Client<HttpConnector, Full<Bytes>>,
}

impl std::fmt::Debug for Admin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Admin").field("base", &self.base).finish()
    }
}

/// A topic's stats, as the tests read them
/// (`GET /admin/v2/persistent/{topic}/stats`, or the aggregated
/// `partitioned-stats` of a partitioned topic).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct TopicStats {
    /// The application's producers connected to the topic (`producerName`),
    /// without the replicators' ([`REPLICATOR_PREFIX`]).
    pub publishers: Vec<String>,
    /// Publishers named as replicators' producers. Pulsar 4.2.4 lists the
    /// producers of other clusters' replicators under `replication` instead
    /// ([`ReplicationStats::msg_in_count`]), so this is empty there.
    pub replicator_publishers: Vec<String>,
    /// Each subscription by name.
    pub subscriptions: BTreeMap<String, SubscriptionStats>,
    /// Replication to each remote cluster by name.
    pub replication: BTreeMap<String, ReplicationStats>,
    /// Messages published on the topic since it was loaded (`msgInCounter`).
    pub msg_in_counter: u64,
    /// The whole answer.
    pub raw: Value,
}

/// One subscription of a [`TopicStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SubscriptionStats {
    /// How many consumers are connected.
    pub consumers: usize,
    /// Messages not yet acknowledged (`msgBacklog`).
    pub msg_backlog: u64,
    /// Whether its state is replicated (`isReplicated`).
    pub replicated: bool,
    /// Its type (`Exclusive`, `Failover`, …) when a consumer set it.
    pub kind: Option<String>,
}

/// Replication to one remote cluster in a [`TopicStats`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ReplicationStats {
    /// Messages not yet replicated (`replicationBacklog`).
    pub backlog: u64,
    /// Whether the replicator's producer is connected (`connected`).
    pub connected: bool,
    /// Messages received from that cluster's replicator (`msgInCount`).
    pub msg_in_count: u64,
    /// Messages replicated to that cluster (`msgOutCount`).
    pub msg_out_count: u64,
}

/// A partitioned topic's stats
/// (`GET /admin/v2/persistent/{topic}/partitioned-stats?perPartition=true`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PartitionedStats {
    /// The partitions' stats added up, as Pulsar adds them: counters are
    /// sums, but the publishers and each subscription's consumers are merged
    /// position by position (a producer or consumer of the partitioned topic
    /// counts once, without its name).
    pub total: TopicStats,
    /// Each partition's stats by partition name (`…-partition-N`).
    pub partitions: BTreeMap<String, TopicStats>,
}

impl TopicStats {
    /// Reads the JSON a broker answers.
    pub fn from_json(raw: Value) -> TopicStats {
        let mut stats = TopicStats {
            msg_in_counter: raw["msgInCounter"].as_u64().unwrap_or(0),
            ..TopicStats::default()
        };
        for publisher in raw["publishers"].as_array().into_iter().flatten() {
            let name = publisher["producerName"].as_str().unwrap_or("").to_owned();
            if name.starts_with(REPLICATOR_PREFIX) {
                stats.replicator_publishers.push(name);
            } else {
                stats.publishers.push(name);
            }
        }
        for (name, sub) in raw["subscriptions"].as_object().into_iter().flatten() {
            stats.subscriptions.insert(
                name.clone(),
                SubscriptionStats {
                    consumers: sub["consumers"].as_array().map_or(0, Vec::len),
                    msg_backlog: sub["msgBacklog"].as_u64().unwrap_or(0),
                    replicated: sub["isReplicated"].as_bool().unwrap_or(false),
                    kind: sub["type"].as_str().map(str::to_owned),
                },
            );
        }
        for (cluster, repl) in raw["replication"].as_object().into_iter().flatten() {
            stats.replication.insert(
                cluster.clone(),
                ReplicationStats {
                    backlog: repl["replicationBacklog"].as_u64().unwrap_or(0),
                    connected: repl["connected"].as_bool().unwrap_or(false),
                    msg_in_count: repl["msgInCount"].as_u64().unwrap_or(0),
                    msg_out_count: repl["msgOutCount"].as_u64().unwrap_or(0),
                },
            );
        }
        stats.raw = raw;
        stats
    }

    /// How many consumers subscription `name` has (0 when it does not exist).
    pub fn consumers(&self, name: &str) -> usize {
        self.subscriptions.get(name).map_or(0, |s| s.consumers)
    }
}

/// `persistent://t/ns/x` or `t/ns/x` as the admin API's path, `t/ns/x`.
pub(crate) fn topic_path(topic: &str) -> Result<String, HarnessError> {
    let path = topic.strip_prefix("persistent://").unwrap_or(topic);
    if path.contains("://") || path.split('/').count() != 3 || path.split('/').any(str::is_empty) {
        return Err(HarnessError::new(format!(
            "`{topic}` is not a persistent topic name (persistent://tenant/namespace/topic)"
        )));
    }
    Ok(path.to_owned())
}

impl Admin {
    /// A client of the broker whose web service is `http_url`
    /// (`http://127.0.0.1:<port>`).
    pub fn new(http_url: &str) -> Admin {
        Admin {
            base: http_url.trim_end_matches('/').to_owned(),
            client: Client::builder(TokioExecutor::new())
                .pool_max_idle_per_host(0)
                .build_http(),
        }
    }

    /// The broker's web service URL.
    pub fn url(&self) -> &str {
        &self.base
    }

    /// Sends a request (`path` from the root, such as
    /// `/admin/v2/clusters`; `body` as JSON) and returns the status and the
    /// body, whatever the status. Follows up to 3 redirects.
    ///
    /// # Errors
    ///
    /// When the broker cannot be reached or does not answer within
    /// [`REQUEST_TIMEOUT`].
    pub async fn request(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<(StatusCode, Bytes), HarnessError> {
        let mut url = format!("{}{path}", self.base);
        for _ in 0..4 {
            let mut builder = Request::builder().method(method.clone()).uri(&url);
            let payload = match body {
                Some(value) => {
                    builder = builder.header(header::CONTENT_TYPE, "application/json");
                    Bytes::from(value.to_string())
                }
                None => Bytes::new(),
            };
            let request = builder
                .body(Full::new(payload))
                .map_err(|e| HarnessError::new(format!("bad request {method} {url}: {e}")))?;
            let call = async {
                let response = self
                    .client
                    .request(request)
                    .await
                    .map_err(|e| e.to_string())?;
                let status = response.status();
                let location = response
                    .headers()
                    .get(header::LOCATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let bytes = response
                    .into_body()
                    .collect()
                    .await
                    .map_err(|e| e.to_string())?
                    .to_bytes();
                Ok::<_, String>((status, location, bytes))
            };
            let (status, location, bytes) = tokio::time::timeout(REQUEST_TIMEOUT, call)
                .await
                .map_err(|_| {
                    HarnessError::new(format!(
                        "{method} {url}: no answer within {REQUEST_TIMEOUT:?}"
                    ))
                })?
                .map_err(|e| HarnessError::new(format!("{method} {url}: {e}")))?;
            match location {
                Some(next) if status.is_redirection() => url = next,
                _ => return Ok((status, bytes)),
            }
        }
        Err(HarnessError::new(format!(
            "{method} {url}: too many redirects"
        )))
    }

    /// Sends a request and fails unless the status is a success (or one of
    /// `also_ok`); returns the body as JSON (`null` when empty).
    async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<&Value>,
        also_ok: &[StatusCode],
    ) -> Result<Value, HarnessError> {
        let (status, bytes) = self.request(method.clone(), path, body).await?;
        if !(status.is_success() || also_ok.contains(&status)) {
            return Err(HarnessError::with_status(
                format!(
                    "{method} {}{path}: {status}: {}",
                    self.base,
                    String::from_utf8_lossy(&bytes)
                ),
                status.as_u16(),
            ));
        }
        if bytes.is_empty() || !status.is_success() {
            return Ok(Value::Null);
        }
        Ok(serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned())))
    }

    /// `GET path` as JSON.
    ///
    /// # Errors
    ///
    /// When the request fails or the status is not a success.
    pub async fn get(&self, path: &str) -> Result<Value, HarnessError> {
        self.call(Method::GET, path, None, &[]).await
    }

    /// The clusters this broker's configuration store knows.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn clusters(&self) -> Result<Vec<String>, HarnessError> {
        let value = self.get("/admin/v2/clusters").await?;
        Ok(value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect())
    }

    /// Registers cluster `name` with its web service and broker service URLs
    /// (`PUT /admin/v2/clusters/{name}`); updates it when it exists.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn register_cluster(
        &self,
        name: &str,
        http_url: &str,
        broker_url: &str,
    ) -> Result<(), HarnessError> {
        let body = json!({ "serviceUrl": http_url, "brokerServiceUrl": broker_url });
        self.create_or_update(&format!("/admin/v2/clusters/{name}"), &body)
            .await
    }

    /// Creates tenant `tenant` allowed on `clusters`, or sets its clusters
    /// when it exists.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn create_tenant(&self, tenant: &str, clusters: &[&str]) -> Result<(), HarnessError> {
        let body = json!({ "adminRoles": [], "allowedClusters": clusters });
        self.create_or_update(&format!("/admin/v2/tenants/{tenant}"), &body)
            .await
    }

    /// `PUT path`, and `POST path` (an update) when that answers 409.
    async fn create_or_update(&self, path: &str, body: &Value) -> Result<(), HarnessError> {
        let (status, bytes) = self.request(Method::PUT, path, Some(body)).await?;
        if status == StatusCode::CONFLICT {
            self.call(Method::POST, path, Some(body), &[]).await?;
        } else if !status.is_success() {
            return Err(HarnessError::with_status(
                format!(
                    "PUT {}{path}: {status}: {}",
                    self.base,
                    String::from_utf8_lossy(&bytes)
                ),
                status.as_u16(),
            ));
        }
        Ok(())
    }

    /// Creates namespace `namespace` (`tenant/ns`); an existing one is fine.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn create_namespace(&self, namespace: &str) -> Result<(), HarnessError> {
        let path = format!("/admin/v2/namespaces/{namespace}");
        self.call(Method::PUT, &path, None, &[StatusCode::CONFLICT])
            .await?;
        Ok(())
    }

    /// Sets the clusters `namespace`'s topics are replicated to
    /// (`POST /admin/v2/namespaces/{ns}/replication`).
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn set_replication(
        &self,
        namespace: &str,
        clusters: &[&str],
    ) -> Result<(), HarnessError> {
        let path = format!("/admin/v2/namespaces/{namespace}/replication");
        self.call(Method::POST, &path, Some(&json!(clusters)), &[])
            .await?;
        Ok(())
    }

    /// The clusters `namespace` replicates to.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn replication(&self, namespace: &str) -> Result<Vec<String>, HarnessError> {
        let value = self
            .get(&format!("/admin/v2/namespaces/{namespace}/replication"))
            .await?;
        Ok(value
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect())
    }

    /// Creates a non-partitioned topic; an existing one is fine.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn create_topic(&self, topic: &str) -> Result<(), HarnessError> {
        let path = format!("/admin/v2/persistent/{}", topic_path(topic)?);
        self.call(Method::PUT, &path, None, &[StatusCode::CONFLICT])
            .await?;
        Ok(())
    }

    /// Creates a partitioned topic of `partitions` partitions; an existing one
    /// is fine.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn create_partitioned_topic(
        &self,
        topic: &str,
        partitions: u32,
    ) -> Result<(), HarnessError> {
        let path = format!("/admin/v2/persistent/{}/partitions", topic_path(topic)?);
        self.call(
            Method::PUT,
            &path,
            Some(&json!(partitions)),
            &[StatusCode::CONFLICT],
        )
        .await?;
        Ok(())
    }

    /// Creates subscription `subscription` on `topic` (every partition of a
    /// partitioned one) at the earliest message, with its state replicated
    /// to the other clusters when `replicated`; an existing one is fine.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn create_subscription(
        &self,
        topic: &str,
        subscription: &str,
        replicated: bool,
    ) -> Result<(), HarnessError> {
        let path = format!(
            "/admin/v2/persistent/{}/subscription/{subscription}?replicated={replicated}",
            topic_path(topic)?
        );
        let earliest = json!({ "ledgerId": -1, "entryId": -1, "partitionIndex": -1 });
        self.call(Method::PUT, &path, Some(&earliest), &[StatusCode::CONFLICT])
            .await?;
        Ok(())
    }

    /// Unloads `topic` from its broker (`PUT …/unload`): the broker closes
    /// it, its producers and consumers are disconnected and look it up again.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn unload(&self, topic: &str) -> Result<(), HarnessError> {
        let path = format!("/admin/v2/persistent/{}/unload", topic_path(topic)?);
        self.call(Method::PUT, &path, None, &[]).await?;
        Ok(())
    }

    /// The stats of a non-partitioned topic (or of one partition,
    /// `…-partition-N`).
    ///
    /// # Errors
    ///
    /// When the request fails (404 when the topic is not loaded and does not
    /// exist).
    pub async fn topic_stats(&self, topic: &str) -> Result<TopicStats, HarnessError> {
        let path = format!("/admin/v2/persistent/{}/stats", topic_path(topic)?);
        Ok(TopicStats::from_json(self.get(&path).await?))
    }

    /// The stats of a partitioned topic: added up, and of each partition.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn partitioned_stats(&self, topic: &str) -> Result<PartitionedStats, HarnessError> {
        let path = format!(
            "/admin/v2/persistent/{}/partitioned-stats?perPartition=true",
            topic_path(topic)?
        );
        let mut raw = self.get(&path).await?;
        let partitions = match raw.get_mut("partitions").map(Value::take) {
            Some(Value::Object(map)) => map
                .into_iter()
                .map(|(name, stats)| (name, TopicStats::from_json(stats)))
                .collect(),
            _ => BTreeMap::new(),
        };
        Ok(PartitionedStats {
            total: TopicStats::from_json(raw),
            partitions,
        })
    }

    /// The payload of the `position`-th message (from 1) after subscription
    /// `subscription`'s position on `topic`, without moving it
    /// (`GET …/subscription/{sub}/position/{n}`).
    ///
    /// # Errors
    ///
    /// When the request fails (404 when there is no such message).
    pub async fn peek(
        &self,
        topic: &str,
        subscription: &str,
        position: u32,
    ) -> Result<Bytes, HarnessError> {
        let path = format!(
            "/admin/v2/persistent/{}/subscription/{subscription}/position/{position}",
            topic_path(topic)?
        );
        let (status, bytes) = self.request(Method::GET, &path, None).await?;
        if status.is_success() {
            Ok(bytes)
        } else {
            Err(HarnessError::with_status(
                format!(
                    "GET {}{path}: {status}: {}",
                    self.base,
                    String::from_utf8_lossy(&bytes)
                ),
                status.as_u16(),
            ))
        }
    }

    /// The broker that owns `topic`, by an HTTP lookup
    /// (`GET /lookup/v2/topic/persistent/{topic}`): its `brokerUrl`.
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn lookup(&self, topic: &str) -> Result<String, HarnessError> {
        let path = format!("/lookup/v2/topic/persistent/{}", topic_path(topic)?);
        let value = self.get(&path).await?;
        value["brokerUrl"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| HarnessError::new(format!("lookup of {topic} answered {value}")))
    }

    /// Marks cluster `cluster` as migrated to the cluster at `http_url` /
    /// `broker_url` (PIP-188:
    /// `POST /admin/v2/clusters/{cluster}/migrate?migrated=true`). The
    /// brokers act on it only when `clusterMigrationCheckDurationSeconds` is
    /// above 0 (see [`StandaloneOptions::conf`](crate::StandaloneOptions::conf)).
    ///
    /// # Errors
    ///
    /// When the request fails.
    pub async fn cluster_migrate(
        &self,
        cluster: &str,
        http_url: &str,
        broker_url: &str,
    ) -> Result<(), HarnessError> {
        let path = format!("/admin/v2/clusters/{cluster}/migrate?migrated=true");
        let body = json!({ "serviceUrl": http_url, "brokerServiceUrl": broker_url });
        self.call(Method::POST, &path, Some(&body), &[]).await?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_paths() {
        assert_eq!(topic_path("persistent://geo/ns/t").unwrap(), "geo/ns/t");
        assert_eq!(topic_path("geo/ns/t").unwrap(), "geo/ns/t");
        assert!(topic_path("non-persistent://geo/ns/t").is_err());
        assert!(topic_path("geo/t").is_err());
        assert!(topic_path("geo//t").is_err());
    }

    #[test]
    fn stats_separate_replicators_from_publishers() {
        let stats = TopicStats::from_json(json!({
            "msgInCounter": 12,
            "publishers": [
                { "producerName": "cluster-a-0-1" },
                { "producerName": "pulsar.repl.cluster-b-->cluster-a" }
            ],
            "subscriptions": {
                "s": { "consumers": [{}, {}], "msgBacklog": 3, "isReplicated": true, "type": "Failover" }
            },
            "replication": { "cluster-b": { "replicationBacklog": 5, "connected": true } }
        }));
        assert_eq!(stats.publishers, ["cluster-a-0-1"]);
        assert_eq!(stats.replicator_publishers.len(), 1);
        assert_eq!(stats.consumers("s"), 2);
        assert_eq!(stats.consumers("missing"), 0);
        assert_eq!(
            stats.subscriptions["s"],
            SubscriptionStats {
                consumers: 2,
                msg_backlog: 3,
                replicated: true,
                kind: Some("Failover".into())
            }
        );
        assert_eq!(
            stats.replication["cluster-b"],
            ReplicationStats {
                backlog: 5,
                connected: true,
                msg_in_count: 0,
                msg_out_count: 0
            }
        );
        assert_eq!(stats.msg_in_counter, 12);
    }
}
