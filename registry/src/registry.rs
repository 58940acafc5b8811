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
use crate::uri::ClusterUri;

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
/// # Single ACTIVE (I12)
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
        Ok(self.store.put(path, &bytes, expected).await?.version)
    }

    /// Every registered cluster, sorted by name.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`] for an unreadable record, [`RegistryError::Metadata`].
    pub async fn list(&self) -> Result<Vec<ClusterRecord>> {
        let mut out = Vec::new();
        for child in self.store.children(&self.root).await? {
            if RESERVED_NAMES.contains(&child.as_str()) {
                continue;
            }
            if let Some((rec, _)) = self.read::<ClusterRecord>(&self.path(&child)).await? {
                out.push(rec);
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

    /// Registers a cluster. With [`ClusterStatus::Active`] the cluster is
    /// created STANDBY and promoted only if no cluster is ACTIVE (otherwise the
    /// record is removed again and [`RegistryError::AnotherActive`] returned).
    ///
    /// # URI collisions under concurrency
    ///
    /// Every key of [`ClusterUri::index_keys`] (the same cluster after
    /// normalisation, or a shared ZooKeeper host with the same ledgers root) is
    /// claimed with a create-if-absent of `<root>/uri-index/<encoded key>` =
    /// `{"cluster","metadataServiceUri"}` *before* the record is written, and
    /// confirmed by a compare-and-set rewrite *after* it. Of concurrent
    /// registrations sharing a key exactly one succeeds; the others get
    /// [`RegistryError::UriCollision`].
    ///
    /// An index node whose cluster record is missing (a crash between index and
    /// record, or during [`unregister`](Self::unregister)) is waited for up to
    /// [`STALE_INDEX_GRACE`], then removed with a compare-and-set delete; one
    /// whose cluster's record has a URI without that key is removed at once. A
    /// registration whose node was removed that way fails its confirmation,
    /// removes its record again and starts over, so two records sharing a key
    /// never both stay.
    ///
    /// Nested ledgers roots on a shared host share no key: they are refused by
    /// scanning the records before the write and once more after it (a
    /// registration that then sees a colliding record removes its own). Two
    /// such registrations racing may therefore both be refused, and may both be
    /// listed for the moment between write and removal; they never both stay
    /// unless a process crashes between its write and its second scan.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidName`], [`RegistryError::InvalidUri`],
    /// [`RegistryError::UriCollision`], [`RegistryError::AlreadyExists`],
    /// [`RegistryError::AnotherActive`], [`RegistryError::Conflict`],
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn register(
        &self,
        name: &str,
        metadata_service_uri: &str,
        status: ClusterStatus,
    ) -> Result<ClusterRecord> {
        validate_name(name)?;
        let uri = ClusterUri::parse(metadata_service_uri)?;
        let path = self.path(name);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let existing = self.list().await?;
            if existing.iter().any(|r| r.name == name) {
                return Err(RegistryError::AlreadyExists {
                    name: name.to_owned(),
                });
            }
            if let Some(e) = collision_with(&uri, metadata_service_uri, &existing, name, false) {
                return Err(e);
            }
            if status == ClusterStatus::Active {
                let (marker, _) = self.marker().await?;
                if let Some(active) = marker.pending.map(|p| p.to).or(marker.active) {
                    return Err(RegistryError::AnotherActive {
                        name: name.to_owned(),
                        active,
                    });
                }
            }
            let entry = UriIndexEntry {
                cluster: name.to_owned(),
                metadata_service_uri: metadata_service_uri.to_owned(),
            };
            let mut claims = self
                .claim_index(name, &uri, metadata_service_uri, &entry)
                .await?;
            let mut record = ClusterRecord {
                name: name.to_owned(),
                metadata_service_uri: metadata_service_uri.to_owned(),
                status: if status == ClusterStatus::Active {
                    ClusterStatus::Standby
                } else {
                    status
                },
                extra: Map::new(),
            };
            match self.write(&path, &record, ExpectedVersion::NotExists).await {
                Ok(_) => {}
                // The index keys stay: they may be those of a concurrent
                // registration of the same name, which adopted them.
                Err(RegistryError::Metadata(e)) if e.kind() == ErrorKind::AlreadyExists => {
                    return Err(RegistryError::AlreadyExists {
                        name: name.to_owned(),
                    })
                }
                Err(e) => return Err(e),
            }
            if !self.confirm_index(&mut claims, &entry).await? {
                // Our index node was removed as stale: another registration may
                // own the key now. Withdraw and start over.
                self.remove_own_record(&path).await?;
                continue;
            }
            let others = self.list().await?;
            if let Some(e) = collision_with(&uri, metadata_service_uri, &others, name, true) {
                self.remove_own_record(&path).await?;
                self.release_index(&claims).await;
                return Err(e);
            }
            if status == ClusterStatus::Active {
                if let Err(e) = self.promote(name, true).await {
                    if self.remove_own_record(&path).await.is_ok() {
                        self.release_index(&claims).await;
                    }
                    return Err(e);
                }
                record.status = ClusterStatus::Active;
            }
            return Ok(record);
        }
        Err(RegistryError::Conflict {
            path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// Removes the record this registration just wrote (version 0, or 1 after a
    /// promotion's touch).
    async fn remove_own_record(&self, path: &str) -> Result<()> {
        let mut last = None;
        for v in [0, 1] {
            match self.store.delete(path, ExpectedVersion::Exactly(v)).await {
                Ok(()) => return Ok(()),
                Err(e) if e.kind() == ErrorKind::NotFound => return Ok(()),
                Err(e) => last = Some(e),
            }
        }
        Err(last.map_or_else(
            || RegistryError::Conflict {
                path: path.to_owned(),
                attempts: 2,
            },
            RegistryError::from,
        ))
    }

    fn index_path(&self, key: &str) -> String {
        format!("{}/{URI_INDEX}/{}", self.root, encode_index_key(key))
    }

    /// Claims every index key of `uri` for `name`: returns `(path, version)`
    /// of each node, created or adopted (a node already naming `name`).
    async fn claim_index(
        &self,
        name: &str,
        uri: &ClusterUri,
        uri_text: &str,
        entry: &UriIndexEntry,
    ) -> Result<Vec<(String, i64)>> {
        let value = encode(&self.path(URI_INDEX), entry)?;
        let mut claims: Vec<(String, i64)> = Vec::new();
        let mut created: Vec<(String, i64)> = Vec::new();
        for key in uri.index_keys() {
            let path = self.index_path(&key);
            let mut claimed = false;
            for _ in 0..MAX_CAS_ATTEMPTS {
                match self
                    .store
                    .put(&path, &value, ExpectedVersion::NotExists)
                    .await
                {
                    Ok(stat) => {
                        claims.push((path.clone(), stat.version));
                        created.push((path.clone(), stat.version));
                        claimed = true;
                        break;
                    }
                    Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                    Err(e) => return Err(e.into()),
                }
                match self.inspect_index(&path, &key, name).await? {
                    IndexState::Gone => {}
                    IndexState::Mine(version) => {
                        claims.push((path.clone(), version));
                        claimed = true;
                        break;
                    }
                    IndexState::Owned(rec) => {
                        // Keys created by this attempt would block others for
                        // the grace period: release them.
                        self.release_index(&created).await;
                        let other = ClusterUri::parse(&rec.metadata_service_uri)?;
                        return Err(RegistryError::UriCollision {
                            uri: uri_text.to_owned(),
                            reason: uri
                                .collision(&other)
                                .unwrap_or_else(|| format!("it shares the URI index key `{key}`")),
                            existing: rec.name,
                            existing_uri: rec.metadata_service_uri,
                        });
                    }
                }
            }
            if !claimed {
                self.release_index(&created).await;
                return Err(RegistryError::Conflict {
                    path,
                    attempts: MAX_CAS_ATTEMPTS,
                });
            }
        }
        Ok(claims)
    }

    /// Looks at an existing index node that `name` could not create: whether it
    /// is `name`'s own, held by a registered cluster, or gone (deleted, or
    /// removed here as stale).
    async fn inspect_index(&self, path: &str, key: &str, name: &str) -> Result<IndexState> {
        // (version seen with the owner's record missing, since when)
        let mut missing_since: Option<(i64, Instant)> = None;
        let mut removals = 0;
        loop {
            let Some(r) = self.store.get(path).await? else {
                return Ok(IndexState::Gone);
            };
            let entry: UriIndexEntry = decode(path, &r)?;
            let version = r.stat.version;
            if entry.cluster == name {
                return Ok(IndexState::Mine(version));
            }
            let owner = match validate_name(&entry.cluster) {
                Ok(()) => {
                    self.read::<ClusterRecord>(&self.path(&entry.cluster))
                        .await?
                }
                Err(_) => None,
            };
            let stale = match owner {
                Some((rec, _)) => {
                    let holds = ClusterUri::parse(&rec.metadata_service_uri)
                        .is_ok_and(|u| u.index_keys().iter().any(|k| k == key));
                    if holds {
                        return Ok(IndexState::Owned(rec));
                    }
                    true
                }
                None => match missing_since {
                    Some((v, since)) if v == version => since.elapsed() >= STALE_INDEX_GRACE,
                    _ => {
                        missing_since = Some((version, Instant::now()));
                        false
                    }
                },
            };
            if !stale {
                tokio::time::sleep(STALE_INDEX_POLL).await;
                continue;
            }
            tracing::info!(path, owner = %entry.cluster, "removing a stale URI index node");
            match self
                .store
                .delete(path, ExpectedVersion::Exactly(version))
                .await
            {
                Ok(()) => return Ok(IndexState::Gone),
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
            removals += 1;
            if removals >= MAX_CAS_ATTEMPTS {
                return Err(RegistryError::Conflict {
                    path: path.to_owned(),
                    attempts: removals,
                });
            }
        }
    }

    /// Rewrites every claimed index node at the version claimed (after the
    /// record was written). `false` when one was removed or changed meanwhile.
    async fn confirm_index(
        &self,
        claims: &mut [(String, i64)],
        entry: &UriIndexEntry,
    ) -> Result<bool> {
        let value = encode(&self.path(URI_INDEX), entry)?;
        for (path, version) in claims.iter_mut() {
            match self
                .store
                .put(path, &value, ExpectedVersion::Exactly(*version))
                .await
            {
                Ok(stat) => *version = stat.version,
                Err(e) if e.is_conflict() => return Ok(false),
                Err(e) => return Err(e.into()),
            }
        }
        Ok(true)
    }

    /// Deletes claimed index nodes still at the version held (best effort: a
    /// node left behind is removed later as stale).
    async fn release_index(&self, claims: &[(String, i64)]) {
        for (path, version) in claims {
            if let Err(e) = self
                .store
                .delete(path, ExpectedVersion::Exactly(*version))
                .await
            {
                tracing::debug!(path, error = %e, "URI index node not released");
            }
        }
    }

    /// Unregisters a cluster (CAS delete), then removes its URI index nodes
    /// (those still naming it, CAS delete).
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`], [`RegistryError::ActiveCluster`] when it is
    /// ACTIVE or part of a pending promotion, [`RegistryError::Conflict`],
    /// [`RegistryError::Metadata`].
    pub async fn unregister(&self, name: &str) -> Result<()> {
        let path = self.path(name);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (rec, version) = self.get_required(name).await?;
            let (marker, _) = self.marker().await?;
            let named = marker.active.as_deref() == Some(name)
                || marker
                    .pending
                    .as_ref()
                    .is_some_and(|p| p.to == name || p.from.as_deref() == Some(name));
            if named || rec.status == ClusterStatus::Active {
                return Err(RegistryError::ActiveCluster {
                    name: name.to_owned(),
                });
            }
            match self
                .store
                .delete(&path, ExpectedVersion::Exactly(version))
                .await
            {
                Ok(()) => {
                    self.remove_index_of(&rec).await?;
                    return Ok(());
                }
                Err(e) if e.is_conflict() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        Err(RegistryError::Conflict {
            path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// Deletes the index nodes of an unregistered cluster that still name it.
    async fn remove_index_of(&self, rec: &ClusterRecord) -> Result<()> {
        let Ok(uri) = ClusterUri::parse(&rec.metadata_service_uri) else {
            return Ok(());
        };
        for key in uri.index_keys() {
            let path = self.index_path(&key);
            let Some(r) = self.store.get(&path).await? else {
                continue;
            };
            let Ok(entry) = decode::<UriIndexEntry>(&path, &r) else {
                continue;
            };
            if entry.cluster != rec.name {
                continue;
            }
            match self
                .store
                .delete(&path, ExpectedVersion::Exactly(r.stat.version))
                .await
            {
                // A conflict: a new registration of the same name adopted it.
                Ok(()) => {}
                Err(e) if e.is_conflict() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    pub(crate) async fn marker(&self) -> Result<(ActiveMarker, Option<i64>)> {
        let path = self.path("active");
        Ok(match self.read::<ActiveMarker>(&path).await? {
            Some((m, v)) => (m, Some(v)),
            None => (ActiveMarker::default(), None),
        })
    }

    /// The ACTIVE cluster according to `<root>/active`: the committed one, or
    /// the target of a promotion in progress. `None` when none was ever
    /// activated through the registry.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn active(&self) -> Result<Option<String>> {
        let (m, _) = self.marker().await?;
        Ok(m.pending.map(|p| p.to).or(m.active))
    }

    /// Makes `name` the ACTIVE cluster: the CLEANUP flip, old → DEPRECATED then
    /// new → ACTIVE, as two CAS (see the [type docs](Self) for the order and
    /// why at most one record is ACTIVE at every instant; between the two CAS
    /// none is). Idempotent when `name` is already ACTIVE. A pending promotion
    /// left by another node is finished first.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`], [`RegistryError::Deprecated`],
    /// [`RegistryError::Conflict`], [`RegistryError::Corrupt`],
    /// [`RegistryError::Metadata`].
    pub async fn promote_active(&self, name: &str) -> Result<()> {
        self.promote(name, false).await
    }

    async fn promote(&self, name: &str, only_if_none: bool) -> Result<()> {
        let marker_path = self.path("active");
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (marker, mver) = self.marker().await?;
            if let (Some(p), Some(v)) = (&marker.pending, mver) {
                self.roll_forward(p, v).await?;
                continue;
            }
            let (rec, rver) = self.get_required(name).await?;
            let mut from = marker.active.clone();
            if from.is_none() && mver.is_none() {
                // No marker yet: adopt an ACTIVE record written without it.
                from = self
                    .list()
                    .await?
                    .into_iter()
                    .find(|r| r.status == ClusterStatus::Active && r.name != name)
                    .map(|r| r.name);
            }
            if from.as_deref() == Some(name) && rec.status == ClusterStatus::Active {
                return Ok(());
            }
            if only_if_none {
                if let Some(active) = from.clone().filter(|a| a != name) {
                    return Err(RegistryError::AnotherActive {
                        name: name.to_owned(),
                        active,
                    });
                }
            }
            if rec.status == ClusterStatus::Deprecated {
                return Err(RegistryError::Deprecated {
                    name: name.to_owned(),
                });
            }
            // 1. touch
            match self
                .write(&self.path(name), &rec, ExpectedVersion::Exactly(rver))
                .await
            {
                Ok(_) => {}
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
            // 2. claim
            let claim = ActiveMarker {
                active: marker.active.clone(),
                pending: Some(Transition {
                    from: from.filter(|f| f != name),
                    to: name.to_owned(),
                }),
            };
            let expected = mver.map_or(ExpectedVersion::NotExists, ExpectedVersion::Exactly);
            let v = match self.write(&marker_path, &claim, expected).await {
                Ok(v) => v,
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            };
            // 3.–5.
            if let Some(p) = &claim.pending {
                self.roll_forward(p, v).await?;
            }
            return Ok(());
        }
        Err(RegistryError::Conflict {
            path: marker_path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// Steps 3–5 of a claimed transition whose marker version is `mver`.
    async fn roll_forward(&self, p: &Transition, mver: i64) -> Result<()> {
        if let Some(from) = &p.from {
            if !self
                .flip_under_claim(from, ClusterStatus::Deprecated, mver)
                .await?
            {
                return Ok(());
            }
        }
        if !self
            .flip_under_claim(&p.to, ClusterStatus::Active, mver)
            .await?
        {
            return Ok(());
        }
        let commit = ActiveMarker {
            active: Some(p.to.clone()),
            pending: None,
        };
        match self
            .write(
                &self.path("active"),
                &commit,
                ExpectedVersion::Exactly(mver),
            )
            .await
        {
            Ok(_) => Ok(()),
            Err(RegistryError::Metadata(e)) if e.is_conflict() => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Sets `name`'s status to `status` if the marker still holds the claim of
    /// version `mver`. Returns `false` when the claim is gone (finished by
    /// someone else).
    async fn flip_under_claim(&self, name: &str, status: ClusterStatus, mver: i64) -> Result<bool> {
        let path = self.path(name);
        for _ in 0..MAX_CAS_ATTEMPTS {
            let Some((mut rec, v)) = self.read::<ClusterRecord>(&path).await? else {
                if status == ClusterStatus::Active {
                    return Err(RegistryError::Corrupt {
                        path,
                        reason: "the cluster being promoted was deleted".to_owned(),
                    });
                }
                return Ok(true);
            };
            let (_, current) = self.marker().await?;
            if current != Some(mver) {
                return Ok(false);
            }
            if rec.status == status
                || (status == ClusterStatus::Deprecated && rec.status != ClusterStatus::Active)
            {
                return Ok(true);
            }
            rec.status = status;
            match self.write(&path, &rec, ExpectedVersion::Exactly(v)).await {
                Ok(_) => return Ok(true),
                Err(RegistryError::Metadata(e)) if e.is_conflict() => continue,
                Err(e) => return Err(e),
            }
        }
        Err(RegistryError::Conflict {
            path,
            attempts: MAX_CAS_ATTEMPTS,
        })
    }

    /// Records the bootstrap cluster once (create-if-absent, never rewritten,
    /// I17) and returns the stored marker, which names another cluster when one
    /// was recorded before.
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidName`], [`RegistryError::Corrupt`],
    /// [`RegistryError::Metadata`].
    pub async fn ensure_bootstrap(&self, name: &str) -> Result<BootstrapMarker> {
        validate_name(name)?;
        let path = self.path("bootstrap");
        let marker = BootstrapMarker {
            bootstrap_cluster_name: name.to_owned(),
            recorded_at: now_ms(),
            extra: Map::new(),
        };
        let bytes = serde_json::to_vec(&marker).map_err(|e| RegistryError::Corrupt {
            path: path.clone(),
            reason: e.to_string(),
        })?;
        if self.store.put_if_absent(&path, &bytes).await?.is_some() {
            return Ok(marker);
        }
        self.bootstrap()
            .await?
            .ok_or(RegistryError::Conflict { path, attempts: 1 })
    }

    /// The bootstrap marker, if recorded.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn bootstrap(&self) -> Result<Option<BootstrapMarker>> {
        Ok(self.read(&self.path("bootstrap")).await?.map(|(m, _)| m))
    }

    /// The current switch directive, if any.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn switch_directive(&self) -> Result<Option<SwitchDirective>> {
        Ok(self
            .read(&self.path("switch-target"))
            .await?
            .map(|(d, _)| d))
    }

    /// Writes a directive to switch to `target` with the next epoch (CAS
    /// against the version read). Idempotent: when `target` already is the
    /// directive's target, the stored directive is returned and nothing is
    /// written.
    ///
    /// # Errors
    ///
    /// [`RegistryError::NotFound`] for an unknown cluster,
    /// [`RegistryError::Deprecated`] for a DEPRECATED one (nothing written),
    /// [`RegistryError::InvalidName`], [`RegistryError::Conflict`],
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn write_directive(
        &self,
        target: &str,
        origin: Option<&str>,
    ) -> Result<SwitchDirective> {
        let path = self.path("switch-target");
        for _ in 0..MAX_CAS_ATTEMPTS {
            let (rec, _) = self.get_required(target).await?;
            let current = self.read::<SwitchDirective>(&path).await?;
            if let Some((d, _)) = &current {
                if d.target == target {
                    return Ok(d.clone());
                }
            }
            if rec.status == ClusterStatus::Deprecated {
                return Err(RegistryError::Deprecated {
                    name: target.to_owned(),
                });
            }
            let (epoch, expected, extra) = match &current {
                Some((d, v)) => (d.epoch + 1, ExpectedVersion::Exactly(*v), d.extra.clone()),
                None => (1, ExpectedVersion::NotExists, Map::new()),
            };
            let directive = SwitchDirective {
                target: target.to_owned(),
                origin: origin.map(str::to_owned),
                epoch,
                ts: now_ms(),
                extra,
            };
            match self.write(&path, &directive, expected).await {
                Ok(_) => return Ok(directive),
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

impl Registry {
    /// The current switch directive with its store version (for a caller that
    /// validates against it and then writes with
    /// [`put_directive`](Self::put_directive)).
    ///
    /// # Errors
    ///
    /// [`RegistryError::Corrupt`], [`RegistryError::Metadata`].
    pub async fn switch_directive_versioned(&self) -> Result<Option<(SwitchDirective, i64)>> {
        self.read(&self.path("switch-target")).await
    }

    /// Writes `directive` with one compare-and-set against `expected` (no
    /// retry, no validation: the caller validated against the version it read).
    /// Returns the new version.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Metadata`] with a conflict when the directive changed
    /// since `expected` (nothing written); other store errors.
    pub async fn put_directive(
        &self,
        directive: &SwitchDirective,
        expected: ExpectedVersion,
    ) -> Result<i64> {
        self.write(&self.path("switch-target"), directive, expected)
            .await
    }
}

/// What [`Registry::inspect_index`] found.
enum IndexState {
    /// The node is gone (deleted, or removed as stale): create it again.
    Gone,
    /// The node names the registering cluster (at this version).
    Mine(i64),
    /// The node is held by this registered cluster.
    Owned(ClusterRecord),
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

/// The first record (other than `name`) that `uri` collides with, as an error.
/// With `unindexed_only`, records sharing an index key with `uri` are skipped
/// (the index decides between those).
fn collision_with(
    uri: &ClusterUri,
    uri_text: &str,
    records: &[ClusterRecord],
    name: &str,
    unindexed_only: bool,
) -> Option<RegistryError> {
    let keys = uri.index_keys();
    records.iter().filter(|r| r.name != name).find_map(|rec| {
        let other = ClusterUri::parse(&rec.metadata_service_uri).ok()?;
        if unindexed_only && other.index_keys().iter().any(|k| keys.contains(k)) {
            return None;
        }
        let reason = uri.collision(&other)?;
        Some(RegistryError::UriCollision {
            uri: uri_text.to_owned(),
            existing: rec.name.clone(),
            existing_uri: rec.metadata_service_uri.clone(),
            reason,
        })
    })
}

fn encode<T: Serialize>(path: &str, value: &T) -> Result<Vec<u8>> {
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
