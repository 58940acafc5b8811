//! The Rust BookKeeper client against BookKeeper's Java client, on the same
//! three real bookies, in one run (a table, not criterion: each figure is one
//! long measurement of a real cluster, and both clients must be measured side by
//! side).
//!
//! Run with:
//! `cargo bench -p bkswitch-bench --bench bookkeeper_real`
//! (needs Java 17 and the jars `scripts/fetch-java-deps.sh` fetches;
//! `BENCH_ENTRIES=N` changes the number of entries per measurement at 64 in
//! flight, default 20,000, a quarter of it at 1; `BENCH_ROUNDS=N` the number of
//! rounds, default 5; `BENCH_WARMUP=N` the adds each client makes before the
//! measurements, default 60,000; `BENCH_TAIL=1` prints the 30 slowest adds of each Rust
//! run with their entry index, which shows the bookies' stalls: runs of
//! consecutive entries held together for the same ~15 ms).
//!
//! Ledgers are ensemble 3 / write quorum 2 / ack quorum 2, CRC32C, 1 KiB
//! entries, protocol v2 on both sides; the Java client runs without its default
//! throttle (`throttle=0`), as Pulsar configures it. Measured: add throughput with 1 and 64 adds in flight, p50/p99 add
//! latency, and sequential read throughput (batches of 100 entries).

use std::time::{Duration, Instant};

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, ReadHandle, WriteHandle};
use bkswitch_bk_harness::{BenchAddOptions, BkCluster, JavaClient};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};

struct AddFigures {
    cpu_us_per_add: f64,
    entries_per_sec: f64,
    mib_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    ledger_id: i64,
}

/// CPU time (user + system) this process has used, in seconds.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after_name = stat.rsplit(')').next().unwrap_or_default();
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    let ticks = |i: usize| {
        fields
            .get(i)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // utime and stime, fields 14 and 15 of the line (11 and 12 after the name).
    (ticks(11) + ticks(12)) / 100.0
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

async fn rust_adds(bk: &BookKeeperClient, entries: u32, inflight: usize) -> AddFigures {
    let cfg = LedgerConfig::default().with_quorums(3, 2, 2);
    let w = bk.create_ledger(&cfg).await.unwrap();
    let payload = Bytes::from((0..1024).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
    let mut latencies = Vec::with_capacity(entries as usize);
    let mut pending = FuturesUnordered::new();
    let started = Instant::now();
    let cpu_started = cpu_seconds();
    for _ in 0..entries {
        if pending.len() >= inflight {
            let (r, took): (bkswitch_bk_client::Result<i64>, Duration) =
                pending.next().await.unwrap();
            r.unwrap();
            latencies.push(took);
        }
        let add = w.add_entry(payload.clone());
        let sent = Instant::now();
        // Each add is awaited by a task of its own, so that its latency is taken
        // when it completes, not when this loop gets round to it.
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
    let cpu_us_per_add = (cpu_seconds() - cpu_started) * 1e6 / f64::from(entries);
    w.close().await.unwrap();
    if std::env::var("BENCH_TAIL").is_ok() && inflight > 1 {
        let mut idx: Vec<(usize, Duration)> = latencies.iter().copied().enumerate().collect();
        idx.sort_by_key(|(_, d)| std::cmp::Reverse(*d));
        let slowest: Vec<(usize, u128)> = idx
            .iter()
            .take(30)
            .map(|(i, d)| (*i, d.as_micros()))
            .collect();
        eprintln!("slowest adds (entry, µs): {slowest:?}");
    }
    latencies.sort();
    AddFigures {
        cpu_us_per_add,
        entries_per_sec: f64::from(entries) / seconds,
        mib_per_sec: f64::from(entries) / 1024.0 / seconds,
        p50_us: percentile(&latencies, 0.50),
        p99_us: percentile(&latencies, 0.99),
        ledger_id: w.id(),
    }
}

async fn rust_reads(bk: &BookKeeperClient, ledger_id: i64) -> (f64, f64) {
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
    (
        (last + 1) as f64 / seconds,
        bytes as f64 / (1024.0 * 1024.0) / seconds,
    )
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a.starts_with("--format")) {
        // `cargo bench -- --list` and friends: nothing to list.
        return;
    }
    bkswitch_bk_harness::require_bk();
    let entries: u32 = std::env::var("BENCH_ENTRIES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let rounds: usize = std::env::var("BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(5);
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
        // Warm up: connections, and above all the JVMs' JIT compilers. A profile
        // (`perf record -e cpu-clock`) of a run with a short warm-up showed half
        // of all CPU in the bookies' C1/C2 compiler threads, which made the first
        // measurements depend on how far compilation had got rather than on the
        // clients.
        let warmup: u32 = std::env::var("BENCH_WARMUP")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(60_000);
        rust_adds(&bk, warmup, 64).await;
        java.bench_add(&BenchAddOptions {
            entries: warmup,
            size: 1024,
            inflight: 64,
            ensemble: 3,
            write_quorum: 2,
            ack_quorum: 2,
        })
        .unwrap();

        // Rounds alternate which client goes first; the table gives the median
        // of the rounds for each figure (a 2-core machine running four JVMs is
        // noisy).
        let mut rows: Vec<(&str, u32, Vec<[f64; 4]>)> = Vec::new();
        let mut rust_cpu: Vec<(u32, f64)> = Vec::new();
        let mut reads: Vec<(&str, Vec<[f64; 2]>)> =
            vec![("Rust", Vec::new()), ("Java", Vec::new())];
        for round in 0..rounds {
            for inflight in [1u32, 64] {
                let n = if inflight == 1 { entries / 4 } else { entries };
                let mut figures = Vec::new();
                for client in if round % 2 == 0 {
                    ["Rust", "Java"]
                } else {
                    ["Java", "Rust"]
                } {
                    let (f, ledger) = if client == "Rust" {
                        let r = rust_adds(&bk, n, inflight as usize).await;
                        rust_cpu.push((inflight, r.cpu_us_per_add));
                        (
                            [r.entries_per_sec, r.mib_per_sec, r.p50_us, r.p99_us],
                            r.ledger_id,
                        )
                    } else {
                        let j = tokio::task::block_in_place(|| {
                            java.bench_add(&BenchAddOptions {
                                entries: n,
                                size: 1024,
                                inflight,
                                ensemble: 3,
                                write_quorum: 2,
                                ack_quorum: 2,
                            })
                            .unwrap()
                        });
                        (
                            [j.entries_per_sec, j.mib_per_sec, j.p50_micros, j.p99_micros],
                            j.ledger_id,
                        )
                    };
                    figures.push((client, f, ledger));
                }
                for (client, f, ledger) in figures {
                    match rows
                        .iter_mut()
                        .find(|(c, i, _)| *c == client && *i == inflight)
                    {
                        Some((_, _, v)) => v.push(f),
                        None => rows.push((client, inflight, vec![f])),
                    }
                    if inflight == 64 {
                        // Read back what the same client wrote.
                        let r = if client == "Rust" {
                            let (eps, mib) = rust_reads(&bk, ledger).await;
                            [eps, mib]
                        } else {
                            let j = tokio::task::block_in_place(|| {
                                java.bench_read(ledger, 100).unwrap()
                            });
                            [j.entries_per_sec, j.mib_per_sec]
                        };
                        reads
                            .iter_mut()
                            .find(|(c, _)| *c == client)
                            .unwrap()
                            .1
                            .push(r);
                    }
                }
            }
        }
        let median = |mut v: Vec<f64>| {
            v.sort_by(|a, b| a.total_cmp(b));
            v[v.len() / 2]
        };
        println!(
            "Median of {rounds} rounds ({entries} entries at 64 in flight, {} at 1):",
            entries / 4
        );
        println!();
        println!("| client | adds in flight | entries/s | MiB/s | p50 add µs | p99 add µs |");
        println!("|---|---|---|---|---|---|");
        rows.sort_by_key(|(c, i, _)| (*i, *c != "Rust"));
        for (client, inflight, v) in rows {
            let col = |k: usize| median(v.iter().map(|f| f[k]).collect());
            println!(
                "| {client} | {inflight} | {:.0} | {:.1} | {:.0} | {:.0} |",
                col(0),
                col(1),
                col(2),
                col(3)
            );
        }
        for inflight in [1u32, 64] {
            let cpu = median(
                rust_cpu
                    .iter()
                    .filter(|(i, _)| *i == inflight)
                    .map(|(_, c)| *c)
                    .collect(),
            );
            println!();
            println!("Rust client CPU per add at {inflight} in flight: {cpu:.1} µs (median)");
        }
        println!();
        println!("| client | sequential read entries/s | MiB/s |");
        println!("|---|---|---|");
        for (client, v) in reads {
            let col = |k: usize| median(v.iter().map(|f| f[k]).collect());
            println!("| {client} | {:.0} | {:.1} |", col(0), col(1));
        }
        bk.close().await.unwrap();
    });
}
