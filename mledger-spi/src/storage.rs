//! The storage shape of Pulsar's PIP-384: a storage holds one or more storage
//! classes, each backed by a BookKeeper client.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{BkError, BookKeeper, ClientFactory};
use bkswitch_metadata_store::{MetadataError, MetadataStore};

use crate::config::ManagedLedgerConfig;

/// Settings a storage is initialised with.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StorageSettings {
    /// The metadata-service URI of the BookKeeper cluster the broker is configured
    /// with (Pulsar's `bookkeeperMetadataServiceUri`), e.g. `memory://old` or
    /// `zk+null://zk1:2181/ledgers`.
    pub metadata_service_uri: String,
    /// Implementation-specific settings, by name.
    pub properties: BTreeMap<String, String>,
}

impl StorageSettings {
    /// Settings for the cluster at `metadata_service_uri` with no extra property.
    pub fn new(metadata_service_uri: impl Into<String>) -> StorageSettings {
        StorageSettings {
            metadata_service_uri: metadata_service_uri.into(),
            properties: BTreeMap::new(),
        }
    }

    /// Add one implementation-specific setting.
    pub fn with_property(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.properties.insert(key.into(), value.into());
        self
    }
}

/// A named class of storage, backed by one BookKeeper client (PIP-384's
/// `BookkeeperManagedLedgerStorageClass`).
///
/// In Pulsar a storage class hands out its managed-ledger factory. Here the
/// factory lives in a higher crate (`bkswitch-managed-ledger`), which this SPI
/// must not depend on, so a class exposes what a factory is built from: its
/// client. The managed-ledger crate builds the factory from it.
pub trait ManagedLedgerStorageClass: Send + Sync + Debug {
    /// The class name (unique within its storage).
    fn name(&self) -> &str;

    /// The BookKeeper client of this class: the client a plain managed ledger
    /// uses for everything when no hook is set.
    fn client(&self) -> Arc<dyn BookKeeper>;
}

/// A managed-ledger storage: the plug-in point a broker loads (PIP-384).
///
/// # Contract
///
/// - [`initialize`](ManagedLedgerStorage::initialize) is called once before any
///   other method; the others fail with [`StorageErrorKind::NotInitialized`] (or
///   return empty) before it.
/// - [`configure`](ManagedLedgerStorage::configure) installs the storage's hooks
///   into every config it is given; a single-cluster storage installs none, so
///   managed ledgers behave exactly as plain ones.
#[async_trait]
pub trait ManagedLedgerStorage: Send + Sync + Debug {
    /// Connects the storage: creates its clients through `client_factory` and
    /// reads whatever state it keeps in `metadata_store`.
    ///
    /// # Errors
    ///
    /// A [`StorageError`] naming what could not be set up.
    async fn initialize(
        &self,
        settings: &StorageSettings,
        metadata_store: Arc<dyn MetadataStore>,
        client_factory: Arc<dyn ClientFactory>,
    ) -> Result<(), StorageError>;

    /// Every storage class, default first.
    fn storage_classes(&self) -> Vec<Arc<dyn ManagedLedgerStorageClass>>;

    /// The class new managed ledgers use unless told otherwise.
    ///
    /// # Errors
    ///
    /// [`StorageErrorKind::NotInitialized`] before [`initialize`](Self::initialize).
    fn default_storage_class(&self) -> Result<Arc<dyn ManagedLedgerStorageClass>, StorageError>;

    /// The class called `name`, if any.
    fn storage_class(&self, name: &str) -> Option<Arc<dyn ManagedLedgerStorageClass>>;

    /// Installs this storage's hooks into `config` (S1, S2, S4).
    fn configure(&self, config: &mut ManagedLedgerConfig);

    /// Closes every client the storage created.
    ///
    /// # Errors
    ///
    /// The first client that failed to close.
    async fn close(&self) -> Result<(), StorageError>;
}

/// What kind of failure a storage reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum StorageErrorKind {
    /// A method was called before `initialize`.
    NotInitialized,
    /// A setting is missing or invalid.
    InvalidSettings,
    /// A BookKeeper client could not be created or failed.
    Client,
    /// The metadata store failed.
    Metadata,
}

/// A storage failure: what went wrong and what the operator can do.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StorageError {
    kind: StorageErrorKind,
    message: String,
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync>>,
}

impl StorageError {
    /// A new error of `kind`.
    pub fn new(kind: StorageErrorKind, message: impl Into<String>) -> StorageError {
        StorageError {
            kind,
            message: message.into(),
            source: None,
        }
    }

    /// The kind of failure.
    pub fn kind(&self) -> StorageErrorKind {
        self.kind
    }

    /// True when retrying later can succeed.
    pub fn is_retryable(&self) -> bool {
        match &self.source {
            Some(source) => {
                if let Some(bk) = source.downcast_ref::<BkError>() {
                    bk.is_retryable()
                } else if let Some(md) = source.downcast_ref::<MetadataError>() {
                    md.is_retryable()
                } else {
                    false
                }
            }
            None => false,
        }
    }
}

impl From<BkError> for StorageError {
    fn from(error: BkError) -> Self {
        StorageError {
            kind: StorageErrorKind::Client,
            message: error.to_string(),
            source: Some(Box::new(error)),
        }
    }
}

impl From<MetadataError> for StorageError {
    fn from(error: MetadataError) -> Self {
        StorageError {
            kind: StorageErrorKind::Metadata,
            message: error.to_string(),
            source: Some(Box::new(error)),
        }
    }
}
