//! Run with: cargo bench -p bkswitch-bench --bench metadata_store
//!
//! The metadata store's costs:
//! - `metadata_store/memory`: `MemoryStore` get, put and compare-and-set (put
//!   expecting the current version), ns/op, next to a baseline (a mutex-guarded
//!   `HashMap` get + clone) so the store's overhead can be read as a ratio;
//! - `metadata_store/zookeeper`: `ZkStore` round trips on a real ZooKeeper
//!   (started by `bkswitch-zk-harness` on a loopback port): a sequential
//!   compare-and-set loop (ops/s through criterion's throughput) and a get;
//! - `metadata_store/notification`: put by one session → notification on a
//!   watch of another session, on ZooKeeper. Besides criterion's figure, the
//!   p50 / p99 / max of 1000 individual round trips are printed:
//!   `cargo bench -p bkswitch-bench --bench metadata_store -- notification`.

use std::cell::OnceCell;
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_metadata_store::{
    ExpectedVersion, MemoryStore, MetadataStore, Notification, WatchStream, ZkStore, ZkStoreOptions,
};
use bkswitch_zk_harness::ZkServer;
use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use futures::StreamExt;
use tokio::runtime::Runtime;

const VALUE: [u8; 64] = [7; 64];
const PERCENTILE_SAMPLES: usize = 1000;

fn memory(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let store = MemoryStore::new();
    // A realistic depth: /managed-ledgers/<tenant>/<ns>/persistent/<topic>.
    let path = "/managed-ledgers/public/default/persistent/topic-1";
    rt.block_on(store.put(path, &VALUE, ExpectedVersion::Any))
        .expect("seed");
    let baseline = parking_lot::Mutex::new(HashMap::from([(path.to_owned(), VALUE.to_vec())]));

    let mut g = c.benchmark_group("metadata_store/memory");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(3));
    g.warm_up_time(Duration::from_secs(1));

    g.bench_function("baseline_locked_hashmap_get", |b| {
        b.iter(|| black_box(baseline.lock().get(black_box(path)).cloned()))
    });
    g.bench_function("get", |b| {
        b.to_async(&rt)
            .iter(|| async { black_box(store.get(black_box(path)).await.expect("get")) })
    });
    g.bench_function("put", |b| {
        b.to_async(&rt).iter(|| async {
            black_box(
                store
                    .put(black_box(path), &VALUE, ExpectedVersion::Any)
                    .await
                    .expect("put"),
            )
        })
    });
    g.bench_function("cas", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let store = &store;
            async move {
                let mut version = store
                    .exists(path)
                    .await
                    .expect("exists")
                    .expect("seeded")
                    .version;
                let start = Instant::now();
                for _ in 0..iters {
                    version = store
                        .put(path, &VALUE, ExpectedVersion::Exactly(version))
                        .await
                        .expect("cas")
                        .version;
                }
                start.elapsed()
            }
        })
    });
    g.finish();
}

/// A private ZooKeeper, a writer session and a watching session.
struct ZkSetup {
    _server: ZkServer,
    writer: Arc<ZkStore>,
    reader: Arc<ZkStore>,
    watch: tokio::sync::Mutex<WatchStream>,
}

const ZK_PATH: &str = "/bench/value";
const WATCHED: &str = "/bench/watched";

impl ZkSetup {
    fn start(rt: &Runtime) -> ZkSetup {
        let server = ZkServer::start();
        let url = format!("zk://{}/bkswitch-bench", server.connect_string());
        rt.block_on(async {
            let options = ZkStoreOptions::default();
            let writer = ZkStore::connect(&url, options.clone())
                .await
                .expect("connect");
            let reader = ZkStore::connect(&url, options).await.expect("connect");
            writer
                .put(ZK_PATH, &VALUE, ExpectedVersion::Any)
                .await
                .expect("seed");
            writer
                .put(WATCHED, &VALUE, ExpectedVersion::Any)
                .await
                .expect("seed");
            let watch = reader.watch(WATCHED).await.expect("watch");
            ZkSetup {
                _server: server,
                writer: Arc::new(writer),
                reader: Arc::new(reader),
                watch: tokio::sync::Mutex::new(watch),
            }
        })
    }

    /// One put by the writer until the reader's watch reports it.
    async fn notification_round_trip(&self) -> Duration {
        let mut watch = self.watch.lock().await;
        let start = Instant::now();
        self.writer
            .put(WATCHED, &VALUE, ExpectedVersion::Any)
            .await
            .expect("put");
        loop {
            match tokio::time::timeout(Duration::from_secs(10), watch.next()).await {
                Ok(Some(Notification::Modified { .. })) => return start.elapsed(),
                Ok(Some(_)) => continue,
                Ok(None) => panic!("watch ended"),
                Err(_) => panic!("no notification within 10 s"),
            }
        }
    }
}

fn zk_runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime")
}

fn zookeeper(c: &mut Criterion) {
    let rt = zk_runtime();
    let setup: OnceCell<ZkSetup> = OnceCell::new();
    let mut g = c.benchmark_group("metadata_store/zookeeper");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(5));
    g.warm_up_time(Duration::from_secs(1));
    g.sample_size(30);

    g.bench_function("cas_round_trip", |b| {
        let s = setup.get_or_init(|| ZkSetup::start(&rt));
        b.to_async(&rt).iter_custom(|iters| async move {
            let mut version = s
                .writer
                .exists(ZK_PATH)
                .await
                .expect("exists")
                .expect("seeded")
                .version;
            let start = Instant::now();
            for _ in 0..iters {
                version = s
                    .writer
                    .put(ZK_PATH, &VALUE, ExpectedVersion::Exactly(version))
                    .await
                    .expect("cas")
                    .version;
            }
            start.elapsed()
        })
    });
    g.bench_function("get_round_trip", |b| {
        let s = setup.get_or_init(|| ZkSetup::start(&rt));
        b.to_async(&rt)
            .iter(|| async { black_box(s.reader.get(ZK_PATH).await.expect("get")) })
    });
    g.finish();

    let mut g = c.benchmark_group("metadata_store/notification");
    g.measurement_time(Duration::from_secs(5));
    g.warm_up_time(Duration::from_secs(1));
    g.sample_size(30);
    let mut printed = false;
    g.bench_function("zookeeper_put_to_event", |b| {
        let s = setup.get_or_init(|| ZkSetup::start(&rt));
        if !printed {
            printed = true;
            print_percentiles(&rt, s);
        }
        b.to_async(&rt).iter_custom(|iters| async move {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                total += s.notification_round_trip().await;
            }
            total
        })
    });
    g.finish();
    if let Some(s) = setup.get() {
        rt.block_on(async {
            let _ = s.writer.close().await;
            let _ = s.reader.close().await;
        });
    }
}

fn print_percentiles(rt: &Runtime, s: &ZkSetup) {
    let mut samples: Vec<Duration> = rt.block_on(async {
        let mut out = Vec::with_capacity(PERCENTILE_SAMPLES);
        for _ in 0..PERCENTILE_SAMPLES {
            out.push(s.notification_round_trip().await);
        }
        out
    });
    samples.sort_unstable();
    let at =
        |q: f64| samples[((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1];
    let mean = samples.iter().sum::<Duration>() / samples.len() as u32;
    println!(
        "notification latency put -> event (ZooKeeper, {} samples): p50 {:?}, p99 {:?}, max {:?}, mean {:?}",
        samples.len(),
        at(0.50),
        at(0.99),
        samples[samples.len() - 1],
        mean
    );
}

criterion_group!(benches, memory, zookeeper);
criterion_main!(benches);
