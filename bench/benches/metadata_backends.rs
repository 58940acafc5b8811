//! Run with:
//! `cargo bench -p bkswitch-bench --bench metadata_backends -- --warm-up-time 1 --measurement-time 5`
//!
//! bkswitch's `EtcdStore` against its `ZkStore` and against Apache Pulsar's
//! own `EtcdMetadataStore` (pulsar-metadata 4.2.4 in a JVM, driven by
//! `bkswitch_bk_harness::PulsarMetadataStore`), in one process and one run, on
//! servers of the same machine started by the harnesses (one etcd member, one
//! ZooKeeper server, loopback):
//!
//! - `metadata_backends/get/<store>/<n>` and `…/put_version/<store>/<n>`: a
//!   256-byte value, `n` lanes (1 or 16) of one operation in flight each, a
//!   key per lane; a put expects the version its lane's previous write
//!   returned. Time per operation (`n` = 16: the inverse of the throughput).
//!   `java_etcd` is Pulsar's store with batching off (every operation sent at
//!   once), `java_etcd_batching` with Pulsar's default batching (operations
//!   wait up to 5 ms to be sent together, as in a broker). The Java loop runs
//!   inside its JVM and times itself; the Rust loops time themselves the same
//!   way (after reading the versions, like the Java loop), as a task of the
//!   runtime that drives the store (as a broker calls it), not from
//!   criterion's own thread: driven from there, every answer costs a wake-up
//!   across threads that neither a broker nor the Java loop pays.
//!   `etcd_raw_txn` (put only) is the Rust etcd client sending the
//!   transaction Pulsar's store sends (`version == expected + 1` → put): the
//!   part of `etcd`'s figure that is the client, not `EtcdStore`'s side keys.
//! - `metadata_backends/children_10k/<store>`: the children of a node with
//!   10,000 children.
//! - `metadata_backends/watch/<store>`: a put by one session until a watch of
//!   another session reports it.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_bk_harness::{pulsar_metadata_available, PulsarBenchOp, PulsarMetadataStore};
use bkswitch_etcd_harness::EtcdCluster;
use bkswitch_metadata_store::{
    CreateMode, EtcdStore, EtcdStoreOptions, ExpectedVersion, MetadataStore, Notification,
    WatchStream, ZkStore, ZkStoreOptions,
};
use bkswitch_zk_harness::ZkServer;
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use futures::StreamExt;
use tokio::runtime::Runtime;

#[path = "shared/etcd_lanes.rs"]
mod etcd_lanes;

const SIZE: usize = 256;
const VALUE: [u8; SIZE] = [7; SIZE];
const LANES: [usize; 2] = [1, 16];
const CHILDREN: usize = 10_000;
const WATCHED: &str = "/bench/watched";
const PARENT: &str = "/bench/children";

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("/bench/k-{i}")).collect()
}

/// A store, a second session of it, and a watch of that second session.
struct Backend {
    name: &'static str,
    writer: Arc<dyn MetadataStore>,
    reader: Arc<dyn MetadataStore>,
    watch: tokio::sync::Mutex<WatchStream>,
}

impl Backend {
    async fn new(
        name: &'static str,
        writer: Arc<dyn MetadataStore>,
        reader: Arc<dyn MetadataStore>,
    ) -> Backend {
        for k in keys(LANES[1]) {
            writer
                .put(&k, &VALUE, ExpectedVersion::Any)
                .await
                .expect("seed");
        }
        writer
            .put(WATCHED, &VALUE, ExpectedVersion::Any)
            .await
            .expect("seed");
        // 10,000 children, 64 creations in flight.
        futures::stream::iter(0..CHILDREN)
            .for_each_concurrent(64, |i| {
                let writer = writer.clone();
                async move {
                    let path = format!("{PARENT}/c-{i:05}");
                    match writer.create(&path, b"", CreateMode::PERSISTENT).await {
                        Ok(_) => {}
                        Err(e) if e.kind() == bkswitch_metadata_store::ErrorKind::AlreadyExists => {
                        }
                        Err(e) => panic!("seed {path}: {e}"),
                    }
                }
            })
            .await;
        let watch = reader.watch(WATCHED).await.expect("watch");
        Backend {
            name,
            writer,
            reader,
            watch: tokio::sync::Mutex::new(watch),
        }
    }

    /// `iters` operations in `lanes` lanes of one operation in flight.
    async fn run(&self, op: PulsarBenchOp, lanes: usize, iters: u64) -> Duration {
        etcd_lanes::store_lanes(self.writer.as_ref(), op, &keys(lanes), iters, &VALUE, false).await
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
                Ok(None) => panic!("{}: watch ended", self.name),
                Err(_) => panic!("{}: no notification within 10 s", self.name),
            }
        }
    }
}

/// Pulsar's put transaction, from the Rust etcd client: `iters` puts in
/// `lanes` lanes, each on its own key with the version it last wrote.
async fn raw_txn_puts(client: &etcd_client::Client, lanes: usize, iters: u64) -> Duration {
    let keys: Vec<String> = (0..lanes).map(|i| format!("/bench/raw-{i}")).collect();
    etcd_lanes::raw_put_lanes(client, &keys, iters, &VALUE).await
}

struct Setup {
    raw: etcd_client::Client,
    _zk: ZkServer,
    _etcd: EtcdCluster,
    backends: Vec<Arc<Backend>>,
    /// Pulsar's store, batching off and on.
    java: Vec<(&'static str, PulsarMetadataStore)>,
}

fn setup(rt: &Runtime) -> Setup {
    bkswitch_etcd_harness::require_etcd();
    let etcd = EtcdCluster::start(1);
    let zk = ZkServer::start();
    let raw = rt.block_on(async {
        let client = etcd_client::Client::connect([format!("http://{}", etcd.endpoint(0))], None)
            .await
            .expect("etcd");
        for i in 0..LANES[1] {
            client
                .kv_client()
                .put(format!("/bench/raw-{i}"), VALUE.to_vec(), None)
                .await
                .expect("seed");
        }
        client
    });
    let backends = rt.block_on(async {
        let url = etcd.url("");
        let options = EtcdStoreOptions::default();
        let e1 = EtcdStore::connect(&url, options.clone())
            .await
            .expect("etcd");
        let e2 = EtcdStore::connect(&url, options).await.expect("etcd");
        let url = format!("zk://{}/bkswitch-bench", zk.connect_string());
        let z1 = ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .expect("zk");
        let z2 = ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .expect("zk");
        vec![
            Arc::new(Backend::new("etcd", Arc::new(e1), Arc::new(e2)).await),
            Arc::new(Backend::new("zookeeper", Arc::new(z1), Arc::new(z2)).await),
        ]
    });
    let mut java = Vec::new();
    if pulsar_metadata_available() {
        let url = format!("etcd:http://{}", etcd.endpoint(0));
        for (name, batching) in [("java_etcd", false), ("java_etcd_batching", true)] {
            java.push((
                name,
                PulsarMetadataStore::start(&url, batching).expect("Pulsar's EtcdMetadataStore"),
            ));
        }
    }
    Setup {
        raw,
        _zk: zk,
        _etcd: etcd,
        backends,
        java,
    }
}

fn backends(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let s = setup(&rt);

    for (group, op) in [
        ("get", PulsarBenchOp::Get),
        ("put_version", PulsarBenchOp::Put),
    ] {
        let mut g = c.benchmark_group(format!("metadata_backends/{group}"));
        g.throughput(Throughput::Elements(1));
        g.sample_size(20);
        for lanes in LANES {
            for b in &s.backends {
                g.bench_with_input(BenchmarkId::new(b.name, lanes), &lanes, |bench, &lanes| {
                    bench.to_async(&rt).iter_custom(|iters| {
                        let b = b.clone();
                        async move {
                            tokio::spawn(async move { b.run(op, lanes, iters).await })
                                .await
                                .expect("bench task")
                        }
                    })
                });
            }
            if op == PulsarBenchOp::Put {
                let raw = &s.raw;
                g.bench_with_input(
                    BenchmarkId::new("etcd_raw_txn", lanes),
                    &lanes,
                    |bench, &lanes| {
                        bench.to_async(&rt).iter_custom(|iters| {
                            let raw = raw.clone();
                            async move {
                                tokio::spawn(async move { raw_txn_puts(&raw, lanes, iters).await })
                                    .await
                                    .expect("bench task")
                            }
                        })
                    },
                );
            }
            for (name, java) in &s.java {
                let keys = keys(lanes);
                g.bench_with_input(BenchmarkId::new(*name, lanes), &lanes, |bench, _| {
                    bench.iter_custom(|iters| {
                        java.bench(op, &keys, iters, SIZE)
                            .expect("Pulsar's store runs the loop")
                    })
                });
            }
        }
        g.finish();
    }

    let mut g = c.benchmark_group("metadata_backends/children_10k");
    g.sample_size(10);
    for b in &s.backends {
        g.bench_function(b.name, |bench| {
            bench.to_async(&rt).iter(|| async {
                let c = b.reader.children(PARENT).await.expect("children");
                assert_eq!(c.len(), CHILDREN);
                black_box(c)
            })
        });
    }
    g.finish();

    let mut g = c.benchmark_group("metadata_backends/watch");
    g.sample_size(20);
    for b in &s.backends {
        g.bench_function(b.name, |bench| {
            bench.to_async(&rt).iter_custom(|iters| async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += b.notification_round_trip().await;
                }
                total
            })
        });
    }
    g.finish();

    rt.block_on(async {
        for b in &s.backends {
            let _ = b.writer.close().await;
            let _ = b.reader.close().await;
        }
    });
    for (_, java) in s.java {
        java.quit();
    }
}

criterion_group!(benches, backends);
criterion_main!(benches);
