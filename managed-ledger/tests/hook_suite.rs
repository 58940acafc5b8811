//! The hook conformance suite (`bkswitch-hook-conformance`) run against the
//! reference managed ledger and schema storage, and its self-tests: the same
//! adapter with one seeded bug each, every one of which the suite must catch.

use std::collections::HashMap;
use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, EntryId, LedgerId};
use bkswitch_hook_conformance::{
    all_rules, async_trait, block_on, run_all, run_rule, HookedStorage, LedgerSetup,
    LedgerUnderTest, SchemasUnderTest, TestResult, RULE_NAMES,
};
use bkswitch_managed_ledger::schema::{SchemaStorage, SchemaStorageOptions, SchemaVersion};
use bkswitch_managed_ledger::{ManagedCursor, ManagedLedger, ManagedLedgerFactory, Position};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{HookError, LedgerResolver, ManagedLedgerConfig, StorageHooks};
use bkswitch_proto::schema::PositionInfo;
use bkswitch_schema_spi::SchemaClientProvider;
use parking_lot::Mutex;

/// A bug seeded into the adapter, for the suite's self-tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// New ledgers are created on the storage's own client (S1 ignored).
    IgnoresS1,
    /// New ledgers are recorded without the S4 properties.
    IgnoresS4,
    /// Ledgers are opened on the storage's own client (S2 ignored).
    IgnoresS2,
    /// Every read consults S2 again (no handle cache).
    ResolvesEveryRead,
    /// Schema ledgers are recorded without S3's creation properties.
    IgnoresS3Properties,
}

/// The reference implementation behind the suite's traits.
struct Reference {
    bug: Option<Bug>,
}

impl Reference {
    fn hooks(&self, hooks: &StorageHooks) -> StorageHooks {
        let mut hooks = hooks.clone();
        match self.bug {
            Some(Bug::IgnoresS1) => hooks.active_client = None,
            Some(Bug::IgnoresS4) => {
                hooks.new_ledger_properties.clear();
                hooks.new_cursor_ledger_properties.clear();
            }
            Some(Bug::IgnoresS2) => {
                hooks.ledger_resolver = None;
                hooks.cursor_resolver = None;
            }
            _ => {}
        }
        hooks
    }
}

#[async_trait]
impl HookedStorage for Reference {
    async fn open_ledger(
        &self,
        setup: &LedgerSetup,
        name: &str,
    ) -> TestResult<Box<dyn LedgerUnderTest>> {
        let config = ManagedLedgerConfig::default()
            .with_quorums(1, 1, 1)
            .with_metadata_quorums(1, 1, 1)
            .with_hooks(self.hooks(&setup.hooks));
        let factory = ManagedLedgerFactory::new(setup.store.clone(), setup.default_client.clone());
        let ml = factory.open(name, config).await?;
        Ok(Box::new(OpenLedger {
            ml,
            cursors: Mutex::new(HashMap::new()),
            per_read_resolver: match self.bug {
                Some(Bug::ResolvesEveryRead) => setup.hooks.ledger_resolver.clone(),
                _ => None,
            },
        }))
    }

    async fn open_schemas(
        &self,
        store: Arc<dyn MetadataStore>,
        provider: Arc<dyn SchemaClientProvider>,
    ) -> TestResult<Box<dyn SchemasUnderTest>> {
        let provider: Arc<dyn SchemaClientProvider> = match self.bug {
            Some(Bug::IgnoresS3Properties) => Arc::new(NoProperties(provider)),
            _ => provider,
        };
        Ok(Box::new(Schemas(SchemaStorage::new(
            store,
            provider,
            SchemaStorageOptions::default(),
        ))))
    }
}

struct OpenLedger {
    ml: ManagedLedger,
    cursors: Mutex<HashMap<String, ManagedCursor>>,
    per_read_resolver: Option<Arc<dyn LedgerResolver>>,
}

impl OpenLedger {
    fn cursor(&self, name: &str) -> TestResult<ManagedCursor> {
        self.cursors
            .lock()
            .get(name)
            .cloned()
            .ok_or_else(|| format!("cursor {name} is not open").into())
    }
}

#[async_trait]
impl LedgerUnderTest for OpenLedger {
    async fn append(&self, data: &[u8]) -> TestResult<(LedgerId, EntryId)> {
        let p = self.ml.append(data.to_vec()).await?;
        Ok((p.ledger_id, p.entry_id))
    }

    async fn read(&self, ledger_id: LedgerId, entry_id: EntryId) -> TestResult<Vec<u8>> {
        if let Some(resolver) = &self.per_read_resolver {
            let (info, _) = self.ml.metadata();
            if let Some(l) = info.ledger_info.iter().find(|l| l.ledger_id == ledger_id) {
                resolver.resolve_ledger(l)?;
            }
        }
        let entries = self
            .ml
            .read_entries(Position::new(ledger_id, entry_id), 1)
            .await?;
        let entry = entries
            .into_iter()
            .next()
            .ok_or_else(|| format!("no entry at ({ledger_id}, {entry_id})"))?;
        Ok(entry.data.to_vec())
    }

    async fn rollover(&self) -> TestResult<()> {
        Ok(self.ml.rollover().await?)
    }

    async fn open_cursor(&self, cursor: &str) -> TestResult<()> {
        let c = self.ml.open_cursor(cursor).await?;
        self.cursors.lock().insert(cursor.to_owned(), c);
        Ok(())
    }

    async fn mark_delete(
        &self,
        cursor: &str,
        ledger_id: LedgerId,
        entry_id: EntryId,
    ) -> TestResult<()> {
        let c = self.cursor(cursor)?;
        Ok(c.mark_delete(Position::new(ledger_id, entry_id)).await?)
    }

    async fn mark_delete_position(&self, cursor: &str) -> TestResult<(LedgerId, EntryId)> {
        let p = self.cursor(cursor)?.mark_delete_position();
        Ok((p.ledger_id, p.entry_id))
    }

    async fn roll_cursor_ledger(&self, cursor: &str) -> TestResult<()> {
        Ok(self.cursor(cursor)?.roll_cursor_ledger().await?)
    }

    async fn trim(&self) -> TestResult<Vec<LedgerId>> {
        Ok(self.ml.trim_consumed_ledgers().await?)
    }

    async fn close(&self) -> TestResult<()> {
        Ok(self.ml.close().await?)
    }
}

struct Schemas(SchemaStorage);

#[async_trait]
impl SchemasUnderTest for Schemas {
    async fn put(&self, schema_id: &str, data: &[u8]) -> TestResult<i64> {
        // The data stands for its own hash: every version differs.
        Ok(self.0.put(schema_id, data, data).await?.0)
    }

    async fn get(&self, schema_id: &str, version: i64) -> TestResult<Vec<u8>> {
        Ok(self
            .0
            .get(schema_id, SchemaVersion(version))
            .await?
            .data
            .to_vec())
    }

    async fn delete(&self, schema_id: &str) -> TestResult<()> {
        self.0.delete(schema_id).await?;
        Ok(())
    }
}

/// Seeded S3 bug: forwards everything but drops the creation properties.
#[derive(Debug)]
struct NoProperties(Arc<dyn SchemaClientProvider>);

impl SchemaClientProvider for NoProperties {
    fn resolve(&self, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        self.0.resolve(position)
    }

    fn active(&self) -> Arc<dyn BookKeeper> {
        self.0.active()
    }

    fn creation_properties(
        &self,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>, HookError> {
        let _ = self.0.creation_properties(client)?;
        Ok(Vec::new())
    }
}

#[test]
fn the_reference_managed_ledger_passes_every_rule() {
    let reference = Reference { bug: None };
    for rule in all_rules::<Reference>() {
        let result = block_on(run_rule(&rule, &reference));
        assert!(result.is_ok(), "{}", result.unwrap_err());
    }
    assert_eq!(all_rules::<Reference>().len(), RULE_NAMES.len());
}

/// Runs the whole suite against the adapter with `bug` and returns the names
/// of the rules that failed.
fn failing_rules(bug: Bug) -> Vec<&'static str> {
    let storage = Reference { bug: Some(bug) };
    match block_on(run_all(&storage)) {
        Ok(()) => Vec::new(),
        Err(report) => report.failures.iter().map(|f| f.rule).collect(),
    }
}

#[test]
fn the_suite_catches_a_managed_ledger_that_ignores_s1() {
    let failed = failing_rules(Bug::IgnoresS1);
    assert!(
        failed.contains(&"creations_ask_the_active_client"),
        "{failed:?}"
    );
}

#[test]
fn the_suite_catches_a_managed_ledger_that_records_ids_without_their_stamp() {
    let failed = failing_rules(Bug::IgnoresS4);
    assert!(failed.contains(&"stamp_recorded_with_the_id"), "{failed:?}");
}

#[test]
fn the_suite_catches_a_managed_ledger_that_opens_ledgers_without_s2() {
    let failed = failing_rules(Bug::IgnoresS2);
    assert!(
        failed.contains(&"opens_and_recovery_route_by_stamp"),
        "{failed:?}"
    );
    assert!(
        failed.contains(&"trim_deletes_route_by_stamp"),
        "{failed:?}"
    );
    assert!(
        failed.contains(&"cursor_ledgers_route_by_stamp"),
        "{failed:?}"
    );
}

#[test]
fn the_suite_catches_a_managed_ledger_that_resolves_on_every_read() {
    let failed = failing_rules(Bug::ResolvesEveryRead);
    assert_eq!(failed, vec!["one_resolve_per_handle_open"]);
}

#[test]
fn the_suite_catches_a_schema_storage_that_drops_the_s3_stamp() {
    let failed = failing_rules(Bug::IgnoresS3Properties);
    assert!(
        failed.contains(&"schema_ledgers_follow_the_provider"),
        "{failed:?}"
    );
}
