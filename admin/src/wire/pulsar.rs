//! Bodies of the Pulsar routing and topic-move endpoints, under
//! [`PULSAR_PATH`]: clusters, routes, the live lookup proxies, and topic
//! moves between Pulsar clusters. Answers are the library's own types
//! ([`RoutingTable`](bkswitch_topic_routes::RoutingTable),
//! [`SwitchRecord`](bkswitch_topic_switch::SwitchRecord)).

use serde::{Deserialize, Serialize};

/// Where the Pulsar routing endpoints live.
pub const PULSAR_PATH: &str = "/admin/v2/pulsar-routes";

/// `PUT /clusters/{name}`: a cluster's URLs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PulsarClusterRequest {
    /// `pulsar://host:port[,…]`.
    pub service_url: String,
    /// `pulsar+ssl://host:port[,…]`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_url_tls: Option<String>,
    /// `http[s]://host:port` (HTTP lookups).
    pub web_service_url: String,
    /// The admin REST API (the web service URL when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin_url: Option<String>,
}

/// `PUT /routes`: a route to a cluster.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RouteRequest {
    /// `topic:…`, `prefix:…`, `namespace:…`, `tenant:…` or `default`.
    pub route: String,
    /// A registered cluster.
    pub cluster: String,
}

/// `POST /routes/remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoveRouteRequest {
    /// The route.
    pub route: String,
}

/// `POST /topic-switch`: start a plan (and drive it on this node).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TopicSwitchRequest {
    /// The plan's id (`topic-move` when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    /// The cluster to move to.
    pub to: String,
    /// Batches of routes, in order.
    pub batches: Vec<Vec<String>>,
    /// The options (defaults when absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub options: Option<bkswitch_topic_switch::SwitchOptions>,
}
