//! What the suite drives: the implementation under test, seen through three
//! small traits an implementer writes adapters for.

use std::error::Error;
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{BookKeeper, EntryId, LedgerId};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::StorageHooks;
use bkswitch_schema_spi::SchemaClientProvider;

/// An error of the implementation under test, reported by the rule that saw
/// it.
pub type TestError = Box<dyn Error + Send + Sync>;

/// The result type of the adapter methods.
pub type TestResult<T> = Result<T, TestError>;

/// What a managed ledger is opened with.
#[derive(Debug, Clone)]
pub struct LedgerSetup {
    /// The metadata store to record the managed ledger in, at Pulsar's layout:
    /// `ManagedLedgerInfo` at `/managed-ledgers/<name>` and each cursor's
    /// `ManagedCursorInfo` at `/managed-ledgers/<name>/<cursor>`.
    pub store: Arc<dyn MetadataStore>,
    /// The storage's own client (the one a managed ledger without hooks uses).
    /// The suite gives a client of a cluster that holds none of its ledgers, so
    /// an operation that bypasses a hook fails or lands where the suite sees it.
    pub default_client: Arc<dyn BookKeeper>,
    /// The hooks to install (S1, S2, S4).
    pub hooks: StorageHooks,
}

/// The implementation under test: opens managed ledgers and schema storage
/// with the suite's hooks installed.
#[async_trait]
pub trait HookedStorage: Send + Sync {
    /// Opens (creating when missing) the managed ledger `name`
    /// (`tenant/namespace/persistent/topic`) as a broker taking ownership does:
    /// load the metadata, recover the last ledger, create a new one. Each call
    /// models a fresh broker: nothing may be cached between calls.
    ///
    /// # Errors
    ///
    /// Whatever the implementation fails with.
    async fn open_ledger(
        &self,
        setup: &LedgerSetup,
        name: &str,
    ) -> TestResult<Box<dyn LedgerUnderTest>>;

    /// Opens the schema storage that keeps its locators in `store` (Pulsar's
    /// `SchemaLocator` at `/schemas/<schemaId>`) with `provider` as S3.
    ///
    /// # Errors
    ///
    /// Whatever the implementation fails with.
    async fn open_schemas(
        &self,
        store: Arc<dyn MetadataStore>,
        provider: Arc<dyn SchemaClientProvider>,
    ) -> TestResult<Box<dyn SchemasUnderTest>>;
}

/// One open managed ledger of the implementation under test.
#[async_trait]
pub trait LedgerUnderTest: Send + Sync {
    /// Appends one entry; returns its position (ledger id, entry id).
    async fn append(&self, data: &[u8]) -> TestResult<(LedgerId, EntryId)>;

    /// Reads the entry at (`ledger_id`, `entry_id`).
    async fn read(&self, ledger_id: LedgerId, entry_id: EntryId) -> TestResult<Vec<u8>>;

    /// Closes the current ledger and starts a new one (a rollover).
    async fn rollover(&self) -> TestResult<()>;

    /// Opens (creating when missing) the durable cursor `cursor`.
    async fn open_cursor(&self, cursor: &str) -> TestResult<()>;

    /// Moves `cursor`'s mark-delete position to (`ledger_id`, `entry_id`) and
    /// persists it.
    async fn mark_delete(
        &self,
        cursor: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> TestResult<()>;

    /// The persisted mark-delete position of `cursor`.
    async fn mark_delete_position(&self, cursor: &str) -> TestResult<(LedgerId, EntryId)>;

    /// Moves `cursor` to a new cursor ledger (the old one is deleted).
    async fn roll_cursor_ledger(&self, cursor: &str) -> TestResult<()>;

    /// Deletes the ledgers every cursor has consumed; returns their ids.
    async fn trim(&self) -> TestResult<Vec<LedgerId>>;

    /// Closes the managed ledger (the broker gives up ownership).
    async fn close(&self) -> TestResult<()>;
}

/// The schema storage of the implementation under test.
#[async_trait]
pub trait SchemasUnderTest: Send + Sync {
    /// Stores a new version of `schema_id`; returns its version number.
    async fn put(&self, schema_id: &str, data: &[u8]) -> TestResult<i64>;

    /// Reads version `version` of `schema_id`.
    async fn get(&self, schema_id: &str, version: i64) -> TestResult<Vec<u8>>;

    /// Deletes every version of `schema_id` and its ledgers.
    async fn delete(&self, schema_id: &str) -> TestResult<()>;
}
