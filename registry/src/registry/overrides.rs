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

/// The managed-ledger domain segments (`tenant/namespace/<domain>/topic`).
const DOMAINS: [&str; 2] = ["persistent", "non-persistent"];

/// Checks an override prefix, so that it scopes managed ledgers
/// (`tenant/namespace/<domain>/topic`) and schemas (`tenant/namespace/topic`,
/// no domain segment) alike: the tenant, namespace and domain segments are
/// whole and end with `/`; only the topic name may be partial. Accepted:
/// `tenant/ns/`, `tenant/ns/persistent/`, `tenant/ns/persistent/orders-`,
/// `tenant/ns/non-persistent/x`. Refused: `tenant` and `tenant/ns` (use
/// `tenant/ns/`), a prefix that stops inside or right at the end of the
/// domain segment (`tenant/ns/pers`, `tenant/ns/persistent`: use
/// `tenant/ns/persistent/`) and a third segment that is no domain
/// (`tenant/ns/orders-`: use `tenant/ns/persistent/orders-`). The schema ids
/// a prefix scopes are those starting with [`schema_id_prefix`].
///
/// # Errors
///
/// [`RegistryError::InvalidPrefix`] naming the prefix, the rule and the
/// prefix to use instead.
pub fn validate_prefix(prefix: &str) -> Result<()> {
    let bad = |reason: String| {
        Err(RegistryError::InvalidPrefix {
            prefix: prefix.to_owned(),
            reason,
        })
    };
    if prefix.starts_with('/') || prefix.contains("//") {
        return bad(
            "a prefix is `tenant/namespace/` or longer, without a leading '/' or an empty \
             segment"
                .to_owned(),
        );
    }
    let parts: Vec<&str> = prefix.splitn(4, '/').collect();
    match parts.as_slice() {
        [] | [_] => bad(
            "a prefix names at least a namespace, ending with '/': use `tenant/namespace/`, or a \
             topic prefix such as `tenant/namespace/persistent/orders-`"
                .to_owned(),
        ),
        [tenant, ns] => bad(format!(
            "a prefix names at least a namespace, ending with '/': use `{tenant}/{ns}/`"
        )),
        [_, _, ""] => Ok(()),
        [tenant, ns, partial] => match DOMAINS.iter().find(|d| d.starts_with(partial)) {
            Some(domain) => bad(format!(
                "it ends inside the domain segment, which schema ids do not have, so it would \
                 scope managed ledgers and schemas differently; the tenant, namespace and \
                 domain segments must be whole and end with '/': use `{tenant}/{ns}/{domain}/` \
                 (or `{tenant}/{ns}/` for the whole namespace)"
            )),
            None => bad(format!(
                "its third segment `{partial}` is no domain (`persistent` or `non-persistent`); \
                 managed-ledger names are `tenant/namespace/<domain>/topic`: use \
                 `{tenant}/{ns}/persistent/{partial}` (or `{tenant}/{ns}/` for the whole \
                 namespace)"
            )),
        },
        [tenant, ns, domain, rest] => {
            if DOMAINS.contains(domain) {
                Ok(())
            } else {
                bad(format!(
                    "its third segment `{domain}` is no domain (`persistent` or \
                     `non-persistent`); managed-ledger names are \
                     `tenant/namespace/<domain>/topic`: use \
                     `{tenant}/{ns}/persistent/{domain}/{rest}` (or `{tenant}/{ns}/` for the \
                     whole namespace)"
                ))
            }
        }
        _ => unreachable!("splitn(4) yields at most four parts"),
    }
}

/// The schema-id prefix an override prefix scopes: schema ids are
/// `tenant/namespace/topic`, without the managed ledger's domain segment,
/// which is dropped (`tenant/ns/persistent/orders-` → `tenant/ns/orders-`,
/// `tenant/ns/persistent/` → `tenant/ns/`). For a prefix that
/// [`validate_prefix`] accepts, a managed ledger is under the prefix exactly
/// when its schema id starts with this. (A schema id is shared by the
/// persistent and the non-persistent topic of one name.)
pub fn schema_id_prefix(prefix: &str) -> String {
    let mut parts: Vec<&str> = prefix.splitn(4, '/').collect();
    if parts.len() >= 3 && DOMAINS.contains(&parts[2]) {
        parts.remove(2);
        if parts.len() == 2 {
            // `tenant/ns/persistent` or `tenant/ns/persistent/`: the namespace.
            return format!("{}/{}/", parts[0], parts[1]);
        }
    }
    parts.join("/")
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
    /// [`RegistryError::InvalidPrefix`] for a bad prefix,
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
        // The overrides node exists before the first override is written,
        // so that every override write is a compare-and-set on a version,
        // which a lost write can be fenced on (see `write`).
        if self.prefix_overrides().await?.1.is_none() {
            let empty = PrefixOverrides::new();
            match self.write(&path, &empty, ExpectedVersion::NotExists).await {
                Ok(_) => {}
                Err(RegistryError::Metadata(e)) if e.is_conflict() => {}
                Err(e) => return Err(e),
            }
        }
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

#[cfg(test)]
mod tests {
    use super::{schema_id_prefix, validate_prefix};

    /// For every accepted prefix, a managed ledger is under it exactly when
    /// its schema id is under the schema-id prefix.
    #[test]
    fn accepted_prefixes_scope_managed_ledgers_and_schemas_alike() {
        let names = [
            "t/ns/persistent/orders-1",
            "t/ns/persistent/other",
            "t/ns/non-persistent/x1",
            "t/ns2/persistent/orders-1",
            "t/n/persistent/orders-1",
        ];
        for prefix in [
            "t/ns/",
            "t/ns/persistent/",
            "t/ns/persistent/orders-",
            "t/ns/non-persistent/x",
            "t/n/",
        ] {
            validate_prefix(prefix).unwrap();
            let schema_prefix = schema_id_prefix(prefix);
            for ml in names {
                let schema_id =
                    ml.replacen("/persistent/", "/", 1)
                        .replacen("/non-persistent/", "/", 1);
                let domain_ok = !prefix.contains("persistent/")
                    || ml.split('/').nth(2) == prefix.split('/').nth(2);
                assert_eq!(
                    ml.starts_with(prefix),
                    schema_id.starts_with(&schema_prefix) && domain_ok,
                    "{prefix} / {ml}"
                );
            }
        }
        assert_eq!(schema_id_prefix("t/ns/"), "t/ns/");
        assert_eq!(schema_id_prefix("t/ns/persistent/orders-"), "t/ns/orders-");
        assert_eq!(schema_id_prefix("t/ns/persistent/"), "t/ns/");
        assert_eq!(schema_id_prefix("t/ns/non-persistent/x"), "t/ns/x");
    }
}
