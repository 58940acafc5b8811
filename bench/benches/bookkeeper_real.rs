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
//!   64 KiB entries. For comparisons at 256 and 1,024 in flight use 200,000:
//!   each round then holds two or three of the bookies' memtable flushes, which
//!   in shorter rounds fall into one client's rounds or the other's by chance
//!   (such a run keeps about 12 GB of journals and entry logs in `TMPDIR` per
//!   in-flight value at 6 rounds: measure one value per run on a tmpfs);
//! - `BENCH_INFLIGHT=1,64,256,1024`: the adds in flight measured;
//! - `BENCH_SIZES=1024,65536`: the entry sizes;
//! - `BENCH_ROUNDS=N`: rounds, default 6 (medians are reported; an even
//!   number lets each client go first as often);
//! - `BENCH_DISCARD_ROUNDS=N`: rounds run before those and not reported,
//!   default 1 (the first round after the warm-up was the costliest for the
//!   bookies of a whole run, in A/A runs too: an outlier that only one of the
//!   two places meets);
//! - `BENCH_WARMUP=N`: adds each client makes before the measurements, default
//!   60,000;
//! - `BENCH_RANDOM_READS=N`: random single-entry reads per measurement, default
//!   5,000, 64 in flight;
//! - `BENCH_PERF=1`: also count the bookies' system calls, in all and by
//!   thread group, with `perf stat --per-thread`
//!   (kernel syscall tracepoints; counting costs the bookies CPU, so the other
//!   figures of such a run are higher), and the interrupts their threads
//!   send to other CPUs (`ipi:ipi_send_cpu`, `ipi:ipi_send_cpumask`: a
//!   wake-up of a thread on another CPU); `BENCH_PERF=2` counts only those,
//!   which hardly moves the other figures;
//! - `BENCH_PIN=1`: the bookies on CPU 0, both clients on CPU 1;
//! - `BENCH_RUST_WORKERS=N`: the Rust client's runtime's worker threads,
//!   default 2;
//! - `BENCH_JAVA_CONF`: extra `key=value` settings of the Java client,
//!   separated by spaces (e.g. `numIOThreads=1 numWorkerThreads=1`);
//! - `BENCH_ADD_COALESCING=N`: the Rust client's `add_coalescing` (default 0,
//!   off, as the client's default);
//! - `BENCH_BOOKIES=pulsar`: the bookies configured as Pulsar's own
//!   `conf/bookkeeper.conf` configures them (see [`PULSAR_BOOKIE_CONF`]: adds
//!   handled on the bookies' I/O threads instead of a write thread, a 1 ms
//!   journal group wait, `DbLedgerStorage`); default: BookKeeper's defaults;
//! - `BENCH_BOOKIE_CONF`: extra `key=value` lines for the bookies (applied
//!   after `BENCH_BOOKIES`);
//! - `BENCH_TRACE=<dir>`: every add of every measurement, both clients, as
//!   "call completion" lines (ns from the measurement's start, in the order
//!   of the calls), one file per measurement in `<dir>`;
//! - `BENCH_BOOKIE_JVM_ARGS`, `BENCH_PHASES=1`: extra JVM arguments for the
//!   bookies, and each measurement's start and end on stderr (see `main`);
//! - `BENCH_AA=rust` or `BENCH_AA=java`: an A/A run, the same client in both
//!   places (the columns keep their names, "Rust" for the place that goes
//!   first in even rounds): the spread of its ratios is the bench's own noise,
//!   against which a gap between the two clients is read.
//!
//! Ledgers are ensemble 3 / write quorum 2 / ack quorum 2, CRC32C, protocol v2
//! on both sides; the Java client runs without its default throttle
//! (`throttle=0`), as Pulsar configures it. Rounds alternate which client goes
//! first. Each figure comes with what the three bookies' JVMs used while it ran
//! (CPU and read system calls from `/proc/<pid>/stat` and `/proc/<pid>/io`, per
//! entry), the TCP segments the machine sent per entry (`OutSegs` of
//! `/proc/net/snmp`: requests, responses and acknowledgements of every
//! connection, both directions, loopback), each client's own CPU per entry,
//! and for the Rust client, how many requests went out per write system call.
//! A second table breaks the bookies' CPU down by thread group (journal,
//! write and read pools, Netty's I/O threads, the memtable flush, JIT, GC)
//! with each group's runs on a CPU (wake-ups) and moves between CPUs per
//! entry, from `/proc/<pid>/task/<tid>/schedstat` and `sched`.
//!
//! Adds are timed two ways. "p99" times each add from its call, as each
//! client's loop makes it. "p99 from the window" times it from the moment the
//! window let it go: the completion that freed its place (the run's start for
//! the first window). A loop whose issuing thread lags behind the completions
//! (the Java side's, under load: a freed permit waits for its thread and a
//! CPU) keeps fewer adds in flight than the window, and at the same rate its
//! adds' latencies from the call are shorter by Little's law; timed from the
//! window, that wait counts, and both clients are compared at the window they
//! were given (coordinated omission, otherwise). "in flight, measured" is
//! the sum of the latencies from the call over the wall time.
//!
//! In each round both clients read the same ledger (written earlier in the
//! round), one after the other: a ledger read right after it was written may
//! still be in a bookie's memtable, so reading each client's own ledger would
//! compare different bookie states.

#[path = "bookkeeper_real/probes.rs"]
mod probes;
#[path = "bookkeeper_real/tables.rs"]
mod tables;
#[path = "bookkeeper_real/workload.rs"]
mod workload;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, ReadHandle, WriteHandle};
use bkswitch_bk_harness::{
    unique_ledgers_root, BenchAddOptions, BkCluster, BkClusterBuilder, JavaClient, ProcessUsage,
};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};

/// One measurement of one client.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Figures {
    pub(crate) entries_per_sec: f64,
    pub(crate) mib_per_sec: f64,
    pub(crate) p50_us: f64,
    pub(crate) p99_us: f64,
    /// Adds: the p99 with each add timed from the moment the window let it
    /// go (see `AddTiming`), µs.
    pub(crate) window_p99_us: f64,
    /// Adds: how many were in flight on average (Little's law).
    pub(crate) in_flight: f64,
    /// The bookies' CPU per entry, µs.
    pub(crate) bookie_cpu_us: f64,
    /// The bookies' read system calls per entry.
    pub(crate) bookie_reads: f64,
    /// TCP segments sent on this machine per entry (both directions of every
    /// connection: requests, responses, acknowledgements).
    pub(crate) segments: f64,
    /// Requests per write system call (Rust only; 0 for Java).
    pub(crate) frames_per_write: f64,
    /// The client's own CPU per entry, µs (Rust only).
    pub(crate) client_cpu_us: f64,
}

pub(crate) fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

pub(crate) fn env_list(name: &str, default: &[u32]) -> Vec<u32> {
    std::env::var(name)
        .ok()
        .map(|v| v.split(',').filter_map(|x| x.trim().parse().ok()).collect())
        .unwrap_or_else(|| default.to_vec())
}

pub(crate) fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1e6
}

use probes::*;
use tables::*;
use workload::*;

/// The settings of Pulsar's `conf/bookkeeper.conf` (Pulsar 4.x) that differ
/// from BookKeeper's defaults and bear on adds and reads; durability stays as
/// the harness runs it (`journalSyncData=false`, on a temporary directory).
const PULSAR_BOOKIE_CONF: &[&str] = &[
    // Adds go from the bookie's Netty I/O thread straight to the journal,
    // not through a write thread (BookKeeper's default is 1).
    "numAddWorkerThreads=0",
    "numReadWorkerThreads=8",
    "numHighPriorityWorkerThreads=8",
    "journalMaxGroupWaitMSec=1",
    "numJournalCallbackThreads=8",
    "journalFormatVersionToWrite=5",
    "journalAlignmentSize=4096",
    "journalRemoveFromPageCache=true",
    "ledgerStorageClass=org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage",
    "flushEntrylogBytes=33554432",
    "readBufferSizeBytes=4096",
    "fileInfoFormatVersionToWrite=0",
];

fn main() {
    if std::env::args().any(|a| a == "--list" || a.starts_with("--format")) {
        // `cargo bench -- --list` and friends: nothing to list.
        return;
    }
    bkswitch_bk_harness::require_bk();
    let entries: u32 = env_or("BENCH_ENTRIES", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 6);
    let discard: usize = env_or("BENCH_DISCARD_ROUNDS", 1);
    let warmup: u32 = env_or("BENCH_WARMUP", 60_000);
    let random_reads: u32 = env_or("BENCH_RANDOM_READS", 5_000);
    let inflights = env_list("BENCH_INFLIGHT", &[1, 64, 256, 1024]);
    let sizes = env_list("BENCH_SIZES", &[1024, 65536]);
    let aa = std::env::var("BENCH_AA").ok();
    // Checked before any bookie starts, so that a typo costs nothing.
    if let Some(other) = aa.as_deref().filter(|c| !["rust", "java"].contains(c)) {
        eprintln!(
            "BENCH_AA={other}: not a client; set BENCH_AA=rust or BENCH_AA=java for an A/A run, \
             or leave it unset to measure Rust against Java"
        );
        std::process::exit(2);
    }
    // Which client measures in a place ("Rust" or "Java"): its own, or in an
    // A/A run the same one in both.
    let runs_rust = |place: &str| match aa.as_deref() {
        Some(client) => client == "rust",
        None => place == "Rust",
    };
    if let Some(client) = &aa {
        println!(
            "A/A run: both places (columns \"Rust\" and \"Java\") measure the {client} client."
        );
        println!();
    }
    // `BENCH_BOOKIE_JVM_ARGS`: extra JVM arguments for the bookies (space
    // separated), e.g. a `-Xlog:jit+compilation=debug:file=...:timemillis`
    // to see what their JIT compiles during which measurement (with
    // `BENCH_PHASES=1`, which prints each measurement's start and end in ms
    // since the epoch to stderr).
    let mut builder = BkClusterBuilder::new(
        &bkswitch_zk_harness::shared().connect_string(),
        &unique_ledgers_root(),
    )
    .bookies(3);
    match std::env::var("BENCH_BOOKIES").as_deref() {
        Ok("pulsar") => {
            for line in PULSAR_BOOKIE_CONF {
                builder = builder.conf(*line);
            }
        }
        Ok("") | Ok("bookkeeper") | Err(_) => {}
        Ok(other) => panic!("BENCH_BOOKIES={other}: expected `pulsar` or `bookkeeper`"),
    }
    // `BENCH_BOOKIE_CONF`: extra `key=value` lines for the bookies' conf,
    // separated by spaces (e.g. Pulsar's storage, `ledgerStorageClass=
    // org.apache.bookkeeper.bookie.storage.ldb.DbLedgerStorage`).
    for line in std::env::var("BENCH_BOOKIE_CONF")
        .unwrap_or_default()
        .split_whitespace()
    {
        builder = builder.conf(line);
    }
    for arg in std::env::var("BENCH_BOOKIE_JVM_ARGS")
        .unwrap_or_default()
        .split_whitespace()
    {
        builder = builder.jvm_arg(arg);
    }
    let cluster = builder.start();
    // Pulsar turns the Java client's add/read throttle (5,000 permits/s by
    // default) off; so does this comparison.
    let mut java = JavaClient::builder(&cluster.metadata_service_uri()).conf("throttle", "0");
    // `BENCH_JAVA_CONF`: extra `key=value` settings of the Java client's
    // `ClientConfiguration`, separated by spaces (e.g. its thread counts,
    // `numIOThreads=1 numWorkerThreads=1`).
    for line in std::env::var("BENCH_JAVA_CONF")
        .unwrap_or_default()
        .split_whitespace()
    {
        let Some((key, value)) = line.split_once('=') else {
            panic!("BENCH_JAVA_CONF: `{line}` is not key=value");
        };
        java = java.conf(key, value);
    }
    let java = java.start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("BENCH_RUST_WORKERS", 2))
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bk =
            BookKeeperClient::connect(
                &cluster.metadata_service_uri(),
                ClientConfig::default().with_add_coalescing(env_or("BENCH_ADD_COALESCING", 0)),
            )
            .await
            .unwrap();
        if env_or("BENCH_PIN", 0u32) != 0 {
            pin_processes(&cluster);
        }
        // Warm up: connections, and above all the JVMs' JIT compilers (a
        // profile of a short warm-up showed half of all CPU in the bookies'
        // compiler threads).
        let (_, warm_ledger) = rust_adds_on_worker(&bk, warmup, 1024, 64).await;
        java.bench_add(&BenchAddOptions {
            entries: warmup,
            size: 1024,
            inflight: 64,
            ensemble: 3,
            write_quorum: 2,
            ack_quorum: 2,
        })
        .unwrap();
        // And the bookies' read path: without it, their JIT compiles it
        // during the first round's reads (thousands of compilations in the
        // first reads, a few dozen later), charged to whichever client read
        // first.
        rust_sequential_reads(&bk, warm_ledger).await;
        rust_random_reads(&bk, warm_ledger, random_reads, 64).await;
        tokio::task::block_in_place(|| {
            java.bench_read(warm_ledger, 100).unwrap();
            java.bench_random_read(warm_ledger, random_reads, 64).unwrap();
        });

        let mut series: Series = BTreeMap::new();
        let mut threads: ThreadSeries = BTreeMap::new();
        for round in 0..discard + rounds {
            // The rounds before `discard` are run and forgotten; the reported
            // ones alternate from their first.
            let kept = round.checked_sub(discard);
            for &size in &sizes {
                for &inflight in &inflights {
                    let mut n = if inflight == 1 { entries / 10 } else { entries };
                    if size > 4096 {
                        n /= 16;
                    }
                    let order = if kept.unwrap_or(round) % 2 == 0 {
                        ["Rust", "Java"]
                    } else {
                        ["Java", "Rust"]
                    };
                    let mut written = Vec::new();
                    for client in order {
                        let rust = runs_rust(client);
                        let meter = Meter::start(&cluster, &bk);
                        let (mut f, ledger) = if rust {
                            rust_adds_on_worker(&bk, n, size, inflight as usize).await
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
                                    window_p99_us: j.window_p99_micros,
                                    in_flight: j.in_flight,
                                    ..Figures::default()
                                },
                                j.ledger_id,
                            )
                        };
                        let g = meter.finish(u64::from(n), &mut f, rust);
                        let key = (client.to_owned(), size, inflight, "add");
                        if kept.is_some() {
                            threads.entry(key.clone()).or_default().push(g);
                            series.entry(key).or_default().push(f);
                        }
                        written.push(ledger);
                    }
                    if inflight != 64 {
                        continue;
                    }
                    // Both clients read the same ledger (the one written
                    // first in this round, by each client in turn), one after
                    // the other in the round's order: the bookies hold it in
                    // the same state for both (a ledger read right after it
                    // was written may still be in a bookie's memtable, one
                    // written earlier is read from its entry log).
                    let ledger = written[0];
                    for client in order {
                        let rust = runs_rust(client);
                        // Sequential batches of 100, then random single
                        // entries.
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
                        let g = meter.finish(read, &mut f, rust);
                        let key = (client.to_owned(), size, 100, "sequential read");
                        if kept.is_some() {
                            threads.entry(key.clone()).or_default().push(g);
                            series.entry(key).or_default().push(f);
                        }
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
                        let g = meter.finish(u64::from(random_reads), &mut f, rust);
                        let key = (client.to_owned(), size, 64, "random read");
                        if kept.is_some() {
                            threads.entry(key.clone()).or_default().push(g);
                            series.entry(key).or_default().push(f);
                        }
                    }
                }
            }
        }
        println!(
            "Median of {rounds} rounds, after {discard} not reported ({entries} entries of 1 KiB at 64+ in flight, {} at 1; \
             a sixteenth of that at 64 KiB; {random_reads} random reads):",
            entries / 10
        );
        println!();
        println!(
            "| op | entry size | in flight | client | entries/s | entries/s, range over rounds | MiB/s | p50 µs | p99 µs | \
             p99 µs from the window | in flight, measured | bookie CPU µs/entry | bookie read calls/entry | TCP segments/entry | client CPU µs/entry | requests/write |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let mut keys: Vec<_> = series.keys().cloned().collect();
        keys.sort_by_key(|(c, s, i, op)| (*op, *s, *i, c != "Rust"));
        for key in keys {
            let v = &series[&key];
            let col = |g: fn(&Figures) -> f64| median(v.iter().map(g).collect());
            let (client, size, inflight, op) = key;
            let rust = runs_rust(&client);
            println!(
                "| {op} | {size} | {inflight} | {client} | {:.0} | {:.0}–{:.0} | {:.1} | {} | {} | {} | {} | {:.1} | {:.2} | {:.2} | {:.1} | {} |",
                col(|f| f.entries_per_sec),
                v.iter().map(|f| f.entries_per_sec).fold(f64::INFINITY, f64::min),
                v.iter().map(|f| f.entries_per_sec).fold(0.0, f64::max),
                col(|f| f.mib_per_sec),
                if op == "add" { format!("{:.0}", col(|f| f.p50_us)) } else { "–".into() },
                if op == "add" { format!("{:.0}", col(|f| f.p99_us)) } else { "–".into() },
                if op == "add" { format!("{:.0}", col(|f| f.window_p99_us)) } else { "–".into() },
                if op == "add" { format!("{:.0}", col(|f| f.in_flight)) } else { "–".into() },
                col(|f| f.bookie_cpu_us),
                col(|f| f.bookie_reads),
                col(|f| f.segments),
                col(|f| f.client_cpu_us),
                if rust { format!("{:.1}", col(|f| f.frames_per_write)) } else { "–".into() },
            );
        }
        print_thread_table(&series, &threads);
        print_round_table(&series);
        bk.close().await.unwrap();
    });
}
