//! The resolve hot path allocates nothing (counted by a per-thread global allocator).
#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::Arc;

use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, RouterConfig};
use bkswitch_mledger_spi::{ActiveClientSupplier, CursorResolver, LedgerResolver};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{KeyValue, ManagedCursorInfo};
use bkswitch_proto::schema::PositionInfo;
use bkswitch_proto::Stamped;

struct Counting;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
}

// SAFETY: delegates every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

fn allocations() -> u64 {
    ALLOCATIONS.with(Cell::get)
}

#[tokio::test]
async fn resolve_and_supply_allocate_nothing() {
    let storage = MultiClusterManagedLedgerStorage::new(RouterConfig::default());
    storage.set_client_factory(Arc::new(MemoryClientFactory::with_clusters(
        MemoryClusters::new(),
    )));
    storage.add_cluster("bk-a", "memory://bk-a").unwrap();
    storage.add_cluster("bk-b", "memory://bk-b").unwrap();
    storage.set_bootstrap("bk-a").unwrap();
    storage.connect_cluster("bk-a").await.unwrap();
    storage.switch_active_cluster("bk-b").await.unwrap();
    let router = storage.router();

    // Legacy ids are below every id created stamped on the bootstrap cluster (I17).
    let mut stamped = LedgerInfo {
        ledger_id: 10,
        ..Default::default()
    };
    for i in 0..7 {
        stamped.properties.push(KeyValue {
            key: format!("k{i}"),
            value: "v".into(),
        });
    }
    stamped.set_cluster_stamp("bk-a").unwrap();
    let legacy = LedgerInfo {
        ledger_id: 2,
        ..Default::default()
    };
    let mut cursor = ManagedCursorInfo {
        cursors_ledger_id: 3,
        ..Default::default()
    };
    cursor.set_cluster_stamp("bk-b").unwrap();
    let mut position = PositionInfo {
        ledger_id: 4,
        entry_id: 0,
        properties: Vec::new(),
    };
    position.set_cluster_stamp("bk-a").unwrap();
    let schema = storage.schema_provider();

    let run = || {
        for _ in 0..1000 {
            let a = router.resolve_ledger(&stamped).unwrap();
            let b = router.resolve_ledger(&legacy).unwrap();
            let c = router.resolve_cursor(&cursor).unwrap();
            let d = schema.resolve(&position).unwrap();
            let e = router.active_client();
            let f = router.active_client_for("tenant/ns/persistent/topic");
            assert_eq!(a.cluster_name().len() + b.cluster_name().len(), 8);
            drop((a, b, c, d, e, f));
        }
    };
    run(); // warm up: anything initialized lazily on first use
    let before = allocations();
    run();
    assert_eq!(allocations() - before, 0, "the resolve hot path allocated");
}
