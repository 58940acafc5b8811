//! [`SchemaStorage`]: schema versions in ledgers, located by a CAS-written
//! `SchemaLocator` at `/schemas/<schemaId>`.

use std::sync::Arc;

use bkswitch_bk_client::{
    BkError, BookKeeper, BookKeeperExt, LedgerConfig, LedgerId, ReadHandleExt,
};
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use bkswitch_proto::schema::{IndexEntry, PositionInfo, SchemaEntry, SchemaLocator};
use bkswitch_proto::{Message, Stamped};
use bkswitch_schema_spi::SchemaClientProvider;
use bytes::Bytes;

use super::error::{Result, SchemaStorageError};
use super::{locator_path, SchemaStorageOptions, SchemaVersion, StoredSchema};
use crate::props::merge_properties;

/// Schema storage over a metadata store and the S3 schema client provider, in
/// the shape of Pulsar's `BookkeeperSchemaStorage`. See the [module
/// documentation](super) for the layout and the guarantees.
#[derive(Debug, Clone)]
pub struct SchemaStorage {
    store: Arc<dyn MetadataStore>,
    provider: Arc<dyn SchemaClientProvider>,
    options: SchemaStorageOptions,
}

/// The outcome of one put attempt.
enum Attempt {
    Done(SchemaVersion),
    Conflict,
}

impl SchemaStorage {
    /// Schema storage writing locators to `store` and schema ledgers to the
    /// clients `provider` names.
    pub fn new(
        store: Arc<dyn MetadataStore>,
        provider: Arc<dyn SchemaClientProvider>,
        options: SchemaStorageOptions,
    ) -> SchemaStorage {
        SchemaStorage {
            store,
            provider,
            options,
        }
    }

    /// The options this storage was created with.
    pub fn options(&self) -> &SchemaStorageOptions {
        &self.options
    }

    /// The schema client provider (hook S3) this storage consults.
    pub fn provider(&self) -> &Arc<dyn SchemaClientProvider> {
        &self.provider
    }

    /// Stores a new version of schema `schema_id` and returns its number
    /// (0 for the first version, then the latest + 1).
    ///
    /// When the latest version's hash is non-empty and equals `hash`, nothing is
    /// written and the latest version is returned (deduplication). Otherwise the
    /// data is written as entry 0 of a new ledger created on the provider's
    /// `active()` client, the ledger is closed, and the locator is
    /// compare-and-set with the new `IndexEntry`, whose `PositionInfo` carries the
    /// provider's `creation_properties` for that client
    /// ([I1](bkswitch_docs::invariants::I1)). A lost compare-and-set deletes the
    /// new ledger through `resolve` ([I15](bkswitch_docs::invariants::I15)) and
    /// starts again from a fresh read, at most
    /// [`max_attempts`](SchemaStorageOptions::max_attempts) times.
    ///
    /// # Errors
    ///
    /// - [`SchemaStorageError::InvalidSchemaId`]: nothing is read or written.
    /// - [`SchemaStorageError::Conflict`] after `max_attempts` lost races; every
    ///   ledger written meanwhile was deleted.
    /// - [`SchemaStorageError::Hook`], [`SchemaStorageError::BookKeeper`],
    ///   [`SchemaStorageError::Metadata`]: the locator is unchanged and the new
    ///   ledger (if any) was deleted — except when a retryable metadata error
    ///   leaves it unknown whether the locator was written, in which case the
    ///   ledger is kept (it may be referenced).
    /// - [`SchemaStorageError::Corrupt`] when the current locator cannot be
    ///   decoded.
    /// - [`SchemaStorageError::LeakedLedger`] when the operation failed and the
    ///   new ledger could not be deleted either.
    pub async fn put(
        &self,
        schema_id: &str,
        schema_data: &[u8],
        hash: &[u8],
    ) -> Result<SchemaVersion> {
        let path = locator_path(schema_id)?;
        let attempts = self.options.max_attempts.max(1);
        for _ in 0..attempts {
            let current = self.read_locator(schema_id, &path).await?;
            if let Some((locator, _)) = &current {
                let info = &locator.info;
                if !info.hash.is_empty() && info.hash == hash {
                    return Ok(SchemaVersion(info.version));
                }
            }
            match self
                .try_put(schema_id, &path, current, schema_data, hash)
                .await?
            {
                Attempt::Done(version) => return Ok(version),
                Attempt::Conflict => {
                    tracing::debug!(schema_id, "schema locator changed concurrently, retrying");
                }
            }
        }
        Err(SchemaStorageError::Conflict {
            schema_id: schema_id.to_owned(),
            path,
            attempts,
        })
    }

    /// Reads version `version` of schema `schema_id`.
    ///
    /// The ledger is opened on the client the provider's `resolve` names for the
    /// version's `PositionInfo`, consulted once for this open
    /// ([I4](bkswitch_docs::invariants::I4), [I15](bkswitch_docs::invariants::I15)).
    ///
    /// # Errors
    ///
    /// [`SchemaStorageError::InvalidSchemaId`],
    /// [`SchemaStorageError::SchemaNotFound`],
    /// [`SchemaStorageError::VersionNotFound`], [`SchemaStorageError::Hook`]
    /// (unroutable stamp), [`SchemaStorageError::BookKeeper`] (open or read
    /// failed), [`SchemaStorageError::Metadata`],
    /// [`SchemaStorageError::Corrupt`].
    pub async fn get(&self, schema_id: &str, version: SchemaVersion) -> Result<StoredSchema> {
        let locator = self.require_locator(schema_id).await?;
        let info = &locator.info;
        let entry = locator
            .index
            .iter()
            .find(|entry| entry.version == version.0)
            .or_else(|| (info.version == version.0).then_some(info))
            .ok_or_else(|| SchemaStorageError::VersionNotFound {
                schema_id: schema_id.to_owned(),
                version: version.0,
                latest: info.version,
            })?;
        self.read_version(schema_id, entry).await
    }

    /// Reads the latest version of schema `schema_id`.
    ///
    /// # Errors
    ///
    /// As [`get`](Self::get), without
    /// [`VersionNotFound`](SchemaStorageError::VersionNotFound).
    pub async fn get_latest(&self, schema_id: &str) -> Result<StoredSchema> {
        let locator = self.require_locator(schema_id).await?;
        self.read_version(schema_id, &locator.info).await
    }

    /// The versions of schema `schema_id` in the order the locator lists them
    /// (ascending); empty when no schema is stored under the id, as Pulsar's
    /// `getAll`.
    ///
    /// # Errors
    ///
    /// [`SchemaStorageError::InvalidSchemaId`], [`SchemaStorageError::Metadata`],
    /// [`SchemaStorageError::Corrupt`].
    pub async fn list_versions(&self, schema_id: &str) -> Result<Vec<SchemaVersion>> {
        let Some((locator, _)) = self.locator(schema_id).await? else {
            return Ok(Vec::new());
        };
        let info = &locator.info;
        let mut versions: Vec<SchemaVersion> = locator
            .index
            .iter()
            .map(|entry| SchemaVersion(entry.version))
            .collect();
        if !versions.contains(&SchemaVersion(info.version)) {
            versions.push(SchemaVersion(info.version));
        }
        Ok(versions)
    }

    /// Deletes schema `schema_id`: every schema ledger it references (each
    /// through `resolve`, a ledger already gone counts as deleted), then the
    /// locator with a compare-and-set on the version read. A locator changed
    /// meanwhile is re-read and its new ledgers deleted too, at most
    /// [`max_attempts`](SchemaStorageOptions::max_attempts) times.
    ///
    /// Returns `true` when this call deleted the locator, `false` when there was
    /// no schema (or another caller deleted it meanwhile).
    ///
    /// # Errors
    ///
    /// [`SchemaStorageError::InvalidSchemaId`]; [`SchemaStorageError::Hook`] and
    /// [`SchemaStorageError::BookKeeper`] when a ledger cannot be routed or
    /// deleted (the locator is kept so that the call can be repeated);
    /// [`SchemaStorageError::Metadata`]; [`SchemaStorageError::Corrupt`];
    /// [`SchemaStorageError::Conflict`] after `max_attempts` lost races.
    pub async fn delete(&self, schema_id: &str) -> Result<bool> {
        let path = locator_path(schema_id)?;
        let attempts = self.options.max_attempts.max(1);
        for _ in 0..attempts {
            let Some((locator, version)) = self.read_locator(schema_id, &path).await? else {
                return Ok(false);
            };
            let mut positions: Vec<&PositionInfo> = Vec::new();
            for entry in locator.index.iter().chain(std::iter::once(&locator.info)) {
                let position = &entry.position;
                if position.ledger_id >= 0 && !positions.contains(&position) {
                    positions.push(position);
                }
            }
            for position in positions {
                let client = self.resolve(schema_id, position)?;
                client
                    .delete_ledger_if_exists(position.ledger_id)
                    .await
                    .map_err(|source| {
                        bk_error(
                            schema_id,
                            format!("delete schema ledger {}", position.ledger_id),
                            source,
                        )
                    })?;
            }
            match self
                .store
                .delete(&path, ExpectedVersion::Exactly(version))
                .await
            {
                Ok(()) => return Ok(true),
                Err(e) if e.kind() == bkswitch_metadata_store::ErrorKind::NotFound => {
                    return Ok(false)
                }
                Err(e) if e.is_conflict() => continue,
                Err(source) => return Err(metadata_error(schema_id, source)),
            }
        }
        Err(SchemaStorageError::Conflict {
            schema_id: schema_id.to_owned(),
            path,
            attempts,
        })
    }

    /// The current locator of schema `schema_id` and its metadata-store version
    /// (for a compare-and-set by the caller, e.g. a stamp-only PROMOTE,
    /// [I10](bkswitch_docs::invariants::I10)); `None` when no schema is stored
    /// under the id.
    ///
    /// # Errors
    ///
    /// [`SchemaStorageError::InvalidSchemaId`], [`SchemaStorageError::Metadata`],
    /// [`SchemaStorageError::Corrupt`] when the value cannot be decoded.
    pub async fn locator(&self, schema_id: &str) -> Result<Option<(SchemaLocator, i64)>> {
        let path = locator_path(schema_id)?;
        self.read_locator(schema_id, &path).await
    }

    async fn require_locator(&self, schema_id: &str) -> Result<SchemaLocator> {
        let path = locator_path(schema_id)?;
        match self.read_locator(schema_id, &path).await? {
            Some((locator, _)) => Ok(locator),
            None => Err(SchemaStorageError::SchemaNotFound {
                schema_id: schema_id.to_owned(),
                path,
            }),
        }
    }

    async fn read_locator(
        &self,
        schema_id: &str,
        path: &str,
    ) -> Result<Option<(SchemaLocator, i64)>> {
        let Some(current) = self
            .store
            .get(path)
            .await
            .map_err(|source| metadata_error(schema_id, source))?
        else {
            return Ok(None);
        };
        let locator = SchemaLocator::decode(current.value.as_slice()).map_err(|e| {
            SchemaStorageError::Corrupt {
                schema_id: schema_id.to_owned(),
                what: format!("locator (node version {})", current.stat.version),
                reason: e.to_string(),
            }
        })?;
        Ok(Some((locator, current.stat.version)))
    }

    /// One attempt of [`put`](Self::put) from the locator read (`current`).
    async fn try_put(
        &self,
        schema_id: &str,
        path: &str,
        current: Option<(SchemaLocator, i64)>,
        schema_data: &[u8],
        hash: &[u8],
    ) -> Result<Attempt> {
        let (previous_index, next_version, expected, entry_index) = match current {
            None => {
                // Pulsar's first entry carries a placeholder index entry
                // (version 0 at ledger -1, entry -1) rather than an empty index.
                let placeholder = IndexEntry {
                    version: 0,
                    position: PositionInfo {
                        ledger_id: -1,
                        entry_id: -1,
                        properties: Vec::new(),
                    },
                    hash: hash.to_vec(),
                };
                (Vec::new(), 0, ExpectedVersion::NotExists, vec![placeholder])
            }
            Some((locator, version)) => {
                let latest = locator.info.version;
                let index = locator.index;
                (
                    index.clone(),
                    latest + 1,
                    ExpectedVersion::Exactly(version),
                    index,
                )
            }
        };

        let client = self.provider.active_for(schema_id);
        let handle = client
            .create_ledger(&self.ledger_config(schema_id))
            .await
            .map_err(|source| {
                bk_error(
                    schema_id,
                    format!(
                        "create a schema ledger on cluster '{}'",
                        client.cluster_name()
                    ),
                    source,
                )
            })?;
        let ledger_id = handle.id();

        let properties = match self.provider.creation_properties(client.as_ref()) {
            Ok(properties) => properties,
            Err(source) => {
                let cause = SchemaStorageError::Hook {
                    schema_id: schema_id.to_owned(),
                    operation: format!(
                        "creation_properties for schema ledger {ledger_id} on cluster '{}'",
                        client.cluster_name()
                    ),
                    source: Box::new(source),
                };
                // No stamp to route by: the creating client is the only one known
                // to hold the ledger.
                let _ = handle.close().await;
                let cleanup = client.delete_ledger_if_exists(ledger_id).await.map(drop);
                return Err(leaked_or(schema_id, &*client, ledger_id, cause, cleanup));
            }
        };
        let mut position = PositionInfo {
            ledger_id,
            entry_id: 0,
            properties: Vec::new(),
        };
        merge_properties(&mut position.properties, properties);

        let payload = SchemaEntry {
            schema_data: schema_data.to_vec(),
            index: entry_index,
        }
        .encode_to_vec();
        let written: std::result::Result<i64, (String, BkError)> = async {
            let entry_id = handle
                .add_entry(Bytes::from(payload))
                .await
                .map_err(|e| (format!("write the schema entry to ledger {ledger_id}"), e))?;
            handle
                .close()
                .await
                .map_err(|e| (format!("close schema ledger {ledger_id}"), e))?;
            Ok(entry_id)
        }
        .await;
        match written {
            Ok(entry_id) => position.entry_id = entry_id,
            Err((operation, source)) => {
                let cause = bk_error(schema_id, operation, source);
                return Err(self.abandon(schema_id, &client, &position, cause).await);
            }
        }

        let info = IndexEntry {
            version: next_version,
            position: position.clone(),
            hash: hash.to_vec(),
        };
        let mut index = previous_index;
        index.push(info.clone());
        let locator = SchemaLocator {
            info: info.clone(),
            index,
        };
        match self
            .store
            .put_version(path, &locator.encode_to_vec(), expected)
            .await
        {
            Ok(_) => Ok(Attempt::Done(SchemaVersion(next_version))),
            Err(source) if source.is_conflict() => {
                // The ledger is an orphan: no locator will ever reference it
                // (docs/INVARIANTS.md I15).
                match self.delete_orphan(schema_id, &client, &position).await {
                    Ok(()) => Ok(Attempt::Conflict),
                    Err(cleanup) => Err(leaked_or(
                        schema_id,
                        &*client,
                        ledger_id,
                        metadata_error(schema_id, source),
                        Err(cleanup),
                    )),
                }
            }
            Err(source) if source.is_retryable() => {
                // The write may have been applied: look before deleting anything.
                match self.read_locator(schema_id, path).await {
                    Ok(Some((now, _))) if now.info == info => {
                        Ok(Attempt::Done(SchemaVersion(next_version)))
                    }
                    // Unchanged: the lost write may still land (it sits in
                    // a queue or an uncommitted quorum). Fence it before
                    // deleting its ledger, or keep the ledger.
                    Ok(Some((_, version))) if expected == ExpectedVersion::Exactly(version) => {
                        // The stored bytes as they are (a re-encoding could
                        // drop what this version does not know).
                        let fenced = match self.store.get(path).await {
                            Ok(Some(r)) if r.stat.version == version => {
                                crate::fence::fence(self.store.as_ref(), path, &r.value, version)
                                    .await
                            }
                            _ => crate::fence::Fence::Moved,
                        };
                        match fenced {
                            crate::fence::Fence::Fenced(_) => {
                                let cause = metadata_error(schema_id, source);
                                Err(self.abandon(schema_id, &client, &position, cause).await)
                            }
                            _ => {
                                tracing::warn!(
                                    schema_id,
                                    ledger_id,
                                    cluster = client.cluster_name(),
                                    "cannot fence the lost schema locator write; keeping the \
                                     new schema ledger, which may be unreferenced"
                                );
                                Err(metadata_error(schema_id, source))
                            }
                        }
                    }
                    // Still absent after a create that may land later: no
                    // write can fence a create; keep the ledger.
                    Ok(None) => {
                        tracing::warn!(
                            schema_id,
                            ledger_id,
                            cluster = client.cluster_name(),
                            "the first schema locator write may still land; keeping the new \
                             schema ledger, which may be unreferenced"
                        );
                        Err(metadata_error(schema_id, source))
                    }
                    // Moved past what the lost write expects: it can no
                    // longer land.
                    Ok(Some(_)) => {
                        let cause = metadata_error(schema_id, source);
                        Err(self.abandon(schema_id, &client, &position, cause).await)
                    }
                    Err(_) => {
                        tracing::warn!(
                            schema_id,
                            ledger_id,
                            cluster = client.cluster_name(),
                            "cannot tell whether the schema locator was written; keeping the \
                             new schema ledger, which may be unreferenced"
                        );
                        Err(metadata_error(schema_id, source))
                    }
                }
            }
            Err(source) => {
                let cause = metadata_error(schema_id, source);
                Err(self.abandon(schema_id, &client, &position, cause).await)
            }
        }
    }

    /// Deletes the unrecorded ledger at `position` and returns `cause`, or a
    /// [`SchemaStorageError::LeakedLedger`] if the ledger could not be deleted.
    async fn abandon(
        &self,
        schema_id: &str,
        client: &Arc<dyn BookKeeper>,
        position: &PositionInfo,
        cause: SchemaStorageError,
    ) -> SchemaStorageError {
        let cleanup = self.delete_orphan(schema_id, client, position).await;
        leaked_or(schema_id, &**client, position.ledger_id, cause, cleanup)
    }

    /// Deletes a ledger this storage created but did not record, through
    /// `resolve` ([I15](bkswitch_docs::invariants::I15)). The creating client is
    /// used instead when `resolve` fails or names another cluster: deleting that
    /// id on another cluster could destroy an unrelated ledger.
    async fn delete_orphan(
        &self,
        schema_id: &str,
        creator: &Arc<dyn BookKeeper>,
        position: &PositionInfo,
    ) -> std::result::Result<(), BkError> {
        let target = match self.provider.resolve(position) {
            Ok(resolved) if resolved.cluster_name() == creator.cluster_name() => resolved,
            Ok(resolved) => {
                tracing::warn!(
                    schema_id,
                    ledger_id = position.ledger_id,
                    created_on = creator.cluster_name(),
                    resolved_to = resolved.cluster_name(),
                    "the schema client provider resolves a new schema ledger to another \
                     cluster than the one it was created on; deleting it on the creating cluster"
                );
                creator.clone()
            }
            Err(e) => {
                tracing::warn!(
                    schema_id,
                    ledger_id = position.ledger_id,
                    error = %e,
                    "cannot resolve the unrecorded schema ledger; deleting it on the \
                     cluster it was created on"
                );
                creator.clone()
            }
        };
        target
            .delete_ledger_if_exists(position.ledger_id)
            .await
            .map(drop)
    }

    /// Opens the ledger of `entry` through `resolve` (once) and decodes it.
    async fn read_version(&self, schema_id: &str, entry: &IndexEntry) -> Result<StoredSchema> {
        let position = &entry.position;
        if position.ledger_id < 0 || position.entry_id < 0 {
            return Err(SchemaStorageError::Corrupt {
                schema_id: schema_id.to_owned(),
                what: format!("index entry of version {}", entry.version),
                reason: format!(
                    "invalid position (ledger {}, entry {})",
                    position.ledger_id, position.entry_id
                ),
            });
        }
        let client = self.resolve(schema_id, position)?;
        let config = &self.options.ledger_config;
        let handle = client
            .open_ledger(position.ledger_id, config.digest_type, &config.password)
            .await
            .map_err(|source| {
                bk_error(
                    schema_id,
                    format!(
                        "open schema ledger {} of version {}",
                        position.ledger_id, entry.version
                    ),
                    source,
                )
            })?;
        let read = handle.read_entry(position.entry_id).await;
        // Closing a read handle only releases it.
        let _ = handle.close().await;
        let ledger_entry = read.map_err(|source| {
            bk_error(
                schema_id,
                format!(
                    "read entry {} of schema ledger {} (version {})",
                    position.entry_id, position.ledger_id, entry.version
                ),
                source,
            )
        })?;
        let decoded = SchemaEntry::decode(ledger_entry.data.as_ref()).map_err(|e| {
            SchemaStorageError::Corrupt {
                schema_id: schema_id.to_owned(),
                what: format!(
                    "schema entry {} in ledger {} (version {})",
                    position.entry_id, position.ledger_id, entry.version
                ),
                reason: e.to_string(),
            }
        })?;
        Ok(StoredSchema {
            version: SchemaVersion(entry.version),
            data: Bytes::from(decoded.schema_data),
            hash: Bytes::from(entry.hash.clone()),
        })
    }

    fn resolve(&self, schema_id: &str, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>> {
        self.provider
            .resolve(position)
            .map_err(|source| SchemaStorageError::Hook {
                schema_id: schema_id.to_owned(),
                operation: format!(
                    "resolve schema ledger {} (stamp {})",
                    position.ledger_id,
                    match position.cluster_stamp() {
                        Ok(Some(cluster)) => format!("'{cluster}'"),
                        Ok(None) => "none".to_owned(),
                        Err(_) => "duplicated".to_owned(),
                    }
                ),
                source: Box::new(source),
            })
    }

    /// The configuration of a new schema ledger: the configured quorums, digest
    /// and password, with Pulsar's schema custom metadata.
    fn ledger_config(&self, schema_id: &str) -> LedgerConfig {
        crate::ledger_metadata::with_metadata(
            self.options.ledger_config.clone(),
            crate::ledger_metadata::schema_ledger(schema_id),
        )
    }
}

fn bk_error(schema_id: &str, operation: String, source: BkError) -> SchemaStorageError {
    SchemaStorageError::BookKeeper {
        schema_id: schema_id.to_owned(),
        operation,
        source: Box::new(source),
    }
}

fn metadata_error(
    schema_id: &str,
    source: bkswitch_metadata_store::MetadataError,
) -> SchemaStorageError {
    SchemaStorageError::Metadata {
        schema_id: schema_id.to_owned(),
        source,
    }
}

fn leaked_or(
    schema_id: &str,
    client: &dyn BookKeeper,
    ledger_id: LedgerId,
    cause: SchemaStorageError,
    cleanup: std::result::Result<(), BkError>,
) -> SchemaStorageError {
    match cleanup {
        Ok(()) => cause,
        Err(e) => SchemaStorageError::LeakedLedger {
            schema_id: schema_id.to_owned(),
            ledger_id,
            cluster: client.cluster_name().to_owned(),
            cleanup_error: Box::new(e),
            cause: Box::new(cause),
        },
    }
}
