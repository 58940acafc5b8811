//! The rules, one public async function each. A rule builds its own world (a
//! fresh metadata store, two clusters `a` and `b` plus an `unused` one whose
//! client is the storage's default), drives the implementation under test
//! through [`HookedStorage`] and checks with assertions; [`run_rule`] turns a
//! panic into a failure naming the rule.
//!
//! | family | what it holds the implementation to |
//! |---|---|
//! | `s1` | every ledger creation asks S1 and creates on the client it returns |
//! | `i1` | a new ledger's stamp is recorded in the very write that records its id ([I1](bkswitch_docs::invariants::I1)); a failed S4 records nothing |
//! | `i4` | S2 is consulted once per handle open, not per read ([I4](bkswitch_docs::invariants::I4)) |
//! | `i15` | every open, recovery and delete routes by stamp ([I15](bkswitch_docs::invariants::I15)) |
//! | `s3` | schema ledgers are created on S3's active client, stamped in the locator write, read and deleted by stamp |
//!
//! [`run_rule`]: crate::run_rule

use std::collections::BTreeSet;
use std::fmt::Display;
use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, LedgerId, MemoryCluster};
use bkswitch_metadata_store::testkit::{RecordingStore, WriteOp};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::StorageHooks;
use bkswitch_proto::paths::{MANAGED_LEDGERS_ROOT, SCHEMAS_ROOT};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{decode_managed_cursor_info, decode_managed_ledger_info, Message, Stamped};

use crate::env::{HookedStorage, LedgerSetup, LedgerUnderTest, TestResult};
use crate::hooks::{
    CountingResolver, CountingSchemaProvider, StampingProvider, SwitchableSupplier,
};

/// The managed ledger every rule uses.
pub const NAME: &str = "hook-suite/ns/persistent/topic";
/// Its cursor.
pub const CURSOR: &str = "sub";
/// The schema id the schema rules use.
pub const SCHEMA_ID: &str = "hook-suite/ns/topic";

/// First ledger id of cluster `b`, so that ids never collide across clusters
/// (as the switch's id-generator step guarantees on real clusters).
const B_FIRST_ID: LedgerId = 1_000_000;
/// First ledger id of the `unused` default cluster.
const UNUSED_FIRST_ID: LedgerId = 2_000_000;

/// The world one rule runs in.
struct World {
    store: Arc<RecordingStore>,
    a: MemoryCluster,
    b: MemoryCluster,
    unused: MemoryCluster,
    supplier: Arc<SwitchableSupplier>,
    resolver: Arc<CountingResolver>,
    stamper: Arc<StampingProvider>,
}

impl World {
    fn new() -> World {
        let a = MemoryCluster::new("a");
        let b = MemoryCluster::new("b");
        let unused = MemoryCluster::new("unused");
        b.advance_ledger_id_to(B_FIRST_ID).expect("fresh cluster b");
        unused
            .advance_ledger_id_to(UNUSED_FIRST_ID)
            .expect("fresh cluster unused");
        let resolver = Arc::new(CountingResolver::new(Arc::new(unused.client())));
        resolver.add_client(Arc::new(a.client()));
        resolver.add_client(Arc::new(b.client()));
        World {
            store: Arc::new(RecordingStore::new(Arc::new(MemoryStore::new()))),
            supplier: Arc::new(SwitchableSupplier::new(Arc::new(a.client()))),
            a,
            b,
            unused,
            resolver,
            stamper: Arc::new(StampingProvider::new()),
        }
    }

    fn setup(&self) -> LedgerSetup {
        LedgerSetup {
            store: self.store.clone(),
            default_client: Arc::new(self.unused.client()),
            hooks: StorageHooks {
                active_client: Some(self.supplier.clone()),
                ledger_resolver: Some(self.resolver.clone()),
                cursor_resolver: Some(self.resolver.clone()),
                new_ledger_properties: vec![self.stamper.clone()],
                new_cursor_ledger_properties: vec![self.stamper.clone()],
            },
        }
    }

    fn client(cluster: &MemoryCluster) -> Arc<dyn BookKeeper> {
        Arc::new(cluster.client())
    }

    /// The name of the cluster that holds `ledger_id`, if any does.
    fn holder(&self, ledger_id: LedgerId) -> Option<&'static str> {
        if self.a.contains_ledger(ledger_id) {
            Some("a")
        } else if self.b.contains_ledger(ledger_id) {
            Some("b")
        } else if self.unused.contains_ledger(ledger_id) {
            Some("unused")
        } else {
            None
        }
    }

    async fn open<S: HookedStorage + ?Sized>(&self, storage: &S) -> Box<dyn LedgerUnderTest> {
        ok(
            storage.open_ledger(&self.setup(), NAME).await,
            "opening the managed ledger",
        )
    }

    /// The data-ledger ids recorded now.
    async fn recorded_ledgers(&self) -> Vec<LedgerId> {
        let value = self
            .store
            .get(&ml_path())
            .await
            .expect("reading the managed ledger's metadata")
            .expect("the managed ledger's metadata exists");
        decode_managed_ledger_info(&value.value)
            .expect("ManagedLedgerInfo decodes")
            .ledger_info
            .iter()
            .map(|l| l.ledger_id)
            .collect()
    }

    /// The cursor ledger recorded now.
    async fn cursor_ledger(&self) -> LedgerId {
        let value = self
            .store
            .get(&cursor_path())
            .await
            .expect("reading the cursor's metadata")
            .expect("the cursor's metadata exists");
        decode_managed_cursor_info(&value.value)
            .expect("ManagedCursorInfo decodes")
            .cursors_ledger_id
    }
}

fn ml_path() -> String {
    format!("{MANAGED_LEDGERS_ROOT}/{NAME}")
}

fn cursor_path() -> String {
    format!("{MANAGED_LEDGERS_ROOT}/{NAME}/{CURSOR}")
}

fn schema_path() -> String {
    format!("{SCHEMAS_ROOT}/{SCHEMA_ID}")
}

/// Unwraps an adapter result, failing the rule with what was being done.
fn ok<T>(result: TestResult<T>, what: impl Display) -> T {
    result.unwrap_or_else(|e| panic!("{what} failed: {e}"))
}

/// Every successful write to `path` (puts and creates), in order.
fn values_written(store: &RecordingStore, path: &str) -> Vec<Vec<u8>> {
    store
        .successful_writes_to(path)
        .into_iter()
        .filter(|w| w.op != WriteOp::Delete)
        .map(|w| w.value)
        .collect()
}

/// S1: every data- and cursor-ledger creation asks the active-client supplier
/// and creates the ledger on the client it returned; nothing is created on the
/// storage's default client.
pub async fn creations_ask_the_active_client<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let ml = w.open(storage).await;
    ok(ml.open_cursor(CURSOR).await, "open_cursor");
    let (first, _) = ok(ml.append(b"e0").await, "append on a");
    ok(ml.mark_delete(CURSOR, first, 0).await, "mark_delete");
    w.supplier.switch_to(World::client(&w.b));
    ok(ml.rollover().await, "rollover after S1 switched to b");
    let (second, _) = ok(ml.append(b"e1").await, "append after the rollover");
    ok(ml.roll_cursor_ledger(CURSOR).await, "roll_cursor_ledger");
    let cursor_ledger = w.cursor_ledger().await;

    assert_eq!(
        w.holder(first),
        Some("a"),
        "ledger {first}, created while S1 answered a, is not on a"
    );
    assert_eq!(
        w.holder(second),
        Some("b"),
        "ledger {second}, created after S1 switched to b, is not on b (S1 not asked at rollover?)"
    );
    assert_eq!(
        w.holder(cursor_ledger),
        Some("b"),
        "cursor ledger {cursor_ledger}, created after S1 switched to b, is not on b"
    );
    assert!(
        w.unused.ledger_ids().is_empty(),
        "ledgers {:?} were created on the storage's default client, bypassing S1",
        w.unused.ledger_ids()
    );
    assert!(
        w.supplier.calls() >= 3,
        "S1 was asked {} times for at least 3 creations",
        w.supplier.calls()
    );
    ok(ml.close().await, "close");
}

/// I1: every data-ledger id and cursor-ledger id first appears in a metadata
/// write that also carries its stamp, naming the cluster that holds it.
pub async fn stamp_recorded_with_the_id<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let ml = w.open(storage).await;
    ok(ml.open_cursor(CURSOR).await, "open_cursor");
    let (first, _) = ok(ml.append(b"e0").await, "append");
    ok(ml.mark_delete(CURSOR, first, 0).await, "mark_delete");
    w.supplier.switch_to(World::client(&w.b));
    ok(ml.rollover().await, "rollover");
    ok(ml.append(b"e1").await, "append");
    ok(ml.roll_cursor_ledger(CURSOR).await, "roll_cursor_ledger");
    ok(ml.close().await, "close");

    let mut seen = BTreeSet::new();
    let mut checked = 0;
    for value in values_written(&w.store, &ml_path()) {
        let info = decode_managed_ledger_info(&value).expect("ManagedLedgerInfo decodes");
        for ledger in &info.ledger_info {
            if !seen.insert(ledger.ledger_id) {
                continue;
            }
            checked += 1;
            let stamp = ledger.cluster_stamp().expect("one stamp at most");
            let holder = w.holder(ledger.ledger_id);
            assert!(
                stamp.is_some() && stamp == holder,
                "data ledger {} was recorded with stamp {stamp:?} in the write that recorded its \
                 id, but it lives on {holder:?} (I1: stamp in the same compare-and-set)",
                ledger.ledger_id
            );
        }
    }
    assert!(checked >= 2, "only {checked} data ledgers were recorded");

    let mut last = None;
    let mut cursors = 0;
    for value in values_written(&w.store, &cursor_path()) {
        let info = decode_managed_cursor_info(&value).expect("ManagedCursorInfo decodes");
        if info.cursors_ledger_id < 0 || last == Some(info.cursors_ledger_id) {
            continue;
        }
        last = Some(info.cursors_ledger_id);
        cursors += 1;
        let stamp = info.cluster_stamp().expect("one stamp at most");
        let holder = w.holder(info.cursors_ledger_id);
        // A rolled-over cursor ledger is deleted: only check stamps of ledgers
        // that still exist, and that every one carried a stamp.
        assert!(
            stamp.is_some(),
            "cursor ledger {} was recorded without a stamp (I1)",
            info.cursors_ledger_id
        );
        if holder.is_some() {
            assert_eq!(
                stamp, holder,
                "cursor ledger {} is stamped {stamp:?} but lives on {holder:?}",
                info.cursors_ledger_id
            );
        }
    }
    assert!(
        cursors >= 2,
        "only {cursors} cursor ledgers were recorded: {:?}",
        values_written(&w.store, &cursor_path())
            .iter()
            .map(|v| decode_managed_cursor_info(v).map(|i| i.cursors_ledger_id))
            .collect::<Vec<_>>()
    );
}

/// I1: when the S4 provider fails, the new ledger is not recorded and is
/// deleted: no recorded ledger lacks its stamp and no ledger is left behind
/// unrecorded.
pub async fn failed_stamp_records_nothing<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let ml = w.open(storage).await;
    ok(ml.append(b"e0").await, "append");
    w.stamper.set_failing(true);
    let refused = match ml.rollover().await {
        Err(_) => true,
        Ok(()) => ml.append(b"e1").await.is_err(),
    };
    w.stamper.set_failing(false);
    assert!(
        refused,
        "a rollover whose S4 provider failed went on as if the ledger were recorded"
    );
    let _ = ml.close().await;

    let recorded = w.recorded_ledgers().await;
    let value = w.store.get(&ml_path()).await.unwrap().unwrap();
    for ledger in decode_managed_ledger_info(&value.value)
        .unwrap()
        .ledger_info
    {
        assert!(
            ledger.cluster_stamp().ok().flatten().is_some(),
            "ledger {} is recorded without a stamp after S4 failed",
            ledger.ledger_id
        );
    }
    let left: Vec<LedgerId> =
        w.a.ledger_ids()
            .into_iter()
            .filter(|id| !recorded.contains(id))
            .collect();
    assert!(
        left.is_empty(),
        "ledgers {left:?} were created, never recorded (S4 failed) and not deleted: leaked"
    );
    // The managed ledger opens again and writes.
    let ml = w.open(storage).await;
    ok(ml.append(b"e2").await, "append after S4 recovered");
    ok(ml.close().await, "close");
}

/// I4: reading many entries of one ledger asks the S2 resolver once (per
/// handle open), not once per read.
pub async fn one_resolve_per_handle_open<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let ml = w.open(storage).await;
    let mut positions = Vec::new();
    for i in 0..3 {
        positions.push(ok(ml.append(format!("e{i}").as_bytes()).await, "append"));
    }
    ok(ml.rollover().await, "rollover");
    ok(ml.append(b"next").await, "append");
    ok(ml.close().await, "close");

    let ml = w.open(storage).await;
    let (ledger, _) = positions[0];
    w.resolver.reset();
    for _ in 0..5 {
        for (i, (l, e)) in positions.iter().enumerate() {
            let data = ok(ml.read(*l, *e).await, format!("read ({l}, {e})"));
            assert_eq!(data, format!("e{i}").as_bytes(), "entry ({l}, {e})");
        }
    }
    let calls = w.resolver.ledger_calls(ledger);
    assert_eq!(
        calls, 1,
        "15 reads of ledger {ledger} consulted the S2 resolver {calls} times; I4 asks for one \
         resolve per handle open"
    );
    ok(ml.close().await, "close");
}

/// I15: a new owner's recovery of the last ledger and every read route by the
/// stamp, to the cluster that holds the ledger (never to the default client).
pub async fn opens_and_recovery_route_by_stamp<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let ml = w.open(storage).await;
    let (on_a, _) = ok(ml.append(b"on a").await, "append");
    w.supplier.switch_to(World::client(&w.b));
    ok(ml.rollover().await, "rollover");
    let (on_b, _) = ok(ml.append(b"on b").await, "append");
    // The owner crashes: no close. A new owner recovers the last ledger.
    drop(ml);
    w.resolver.reset();
    let ml = w.open(storage).await;
    assert!(
        w.resolver.ledger_calls(on_b) >= 1,
        "the new owner recovered ledger {on_b} without asking S2"
    );
    assert_eq!(
        w.b.is_fenced(on_b),
        Some(true),
        "ledger {on_b}, the crashed owner's last ledger on b, was not recovered (fenced) on b"
    );
    assert_eq!(ok(ml.read(on_a, 0).await, "read on a"), b"on a");
    assert_eq!(ok(ml.read(on_b, 0).await, "read on b"), b"on b");
    assert!(
        w.resolver.ledger_calls(on_a) >= 1,
        "ledger {on_a} was read without asking S2"
    );
    ok(ml.close().await, "close");
}

/// I15: trimming deletes each consumed ledger on the cluster its stamp names,
/// after asking S2.
pub async fn trim_deletes_route_by_stamp<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let ml = w.open(storage).await;
    ok(ml.open_cursor(CURSOR).await, "open_cursor");
    let (on_a, _) = ok(ml.append(b"on a").await, "append");
    w.supplier.switch_to(World::client(&w.b));
    ok(ml.rollover().await, "rollover");
    let (on_b, e) = ok(ml.append(b"on b").await, "append");
    ok(ml.mark_delete(CURSOR, on_b, e).await, "mark_delete");
    w.resolver.reset();
    let trimmed = ok(ml.trim().await, "trim");
    assert!(
        trimmed.contains(&on_a),
        "ledger {on_a}, consumed, was not trimmed (trimmed {trimmed:?})"
    );
    assert!(
        !w.a.contains_ledger(on_a),
        "trimmed ledger {on_a} still exists on a, the cluster its stamp names"
    );
    assert!(
        w.resolver.ledger_calls(on_a) >= 1,
        "ledger {on_a} was deleted without asking S2"
    );
    assert!(
        w.b.contains_ledger(on_b),
        "ledger {on_b} is still in use and must not be deleted"
    );
    ok(ml.close().await, "close");
}

/// I15: a cursor ledger is recovered from, and deleted on, the cluster its
/// stamp names; a cursor rolled over after S1 moved lands on the new cluster.
pub async fn cursor_ledgers_route_by_stamp<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let ml = w.open(storage).await;
    ok(ml.open_cursor(CURSOR).await, "open_cursor");
    let (l, e) = ok(ml.append(b"e0").await, "append");
    ok(ml.mark_delete(CURSOR, l, e).await, "mark_delete");
    let old_cursor_ledger = w.cursor_ledger().await;
    assert_eq!(
        w.holder(old_cursor_ledger),
        Some("a"),
        "cursor ledger {old_cursor_ledger} is not on a"
    );
    w.supplier.switch_to(World::client(&w.b));
    ok(ml.close().await, "close");

    w.resolver.reset();
    let ml = w.open(storage).await;
    ok(ml.open_cursor(CURSOR).await, "reopen the cursor");
    assert_eq!(
        ok(
            ml.mark_delete_position(CURSOR).await,
            "mark_delete_position"
        ),
        (l, e),
        "the cursor did not recover its mark-delete position"
    );
    ok(ml.roll_cursor_ledger(CURSOR).await, "roll_cursor_ledger");
    let new_cursor_ledger = w.cursor_ledger().await;
    assert_eq!(
        w.holder(new_cursor_ledger),
        Some("b"),
        "cursor ledger {new_cursor_ledger}, created after S1 moved to b, is not on b"
    );
    assert!(
        !w.a.contains_ledger(old_cursor_ledger),
        "the rolled-over cursor ledger {old_cursor_ledger} was not deleted from a"
    );
    assert!(
        w.resolver.cursor_calls(old_cursor_ledger) >= 1,
        "cursor ledger {old_cursor_ledger} was recovered or deleted without asking S2"
    );
    ok(ml.close().await, "close");
}

/// The schema ledgers recorded by each write of the locator, in order, with
/// their stamps: (ledger id, stamp) of every position not seen before.
fn schema_ledgers_recorded(store: &RecordingStore) -> Vec<(LedgerId, Option<String>)> {
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for value in values_written(store, &schema_path()) {
        let locator = SchemaLocator::decode(value.as_slice()).expect("SchemaLocator decodes");
        for entry in locator.index.iter().chain(std::iter::once(&locator.info)) {
            let position = &entry.position;
            if seen.insert(position.ledger_id) {
                let stamp = position
                    .cluster_stamp()
                    .expect("one stamp at most")
                    .map(str::to_owned);
                out.push((position.ledger_id, stamp));
            }
        }
    }
    out
}

/// S3: each schema version's ledger is created on the provider's active client
/// and stamped in the locator write that records it; reads route by stamp.
pub async fn schema_ledgers_follow_the_provider<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let provider = Arc::new(CountingSchemaProvider::new(World::client(&w.a)));
    let schemas = ok(
        storage
            .open_schemas(w.store.clone(), provider.clone())
            .await,
        "open_schemas",
    );
    let v0 = ok(schemas.put(SCHEMA_ID, b"schema v0").await, "put v0");
    provider.switch_to(World::client(&w.b));
    let v1 = ok(schemas.put(SCHEMA_ID, b"schema v1").await, "put v1");
    assert!(
        provider.active_calls() >= 2 && provider.property_calls() >= 2,
        "two schema versions asked S3 active() {} and creation_properties() {} times",
        provider.active_calls(),
        provider.property_calls()
    );
    let recorded = schema_ledgers_recorded(&w.store);
    assert_eq!(recorded.len(), 2, "schema ledgers recorded: {recorded:?}");
    for (ledger, stamp) in &recorded {
        let holder = w.holder(*ledger);
        assert!(
            stamp.is_some() && stamp.as_deref() == holder,
            "schema ledger {ledger} was recorded with stamp {stamp:?} in the locator write, but \
             lives on {holder:?}"
        );
    }
    assert_eq!(recorded[0].1.as_deref(), Some("a"), "version 0 not on a");
    assert_eq!(recorded[1].1.as_deref(), Some("b"), "version 1 not on b");

    let reopened = ok(
        storage
            .open_schemas(w.store.clone(), provider.clone())
            .await,
        "open_schemas again",
    );
    assert_eq!(
        ok(reopened.get(SCHEMA_ID, v0).await, "get v0"),
        b"schema v0"
    );
    assert_eq!(
        ok(reopened.get(SCHEMA_ID, v1).await, "get v1"),
        b"schema v1"
    );
    for (ledger, _) in &recorded {
        assert!(
            provider.resolve_calls(*ledger) >= 1,
            "schema ledger {ledger} was read without asking S3 to resolve it"
        );
    }
}

/// S3: deleting a schema deletes each version's ledger on the cluster its
/// stamp names.
pub async fn schema_deletes_route_by_stamp<S: HookedStorage + ?Sized>(storage: &S) {
    let w = World::new();
    let provider = Arc::new(CountingSchemaProvider::new(World::client(&w.a)));
    let schemas = ok(
        storage
            .open_schemas(w.store.clone(), provider.clone())
            .await,
        "open_schemas",
    );
    ok(schemas.put(SCHEMA_ID, b"schema v0").await, "put v0");
    provider.switch_to(World::client(&w.b));
    ok(schemas.put(SCHEMA_ID, b"schema v1").await, "put v1");
    let recorded = schema_ledgers_recorded(&w.store);
    ok(schemas.delete(SCHEMA_ID).await, "delete");
    for (ledger, stamp) in recorded {
        assert_eq!(
            w.holder(ledger),
            None,
            "schema ledger {ledger} (stamped {stamp:?}) survived the schema's deletion"
        );
        assert!(
            provider.resolve_calls(ledger) >= 1,
            "schema ledger {ledger} was deleted without asking S3 to resolve it"
        );
    }
}
