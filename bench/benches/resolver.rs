//! Router hot paths: S2 resolve (stamped, legacy, 8 properties, cursor, schema),
//! S1 supply under concurrent swaps, and a cached-handle read through the router.
//!
//! Run with: cargo bench -p bkswitch-bench --bench resolver -- --warm-up-time 1 --measurement-time 3
//!
//! The stamped ledgers (id 42, stamped to the bootstrap cluster) and the legacy
//! one (id 42) keep the I17 check quiet: a legacy id above a stamped bootstrap
//! id would be reported as corrupt.
//!
//! The `s1_*` lines compare ways to supply the active client (S1), each quiet
//! and under a swap storm (another thread swapping the active client without
//! pause): a plain `Arc` clone of a client no swap touches (the floor), the
//! router's S1 (the slot table) and S1 on `arc_swap::ArcSwap`, modelled here as
//! the router would hold it (one `ArcSwap` of a sized client, `load_full` per
//! supply). The storm runs the router's own `switch_active_cluster` and stores
//! the same cluster's client into the `ArcSwap`, so both suppliers see every
//! swap; it prints how many swaps it made per second. On a shared machine the
//! background load drifts between criterion's lines, so the bench also prints a
//! paired comparison: the three suppliers timed in turn, in short slices, for
//! many rounds, as median ns per supply and the ratio to the plain clone.

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;

use bkswitch_bk_client::{
    BookKeeper, DigestType, LedgerConfig, MemoryBookKeeper, MemoryClientFactory, MemoryClusters,
    ReadHandle, WriteHandleExt,
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

/// S1 on `arc_swap`: the active client in one `ArcSwap`, as the router would
/// hold it (a sized client type, so that the `ArcSwap` stores a thin pointer).
#[derive(Debug)]
struct ArcSwapSupplier {
    active: ArcSwap<MemoryBookKeeper>,
}

impl ActiveClientSupplier for ArcSwapSupplier {
    #[inline]
    fn active_client(&self) -> Arc<dyn BookKeeper> {
        self.active.load_full()
    }
}

/// Another thread swapping the active client (without pause, or pausing
/// between swaps): the router's `switch_active_cluster` and the `ArcSwap`
/// model, alternating two clusters.
struct SwapStorm {
    stop: Arc<AtomicBool>,
    swaps: Arc<AtomicU64>,
    started: Instant,
    thread: std::thread::JoinHandle<()>,
}

impl SwapStorm {
    fn start(
        storage: &MultiClusterManagedLedgerStorage,
        model: &Arc<ArcSwapSupplier>,
        clients: [(&'static str, Arc<MemoryBookKeeper>); 2],
        rt: &tokio::runtime::Runtime,
        pause: Duration,
    ) -> SwapStorm {
        let stop = Arc::new(AtomicBool::new(false));
        let swaps = Arc::new(AtomicU64::new(0));
        let thread = {
            let (storage, model, handle) = (storage.clone(), model.clone(), rt.handle().clone());
            let (stop, swaps) = (stop.clone(), swaps.clone());
            std::thread::spawn(move || {
                for (name, client) in clients.iter().cycle() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    handle
                        .block_on(storage.switch_active_cluster(name))
                        .unwrap();
                    model.active.store(client.clone());
                    swaps.fetch_add(1, Ordering::Relaxed);
                    if !pause.is_zero() {
                        std::thread::sleep(pause);
                    }
                }
            })
        };
        SwapStorm {
            stop,
            swaps,
            started: Instant::now(),
            thread,
        }
    }

    fn stop(self) {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        let swaps = self.swaps.load(Ordering::Relaxed);
        let rate = swaps as f64 / self.started.elapsed().as_secs_f64();
        println!("swapper: {swaps} swaps, {rate:.0} swaps/s");
    }
}

/// Times `f` over `n` calls, in ns per call.
fn ns_per_call<T>(n: u32, f: &dyn Fn() -> T) -> f64 {
    let start = Instant::now();
    for _ in 0..n {
        black_box(f());
    }
    start.elapsed().as_nanos() as f64 / f64::from(n)
}

/// A named way to supply the active client.
type Supplier<'a> = (&'a str, &'a dyn Fn() -> Arc<dyn BookKeeper>);

/// The paired comparison: each round times every supplier for a short slice,
/// in a rotating order; prints the medians over the rounds.
fn paired(label: &str, suppliers: [Supplier<'_>; 3]) {
    const ROUNDS: usize = 41;
    const CALLS: u32 = 100_000;
    let mut times: [Vec<f64>; 3] = Default::default();
    for round in 0..ROUNDS {
        for k in 0..3 {
            let i = (round + k) % 3;
            times[i].push(ns_per_call(CALLS, suppliers[i].1));
        }
    }
    let median = |v: &mut Vec<f64>| {
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let medians: Vec<f64> = times.iter_mut().map(median).collect();
    let line: Vec<String> = suppliers
        .iter()
        .zip(&medians)
        .map(|((name, _), m)| format!("{name} {m:.2} ns ({:.2}x)", m / medians[0]))
        .collect();
    println!(
        "s1 paired, {label}, median of {ROUNDS} rounds: {}",
        line.join(", ")
    );
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

    // S1 three ways (see the module docs), quiet and under a swap storm.
    let model_clients = [
        (
            "bk-a",
            Arc::new(MemoryClusters::new().get_or_create("bk-a").client()),
        ),
        (
            "bk-b",
            Arc::new(MemoryClusters::new().get_or_create("bk-b").client()),
        ),
    ];
    let model = Arc::new(ArcSwapSupplier {
        active: ArcSwap::new(model_clients[0].1.clone()),
    });
    // The floor: an `Arc` no swap touches.
    let plain: Arc<dyn BookKeeper> = Arc::new(MemoryBookKeeper::new("plain"));
    g.bench_function("s1_baseline_arc_clone_quiet", |b| {
        b.iter(|| black_box(&plain).clone())
    });
    g.bench_function("s1_table_quiet", |b| b.iter(|| router.active_client()));
    g.bench_function("s1_arc_swap_quiet", |b| b.iter(|| model.active_client()));
    let plain_clone = || black_box(&plain).clone();
    let table_supply = || router.active_client();
    let arc_swap_supply = || model.active_client();
    let suppliers: [Supplier<'_>; 3] = [
        ("baseline_arc_clone", &plain_clone),
        ("table", &table_supply),
        ("arc_swap", &arc_swap_supply),
    ];
    paired("quiet", suppliers);
    // The same, with a swap every 100 µs: still far more often than any
    // operator switches.
    let paced = SwapStorm::start(
        &storage,
        &model,
        model_clients.clone(),
        &rt,
        Duration::from_micros(100),
    );
    paired("a swap every 100 µs", suppliers);
    paced.stop();
    let storm = SwapStorm::start(&storage, &model, model_clients, &rt, Duration::ZERO);
    paired("swap storm", suppliers);
    g.bench_function("s1_baseline_arc_clone_storm", |b| {
        b.iter(|| black_box(&plain).clone())
    });
    g.bench_function("s1_table_storm", |b| b.iter(|| router.active_client()));
    g.bench_function("s1_arc_swap_storm", |b| b.iter(|| model.active_client()));
    storm.stop();
    rt.block_on(storage.switch_active_cluster("bk-a")).unwrap();

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
