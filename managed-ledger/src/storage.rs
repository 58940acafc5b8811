//! The plain single-cluster storage: one BookKeeper client, no hook.

use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{BookKeeper, ClientFactory};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{
    ManagedLedgerConfig, ManagedLedgerStorage, ManagedLedgerStorageClass, StorageError,
    StorageErrorKind, StorageSettings,
};
use parking_lot::RwLock;

use crate::ledger::ManagedLedgerFactory;

/// The name of the single storage class of [`BookKeeperStorage`] (Pulsar's
/// default storage class name).
pub const DEFAULT_STORAGE_CLASS: &str = "bookkeeper";

/// The storage class of [`BookKeeperStorage`]: one client.
#[derive(Debug)]
pub struct BookKeeperStorageClass {
    name: String,
    client: Arc<dyn BookKeeper>,
}

impl ManagedLedgerStorageClass for BookKeeperStorageClass {
    fn name(&self) -> &str {
        &self.name
    }

    fn client(&self) -> Arc<dyn BookKeeper> {
        self.client.clone()
    }
}

#[derive(Debug)]
struct Initialized {
    class: Arc<BookKeeperStorageClass>,
    store: Arc<dyn MetadataStore>,
}

/// The storage of a plain single-cluster broker (Pulsar's default
/// `ManagedLedgerStorage`): one BookKeeper client, created from
/// [`StorageSettings::metadata_service_uri`], and no hook, so every managed
/// ledger behaves — and writes bytes — exactly as without PIP-477.
///
/// ```
/// use std::sync::Arc;
/// use bkswitch_bk_client::MemoryClientFactory;
/// use bkswitch_managed_ledger::BookKeeperStorage;
/// use bkswitch_metadata_store::MemoryStore;
/// use bkswitch_mledger_spi::{ManagedLedgerConfig, ManagedLedgerStorage, StorageSettings};
///
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// let storage = BookKeeperStorage::new();
/// storage
///     .initialize(
///         &StorageSettings::new("memory://main"),
///         Arc::new(MemoryStore::new()),
///         Arc::new(MemoryClientFactory::new()),
///     )
///     .await?;
/// let class = storage.default_storage_class()?;
/// assert_eq!(class.client().cluster_name(), "main");
///
/// let mut config = ManagedLedgerConfig::default().with_quorums(1, 1, 1);
/// storage.configure(&mut config);
/// assert!(config.hooks.is_empty());
/// let ml = storage.factory()?.open("public/default/persistent/t", config).await?;
/// ml.append(bytes::Bytes::from_static(b"hello")).await?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Default)]
pub struct BookKeeperStorage {
    state: RwLock<Option<Initialized>>,
}

impl BookKeeperStorage {
    /// An uninitialised storage; call
    /// [`initialize`](ManagedLedgerStorage::initialize) before use.
    pub fn new() -> BookKeeperStorage {
        BookKeeperStorage::default()
    }

    /// A managed-ledger factory on this storage's client and metadata store.
    ///
    /// # Errors
    ///
    /// [`StorageErrorKind::NotInitialized`] before `initialize`.
    pub fn factory(&self) -> Result<ManagedLedgerFactory, StorageError> {
        let state = self.state.read();
        let state = state.as_ref().ok_or_else(not_initialized)?;
        Ok(ManagedLedgerFactory::from_storage_class(
            state.store.clone(),
            state.class.as_ref(),
        ))
    }
}

fn not_initialized() -> StorageError {
    StorageError::new(
        StorageErrorKind::NotInitialized,
        "the BookKeeper storage is not initialised: call initialize() with the \
         cluster's metadata-service URI first",
    )
}

#[async_trait]
impl ManagedLedgerStorage for BookKeeperStorage {
    async fn initialize(
        &self,
        settings: &StorageSettings,
        metadata_store: Arc<dyn MetadataStore>,
        client_factory: Arc<dyn ClientFactory>,
    ) -> Result<(), StorageError> {
        if self.state.read().is_some() {
            return Err(StorageError::new(
                StorageErrorKind::InvalidSettings,
                "the BookKeeper storage is already initialised; create a new storage \
                 to connect to another cluster",
            ));
        }
        if settings.metadata_service_uri.is_empty() {
            return Err(StorageError::new(
                StorageErrorKind::InvalidSettings,
                "no metadata-service URI: set StorageSettings::metadata_service_uri to the \
                 BookKeeper cluster's URI (e.g. zk+null://zk1:2181/ledgers or memory://name)",
            ));
        }
        let client = client_factory
            .create(&settings.metadata_service_uri)
            .await?;
        let class = Arc::new(BookKeeperStorageClass {
            name: DEFAULT_STORAGE_CLASS.to_string(),
            client,
        });
        let mut state = self.state.write();
        if state.is_some() {
            return Err(StorageError::new(
                StorageErrorKind::InvalidSettings,
                "the BookKeeper storage was initialised concurrently; use one storage per broker",
            ));
        }
        *state = Some(Initialized {
            class,
            store: metadata_store,
        });
        Ok(())
    }

    fn storage_classes(&self) -> Vec<Arc<dyn ManagedLedgerStorageClass>> {
        match self.state.read().as_ref() {
            Some(state) => vec![state.class.clone() as Arc<dyn ManagedLedgerStorageClass>],
            None => Vec::new(),
        }
    }

    fn default_storage_class(&self) -> Result<Arc<dyn ManagedLedgerStorageClass>, StorageError> {
        self.state
            .read()
            .as_ref()
            .map(|state| state.class.clone() as Arc<dyn ManagedLedgerStorageClass>)
            .ok_or_else(not_initialized)
    }

    fn storage_class(&self, name: &str) -> Option<Arc<dyn ManagedLedgerStorageClass>> {
        self.state
            .read()
            .as_ref()
            .filter(|state| state.class.name == name)
            .map(|state| state.class.clone() as Arc<dyn ManagedLedgerStorageClass>)
    }

    fn configure(&self, _config: &mut ManagedLedgerConfig) {
        // A single cluster needs no hook: plain behaviour, plain bytes.
    }

    async fn close(&self) -> Result<(), StorageError> {
        let state = self.state.write().take();
        if let Some(state) = state {
            state.class.client.close().await?;
        }
        Ok(())
    }
}
