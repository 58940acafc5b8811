//! The JSON records of the registry ([formats §3](bkswitch_docs::formats)).

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// Status of a registered cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "UPPERCASE")]
pub enum ClusterStatus {
    /// The cluster new ledgers are created on; exactly one ([I12](bkswitch_docs::invariants::I12)).
    Active,
    /// Registered, not in use; may become the switch target.
    Standby,
    /// Left behind by a switch; never the target again.
    Deprecated,
}

/// `<root>/<name>` = `{"name","metadataServiceUri","status"}`; unknown fields
/// are kept in `extra` and written back on every rewrite.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterRecord {
    /// The cluster name (equals the node name).
    pub name: String,
    /// The BookKeeper metadata-service URI, as registered.
    pub metadata_service_uri: String,
    /// The cluster's status.
    pub status: ClusterStatus,
    /// Fields written by others, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `<root>/bootstrap` = `{"bootstrapClusterName","recordedAt"}`, written once ([I17](bkswitch_docs::invariants::I17)).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BootstrapMarker {
    /// The cluster the broker first ran on: the legacy fallback for unstamped
    /// ledgers.
    pub bootstrap_cluster_name: String,
    /// When the marker was written, milliseconds since the Unix epoch.
    pub recorded_at: i64,
    /// Fields written by others, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `<root>/switch-target` = `{"target","origin","epoch","ts"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SwitchDirective {
    /// The cluster to switch to.
    pub target: String,
    /// The node that asked for the switch and runs the orchestrator; `None` →
    /// leader election picks one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// Strictly increasing with every new directive.
    pub epoch: i64,
    /// When the directive was written, milliseconds since the Unix epoch.
    pub ts: i64,
    /// Fields written by others, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `<root>/active`: the single source of truth for which cluster is ACTIVE
/// (see [`Registry::promote_active`](crate::Registry::promote_active)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ActiveMarker {
    #[serde(default)]
    pub(crate) active: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) pending: Option<Transition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Transition {
    #[serde(default)]
    pub(crate) from: Option<String>,
    pub(crate) to: String,
}

/// `<root>/uri-index/<encoded key>`: which cluster holds a URI index key (see
/// [`ClusterUri::index_keys`](crate::ClusterUri::index_keys)).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct UriIndexEntry {
    pub(crate) cluster: String,
    pub(crate) metadata_service_uri: String,
}
