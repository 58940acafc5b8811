//! The plugin passes every rule of the hook conformance suite.

use std::sync::Arc;

use bkswitch_bk_client::{EntryId, LedgerId};
use bkswitch_hook_conformance::{
    all_rules, async_trait, block_on, run_rule, HookedStorage, LedgerSetup, LedgerUnderTest,
    SchemasUnderTest, TestResult,
};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_schema_spi::SchemaClientProvider;
use example_storage_plugin::{TinyLedger, TinySchemas};

struct Plugin;

struct Ledger(TinyLedger);

struct Schemas(TinySchemas);

#[async_trait]
impl HookedStorage for Plugin {
    async fn open_ledger(
        &self,
        setup: &LedgerSetup,
        name: &str,
    ) -> TestResult<Box<dyn LedgerUnderTest>> {
        let ml = TinyLedger::open(
            setup.store.clone(),
            setup.default_client.clone(),
            setup.hooks.clone(),
            name,
        )
        .await?;
        Ok(Box::new(Ledger(ml)))
    }

    async fn open_schemas(
        &self,
        store: Arc<dyn MetadataStore>,
        provider: Arc<dyn SchemaClientProvider>,
    ) -> TestResult<Box<dyn SchemasUnderTest>> {
        Ok(Box::new(Schemas(TinySchemas::new(store, provider))))
    }
}

#[async_trait]
impl LedgerUnderTest for Ledger {
    async fn append(&self, data: &[u8]) -> TestResult<(LedgerId, EntryId)> {
        self.0.append(data).await
    }
    async fn read(&self, ledger_id: LedgerId, entry_id: EntryId) -> TestResult<Vec<u8>> {
        self.0.read(ledger_id, entry_id).await
    }
    async fn rollover(&self) -> TestResult<()> {
        self.0.rollover().await
    }
    async fn open_cursor(&self, cursor: &str) -> TestResult<()> {
        self.0.open_cursor(cursor).await
    }
    async fn mark_delete(
        &self,
        cursor: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> TestResult<()> {
        self.0.mark_delete(cursor, ledger_id, entry_id).await
    }
    async fn mark_delete_position(&self, cursor: &str) -> TestResult<(LedgerId, EntryId)> {
        self.0.mark_delete_position(cursor).await
    }
    async fn roll_cursor_ledger(&self, cursor: &str) -> TestResult<()> {
        self.0.roll_cursor_ledger(cursor).await
    }
    async fn trim(&self) -> TestResult<Vec<LedgerId>> {
        self.0.trim().await
    }
    async fn close(&self) -> TestResult<()> {
        self.0.close().await
    }
}

#[async_trait]
impl SchemasUnderTest for Schemas {
    async fn put(&self, schema_id: &str, data: &[u8]) -> TestResult<i64> {
        self.0.put(schema_id, data).await
    }
    async fn get(&self, schema_id: &str, version: i64) -> TestResult<Vec<u8>> {
        self.0.get(schema_id, version).await
    }
    async fn delete(&self, schema_id: &str) -> TestResult<()> {
        self.0.delete(schema_id).await
    }
}

#[test]
fn the_plugin_honours_every_hook() {
    let mut failures = Vec::new();
    for rule in all_rules::<Plugin>() {
        if let Err(failure) = block_on(run_rule(&rule, &Plugin)) {
            failures.push(failure.to_string());
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
