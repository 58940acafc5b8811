//! Schema storage: every version of a schema in its own ledger, located by a
//! `SchemaLocator` at `/schemas/<schemaId>` — the shape of Pulsar's
//! `BookkeeperSchemaStorage`, with the PIP-477 hook S3
//! ([`SchemaClientProvider`]) deciding which bookie cluster each schema ledger
//! lives on.
//!
//! # Layout ([formats §2](bkswitch_docs::formats))
//!
//! - Each version is a `SchemaEntry { schema_data, index }` written as entry 0
//!   of a new ledger, which is then closed. `index` is the locator's index
//!   before this version; for the first version it is Pulsar's placeholder
//!   (one `IndexEntry` with version 0 at ledger -1, entry -1, and the hash).
//! - The locator is `SchemaLocator { info, index }`: `info` is the latest
//!   version, `index` every version in ascending order. It is created with
//!   [`ExpectedVersion::NotExists`](bkswitch_metadata_store::ExpectedVersion::NotExists)
//!   and then replaced by compare-and-set on the node version read
//!   ([I3](bkswitch_docs::invariants::I3)).
//! - New ledgers get Pulsar's custom metadata `application=pulsar`,
//!   `component=schema`, `pulsar/schemaId=<schemaId>`.
//!
//! # Hook S3 and the invariants
//!
//! - A put creates the ledger on [`SchemaClientProvider::active`] and records
//!   [`SchemaClientProvider::creation_properties`] of *that* client in the new
//!   `PositionInfo.properties` of the very locator write that records the ledger
//!   ([I1](bkswitch_docs::invariants::I1)). With
//!   [`SingleClientSchemaProvider`](bkswitch_schema_spi::SingleClientSchemaProvider)
//!   no property is added, so the locator bytes are those of a broker without
//!   PIP-477.
//! - Every open of a schema ledger, every delete, and the delete of the orphan
//!   left by a lost compare-and-set go through
//!   [`SchemaClientProvider::resolve`], once per open
//!   ([I4](bkswitch_docs::invariants::I4), [I15](bkswitch_docs::invariants::I15)).
//!   When the provider fails to attribute a new ledger, no stamp exists to route by, so
//!   that ledger is deleted on the client that created it.
//! - A put whose compare-and-set loses deletes its ledger and starts again from
//!   a fresh read, at most [`SchemaStorageOptions::max_attempts`] times. Any
//!   other failure after the ledger was created deletes it before returning.
//!   The single exception is a retryable metadata error on the locator write
//!   when the locator cannot be re-read: the write may have been applied, so the
//!   ledger is kept rather than risk deleting a referenced one.
//! - Deduplication as in Pulsar's storage layer: a put whose hash is non-empty
//!   and equals the latest version's hash returns that version and writes
//!   nothing. (Recent Pulsar releases moved this check into the schema registry;
//!   only the latest version is compared here.)
//!
//! # Schema ids
//!
//! A schema id is Pulsar's schema name: `tenant/namespace/topic` (or the legacy
//! `property/cluster/namespace/topic`). Accepted: 1 to 4 non-empty segments
//! separated by single `/`, no leading or trailing `/`, no `.` or `..` segment,
//! no control character, and nothing the metadata store refuses in a path
//! ([`validate_path`](bkswitch_metadata_store::validate_path)). Anything else
//! is [`SchemaStorageError::InvalidSchemaId`] before any I/O.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use bkswitch_bk_client::{BookKeeper, LedgerConfig, MemoryBookKeeper};
//! use bkswitch_managed_ledger::schema::{SchemaStorage, SchemaStorageOptions, SchemaVersion};
//! use bkswitch_metadata_store::{MemoryStore, MetadataStore};
//! use bkswitch_schema_spi::SingleClientSchemaProvider;
//!
//! # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
//! let bookkeeper: Arc<dyn BookKeeper> = Arc::new(MemoryBookKeeper::new("bk-a"));
//! let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
//! let storage = SchemaStorage::new(
//!     store,
//!     Arc::new(SingleClientSchemaProvider::new(bookkeeper)),
//!     SchemaStorageOptions::default().with_ledger_config(LedgerConfig::default().with_quorums(1, 1, 1)),
//! );
//!
//! let id = "public/default/orders";
//! assert_eq!(storage.put(id, b"{\"v\":1}", b"hash-1").await?, SchemaVersion(0));
//! assert_eq!(storage.put(id, b"{\"v\":2}", b"hash-2").await?, SchemaVersion(1));
//! // Same hash as the latest version: deduplicated, nothing written.
//! assert_eq!(storage.put(id, b"{\"v\":2}", b"hash-2").await?, SchemaVersion(1));
//!
//! let latest = storage.get_latest(id).await?;
//! assert_eq!(latest.version, SchemaVersion(1));
//! assert_eq!(&latest.data[..], b"{\"v\":2}");
//!
//! let first = storage.get(id, SchemaVersion(0)).await?;
//! assert_eq!(&first.data[..], b"{\"v\":1}");
//! assert_eq!(&first.hash[..], b"hash-1");
//! assert_eq!(storage.list_versions(id).await?, vec![SchemaVersion(0), SchemaVersion(1)]);
//! # Ok::<(), bkswitch_managed_ledger::schema::SchemaStorageError>(())
//! # }).unwrap();
//! ```

mod error;
mod storage;

use std::fmt;

use bkswitch_bk_client::LedgerConfig;
pub use bkswitch_schema_spi::SchemaClientProvider;
use bytes::Bytes;

pub use error::{Result, SchemaStorageError};
pub use storage::SchemaStorage;

/// The metadata-store node under which schema locators live (Pulsar's
/// `/schemas`, defined in [`bkswitch_proto::paths`]).
pub const SCHEMAS_ROOT: &str = bkswitch_proto::paths::SCHEMAS_ROOT;

/// The default of [`SchemaStorageOptions::max_attempts`].
pub const DEFAULT_MAX_ATTEMPTS: usize = 10;

/// The most `/`-separated segments a schema id may have
/// (`property/cluster/namespace/topic`).
pub const MAX_SCHEMA_ID_SEGMENTS: usize = 4;

/// A schema version number (Pulsar's `LongSchemaVersion`): 0 for the first
/// version of a schema, then +1 per version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SchemaVersion(pub i64);

impl SchemaVersion {
    /// The 8-byte big-endian form Pulsar exchanges with clients.
    pub fn to_bytes(self) -> [u8; 8] {
        self.0.to_be_bytes()
    }

    /// Reads the first 8 bytes as a big-endian version, as Pulsar's
    /// `versionFromBytes` does; `None` when fewer than 8 bytes are given.
    pub fn from_bytes(bytes: &[u8]) -> Option<SchemaVersion> {
        let head: [u8; 8] = bytes.get(..8)?.try_into().ok()?;
        Some(SchemaVersion(i64::from_be_bytes(head)))
    }
}

impl fmt::Display for SchemaVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// One version of a schema as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSchema {
    /// The version number.
    pub version: SchemaVersion,
    /// The schema data as it was put.
    pub data: Bytes,
    /// The hash recorded with the version in the locator.
    pub hash: Bytes,
}

/// Settings of a [`SchemaStorage`].
///
/// The default creates ledgers with [`LedgerConfig::default`] (ensemble 3,
/// write and ack quorum 2, CRC32C, the empty password Pulsar uses for schema
/// ledgers) and makes at most [`DEFAULT_MAX_ATTEMPTS`] attempts per write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SchemaStorageOptions {
    /// Quorums, digest type and password of new schema ledgers (and the digest
    /// and password used to open them). Pulsar's schema custom metadata is added
    /// to `custom_metadata`.
    pub ledger_config: LedgerConfig,
    /// How many times a put or delete reads the locator and tries its
    /// compare-and-set before giving up with [`SchemaStorageError::Conflict`]
    /// (values below 1 count as 1).
    pub max_attempts: usize,
}

impl Default for SchemaStorageOptions {
    fn default() -> Self {
        SchemaStorageOptions {
            ledger_config: LedgerConfig::default(),
            max_attempts: DEFAULT_MAX_ATTEMPTS,
        }
    }
}

impl SchemaStorageOptions {
    /// Sets the configuration of new schema ledgers.
    pub fn with_ledger_config(mut self, ledger_config: LedgerConfig) -> Self {
        self.ledger_config = ledger_config;
        self
    }

    /// Sets the number of compare-and-set attempts.
    pub fn with_max_attempts(mut self, max_attempts: usize) -> Self {
        self.max_attempts = max_attempts;
        self
    }
}

/// The locator path of `schema_id`: `/schemas/<schemaId>`.
///
/// # Errors
///
/// [`SchemaStorageError::InvalidSchemaId`] when the id breaks a rule of the
/// [module documentation](self#schema-ids).
pub fn locator_path(schema_id: &str) -> Result<String> {
    let invalid = |reason: &'static str| SchemaStorageError::InvalidSchemaId {
        schema_id: schema_id.to_owned(),
        reason,
    };
    if schema_id.is_empty() {
        return Err(invalid("the id is empty"));
    }
    if schema_id.chars().any(char::is_control) {
        return Err(invalid("the id contains a control character"));
    }
    if schema_id.starts_with('/') || schema_id.ends_with('/') {
        return Err(invalid("the id must not start or end with `/`"));
    }
    let mut segments = 0;
    for segment in schema_id.split('/') {
        segments += 1;
        match segment {
            "" => return Err(invalid("the id contains an empty segment (`//`)")),
            "." | ".." => return Err(invalid("the id contains a `.` or `..` segment")),
            _ => {}
        }
    }
    if segments > MAX_SCHEMA_ID_SEGMENTS {
        return Err(invalid("the id has more than 4 `/`-separated segments"));
    }
    let path = format!("{SCHEMAS_ROOT}/{schema_id}");
    bkswitch_metadata_store::validate_path(
        bkswitch_metadata_store::Operation::Put,
        &path,
        bkswitch_metadata_store::PathUse::Write,
    )
    .map_err(|_| invalid("the id contains a character the metadata store refuses"))?;
    Ok(path)
}
