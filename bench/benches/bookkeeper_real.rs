//! The Rust BookKeeper client against BookKeeper's Java client, on the same
//! three real bookies, in one run (a table, not criterion: each figure is one
//! long measurement of a real cluster, and both clients must be measured side by
//! side).
//!
//! Run with:
//! `cargo bench -p bkswitch-bench --bench bookkeeper_real`
//! (needs Java 17 and the jars `scripts/fetch-java-deps.sh` fetches). Settings:
//! - `BENCH_ENTRIES=N`: 1 KiB entries per add measurement at 64 in flight and
//!   more (default 20,000); a tenth of it at 1 in flight, a sixteenth of it with
//!   64 KiB entries;
//! - `BENCH_INFLIGHT=1,64,256,1024`: the adds in flight measured;
//! - `BENCH_SIZES=1024,65536`: the entry sizes;
//! - `BENCH_ROUNDS=N`: rounds, default 5 (medians are reported);
//! - `BENCH_WARMUP=N`: adds each client makes before the measurements, default
//!   60,000;
//! - `BENCH_RANDOM_READS=N`: random single-entry reads per measurement, default
//!   5,000, 64 in flight.
//!
//! Ledgers are ensemble 3 / write quorum 2 / ack quorum 2, CRC32C, protocol v2
//! on both sides; the Java client runs without its default throttle
//! (`throttle=0`), as Pulsar configures it. Rounds alternate which client goes
//! first. Each figure comes with what the three bookies' JVMs used while it ran
//! (CPU and read system calls from `/proc/<pid>/stat` and `/proc/<pid>/io`, per
//! entry), the TCP segments the machine sent per entry (`OutSegs` of
//! `/proc/net/snmp`: requests, responses and acknowledgements of every
//! connection, both directions, loopback), and for the Rust client, how many
//! requests went out per write system call.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, ReadHandle, WriteHandle};
use bkswitch_bk_harness::{BenchAddOptions, BkCluster, JavaClient, ProcessUsage};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};

/// One measurement of one client.
#[derive(Debug, Clone, Copy, Default)]
struct Figures {
    entries_per_sec: f64,
    mib_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    /// The bookies' CPU per entry, µs.
    bookie_cpu_us: f64,
    /// The bookies' read system calls per entry.
    bookie_reads: f64,
    /// TCP segments sent on this machine per entry (both directions of every
    /// connection: requests, responses, acknowledgements).
    segments: f64,
    /// Requests per write system call (Rust only; 0 for Java).
    frames_per_write: f64,
    /// The client's own CPU per entry, µs (Rust only).
    client_cpu_us: f64,
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn env_list(name: &str, default: &[u32]) -> Vec<u32> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

/// Measures `run` with the bookies' and this process's usage around it.
struct Meter<'a> {
    cluster: &'a BkCluster,
    bk: &'a BookKeeperClient,
    bookies: ProcessUsage,
    me: ProcessUsage,
    wire: bkswitch_bookkeeper::WireCounts,
    segments: u64,
}

/// The machine's count of TCP segments sent (`OutSegs` of `/proc/net/snmp`).
/// The bookies, the client and ZooKeeper talk over loopback, so every
/// segment of a measurement is counted once, whichever side sent it; the
/// machine's other traffic is small beside it.
fn tcp_out_segments() -> u64 {
    let snmp = std::fs::read_to_string("/proc/net/snmp").unwrap_or_default();
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let (Some(names), Some(values)) = (tcp.next(), tcp.next()) else {
        return 0;
    };
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == "OutSegs")
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(0)
}

impl<'a> Meter<'a> {
    fn start(cluster: &'a BkCluster, bk: &'a BookKeeperClient) -> Meter<'a> {
        Meter {
            cluster,
            bk,
            bookies: cluster.bookie_usage(),
            me: ProcessUsage::current(),
            wire: bk.wire_counts(),
            segments: tcp_out_segments(),
        }
    }

    fn finish(self, entries: u64, f: &mut Figures, rust: bool) {
        let bookies = self.cluster.bookie_usage() - self.bookies;
        let n = entries.max(1) as f64;
        f.bookie_cpu_us = bookies.cpu_seconds * 1e6 / n;
        f.bookie_reads = bookies.read_calls as f64 / n;
        f.segments = tcp_out_segments().saturating_sub(self.segments) as f64 / n;
        if rust {
            let me = ProcessUsage::current() - self.me;
            f.client_cpu_us = me.cpu_seconds * 1e6 / n;
            let wire = self.bk.wire_counts();
            let writes = wire.writes - self.wire.writes;
            f.frames_per_write = (wire.frames - self.wire.frames) as f64 / writes.max(1) as f64;
        }
    }
}

fn payload(size: u32) -> Bytes {
    Bytes::from((0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

async fn rust_adds(
    bk: &BookKeeperClient,
    entries: u32,
    size: u32,
    inflight: usize,
) -> (Figures, i64) {
    let cfg = LedgerConfig::default().with_quorums(3, 2, 2);
    let w = bk.create_ledger(&cfg).await.unwrap();
    let payload = payload(size);
    let mut latencies = Vec::with_capacity(entries as usize);
    let mut pending = FuturesUnordered::new();
    let started = Instant::now();
    for _ in 0..entries {
        if pending.len() >= inflight {
            let (r, took): (bkswitch_bk_client::Result<i64>, Duration) =
                pending.next().await.unwrap();
            r.unwrap();
            latencies.push(took);
        }
        let add = w.add_entry(payload.clone());
        let sent = Instant::now();
        pending.push(async move {
            let r = add.await;
            (r, sent.elapsed())
        });
    }
    while let Some((r, took)) = pending.next().await {
        r.unwrap();
        latencies.push(took);
    }
    let seconds = started.elapsed().as_secs_f64();
    w.close().await.unwrap();
    latencies.sort();
    (
        Figures {
            entries_per_sec: f64::from(entries) / seconds,
            mib_per_sec: f64::from(entries) * f64::from(size) / 1048576.0 / seconds,
            p50_us: percentile(&latencies, 0.50),
            p99_us: percentile(&latencies, 0.99),
            ..Figures::default()
        },
        w.id(),
    )
}

async fn rust_sequential_reads(bk: &BookKeeperClient, ledger_id: i64) -> (Figures, u64) {
    let r = bk
        .open_ledger_no_recovery(ledger_id, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let last = r.last_add_confirmed();
    let started = Instant::now();
    let mut bytes = 0usize;
    let mut first = 0;
    while first <= last {
        let to = (first + 99).min(last);
        for e in r.read_entries(first, to).await.unwrap() {
            bytes += e.data.len();
        }
        first = to + 1;
    }
    let seconds = started.elapsed().as_secs_f64();
    let n = (last + 1) as u64;
    (
        Figures {
            entries_per_sec: n as f64 / seconds,
            mib_per_sec: bytes as f64 / 1048576.0 / seconds,
            ..Figures::default()
        },
        n,
    )
}

async fn rust_random_reads(
    bk: &BookKeeperClient,
    ledger_id: i64,
    count: u32,
    inflight: usize,
) -> Figures {
    let r = bk
        .open_ledger_no_recovery(ledger_id, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let last = r.last_add_confirmed();
    let mut rng = fastrand_like(7);
    let started = Instant::now();
    let mut bytes = 0usize;
    let mut pending = FuturesUnordered::new();
    for _ in 0..count {
        if pending.len() >= inflight {
            let got: Vec<bkswitch_bk_client::LedgerEntry> = pending.next().await.unwrap();
            bytes += got.iter().map(|e| e.data.len()).sum::<usize>();
        }
        let e = (rng() % (last as u64 + 1)) as i64;
        let r = &r;
        pending.push(async move { r.read_entries(e, e).await.unwrap() });
    }
    while let Some(got) = pending.next().await {
        bytes += got.iter().map(|e| e.data.len()).sum::<usize>();
    }
    let seconds = started.elapsed().as_secs_f64();
    Figures {
        entries_per_sec: f64::from(count) / seconds,
        mib_per_sec: bytes as f64 / 1048576.0 / seconds,
        ..Figures::default()
    }
}

/// A small deterministic generator (xorshift), the same sequence every run.
fn fastrand_like(seed: u64) -> impl FnMut() -> u64 {
    let mut x = seed.max(1);
    move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    }
}

/// Figures of one point, by client, over the rounds.
type Series = BTreeMap<(String, u32, u32, &'static str), Vec<Figures>>;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a.starts_with("--format")) {
        // `cargo bench -- --list` and friends: nothing to list.
        return;
    }
    bkswitch_bk_harness::require_bk();
    let entries: u32 = env_or("BENCH_ENTRIES", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 5);
    let warmup: u32 = env_or("BENCH_WARMUP", 60_000);
    let random_reads: u32 = env_or("BENCH_RANDOM_READS", 5_000);
    let inflights = env_list("BENCH_INFLIGHT", &[1, 64, 256, 1024]);
    let sizes = env_list("BENCH_SIZES", &[1024, 65536]);
    let cluster = BkCluster::on_shared_zk(3);
    // Pulsar turns the Java client's add/read throttle (5,000 permits/s by
    // default) off; so does this comparison.
    let java = JavaClient::builder(&cluster.metadata_service_uri())
        .conf("throttle", "0")
        .start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bk =
            BookKeeperClient::connect(&cluster.metadata_service_uri(), ClientConfig::default())
                .await
                .unwrap();
        // Warm up: connections, and above all the JVMs' JIT compilers (a
        // profile of a short warm-up showed half of all CPU in the bookies'
        // compiler threads).
        rust_adds(&bk, warmup, 1024, 64).await;
        java.bench_add(&BenchAddOptions {
            entries: warmup,
            size: 1024,
            inflight: 64,
            ensemble: 3,
            write_quorum: 2,
            ack_quorum: 2,
        })
        .unwrap();

        let mut series: Series = BTreeMap::new();
        for round in 0..rounds {
            for &size in &sizes {
                for &inflight in &inflights {
                    let mut n = if inflight == 1 { entries / 10 } else { entries };
                    if size > 4096 {
                        n /= 16;
                    }
                    let order = if round % 2 == 0 {
                        ["Rust", "Java"]
                    } else {
                        ["Java", "Rust"]
                    };
                    for client in order {
                        let rust = client == "Rust";
                        let meter = Meter::start(&cluster, &bk);
                        let (mut f, ledger) = if rust {
                            rust_adds(&bk, n, size, inflight as usize).await
                        } else {
                            let j = tokio::task::block_in_place(|| {
                                java.bench_add(&BenchAddOptions {
                                    entries: n,
                                    size,
                                    inflight,
                                    ensemble: 3,
                                    write_quorum: 2,
                                    ack_quorum: 2,
                                })
                                .unwrap()
                            });
                            (
                                Figures {
                                    entries_per_sec: j.entries_per_sec,
                                    mib_per_sec: j.mib_per_sec,
                                    p50_us: j.p50_micros,
                                    p99_us: j.p99_micros,
                                    ..Figures::default()
                                },
                                j.ledger_id,
                            )
                        };
                        meter.finish(u64::from(n), &mut f, rust);
                        series
                            .entry((client.to_owned(), size, inflight, "add"))
                            .or_default()
                            .push(f);
                        if inflight != 64 {
                            continue;
                        }
                        // Read back what the same client wrote: sequential
                        // batches of 100, then random single entries.
                        let meter = Meter::start(&cluster, &bk);
                        let (mut f, read) = if rust {
                            rust_sequential_reads(&bk, ledger).await
                        } else {
                            let j = tokio::task::block_in_place(|| {
                                java.bench_read(ledger, 100).unwrap()
                            });
                            (
                                Figures {
                                    entries_per_sec: j.entries_per_sec,
                                    mib_per_sec: j.mib_per_sec,
                                    ..Figures::default()
                                },
                                j.entries,
                            )
                        };
                        meter.finish(read, &mut f, rust);
                        series
                            .entry((client.to_owned(), size, 100, "sequential read"))
                            .or_default()
                            .push(f);
                        let meter = Meter::start(&cluster, &bk);
                        let mut f = if rust {
                            rust_random_reads(&bk, ledger, random_reads, 64).await
                        } else {
                            let j = tokio::task::block_in_place(|| {
                                java.bench_random_read(ledger, random_reads, 64).unwrap()
                            });
                            Figures {
                                entries_per_sec: j.entries_per_sec,
                                mib_per_sec: j.mib_per_sec,
                                ..Figures::default()
                            }
                        };
                        meter.finish(u64::from(random_reads), &mut f, rust);
                        series
                            .entry((client.to_owned(), size, 64, "random read"))
                            .or_default()
                            .push(f);
                    }
                }
            }
        }
        println!(
            "Median of {rounds} rounds ({entries} entries of 1 KiB at 64+ in flight, {} at 1; \
             a sixteenth of that at 64 KiB; {random_reads} random reads):",
            entries / 10
        );
        println!();
        println!(
            "| op | entry size | in flight | client | entries/s | MiB/s | p50 µs | p99 µs | \
             bookie CPU µs/entry | bookie read calls/entry | TCP segments/entry | client CPU µs/entry | requests/write |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let mut keys: Vec<_> = series.keys().cloned().collect();
        keys.sort_by_key(|(c, s, i, op)| (*op, *s, *i, c != "Rust"));
        for key in keys {
            let v = &series[&key];
            let col = |g: fn(&Figures) -> f64| median(v.iter().map(g).collect());
            let (client, size, inflight, op) = key;
            let rust = client == "Rust";
            println!(
                "| {op} | {size} | {inflight} | {client} | {:.0} | {:.1} | {} | {} | {:.1} | {:.2} | {:.2} | {} | {} |",
                col(|f| f.entries_per_sec),
                col(|f| f.mib_per_sec),
                if op == "add" { format!("{:.0}", col(|f| f.p50_us)) } else { "–".into() },
                if op == "add" { format!("{:.0}", col(|f| f.p99_us)) } else { "–".into() },
                col(|f| f.bookie_cpu_us),
                col(|f| f.bookie_reads),
                col(|f| f.segments),
                if rust { format!("{:.1}", col(|f| f.client_cpu_us)) } else { "–".into() },
                if rust { format!("{:.1}", col(|f| f.frames_per_write)) } else { "–".into() },
            );
        }
        bk.close().await.unwrap();
    });
}
