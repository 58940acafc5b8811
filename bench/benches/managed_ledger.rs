//! Run with: cargo bench -p bkswitch-bench --bench managed_ledger
//!
//! The cost of the PIP-477 hooks on the managed ledger's hot paths, on
//! `MemoryBookKeeper` + `MemoryStore`:
//! - `managed_ledger/append`: 100 pipelined appends of 100-byte entries (rolling
//!   over every 1000 entries, so S1/S4 are exercised, and trimming sealed
//!   ledgers so the managed ledger stays small), plain vs hooked;
//! - `managed_ledger/read`: reading 1000 entries spread over 5 ledgers through
//!   the cached read handles, plain vs hooked.
//!
//! "hooked" sets a fixed S1 supplier, an identity S2 resolver (data and cursor)
//! and a stamping S4 provider; the plain/hooked ratio is the overhead.

use std::hint::black_box;
use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, MemoryCluster};
use bkswitch_managed_ledger::testkit::StampingProvider;
use bkswitch_managed_ledger::{ManagedLedger, ManagedLedgerFactory, Position};
use bkswitch_metadata_store::MemoryStore;
use bkswitch_mledger_spi::{
    ActiveClientSupplier, CursorResolver, HookError, LedgerResolver, ManagedLedgerConfig,
    StorageHooks,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedCursorInfo;
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tokio::runtime::Runtime;

const BATCH: u64 = 100;
const READ_ENTRIES: usize = 1000;

#[derive(Debug)]
struct Fixed(Arc<dyn BookKeeper>);

impl ActiveClientSupplier for Fixed {
    fn active_client(&self) -> Arc<dyn BookKeeper> {
        self.0.clone()
    }
}

impl LedgerResolver for Fixed {
    fn resolve_ledger(&self, _info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        Ok(self.0.clone())
    }
}

impl CursorResolver for Fixed {
    fn resolve_cursor(&self, _info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        Ok(self.0.clone())
    }
}

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

fn open(rt: &Runtime, hooked: bool, max_entries: u64, name: &str) -> ManagedLedger {
    let cluster = MemoryCluster::new("bk-a");
    let client: Arc<dyn BookKeeper> = Arc::new(cluster.client());
    let mut config = ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1)
        .with_max_entries_per_ledger(max_entries);
    if hooked {
        let fixed = Arc::new(Fixed(client.clone()));
        let stamper = Arc::new(StampingProvider::new());
        config = config.with_hooks(StorageHooks {
            active_client: Some(fixed.clone()),
            ledger_resolver: Some(fixed.clone()),
            cursor_resolver: Some(fixed),
            new_ledger_properties: vec![stamper.clone()],
            new_cursor_ledger_properties: vec![stamper],
        });
    }
    let factory = ManagedLedgerFactory::new(Arc::new(MemoryStore::new()), client);
    rt.block_on(factory.open(name, config)).expect("open")
}

fn append(c: &mut Criterion) {
    let rt = runtime();
    let payload = Bytes::from(vec![7u8; 100]);
    let mut group = c.benchmark_group("managed_ledger/append");
    group.throughput(Throughput::Elements(BATCH));
    for (label, hooked) in [("plain", false), ("hooked", true)] {
        let ml = open(&rt, hooked, 1000, "bench/ns/persistent/append");
        group.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async {
                let futs: Vec<_> = (0..BATCH).map(|_| ml.append(payload.clone())).collect();
                let positions = futures::future::try_join_all(futs).await.expect("append");
                black_box(positions);
                // Keep the managed ledger (and the in-memory cluster) bounded:
                // without cursors every sealed ledger is consumed.
                if ml.ledger_ids().len() > 3 {
                    ml.trim_consumed_ledgers().await.expect("trim");
                }
            });
        });
    }
    group.finish();
}

fn read(c: &mut Criterion) {
    let rt = runtime();
    let payload = Bytes::from(vec![7u8; 100]);
    let mut group = c.benchmark_group("managed_ledger/read");
    group.throughput(Throughput::Elements(READ_ENTRIES as u64));
    for (label, hooked) in [("plain", false), ("hooked", true)] {
        let ml = open(&rt, hooked, 200, "bench/ns/persistent/read");
        let first: Position = rt.block_on(async {
            let futs: Vec<_> = (0..READ_ENTRIES)
                .map(|_| ml.append(payload.clone()))
                .collect();
            futures::future::try_join_all(futs).await.expect("fill")[0]
        });
        // Roll over so every filled ledger is sealed and read through a handle
        // that is not the writer's.
        rt.block_on(ml.rollover()).expect("rollover");
        group.bench_function(label, |b| {
            b.to_async(&rt).iter(|| async {
                let entries = ml.read_entries(first, READ_ENTRIES).await.expect("read");
                assert_eq!(entries.len(), READ_ENTRIES);
                black_box(entries);
            });
        });
    }
    group.finish();
}

criterion_group!(benches, append, read);
criterion_main!(benches);
