//! Shared helpers of the schema-storage tests: a metadata store that records
//! writes and can inject races, a stamping provider over named clusters that
//! counts resolve calls, and locator and ledger helpers.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{BookKeeper, LedgerConfig, MemoryCluster, ReadHandleExt};
use bkswitch_managed_ledger::schema::{SchemaStorage, SchemaStorageOptions};
use bkswitch_metadata_store::{
    CreateMode, ExpectedVersion, GetResult, MemoryStore, MetadataStore, Stat, WatchStream,
};
use bkswitch_proto::schema::{IndexEntry, PositionInfo, SchemaEntry, SchemaLocator};
use bkswitch_proto::{Message, Stamped, ATTR_KEY};
use bkswitch_schema_spi::{HookError, HookErrorKind, SchemaClientProvider};
use parking_lot::Mutex;
use tokio::sync::Barrier;

pub type StoreResult<T> = bkswitch_metadata_store::Result<T>;

pub const ID: &str = "public/default/orders";

// ---------------------------------------------------------------------------
// A metadata store wrapper that records writes and can inject races.
// ---------------------------------------------------------------------------

/// One `put` seen by [`RecordingStore`].
#[derive(Debug, Clone)]
pub struct RecordedPut {
    pub path: String,
    pub value: Vec<u8>,
    pub expected: ExpectedVersion,
    pub ok: bool,
}

#[derive(Debug)]
pub struct RecordingStore {
    pub inner: MemoryStore,
    pub puts: Mutex<Vec<RecordedPut>>,
    pub deletes: AtomicUsize,
    /// The first `barrier_gets` reads wait on the barrier after reading, so that
    /// concurrent writers all read the same locator.
    pub barrier: Option<Arc<Barrier>>,
    pub barrier_gets: AtomicUsize,
    /// When set, every put first rewrites the node (bumping its version), so the
    /// caller's compare-and-set always loses.
    pub interfere: AtomicBool,
}

impl RecordingStore {
    pub fn new() -> Arc<RecordingStore> {
        Arc::new(Self::build(None))
    }

    pub fn with_barrier(parties: usize) -> Arc<RecordingStore> {
        let store = Self::build(Some(Arc::new(Barrier::new(parties))));
        store.barrier_gets.store(parties, Ordering::SeqCst);
        Arc::new(store)
    }

    pub fn build(barrier: Option<Arc<Barrier>>) -> RecordingStore {
        RecordingStore {
            inner: MemoryStore::new(),
            puts: Mutex::new(Vec::new()),
            deletes: AtomicUsize::new(0),
            barrier,
            barrier_gets: AtomicUsize::new(0),
            interfere: AtomicBool::new(false),
        }
    }

    pub fn puts(&self) -> Vec<RecordedPut> {
        self.puts.lock().clone()
    }

    pub fn successful_puts(&self) -> Vec<RecordedPut> {
        self.puts().into_iter().filter(|p| p.ok).collect()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl MetadataStore for RecordingStore {
    async fn get(&self, path: &str) -> StoreResult<Option<GetResult>> {
        // Read first, then wait: every party of the barrier has read the same
        // value before any of them goes on to write.
        let result = self.inner.get(path).await;
        if let Some(barrier) = &self.barrier {
            let take = self
                .barrier_gets
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            if take {
                barrier.wait().await;
            }
        }
        result
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> StoreResult<Stat> {
        if self.interfere.load(Ordering::SeqCst) {
            if let Some(current) = self.inner.get(path).await? {
                self.inner
                    .put(path, &current.value, ExpectedVersion::Any)
                    .await?;
            }
        }
        let result = self.inner.put(path, value, expected).await;
        self.puts.lock().push(RecordedPut {
            path: path.to_owned(),
            value: value.to_vec(),
            expected,
            ok: result.is_ok(),
        });
        result
    }

    async fn put_version(
        &self,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
    ) -> StoreResult<i64> {
        // Recorded and interfered with as `put`.
        Ok(self.put(path, value, expected).await?.version)
    }

    async fn create(
        &self,
        path: &str,
        value: &[u8],
        mode: CreateMode,
    ) -> StoreResult<(String, Stat)> {
        self.inner.create(path, value, mode).await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> StoreResult<()> {
        self.deletes.fetch_add(1, Ordering::SeqCst);
        self.inner.delete(path, expected).await
    }

    async fn exists(&self, path: &str) -> StoreResult<Option<Stat>> {
        self.inner.exists(path).await
    }

    async fn children(&self, path: &str) -> StoreResult<Vec<String>> {
        self.inner.children(path).await
    }

    async fn watch(&self, path: &str) -> StoreResult<WatchStream> {
        self.inner.watch(path).await
    }

    async fn close(&self) -> StoreResult<()> {
        self.inner.close().await
    }

    fn can_import_versions(&self) -> bool {
        self.inner.can_import_versions()
    }

    fn session_generation(&self) -> Option<u64> {
        self.inner.session_generation()
    }

    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> StoreResult<Stat> {
        self.inner.import_version(path, value, version).await
    }

    async fn import_sequential_counter(&self, path: &str, next: i64) -> StoreResult<Stat> {
        self.inner.import_sequential_counter(path, next).await
    }
}

// ---------------------------------------------------------------------------
// A stamping provider over named clusters, counting resolve calls.
// ---------------------------------------------------------------------------

#[derive(Debug)]
pub struct StampingProvider {
    pub clients: HashMap<String, Arc<dyn BookKeeper>>,
    pub active: Mutex<String>,
    /// `(ledger id, stamp)` of every resolve call, in order.
    pub resolves: Mutex<Vec<(i64, Option<String>)>>,
    pub fail_properties: AtomicBool,
}

impl StampingProvider {
    pub fn new(clusters: &[&MemoryCluster]) -> Arc<StampingProvider> {
        let clients = clusters
            .iter()
            .map(|c| {
                let client: Arc<dyn BookKeeper> = Arc::new(c.client());
                (c.name().to_owned(), client)
            })
            .collect();
        Arc::new(StampingProvider {
            clients,
            active: Mutex::new(clusters[0].name().to_owned()),
            resolves: Mutex::new(Vec::new()),
            fail_properties: AtomicBool::new(false),
        })
    }

    pub fn switch_to(&self, cluster: &str) {
        *self.active.lock() = cluster.to_owned();
    }

    pub fn resolves(&self) -> Vec<(i64, Option<String>)> {
        self.resolves.lock().clone()
    }
}

impl SchemaClientProvider for StampingProvider {
    fn resolve(&self, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        let stamp = position
            .cluster_stamp()
            .map_err(|e| HookError::new(HookErrorKind::CorruptMetadata, e.to_string()))?
            .map(str::to_owned);
        self.resolves
            .lock()
            .push((position.ledger_id, stamp.clone()));
        let name = stamp.ok_or_else(|| {
            HookError::new(HookErrorKind::CorruptMetadata, "unstamped schema ledger")
                .with_ledger(position.ledger_id)
        })?;
        self.clients.get(&name).cloned().ok_or_else(|| {
            HookError::new(
                HookErrorKind::UnknownCluster,
                format!("unknown cluster {name}"),
            )
            .with_cluster(name)
        })
    }

    fn active(&self) -> Arc<dyn BookKeeper> {
        self.clients[&*self.active.lock()].clone()
    }

    fn creation_properties(
        &self,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>, HookError> {
        if self.fail_properties.load(Ordering::SeqCst) {
            return Err(HookError::new(
                HookErrorKind::Other,
                "attribution refused by the test",
            ));
        }
        Ok(vec![(
            ATTR_KEY.to_owned(),
            client.cluster_name().to_owned(),
        )])
    }
}

// ---------------------------------------------------------------------------
// Helpers.
// ---------------------------------------------------------------------------

pub fn options() -> SchemaStorageOptions {
    SchemaStorageOptions::default()
}

pub fn storage(
    store: Arc<dyn MetadataStore>,
    provider: Arc<dyn SchemaClientProvider>,
) -> SchemaStorage {
    SchemaStorage::new(store, provider, options())
}

pub fn decode_locator(bytes: &[u8]) -> SchemaLocator {
    SchemaLocator::decode(bytes).expect("locator decodes")
}

pub fn position(ledger_id: i64) -> PositionInfo {
    PositionInfo {
        ledger_id,
        entry_id: 0,
        properties: Vec::new(),
    }
}

pub fn index_entry(version: i64, ledger_id: i64, hash: &[u8]) -> IndexEntry {
    IndexEntry {
        version,
        position: position(ledger_id),
        hash: hash.to_vec(),
    }
}

pub async fn read_schema_entry(cluster: &MemoryCluster, ledger_id: i64) -> SchemaEntry {
    let client = cluster.client();
    let config = LedgerConfig::default();
    let handle = client
        .open_ledger(ledger_id, config.digest_type, &config.password)
        .await
        .expect("open schema ledger");
    assert!(
        handle.is_closed(),
        "schema ledgers are closed after the write"
    );
    assert_eq!(
        handle.last_add_confirmed(),
        0,
        "one entry per schema ledger"
    );
    let entry = handle.read_entry(0).await.expect("read entry 0");
    SchemaEntry::decode(entry.data.as_ref()).expect("schema entry decodes")
}
