//! The bodies operators send, and the answer of `POST /read-mode`.

use bkswitch_bk_router::ReadMode;
use bkswitch_registry::ClusterStatus;
use serde::{Deserialize, Serialize};

/// Body of `POST /{name}`: register a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterRequest {
    /// The cluster's BookKeeper metadata-service URI.
    pub metadata_service_uri: String,
    /// The status to register with; `None` → `STANDBY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterStatus>,
}

/// Body of `POST /switch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwitchRequest {
    /// The cluster to switch to.
    pub target: String,
}

/// Body of `POST /read-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadModeRequest {
    /// `DUAL_READ`, `NEW_CLUSTER_ONLY` or `OLD_CLUSTER_ONLY`.
    #[serde(with = "read_mode_serde")]
    pub mode: ReadMode,
}

/// Answer of `POST /read-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadModeResponse {
    /// The read mode now in force.
    #[serde(with = "read_mode_serde")]
    pub read_mode: ReadMode,
}

/// Body of `POST /cleanup`; every field is optional on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CleanupRequest {
    /// Only report what would be deleted (default `true`).
    pub dry_run: bool,
    /// Only delete ledgers on this cluster (`None`: every old cluster).
    pub src_cluster_filter: Option<String>,
    /// Delete at most this many ledgers; `0` = no limit.
    pub max_deletions: u64,
    /// Delete even inside the rollback window (which ends the window).
    pub force: bool,
}

impl CleanupRequest {
    /// The coordinator's cleanup options this request asks for
    /// (`maxDeletions` 0: no limit).
    pub fn options(&self) -> bkswitch_switch_orchestrator::CleanupOptions {
        bkswitch_switch_orchestrator::CleanupOptions {
            dry_run: self.dry_run,
            src_cluster_filter: self.src_cluster_filter.clone(),
            max_deletions: match self.max_deletions {
                0 => None,
                n => Some(usize::try_from(n).unwrap_or(usize::MAX)),
            },
            force: self.force,
        }
    }
}

impl Default for CleanupRequest {
    /// A dry run over every old cluster, no limit, no force.
    fn default() -> Self {
        CleanupRequest {
            dry_run: true,
            src_cluster_filter: None,
            max_deletions: 0,
            force: false,
        }
    }
}

/// Body of `POST /rollback` (`{}`; the body itself is optional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {}

/// Serde of [`ReadMode`] by its operator-facing name.
mod read_mode_serde {
    use bkswitch_bk_router::ReadMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(mode: &ReadMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(mode.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ReadMode, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|_| {
            serde::de::Error::custom(format!(
                "unknown read mode '{s}'; expected DUAL_READ, NEW_CLUSTER_ONLY or OLD_CLUSTER_ONLY"
            ))
        })
    }
}

/// Body of `POST /overrides`: start the canary of a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct OverrideRequest {
    /// The managed-ledger prefix (`tenant/namespace/` or a longer topic
    /// prefix).
    pub prefix: String,
    /// The cluster its new ledgers are created on.
    pub cluster: String,
}

/// Body of `POST /overrides/remove`: end (roll back) the canary of a prefix.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RemoveOverrideRequest {
    /// The prefix.
    pub prefix: String,
}
