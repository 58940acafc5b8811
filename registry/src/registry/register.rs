//! Registering and unregistering clusters, and the URI index that keeps two
//! clusters from sharing a metadata-service URI.

use super::*;

impl Registry {
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
                Err(e) => {
                    // The answer was lost: the delete may be applied, or may
                    // still land later. Gone: done. Still there at the same
                    // version: fence it (write the record back) so that it
                    // never lands after the caller was told it failed (found
                    // by the nemesis: an unregister answered 503 landed while
                    // a switch to that cluster ran, and the switch was stuck
                    // for good).
                    match self.store.get(&path).await {
                        Ok(None) => {
                            self.remove_index_of(&rec).await?;
                            return Ok(());
                        }
                        Ok(Some(r)) if r.stat.version == version => {
                            let _ = self
                                .store
                                .put_version(&path, &r.value, ExpectedVersion::Exactly(version))
                                .await;
                        }
                        _ => {}
                    }
                    return Err(e.into());
                }
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
