//! Per-prefix cluster overrides (the canary: one namespace or topic prefix
//! moved first): `<root>/overrides`, one JSON node mapping each prefix to
//! the cluster new ledgers of the managed ledgers under it are created on.
//! One node, so that every change is one compare-and-set and a watcher sees
//! the whole set at once.

use std::collections::BTreeMap;

use bkswitch_metadata_store::ExpectedVersion;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::Registry;
use crate::error::{RegistryError, Result};
use crate::model::ClusterStatus;
use crate::MAX_CAS_ATTEMPTS;

/// One override: new ledgers of managed ledgers whose name starts with
/// `prefix` are created on `cluster`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PrefixOverride {
    /// The cluster.
    pub cluster: String,
    /// Strictly increasing with every change of the overrides.
    pub epoch: i64,
    /// The node that set it (and coordinates its copy), if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<String>,
    /// When it was set, milliseconds since the Unix epoch.
    pub ts: i64,
    /// Fields written by others, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// The node's value: prefix → override.
pub type PrefixOverrides = BTreeMap<String, PrefixOverride>;

/// Checks a prefix: `tenant/namespace/` or longer, no empty segment.
///
/// # Errors
///
/// [`RegistryError::InvalidName`] naming the prefix and the rule.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let bad = |reason: &str| {
        Err(RegistryError::InvalidName {
            name: prefix.to_owned(),
            reason: reason.to_owned(),
        })
    };
    if prefix.starts_with('/') || prefix.contains("//") {
        return bad(
            "a prefix is `tenant/namespace/` or longer, without a leading '/' or an empty segment",
        );
    }
    let segments = prefix.split('/').filter(|s| !s.is_empty()).count();
    if segments < 2 || (segments == 2 && !prefix.ends_with('/')) {
        return bad(
            "a prefix names at least a namespace, ending with '/' (`tenant/namespace/`), or a \
             longer topic prefix (`tenant/namespace/persistent/orders-`)",
        );
    }
    Ok(())
}

impl Registry {
    fn overrides_path(&self) -> String {
        self.path("overrides")
    }

    /// The overrides and the node's version (`None` while none was ever set).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn prefix_overrides(&self) -> Result<(PrefixOverrides, Option<i64>)> {
        Ok(match self.read(&self.overrides_path()).await? {
            Some((map, version)) => (map, Some(version)),
            None => (PrefixOverrides::new(), None),
        })
    }

    /// Sets (or replaces) the override of `prefix` to `cluster`, with one
    /// compare-and-set (retried on a concurrent change). The cluster must be
    /// registered and not DEPRECATED. Its epoch is above every override's and
    /// above `after` (the caller's last epoch for the prefix, so that a
    /// prefix set again after its removal never reuses one). Returns the
    /// override written.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidName`] for a bad prefix,
    /// [`RegistryError::NotFound`], [`RegistryError::Deprecated`] (nothing
    /// written); [`RegistryError::Conflict`], [`RegistryError::Metadata`].
    pub async fn set_prefix_override(
        &self,
        prefix: &str,
        cluster: &str,
        origin: Option<&str>,
        after: i64,
    ) -> Result<PrefixOverride> {
        validate_prefix(prefix)?;
        let Some(rec) = self.get(cluster).await? else {
            return Err(RegistryError::NotFound {
                name: cluster.to_owned(),
            });
        };
        if rec.status == ClusterStatus::Deprecated {
            return Err(RegistryError::Deprecated {
                name: cluster.to_owned(),
            });
        }
        let path = self.overrides_path();
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (mut map, version) = self.prefix_overrides().await?;
            let epoch = map.values().map(|o| o.epoch).max().unwrap_or(0).max(after) + 1;
            let written = PrefixOverride {
                cluster: cluster.to_owned(),
                epoch,
                origin: origin.map(str::to_owned),
                ts: now_ms(),
                extra: Map::new(),
            };
            map.insert(prefix.to_owned(), written.clone());
            let expected = version.map_or(ExpectedVersion::NotExists, ExpectedVersion::Exactly);
            match self.write(&path, &map, expected).await {
                Ok(_) => return Ok(written),
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(RegistryError::Conflict {
            path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// Removes the override of `prefix` (compare-and-set, retried); returns
    /// it, `None` when there was none (nothing written).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Conflict`], [`RegistryError::Metadata`].
    pub async fn remove_prefix_override(&self, prefix: &str) -> Result<Option<PrefixOverride>> {
        let path = self.overrides_path();
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (mut map, version) = self.prefix_overrides().await?;
            let (Some(removed), Some(version)) = (map.remove(prefix), version) else {
                return Ok(None);
            };
            match self
                .write(&path, &map, ExpectedVersion::Exactly(version))
                .await
            {
                Ok(_) => return Ok(Some(removed)),
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(RegistryError::Conflict {
            path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}
