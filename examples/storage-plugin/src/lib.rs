//! A small storage plugin built on the bkswitch crates, as an outside user
//! would write one: [`TinyLedger`], a minimal managed ledger, and
//! [`TinySchemas`], a minimal schema storage, that keep their metadata in
//! Pulsar's layout and honour the PIP-477 hooks:
//!
//! - S1: every new data or cursor ledger is created on the client the
//!   [`ActiveClientSupplier`] returns;
//! - S4: the new ledger's properties (its cluster stamp) are recorded in the
//!   very compare-and-set that records its id; if the provider fails, the
//!   ledger is deleted and nothing is recorded;
//! - S2: a ledger is opened, recovered or deleted on the client the resolver
//!   names, once per handle open;
//! - S3: schema ledgers are created on the provider's client for the schema (`active_for`, which follows a canary), stamped
//!   in the locator write, read and deleted by stamp.
//!
//! The hooks come from wherever the plugin is configured: in production from
//! `bkswitch-bk-router` (see `tests/router.rs`), in the conformance suite from
//! the suite itself (see `tests/hook_suite.rs`).

use std::collections::HashMap;
use std::sync::Arc;

use bkswitch_bk_client::{
    BookKeeper, DigestType, EntryId, LedgerConfig, LedgerId, ReadHandle, WriteHandle,
};
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use bkswitch_mledger_spi::{
    LedgerPurpose, NewLedgerContext, NewLedgerPropertiesProvider, StorageHooks,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{KeyValue, ManagedCursorInfo, ManagedLedgerInfo, StringProperty};
use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};
use bkswitch_proto::schema::{IndexEntry, PositionInfo, SchemaLocator};
use bkswitch_proto::{decode_managed_cursor_info, decode_managed_ledger_info, Message};
use bkswitch_schema_spi::SchemaClientProvider;
use bytes::Bytes;
use tokio::sync::Mutex;

/// Any failure of the plugin, as text for the operator.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// The plugin's result type.
pub type Result<T> = std::result::Result<T, Error>;

const PASSWORD: &[u8] = b"";
const DIGEST: DigestType = DigestType::Crc32c;

fn ledger_config() -> LedgerConfig {
    LedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_digest_type(DIGEST)
}

/// Where a data ledger or a cursor ledger is, with what S4 said about it.
struct NewLedger {
    handle: Arc<dyn WriteHandle>,
    client: Arc<dyn BookKeeper>,
    properties: Vec<(String, String)>,
}

struct Cursor {
    info: ManagedCursorInfo,
    version: i64,
}

struct State {
    info: ManagedLedgerInfo,
    version: i64,
    current: Option<Arc<dyn WriteHandle>>,
    /// Read handles by ledger: S2 is asked once per open, never per read.
    handles: HashMap<LedgerId, Arc<dyn ReadHandle>>,
    cursors: HashMap<String, Cursor>,
}

/// A minimal managed ledger: one writing ledger, rollover, durable cursors
/// with their own cursor ledgers, trimming. Its metadata is Pulsar's
/// `ManagedLedgerInfo` at `/managed-ledgers/<name>` and `ManagedCursorInfo` at
/// `/managed-ledgers/<name>/<cursor>`, every write a compare-and-set.
pub struct TinyLedger {
    name: String,
    store: Arc<dyn MetadataStore>,
    default_client: Arc<dyn BookKeeper>,
    hooks: StorageHooks,
    state: Mutex<State>,
}

impl TinyLedger {
    /// Opens (creating when missing) the managed ledger `name`, as a broker
    /// taking ownership does: recovers the last ledger on the cluster S2
    /// names (fencing a previous owner), then starts a new ledger through S1.
    ///
    /// # Errors
    ///
    /// Metadata, client and hook failures.
    pub async fn open(
        store: Arc<dyn MetadataStore>,
        default_client: Arc<dyn BookKeeper>,
        hooks: StorageHooks,
        name: &str,
    ) -> Result<TinyLedger> {
        let path = format!("{MANAGED_LEDGERS_ROOT}/{name}");
        let (info, version) = match store.get(&path).await? {
            Some(found) => (
                decode_managed_ledger_info(&found.value)?,
                found.stat.version,
            ),
            None => {
                let info = ManagedLedgerInfo::default();
                let stat = store
                    .put(&path, &info.encode_to_vec(), ExpectedVersion::NotExists)
                    .await?;
                (info, stat.version)
            }
        };
        let ml = TinyLedger {
            name: name.to_owned(),
            store,
            default_client,
            hooks,
            state: Mutex::new(State {
                info,
                version,
                current: None,
                handles: HashMap::new(),
                cursors: HashMap::new(),
            }),
        };
        {
            let mut state = ml.state.lock().await;
            if let Some(last) = state.info.ledger_info.last().cloned() {
                // Recovery open: routed by stamp, fences the previous owner.
                let client = ml.resolve(&last)?;
                let handle = client.open_ledger(last.ledger_id, DIGEST, PASSWORD).await?;
                let entries = handle.last_add_confirmed() + 1;
                if let Some(l) = state.info.ledger_info.last_mut() {
                    l.entries = Some(entries);
                }
                state.handles.insert(last.ledger_id, handle);
            }
            ml.start_ledger(&mut state).await?;
        }
        Ok(ml)
    }

    fn path(&self) -> String {
        format!("{MANAGED_LEDGERS_ROOT}/{}", self.name)
    }

    fn resolve(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>> {
        Ok(match &self.hooks.ledger_resolver {
            Some(resolver) => resolver.resolve_ledger(info)?,
            None => self.default_client.clone(),
        })
    }

    fn resolve_cursor(&self, info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>> {
        Ok(match &self.hooks.cursor_resolver {
            Some(resolver) => resolver.resolve_cursor(info)?,
            None => self.default_client.clone(),
        })
    }

    /// Creates a ledger through S1 and asks the S4 providers for its
    /// properties; on a provider failure the ledger is deleted.
    async fn create(
        &self,
        providers: &[Arc<dyn NewLedgerPropertiesProvider>],
        purpose: LedgerPurpose<'_>,
    ) -> Result<NewLedger> {
        let client = match &self.hooks.active_client {
            Some(supplier) => supplier.active_client_for(&self.name),
            None => self.default_client.clone(),
        };
        let handle = client.create_ledger(&ledger_config()).await?;
        let ctx = NewLedgerContext {
            managed_ledger: &self.name,
            ledger_id: handle.id(),
            purpose,
            client: client.as_ref(),
        };
        let mut properties = Vec::new();
        for provider in providers {
            match provider.new_ledger_properties(&ctx) {
                Ok(p) => properties.extend(p),
                Err(e) => {
                    // Never recorded, so never left behind.
                    let _ = handle.close().await;
                    client.delete_ledger(handle.id()).await?;
                    return Err(e.into());
                }
            }
        }
        Ok(NewLedger {
            handle,
            client,
            properties,
        })
    }

    /// Starts a new data ledger and records it with its properties in one
    /// compare-and-set.
    async fn start_ledger(&self, state: &mut State) -> Result<()> {
        let new = self
            .create(&self.hooks.new_ledger_properties, LedgerPurpose::Data)
            .await?;
        let mut info = state.info.clone();
        info.ledger_info.push(LedgerInfo {
            ledger_id: new.handle.id(),
            properties: new
                .properties
                .iter()
                .map(|(key, value)| KeyValue {
                    key: key.clone(),
                    value: value.clone(),
                })
                .collect(),
            ..Default::default()
        });
        match self
            .store
            .put(
                &self.path(),
                &info.encode_to_vec(),
                ExpectedVersion::Exactly(state.version),
            )
            .await
        {
            Ok(stat) => {
                state.info = info;
                state.version = stat.version;
                state.current = Some(new.handle);
                Ok(())
            }
            Err(e) => {
                let _ = new.client.delete_ledger(new.handle.id()).await;
                Err(e.into())
            }
        }
    }

    /// Appends one entry; returns its position.
    ///
    /// # Errors
    ///
    /// When no ledger is open (a rollover failed) or the add fails.
    pub async fn append(&self, data: &[u8]) -> Result<(LedgerId, EntryId)> {
        let state = self.state.lock().await;
        let current = state
            .current
            .clone()
            .ok_or("no ledger is open for writing")?;
        drop(state);
        let entry = current.add_entry(Bytes::copy_from_slice(data)).await?;
        Ok((current.id(), entry))
    }

    /// Reads the entry at a position.
    ///
    /// # Errors
    ///
    /// An unknown ledger, a hook error, a read failure.
    pub async fn read(&self, ledger_id: LedgerId, entry_id: EntryId) -> Result<Vec<u8>> {
        let mut state = self.state.lock().await;
        let handle: Arc<dyn ReadHandle> = match &state.current {
            Some(current) if current.id() == ledger_id => current.clone(),
            _ => match state.handles.get(&ledger_id) {
                Some(h) => h.clone(),
                None => {
                    let info = state
                        .info
                        .ledger_info
                        .iter()
                        .find(|l| l.ledger_id == ledger_id)
                        .ok_or_else(|| format!("ledger {ledger_id} is not part of {}", self.name))?
                        .clone();
                    let client = self.resolve(&info)?;
                    let h = client
                        .open_ledger_no_recovery(ledger_id, DIGEST, PASSWORD)
                        .await?;
                    state.handles.insert(ledger_id, h.clone());
                    h
                }
            },
        };
        drop(state);
        let entries = handle.read_entries(entry_id, entry_id).await?;
        Ok(entries
            .into_iter()
            .next()
            .ok_or_else(|| format!("no entry ({ledger_id}, {entry_id})"))?
            .data
            .to_vec())
    }

    /// Closes the current ledger, records its size and starts a new one.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub async fn rollover(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.seal_current(&mut state).await?;
        self.start_ledger(&mut state).await
    }

    async fn seal_current(&self, state: &mut State) -> Result<()> {
        if let Some(current) = state.current.take() {
            current.close().await?;
            let id = current.id();
            let mut info = state.info.clone();
            if let Some(l) = info.ledger_info.iter_mut().find(|l| l.ledger_id == id) {
                l.entries = Some(current.last_add_confirmed() + 1);
                l.size = Some(i64::try_from(current.length()).unwrap_or(i64::MAX));
            }
            let stat = self
                .store
                .put(
                    &self.path(),
                    &info.encode_to_vec(),
                    ExpectedVersion::Exactly(state.version),
                )
                .await?;
            state.info = info;
            state.version = stat.version;
            state.handles.insert(id, current);
        }
        Ok(())
    }

    /// Opens (creating when missing) a durable cursor at the end of the ledger.
    ///
    /// # Errors
    ///
    /// Metadata, client and hook failures.
    pub async fn open_cursor(&self, cursor: &str) -> Result<()> {
        let path = format!("{}/{cursor}", self.path());
        let found = self.store.get(&path).await?;
        let (info, version) = match found {
            Some(found) => {
                let info = decode_managed_cursor_info(&found.value)?;
                if info.cursors_ledger_id >= 0 {
                    // Recovery of the cursor ledger, routed by its stamp.
                    let client = self.resolve_cursor(&info)?;
                    client
                        .open_ledger(info.cursors_ledger_id, DIGEST, PASSWORD)
                        .await?;
                }
                (info, found.stat.version)
            }
            None => {
                let state = self.state.lock().await;
                let last = state
                    .current
                    .as_ref()
                    .map(|h| (h.id(), h.last_add_confirmed()));
                drop(state);
                let info = ManagedCursorInfo {
                    cursors_ledger_id: -1,
                    mark_delete_ledger_id: last.map(|l| l.0),
                    mark_delete_entry_id: last.map(|l| l.1),
                    ..Default::default()
                };
                let stat = self
                    .store
                    .put(&path, &info.encode_to_vec(), ExpectedVersion::NotExists)
                    .await?;
                (info, stat.version)
            }
        };
        self.state
            .lock()
            .await
            .cursors
            .insert(cursor.to_owned(), Cursor { info, version });
        Ok(())
    }

    /// Moves a cursor's mark-delete position and persists it; the first one
    /// creates the cursor's ledger (S1, S4 in the same write).
    ///
    /// # Errors
    ///
    /// An unknown cursor; metadata, client and hook failures.
    pub async fn mark_delete(
        &self,
        cursor: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> Result<()> {
        let mut state = self.state.lock().await;
        let c = state
            .cursors
            .get(cursor)
            .ok_or_else(|| format!("cursor {cursor} is not open"))?;
        let mut info = c.info.clone();
        let version = c.version;
        info.mark_delete_ledger_id = Some(ledger_id);
        info.mark_delete_entry_id = Some(entry_id);
        let new = if info.cursors_ledger_id < 0 {
            Some(self.new_cursor_ledger(cursor, &mut info).await?)
        } else {
            None
        };
        self.write_cursor(&mut state, cursor, info, version, new)
            .await
    }

    async fn new_cursor_ledger(
        &self,
        cursor: &str,
        info: &mut ManagedCursorInfo,
    ) -> Result<NewLedger> {
        let new = self
            .create(
                &self.hooks.new_cursor_ledger_properties,
                LedgerPurpose::Cursor { cursor },
            )
            .await?;
        info.cursors_ledger_id = new.handle.id();
        info.cursor_properties
            .retain(|p| !new.properties.iter().any(|(k, _)| *k == p.name));
        info.cursor_properties
            .extend(new.properties.iter().map(|(name, value)| StringProperty {
                name: name.clone(),
                value: value.clone(),
            }));
        Ok(new)
    }

    async fn write_cursor(
        &self,
        state: &mut State,
        cursor: &str,
        info: ManagedCursorInfo,
        version: i64,
        new: Option<NewLedger>,
    ) -> Result<()> {
        let path = format!("{}/{cursor}", self.path());
        match self
            .store
            .put(
                &path,
                &info.encode_to_vec(),
                ExpectedVersion::Exactly(version),
            )
            .await
        {
            Ok(stat) => {
                state.cursors.insert(
                    cursor.to_owned(),
                    Cursor {
                        info,
                        version: stat.version,
                    },
                );
                Ok(())
            }
            Err(e) => {
                if let Some(new) = new {
                    let _ = new.client.delete_ledger(new.handle.id()).await;
                }
                Err(e.into())
            }
        }
    }

    /// The persisted mark-delete position of a cursor.
    ///
    /// # Errors
    ///
    /// An unknown cursor.
    pub async fn mark_delete_position(&self, cursor: &str) -> Result<(LedgerId, EntryId)> {
        let state = self.state.lock().await;
        let c = state
            .cursors
            .get(cursor)
            .ok_or_else(|| format!("cursor {cursor} is not open"))?;
        Ok((
            c.info.mark_delete_ledger_id.unwrap_or(-1),
            c.info.mark_delete_entry_id.unwrap_or(-1),
        ))
    }

    /// Moves a cursor to a new cursor ledger (S1, S4 in the same write) and
    /// deletes the old one where its stamp says (S2).
    ///
    /// # Errors
    ///
    /// An unknown cursor; metadata, client and hook failures.
    pub async fn roll_cursor_ledger(&self, cursor: &str) -> Result<()> {
        let mut state = self.state.lock().await;
        let c = state
            .cursors
            .get(cursor)
            .ok_or_else(|| format!("cursor {cursor} is not open"))?;
        let old = c.info.clone();
        let version = c.version;
        let mut info = old.clone();
        let new = self.new_cursor_ledger(cursor, &mut info).await?;
        self.write_cursor(&mut state, cursor, info, version, Some(new))
            .await?;
        if old.cursors_ledger_id >= 0 {
            let client = self.resolve_cursor(&old)?;
            client.delete_ledger(old.cursors_ledger_id).await?;
        }
        Ok(())
    }

    /// Deletes, where their stamps say, the ledgers every cursor has consumed;
    /// returns their ids.
    ///
    /// # Errors
    ///
    /// Metadata, client and hook failures.
    pub async fn trim(&self) -> Result<Vec<LedgerId>> {
        let mut state = self.state.lock().await;
        let slowest = state
            .cursors
            .values()
            .map(|c| c.info.mark_delete_ledger_id.unwrap_or(-1))
            .min()
            .unwrap_or(-1);
        let current = state.current.as_ref().map(|h| h.id());
        let (gone, kept): (Vec<LedgerInfo>, Vec<LedgerInfo>) = state
            .info
            .ledger_info
            .iter()
            .cloned()
            .partition(|l| l.ledger_id < slowest && Some(l.ledger_id) != current);
        if gone.is_empty() {
            return Ok(Vec::new());
        }
        let mut info = state.info.clone();
        info.ledger_info = kept;
        let stat = self
            .store
            .put(
                &self.path(),
                &info.encode_to_vec(),
                ExpectedVersion::Exactly(state.version),
            )
            .await?;
        state.info = info;
        state.version = stat.version;
        let mut deleted = Vec::new();
        for l in gone {
            state.handles.remove(&l.ledger_id);
            self.resolve(&l)?.delete_ledger(l.ledger_id).await?;
            deleted.push(l.ledger_id);
        }
        Ok(deleted)
    }

    /// Seals the current ledger and gives up the managed ledger.
    ///
    /// # Errors
    ///
    /// Metadata and client failures.
    pub async fn close(&self) -> Result<()> {
        let mut state = self.state.lock().await;
        self.seal_current(&mut state).await
    }
}

/// A minimal schema storage: each version in a ledger of its own (entry 0),
/// located by Pulsar's `SchemaLocator` at `/schemas/<schemaId>`, every write a
/// compare-and-set, every ledger routed through the S3 provider.
pub struct TinySchemas {
    store: Arc<dyn MetadataStore>,
    provider: Arc<dyn SchemaClientProvider>,
}

impl TinySchemas {
    /// Schema storage on `store` with `provider` as S3.
    pub fn new(store: Arc<dyn MetadataStore>, provider: Arc<dyn SchemaClientProvider>) -> Self {
        TinySchemas { store, provider }
    }

    fn path(schema_id: &str) -> String {
        format!("{SCHEMAS_ROOT}/{schema_id}")
    }

    async fn locator(&self, schema_id: &str) -> Result<Option<(SchemaLocator, i64)>> {
        Ok(match self.store.get(&Self::path(schema_id)).await? {
            Some(found) => Some((
                SchemaLocator::decode(found.value.as_slice())?,
                found.stat.version,
            )),
            None => None,
        })
    }

    /// Stores a new version; returns its number.
    ///
    /// # Errors
    ///
    /// Metadata, client and hook failures (the new ledger is deleted then).
    pub async fn put(&self, schema_id: &str, data: &[u8]) -> Result<i64> {
        let current = self.locator(schema_id).await?;
        let client = self.provider.active_for(schema_id);
        let handle = client.create_ledger(&ledger_config()).await?;
        let id = handle.id();
        let written = async {
            handle.add_entry(Bytes::copy_from_slice(data)).await?;
            handle.close().await?;
            let properties = self.provider.creation_properties(client.as_ref())?;
            let version = current
                .as_ref()
                .map_or(0, |(locator, _)| locator.info.version + 1);
            let entry = IndexEntry {
                version,
                position: PositionInfo {
                    ledger_id: id,
                    entry_id: 0,
                    properties: properties
                        .into_iter()
                        .map(|(key, value)| bkswitch_proto::schema::KeyValue { key, value })
                        .collect(),
                },
                hash: data.to_vec(),
            };
            let (mut index, expected) = match &current {
                Some((locator, v)) => (locator.index.clone(), ExpectedVersion::Exactly(*v)),
                None => (Vec::new(), ExpectedVersion::NotExists),
            };
            index.push(entry.clone());
            let locator = SchemaLocator { info: entry, index };
            self.store
                .put(&Self::path(schema_id), &locator.encode_to_vec(), expected)
                .await?;
            Ok::<i64, Error>(version)
        }
        .await;
        if written.is_err() {
            let _ = client.delete_ledger(id).await;
        }
        written
    }

    /// Reads one version.
    ///
    /// # Errors
    ///
    /// An unknown schema or version; hook and client failures.
    pub async fn get(&self, schema_id: &str, version: i64) -> Result<Vec<u8>> {
        let (locator, _) = self
            .locator(schema_id)
            .await?
            .ok_or_else(|| format!("schema {schema_id} does not exist"))?;
        let entry = locator
            .index
            .iter()
            .find(|e| e.version == version)
            .ok_or_else(|| format!("schema {schema_id} has no version {version}"))?;
        let client = self.provider.resolve(&entry.position)?;
        let handle = client
            .open_ledger_no_recovery(entry.position.ledger_id, DIGEST, PASSWORD)
            .await?;
        let entries = handle
            .read_entries(entry.position.entry_id, entry.position.entry_id)
            .await?;
        Ok(entries.first().ok_or("empty schema ledger")?.data.to_vec())
    }

    /// Deletes every version and its ledger (each where its stamp says).
    ///
    /// # Errors
    ///
    /// Hook, client and metadata failures.
    pub async fn delete(&self, schema_id: &str) -> Result<()> {
        let Some((locator, version)) = self.locator(schema_id).await? else {
            return Ok(());
        };
        for entry in &locator.index {
            let client = self.provider.resolve(&entry.position)?;
            client.delete_ledger(entry.position.ledger_id).await?;
        }
        self.store
            .delete(&Self::path(schema_id), ExpectedVersion::Exactly(version))
            .await?;
        Ok(())
    }
}
