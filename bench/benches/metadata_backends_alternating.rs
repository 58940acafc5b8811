//! `EtcdStore` against Apache Pulsar's own `EtcdMetadataStore`, measured in
//! alternating rounds on one etcd member (a table, not criterion).
//!
//! Run with:
//! `cargo bench -p bkswitch-bench --bench metadata_backends_alternating`
//! (needs Java 17 and the jars `scripts/fetch-java-deps.sh` fetches).
//! Settings: `BENCH_ROUNDS=N` (default 15; medians are reported),
//! `BENCH_OPS=N` (operations per client per round at one lane, default 400;
//! eight times as many at 16 lanes).
//!
//! Why a second etcd bench beside `metadata_backends`: at one operation in
//! flight every figure is one etcd round trip (a raft entry and its
//! `fsync`), and on a shared machine that round trip drifts by tens of per
//! cent within a minute. Criterion measures one client after the other, so a
//! drift lands on whichever client was measured during it. Here every round
//! measures each client once, the order rotating from round to round, and the
//! figure is the median over the rounds: a drift touches every client alike.
//!
//! Clients, each `n` lanes (1 or 16) of one operation in flight on a key of
//! its own, a 256-byte value:
//! - `etcd`: bkswitch's [`EtcdStore`] (`get`, `put` with the version the
//!   lane's previous write returned);
//! - `etcd_put_version` (put only): `EtcdStore::put_version`, the same write
//!   answering only the new version, as Pulsar's store does (its `Stat` has
//!   no times and no children); what the managed ledger's and the
//!   registry's compare-and-set loops call;
//! - `java_etcd`: Pulsar's `EtcdMetadataStore` (pulsar-metadata 4.2.4, its
//!   batching off, every operation sent at once), its loop inside its JVM
//!   timing itself, on keys of its own written as Pulsar writes them;
//! - `etcd_raw_txn` (put only): the Rust etcd client sending the transaction
//!   Pulsar's store sends (`version == expected + 1` → put), the floor of a
//!   conditional write from Rust.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_harness::{pulsar_metadata_available, PulsarBenchOp, PulsarMetadataStore};
use bkswitch_etcd_harness::EtcdCluster;
use bkswitch_metadata_store::{EtcdStore, EtcdStoreOptions, ExpectedVersion, MetadataStore};
use tokio::runtime::Runtime;

#[path = "shared/etcd_lanes.rs"]
mod etcd_lanes;

const SIZE: usize = 256;
const VALUE: [u8; SIZE] = [7; SIZE];
const LANES: [usize; 2] = [1, 16];

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn keys(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("/bench-alt/{prefix}-{i}")).collect()
}

/// `iters` operations of `EtcdStore` in `lanes` lanes (puts by `put_version`
/// with `version_only`); time per operation.
async fn store_ops(
    store: Arc<EtcdStore>,
    op: PulsarBenchOp,
    lanes: usize,
    iters: u64,
    version_only: bool,
) -> Duration {
    let prefix = if version_only { "kv" } else { "k" };
    etcd_lanes::store_lanes(
        store.as_ref(),
        op,
        &keys(prefix, lanes),
        iters,
        &VALUE,
        version_only,
    )
    .await
        / iters as u32
}

/// `iters` of Pulsar's put transaction from the Rust etcd client.
async fn raw_puts(client: etcd_client::Client, lanes: usize, iters: u64) -> Duration {
    etcd_lanes::raw_put_lanes(&client, &keys("raw", lanes), iters, &VALUE).await / iters as u32
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Client {
    Store,
    StoreVersion,
    Java,
    Raw,
}

impl Client {
    fn name(self) -> &'static str {
        match self {
            Client::Store => "etcd",
            Client::StoreVersion => "etcd_put_version",
            Client::Java => "java_etcd",
            Client::Raw => "etcd_raw_txn",
        }
    }
}

struct Setup {
    _etcd: EtcdCluster,
    store: Arc<EtcdStore>,
    raw: etcd_client::Client,
    java: PulsarMetadataStore,
}

impl Setup {
    fn measure(
        &self,
        rt: &Runtime,
        c: Client,
        op: PulsarBenchOp,
        lanes: usize,
        iters: u64,
    ) -> Duration {
        match c {
            Client::Store | Client::StoreVersion => {
                let store = self.store.clone();
                let version_only = c == Client::StoreVersion;
                rt.block_on(async {
                    tokio::spawn(store_ops(store, op, lanes, iters, version_only))
                        .await
                        .expect("bench task")
                })
            }
            Client::Raw => {
                let raw = self.raw.clone();
                rt.block_on(async {
                    tokio::spawn(raw_puts(raw, lanes, iters))
                        .await
                        .expect("bench task")
                })
            }
            Client::Java => {
                self.java
                    .bench(op, &keys("java", lanes), iters, SIZE)
                    .expect("Pulsar's store runs the loop")
                    / iters as u32
            }
        }
    }
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if !pulsar_metadata_available() {
        eprintln!("metadata_backends_alternating: Pulsar's metadata store is unavailable here; nothing measured");
        return;
    }
    bkswitch_etcd_harness::require_etcd();
    let rounds = env_or("BENCH_ROUNDS", 15).max(1);
    let ops = env_or("BENCH_OPS", 400).max(1) as u64;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let etcd = EtcdCluster::start(1);
    let (store, raw) = rt.block_on(async {
        let store = EtcdStore::connect(&etcd.url(""), EtcdStoreOptions::default())
            .await
            .expect("EtcdStore");
        for k in keys("k", LANES[1]).into_iter().chain(keys("kv", LANES[1])) {
            store
                .put(&k, &VALUE, ExpectedVersion::Any)
                .await
                .expect("seed");
        }
        let raw = etcd_client::Client::connect([format!("http://{}", etcd.endpoint(0))], None)
            .await
            .expect("etcd");
        // Pulsar's store and the bare transaction get keys of their own,
        // written as Pulsar writes them: a plain key, no side keys.
        for k in keys("raw", LANES[1])
            .into_iter()
            .chain(keys("java", LANES[1]))
        {
            raw.kv_client()
                .put(k, VALUE.to_vec(), None)
                .await
                .expect("seed");
        }
        (Arc::new(store), raw)
    });
    let java = PulsarMetadataStore::start(&format!("etcd:http://{}", etcd.endpoint(0)), false)
        .expect("Pulsar's EtcdMetadataStore");
    let s = Setup {
        _etcd: etcd,
        store,
        raw,
        java,
    };

    println!(
        "rounds: {rounds}, operations per client and round: {ops} at 1 lane, {} at 16",
        ops * 8
    );
    println!();
    println!("| operation | lanes | client | median µs/op | min | max | time ÷ `etcd`'s |");
    println!("|---|---|---|---|---|---|---|");
    for (name, op) in [
        ("get", PulsarBenchOp::Get),
        ("put with version", PulsarBenchOp::Put),
    ] {
        for lanes in LANES {
            let iters = if lanes == 1 { ops } else { ops * 8 };
            let mut clients = vec![Client::Store, Client::Java];
            if op == PulsarBenchOp::Put {
                clients.push(Client::StoreVersion);
                clients.push(Client::Raw);
            }
            // Warm-up: one round not counted.
            for &c in &clients {
                s.measure(&rt, c, op, lanes, iters);
            }
            let mut figures: Vec<Vec<f64>> = vec![Vec::new(); clients.len()];
            for r in 0..rounds {
                for j in 0..clients.len() {
                    let which = (j + r) % clients.len();
                    let d = s.measure(&rt, clients[which], op, lanes, iters);
                    figures[which].push(d.as_secs_f64() * 1e6);
                }
            }
            let medians: Vec<f64> = figures.iter_mut().map(|f| median(f)).collect();
            for (i, &c) in clients.iter().enumerate() {
                let f = &figures[i];
                println!(
                    "| {name} | {lanes} | `{}` | {:.0} | {:.0} | {:.0} | {:.2} |",
                    c.name(),
                    medians[i],
                    f[0],
                    f[f.len() - 1],
                    medians[i] / medians[0],
                );
            }
        }
    }
}
