//! The one error type of the crate.

use bkswitch_metadata_store::MetadataError;

/// Result alias of the crate.
pub type Result<T, E = RoutesError> = std::result::Result<T, E>;

/// Error of every routing-table operation.
///
/// Bad input (a malformed name, URL or route, an unknown cluster, a route to
/// an unregistered cluster, unregistering a cluster a route uses) never
/// changes the store: a change is validated against the table it would be
/// written over, and the table is written whole, with compare-and-set.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum RoutesError {
    /// A cluster name breaks the name rules.
    #[error("invalid Pulsar cluster name {name:?}: {reason}. Nothing was written")]
    InvalidClusterName {
        /// The offending name.
        name: String,
        /// The broken rule.
        reason: String,
    },
    /// One of a cluster's URLs is not accepted.
    #[error(
        "invalid {field} {url:?} for Pulsar cluster `{cluster}`: {reason}. Nothing was written"
    )]
    InvalidUrl {
        /// The cluster.
        cluster: String,
        /// Which URL (`serviceUrl`, `serviceUrlTls`, `webServiceUrl`, `adminUrl`).
        field: &'static str,
        /// The offending URL.
        url: String,
        /// What is wrong and what is accepted.
        reason: String,
    },
    /// The cluster is already registered.
    #[error("Pulsar cluster `{name}` is already registered; update it or choose another name. Nothing was written")]
    ClusterExists {
        /// The registered cluster.
        name: String,
    },
    /// The cluster is not registered.
    #[error("Pulsar cluster `{name}` is not registered; list the clusters and check the name, or register it first. Nothing was written")]
    UnknownCluster {
        /// The unknown cluster.
        name: String,
    },
    /// A route points to a cluster that is not registered.
    #[error("route `{route}` points to Pulsar cluster `{cluster}`, which is not registered; register the cluster first. Nothing was written")]
    RouteToUnknownCluster {
        /// The refused route.
        route: String,
        /// The unregistered cluster.
        cluster: String,
    },
    /// Unregistering a cluster that routes still use.
    #[error("Pulsar cluster `{name}` is used by {} route(s) ({}); move or remove them first. Nothing was written", routes.len(), routes.join(", "))]
    ClusterInUse {
        /// The cluster.
        name: String,
        /// The routes that use it.
        routes: Vec<String>,
    },
    /// A route (its selector) is malformed.
    #[error("invalid route {route:?}: {reason}. Nothing was written")]
    InvalidRoute {
        /// The offending route.
        route: String,
        /// The broken rule and the accepted forms.
        reason: String,
    },
    /// A topic name is malformed.
    #[error("invalid topic name {topic:?}: {reason}")]
    InvalidTopic {
        /// The offending name.
        topic: String,
        /// The broken rule.
        reason: String,
    },
    /// Removing a route that does not exist.
    #[error("there is no route `{route}`. Nothing was written")]
    UnknownRoute {
        /// The missing route.
        route: String,
    },
    /// A proxy id breaks the name rules.
    #[error("invalid proxy id {id:?}: {reason}")]
    InvalidProxyId {
        /// The offending id.
        id: String,
        /// The broken rule.
        reason: String,
    },
    /// A stored value is not what this crate writes.
    #[error("corrupt routing metadata at {path}: {reason}")]
    Corrupt {
        /// The node.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A change would grow a shard of a sharded table past the store's
    /// largest value.
    #[error("the routing table is full: shard {shard} of {shards} would hold {bytes} bytes, over the metadata store's largest value ({limit}); remove routes, or route whole prefixes or namespaces instead of single topics. Nothing was written")]
    TableFull {
        /// The shard.
        shard: u32,
        /// The table's shard count.
        shards: u32,
        /// The shard's encoded size.
        bytes: usize,
        /// The store's largest value.
        limit: usize,
    },
    /// Concurrent writers kept winning the compare-and-set.
    #[error("the routing table kept changing under {attempts} attempts; retry")]
    Conflict {
        /// Attempts made.
        attempts: usize,
    },
    /// Some live proxies had not acknowledged the version in time.
    #[error("routing-table version {version} not acknowledged in time by: {}", lagging.iter().map(|(p, v)| format!("{p} (at {v})")).collect::<Vec<_>>().join(", "))]
    NotAcknowledged {
        /// The version waited for.
        version: u64,
        /// The proxies behind it, with the version each acknowledged.
        lagging: Vec<(String, u64)>,
    },
    /// The metadata store failed.
    #[error(transparent)]
    Metadata(#[from] MetadataError),
}
