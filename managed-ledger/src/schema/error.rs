//! The one error type of schema storage.

use bkswitch_bk_client::{BkError, LedgerId};
use bkswitch_metadata_store::MetadataError;
use bkswitch_schema_spi::HookError;

/// Result alias of schema storage.
pub type Result<T, E = SchemaStorageError> = std::result::Result<T, E>;

/// What failed in a [`SchemaStorage`](super::SchemaStorage) operation.
///
/// Every variant names the schema id (and the version, ledger, cluster or path
/// when they matter) and says what the caller or the operator can do.
/// [`is_retryable`](Self::is_retryable) tells whether the same call may succeed
/// later.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum SchemaStorageError {
    /// The schema id cannot be stored at `/schemas/<schemaId>`; nothing was
    /// read or written.
    #[error(
        "invalid schema id {schema_id:?}: {reason}; use Pulsar's `tenant/namespace/topic` \
         form (1 to 4 non-empty segments separated by `/`)"
    )]
    InvalidSchemaId {
        /// The rejected id (escaped when printed).
        schema_id: String,
        /// The rule it breaks.
        reason: &'static str,
    },

    /// No schema is stored under this id.
    #[error(
        "schema `{schema_id}` not found: there is no locator at `{path}`; put a schema \
         first or check the id"
    )]
    SchemaNotFound {
        /// The schema id.
        schema_id: String,
        /// The locator path that does not exist.
        path: String,
    },

    /// The schema exists but has no such version.
    #[error(
        "schema `{schema_id}` has no version {version} (latest is {latest}); ask for one \
         of the versions listed by list_versions"
    )]
    VersionNotFound {
        /// The schema id.
        schema_id: String,
        /// The version asked for.
        version: i64,
        /// The latest version stored.
        latest: i64,
    },

    /// Every compare-and-set of the locator lost against another writer.
    #[error(
        "schema `{schema_id}`: the locator at `{path}` was changed by another writer \
         {attempts} times in a row; every ledger written by these attempts was deleted. \
         Retry later or raise max_attempts"
    )]
    Conflict {
        /// The schema id.
        schema_id: String,
        /// The locator path.
        path: String,
        /// How many attempts were made.
        attempts: usize,
    },

    /// The schema client provider (hook S3) refused.
    #[error("schema `{schema_id}`: {operation} failed in the schema client provider: {source}")]
    Hook {
        /// The schema id.
        schema_id: String,
        /// What was being done (e.g. `resolve ledger 7`).
        operation: String,
        /// The provider's error.
        #[source]
        source: Box<HookError>,
    },

    /// A BookKeeper operation failed.
    #[error("schema `{schema_id}`: {operation} failed: {source}")]
    BookKeeper {
        /// The schema id.
        schema_id: String,
        /// What was being done (e.g. `read entry 0 of ledger 7`).
        operation: String,
        /// The client's error (it names the cluster and ledger).
        #[source]
        source: Box<BkError>,
    },

    /// A metadata-store operation failed.
    #[error("schema `{schema_id}`: metadata operation failed: {source}")]
    Metadata {
        /// The schema id.
        schema_id: String,
        /// The store's error (it names the path).
        #[source]
        source: MetadataError,
    },

    /// Stored bytes (the locator or a schema entry) could not be decoded or are
    /// inconsistent.
    #[error(
        "schema `{schema_id}`: corrupt {what}: {reason}; repair or delete the schema \
         (the locator is at `{root}/{schema_id}`)",
        root = bkswitch_proto::paths::SCHEMAS_ROOT
    )]
    Corrupt {
        /// The schema id.
        schema_id: String,
        /// What is corrupt (e.g. `locator`, `schema entry in ledger 7`).
        what: String,
        /// Why.
        reason: String,
    },

    /// An operation failed after a new schema ledger was created, and deleting
    /// that ledger failed too: it is left behind unreferenced.
    #[error(
        "schema `{schema_id}`: {cause}; in addition ledger {ledger_id} on cluster \
         '{cluster}' could not be deleted ({cleanup_error}): it is not referenced by any \
         locator, delete it by hand"
    )]
    LeakedLedger {
        /// The schema id.
        schema_id: String,
        /// The unreferenced ledger.
        ledger_id: LedgerId,
        /// The cluster it was created on.
        cluster: String,
        /// Why the cleanup failed (the client's error, typed: it names the
        /// cluster and says whether retrying can help).
        cleanup_error: Box<BkError>,
        /// The failure that made the ledger an orphan.
        #[source]
        cause: Box<SchemaStorageError>,
    },
}

impl SchemaStorageError {
    /// The schema id the error is about.
    pub fn schema_id(&self) -> &str {
        match self {
            SchemaStorageError::InvalidSchemaId { schema_id, .. }
            | SchemaStorageError::SchemaNotFound { schema_id, .. }
            | SchemaStorageError::VersionNotFound { schema_id, .. }
            | SchemaStorageError::Conflict { schema_id, .. }
            | SchemaStorageError::Hook { schema_id, .. }
            | SchemaStorageError::BookKeeper { schema_id, .. }
            | SchemaStorageError::Metadata { schema_id, .. }
            | SchemaStorageError::Corrupt { schema_id, .. }
            | SchemaStorageError::LeakedLedger { schema_id, .. } => schema_id,
        }
    }

    /// Whether the same call may succeed later: a lost race
    /// ([`Conflict`](Self::Conflict)) and the retryable errors of the provider,
    /// the BookKeeper client and the metadata store.
    pub fn is_retryable(&self) -> bool {
        match self {
            SchemaStorageError::Conflict { .. } => true,
            SchemaStorageError::Hook { source, .. } => source.is_retryable(),
            SchemaStorageError::BookKeeper { source, .. } => source.is_retryable(),
            SchemaStorageError::Metadata { source, .. } => source.is_retryable(),
            SchemaStorageError::LeakedLedger { cause, .. } => cause.is_retryable(),
            SchemaStorageError::InvalidSchemaId { .. }
            | SchemaStorageError::SchemaNotFound { .. }
            | SchemaStorageError::VersionNotFound { .. }
            | SchemaStorageError::Corrupt { .. } => false,
        }
    }

    /// Whether the schema or the version does not exist.
    pub fn is_not_found(&self) -> bool {
        matches!(
            self,
            SchemaStorageError::SchemaNotFound { .. } | SchemaStorageError::VersionNotFound { .. }
        )
    }
}
