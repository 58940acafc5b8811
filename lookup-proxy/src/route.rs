//! Which cluster answers for a topic or a namespace, or why the proxy
//! refuses to say.

use bkswitch_pulsar_wire::proto::ServerError;
use bkswitch_topic_routes::{PulsarCluster, RoutingTable, TopicName};

use crate::view::Snapshot;

/// Where the proxy sends what the route table does not decide: the
/// namespaces that belong to the Pulsar installation rather than to a
/// tenant (`pulsar/system`, where the transaction coordinator's topics
/// live) go to the home cluster, whatever the routes say.
#[derive(Debug, Clone, Default)]
pub struct Home {
    /// The home cluster (a registered cluster's name), if any.
    pub cluster: Option<String>,
    /// Namespaces (`tenant/namespace`) that always go to the home cluster.
    pub namespaces: Vec<String>,
}

impl Home {
    /// Pulsar's own system namespace, `pulsar/system`, goes to `cluster`.
    pub fn new(cluster: Option<String>) -> Home {
        Home {
            cluster,
            namespaces: vec!["pulsar/system".to_owned()],
        }
    }
}

/// Why the proxy does not name a cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refusal {
    /// The error code clients get.
    pub error: ServerError,
    /// What to tell them (and the log).
    pub message: String,
}

impl Refusal {
    fn not_ready(message: String) -> Refusal {
        Refusal {
            error: ServerError::ServiceNotReady,
            message,
        }
    }
}

fn home_cluster<'a>(
    table: &'a RoutingTable,
    home: &Home,
    namespace: &str,
    what: &str,
) -> Option<Result<&'a PulsarCluster, Refusal>> {
    if !home.namespaces.iter().any(|n| n == namespace) {
        return None;
    }
    let Some(name) = &home.cluster else {
        return Some(Err(Refusal::not_ready(format!(
            "{what} is in the system namespace `{namespace}`, which goes to the home cluster, and this proxy has none: start it with a home cluster"
        ))));
    };
    Some(table.clusters.get(name).ok_or_else(|| {
        Refusal::not_ready(format!(
            "{what} goes to the home cluster `{name}`, which is not registered: register it"
        ))
    }))
}

/// The cluster that serves `topic`.
///
/// # Errors
/// A retryable `ServiceNotReady` while the proxy is closed or when no route
/// matches; `InvalidTopicName` for a malformed name.
pub fn topic_cluster<'a>(
    snapshot: &'a Snapshot,
    home: &Home,
    topic: &str,
) -> Result<&'a PulsarCluster, Refusal> {
    if let Some(reason) = &snapshot.closed {
        return Err(Refusal::not_ready(format!(
            "the lookup proxy cannot answer for `{topic}` now ({reason}); retry"
        )));
    }
    let name = TopicName::parse(topic).map_err(|e| Refusal {
        error: ServerError::InvalidTopicName,
        message: e.to_string(),
    })?;
    let table = &snapshot.table;
    if let Some(r) = home_cluster(
        table,
        home,
        &name.namespace_name(),
        &format!("topic `{topic}`"),
    ) {
        return r;
    }
    match snapshot.index.resolve(table, topic) {
        Ok(Some(r)) => Ok(r.cluster),
        Ok(None) => Err(Refusal::not_ready(format!(
            "no route matches topic `{topic}`: set a route for it, its namespace or tenant, or a default route"
        ))),
        Err(e) => Err(Refusal {
            error: ServerError::InvalidTopicName,
            message: e.to_string(),
        }),
    }
}

/// The clusters whose topics make up `namespace`'s listing.
///
/// # Errors
/// As [`topic_cluster`]; `MetadataError` for a malformed namespace name.
pub fn namespace_clusters<'a>(
    snapshot: &'a Snapshot,
    home: &Home,
    namespace: &str,
) -> Result<Vec<&'a PulsarCluster>, Refusal> {
    if let Some(reason) = &snapshot.closed {
        return Err(Refusal::not_ready(format!(
            "the lookup proxy cannot list namespace `{namespace}` now ({reason}); retry"
        )));
    }
    let table = &snapshot.table;
    if let Some(r) = home_cluster(table, home, namespace, &format!("namespace `{namespace}`")) {
        return r.map(|c| vec![c]);
    }
    let clusters = table.namespace_clusters(namespace).map_err(|e| Refusal {
        error: ServerError::MetadataError,
        message: e.to_string(),
    })?;
    if clusters.is_empty() {
        return Err(Refusal::not_ready(format!(
            "no route matches namespace `{namespace}`: set a route for it, its tenant, or a default route"
        )));
    }
    Ok(clusters)
}
