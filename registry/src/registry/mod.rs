//! Cluster records, the single-ACTIVE protocol, the bootstrap marker and the
//! switch directive.

use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bkswitch_metadata_store::{
    ErrorKind, ExpectedVersion, GetResult, MetadataStore, MetadataStoreExt,
};
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Map;

use crate::error::{RegistryError, Result};
use crate::model::{
    ActiveMarker, BootstrapMarker, ClusterRecord, ClusterStatus, SwitchDirective, Transition,
    UriIndexEntry,
};
use bkswitch_bk_client::ClusterUri;

mod active;
mod markers;
mod overrides;
mod register;

pub use overrides::{schema_id_prefix, validate_prefix, PrefixOverride, PrefixOverrides};

/// Default registry root in the broker metadata store.
pub const DEFAULT_ROOT: &str = "/admin/bookie-clusters";

/// Child names of the root that are not cluster records.
pub const RESERVED_NAMES: &[&str] = &[
    "switch-target",
    "bootstrap",
    "orchestrator",
    "leader",
    "active",
    "precheck",
    "status",
    "overrides",
    "canaries",
    URI_INDEX,
    // Path segments of the admin REST API (`/admin/v2/bookie-clusters/<segment>`):
    // a cluster with one of these names could not be addressed.
    "switch",
    "read-mode",
    "cleanup",
    "cleanup-targets",
    "close-client",
    "rollback",
    "internal",
];

/// Child of the root holding the URI index (one node per
/// [`ClusterUri::index_keys`] key, see [`Registry::register`]).
pub const URI_INDEX: &str = "uri-index";

/// How long [`Registry::register`] waits for the record of a cluster whose URI
/// index node it meets while that record is missing (a registration in flight
/// writes it within a few round trips) before it removes the node as left by a
/// crash.
pub const STALE_INDEX_GRACE: Duration = Duration::from_secs(2);

const STALE_INDEX_POLL: Duration = Duration::from_millis(25);

/// Compare-and-set attempts before [`RegistryError::Conflict`].
pub const MAX_CAS_ATTEMPTS: usize = 16;

/// Checks a cluster name: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`, not one of
/// [`RESERVED_NAMES`].
///
/// # Errors
///
/// [`RegistryError::InvalidName`] with the broken rule.
pub fn validate_name(name: &str) -> Result<()> {
    let fail = |reason: &str| RegistryError::InvalidName {
        name: name.to_owned(),
        reason: format!("{reason}; a name matches [A-Za-z0-9][A-Za-z0-9._-]{{0,63}}"),
    };
    let mut chars = name.chars();
    match chars.next() {
        None => return Err(fail("it is empty")),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return Err(fail("it must start with a letter or digit"))
        }
        Some(_) => {}
    }
    if name.len() > 64 {
        return Err(fail("it is longer than 64 characters"));
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        return Err(fail("it may only use letters, digits, `.`, `_`, `-`"));
    }
    if RESERVED_NAMES.contains(&name) {
        return Err(RegistryError::InvalidName {
            name: name.to_owned(),
            reason: format!(
                "it is reserved (reserved names: {})",
                RESERVED_NAMES.join(", ")
            ),
        });
    }
    Ok(())
}

pub(crate) fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// The registry of BookKeeper clusters, on any [`MetadataStore`].
///
/// # Single ACTIVE ([I12](bkswitch_docs::invariants::I12))
///
/// The node `<root>/active` (`{"active": name|null, "pending": {"from","to"}}`)
/// is the single source of truth; it is only written with compare-and-set. A
/// promotion (see [`promote_active`](Self::promote_active)) runs in this order:
///
/// 1. **touch** the target record (CAS rewrite of the same value), so that a
///    concurrent [`unregister`](Self::unregister) that read it before loses its
///    CAS delete;
/// 2. **claim**: CAS the marker from "no pending transition" to
///    `pending = {from: old, to: new}`; of concurrent promoters exactly one wins,
///    the others first help finish the winner's transition, then retry;
/// 3. **old → DEPRECATED** (CAS on the old record);
/// 4. **new → ACTIVE** (CAS on the new record, against a version read *before*
///    re-checking that the marker still holds this very claim, so a slow helper of
///    a finished transition always loses its CAS);
/// 5. **commit**: CAS the marker to `{active: new}`.
///
/// Steps 3–5 are idempotent and any node may run them (a promoter that crashed
/// after step 2 is finished by the next one). Between steps 3 and 4 no record
/// says ACTIVE: readers that need the active cluster call
/// [`active`](Self::active), which answers from the marker (the claimed target
/// during a transition) instead of scanning records.
#[derive(Debug, Clone)]
pub struct Registry {
    pub(crate) store: Arc<dyn MetadataStore>,
    pub(crate) root: String,
}

impl Registry {
    /// A registry under [`DEFAULT_ROOT`].
    pub fn new(store: Arc<dyn MetadataStore>) -> Registry {
        Registry {
            store,
            root: DEFAULT_ROOT.to_owned(),
        }
    }

    /// A registry under `root` (an absolute path without trailing `/`).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Metadata`] with [`ErrorKind::InvalidPath`] for a bad root.
    pub fn with_root(store: Arc<dyn MetadataStore>, root: &str) -> Result<Registry> {
        bkswitch_metadata_store::validate_path(
            bkswitch_metadata_store::Operation::Put,
            root,
            bkswitch_metadata_store::PathUse::Write,
        )?;
        Ok(Registry {
            store,
            root: root.to_owned(),
        })
    }

    /// The registry root.
    pub fn root(&self) -> &str {
        &self.root
    }

    /// The store the registry uses.
    pub fn store(&self) -> &Arc<dyn MetadataStore> {
        &self.store
    }

    pub(crate) fn path(&self, child: &str) -> String {
        format!("{}/{child}", self.root)
    }

    pub(crate) async fn read<T: DeserializeOwned>(&self, path: &str) -> Result<Option<(T, i64)>> {
        match self.store.get(path).await? {
            None => Ok(None),
            Some(r) => Ok(Some((decode(path, &r)?, r.stat.version))),
        }
    }

    async fn write<T: Serialize>(
        &self,
        path: &str,
        value: &T,
        expected: ExpectedVersion,
    ) -> Result<i64> {
        let bytes = serde_json::to_vec(value).map_err(|e| RegistryError::Corrupt {
            path: path.to_owned(),
            reason: format!("cannot encode: {e}"),
        })?;
        crate::failpoints::write_fault(path)?;
        match self.store.put_version(path, &bytes, expected).await {
            Ok(v) => Ok(v),
            Err(e) if e.is_conflict() => Err(e.into()),
            Err(e) => {
                // The answer was lost: the write may have been applied, or
                // may still land later (queued on the server). Applied: done.
                // Not yet: fence it (write the stored value back at the
                // version it expects) so that it never lands after the
                // caller was told it failed (found by the nemesis: an
                // override answered 503 landed later and routed a prefix to
                // a cluster no precheck had cleared).
                if let ExpectedVersion::Exactly(v) = expected {
                    match self.store.get(path).await {
                        Ok(Some(r)) if r.stat.version == v + 1 && r.value == bytes => {
                            return Ok(r.stat.version);
                        }
                        Ok(Some(r)) if r.stat.version == v => {
                            let _ = self
                                .store
                                .put_version(path, &r.value, ExpectedVersion::Exactly(v))
                                .await;
                        }
                        _ => {}
                    }
                }
                Err(e.into())
            }
        }
    }

    /// Every registered cluster, sorted by name, as they all were at one
    /// instant.
    ///
    /// Records are read one by one, so the listing is read twice and
    /// returned once a second pass finds the same names at the versions the
    /// first read: no record changed in between, so at an instant between
    /// the passes every record was as read. One pass alone could show a
    /// promotion half seen — the old ACTIVE record read before its flip,
    /// the new one after its own: two ACTIVE records that never were at
    /// once.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`] for an unreadable record,
    /// [`RegistryError::Conflict`] when the records kept changing for
    /// [`MAX_CAS_ATTEMPTS`] passes, [`RegistryError::Metadata`].
    pub async fn list(&self) -> Result<Vec<ClusterRecord>> {
        let mut seen = self.collect().await?;
        for _ in 0..MAX_CAS_ATTEMPTS {
            let again = self.collect().await?;
            let same = again.len() == seen.len()
                && again
                    .iter()
                    .zip(&seen)
                    .all(|(a, b)| a.0 == b.0 && a.2 == b.2);
            if same {
                return Ok(again.into_iter().map(|(_, rec, _)| rec).collect());
            }
            seen = again;
        }
        Err(RegistryError::Conflict {
            path: self.root.clone(),
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// One pass over the records: (name, record, version).
    async fn collect(&self) -> Result<Vec<(String, ClusterRecord, i64)>> {
        let mut out = Vec::new();
        for child in self.store.children(&self.root).await? {
            if RESERVED_NAMES.contains(&child.as_str()) {
                continue;
            }
            if let Some((rec, version)) = self.read::<ClusterRecord>(&self.path(&child)).await? {
                out.push((child, rec, version));
            }
        }
        Ok(out)
    }

    /// The record of `name`, if registered.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidName`], [`RegistryError::Corrupt`],
    /// [`RegistryError::Metadata`].
    pub async fn get(&self, name: &str) -> Result<Option<ClusterRecord>> {
        validate_name(name)?;
        Ok(self.read(&self.path(name)).await?.map(|(r, _)| r))
    }

    async fn get_required(&self, name: &str) -> Result<(ClusterRecord, i64)> {
        validate_name(name)?;
        self.read(&self.path(name))
            .await?
            .ok_or_else(|| RegistryError::NotFound {
                name: name.to_owned(),
            })
    }

    pub(crate) async fn marker(&self) -> Result<(ActiveMarker, Option<i64>)> {
        let path = self.path("active");
        Ok(match self.read::<ActiveMarker>(&path).await? {
            Some((m, v)) => (m, Some(v)),
            None => (ActiveMarker::default(), None),
        })
    }
}

/// A znode-safe name for an index key: letters, digits, `.`, `_`, `-` kept,
/// every other byte written `%XX`.
pub(crate) fn encode_index_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len() * 2);
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

pub(crate) fn encode<T: Serialize>(path: &str, value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| RegistryError::Corrupt {
        path: path.to_owned(),
        reason: format!("cannot encode: {e}"),
    })
}

pub(crate) fn decode<T: DeserializeOwned>(path: &str, r: &GetResult) -> Result<T> {
    serde_json::from_slice(&r.value).map_err(|e| RegistryError::Corrupt {
        path: path.to_owned(),
        reason: format!("not the expected JSON: {e}"),
    })
}
