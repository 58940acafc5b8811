//! Router hot paths: S2 resolve (stamped, legacy, 8 properties, cursor, schema),
//! S1 supply under concurrent swaps, and a cached-handle read through the router.
//!
//! Run with: cargo bench -p bkswitch-bench --bench resolver -- --warm-up-time 1 --measurement-time 3
//!
//! The stamped ledgers (id 42, stamped to the bootstrap cluster) and the legacy
//! one (id 42) keep the I17 check quiet: a legacy id above a stamped bootstrap
//! id would be reported as corrupt.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{
    BookKeeper, DigestType, LedgerConfig, MemoryClientFactory, MemoryClusters, ReadHandle,
    WriteHandleExt,
};
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, RouterConfig};
use bkswitch_mledger_spi::{ActiveClientSupplier, CursorResolver, LedgerResolver};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{KeyValue, ManagedCursorInfo};
use bkswitch_proto::schema::PositionInfo;
use bkswitch_proto::Stamped;
use bytes::Bytes;
use criterion::{criterion_group, criterion_main, Criterion};

fn info(extra: usize, stamp: Option<&str>) -> LedgerInfo {
    let mut info = LedgerInfo {
        ledger_id: 42,
        ..Default::default()
    };
    for i in 0..extra {
        info.properties.push(KeyValue {
            key: format!("prop-{i}"),
            value: "value".into(),
        });
    }
    if let Some(s) = stamp {
        info.set_cluster_stamp(s).unwrap();
    }
    info
}

fn resolver(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let storage = MultiClusterManagedLedgerStorage::new(RouterConfig::default());
    storage.set_client_factory(Arc::new(MemoryClientFactory::with_clusters(
        MemoryClusters::new(),
    )));
    storage.add_cluster("bk-a", "memory://bk-a").unwrap();
    storage.add_cluster("bk-b", "memory://bk-b").unwrap();
    storage.set_bootstrap("bk-a").unwrap();
    rt.block_on(async {
        storage.switch_active_cluster("bk-b").await.unwrap();
        storage.switch_active_cluster("bk-a").await.unwrap();
    });
    let router = storage.router();
    let schema = storage.schema_provider();
    let direct: Arc<dyn BookKeeper> = router.active_client();

    let one = info(0, Some("bk-a"));
    let legacy = info(0, None);
    let eight = info(7, Some("bk-a"));
    let mut cursor = ManagedCursorInfo {
        cursors_ledger_id: 42,
        ..Default::default()
    };
    cursor.set_cluster_stamp("bk-a").unwrap();
    let mut position = PositionInfo {
        ledger_id: 42,
        entry_id: 0,
        properties: Vec::new(),
    };
    position.set_cluster_stamp("bk-a").unwrap();

    let mut g = c.benchmark_group("resolver");
    g.bench_function("baseline_arc_clone", |b| {
        b.iter(|| black_box(&direct).clone())
    });
    g.bench_function("ledger_stamped_1_property", |b| {
        b.iter(|| router.resolve_ledger(black_box(&one)).unwrap())
    });
    g.bench_function("ledger_legacy_no_property", |b| {
        b.iter(|| router.resolve_ledger(black_box(&legacy)).unwrap())
    });
    g.bench_function("ledger_stamp_last_of_8", |b| {
        b.iter(|| router.resolve_ledger(black_box(&eight)).unwrap())
    });
    // The managed ledger holds the resolver as a trait object: the same
    // resolve through dynamic dispatch (the result returns through memory).
    let dyn_resolver: Arc<dyn LedgerResolver> = router.clone();
    g.bench_function("ledger_stamped_1_property_dyn", |b| {
        b.iter(|| dyn_resolver.resolve_ledger(black_box(&one)).unwrap())
    });
    g.bench_function("ledger_legacy_no_property_dyn", |b| {
        b.iter(|| dyn_resolver.resolve_ledger(black_box(&legacy)).unwrap())
    });
    g.bench_function("cursor_stamped", |b| {
        b.iter(|| router.resolve_cursor(black_box(&cursor)).unwrap())
    });
    g.bench_function("schema_stamped", |b| {
        b.iter(|| schema.resolve(black_box(&position)).unwrap())
    });

    // S1 while another thread switches every 100 µs.
    g.bench_function("supplier_baseline_arc_clone", |b| {
        b.iter(|| black_box(&direct).clone())
    });
    let stop = Arc::new(AtomicBool::new(false));
    let swapper = {
        let storage = storage.clone();
        let stop = stop.clone();
        let handle = rt.handle().clone();
        std::thread::spawn(move || {
            let mut to = ["bk-b", "bk-a"].into_iter().cycle();
            while !stop.load(Ordering::Relaxed) {
                let name = to.next().unwrap_or("bk-a");
                handle
                    .block_on(storage.switch_active_cluster(name))
                    .unwrap();
                std::thread::sleep(Duration::from_micros(100));
            }
        })
    };
    g.bench_function("supplier_under_swaps", |b| {
        b.iter(|| router.active_client())
    });
    stop.store(true, Ordering::Relaxed);
    swapper.join().unwrap();
    rt.block_on(storage.switch_active_cluster("bk-a")).unwrap();

    // Cached-handle read: the same ledger through the router vs the raw client.
    let raw: Arc<dyn BookKeeper> = Arc::new(MemoryClusters::new().get_or_create("bk-x").client());
    let (routed_handle, raw_handle) = rt.block_on(async {
        let routed = router.active_client();
        let config = LedgerConfig::default().with_quorums(1, 1, 1);
        let mut out = Vec::new();
        for client in [&routed, &raw] {
            let w = client.create_ledger(&config).await.unwrap();
            w.add_all((0..16).map(|_| Bytes::from_static(&[7u8; 256])))
                .await
                .unwrap();
            w.close().await.unwrap();
            out.push(
                client
                    .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
                    .await
                    .unwrap(),
            );
        }
        (out.remove(0), out.remove(0))
    });
    let read = |h: &Arc<dyn ReadHandle>| {
        let h = h.clone();
        async move { h.read_entries(3, 3).await.unwrap() }
    };
    g.bench_function("read_cached_handle_no_router", |b| {
        b.to_async(&rt).iter(|| read(&raw_handle))
    });
    g.bench_function("read_cached_handle_router", |b| {
        b.to_async(&rt).iter(|| read(&routed_handle))
    });
    g.finish();
}

criterion_group!(benches, resolver);
criterion_main!(benches);
