//! The Rust BookKeeper client's memory on real bookies stays under a fixed
//! bound whatever a caller asks (a table, not criterion; the counting
//! allocator of the other memory benches measures the live heap):
//!
//! 1. **Adds with backpressure.** A ledger of `BENCH_READ_MIB` MiB (default
//!    1,024) of 64 KiB entries is written by a caller that issues *every* add at
//!    once, without waiting; the client's budget of add bytes in flight
//!    (`max_add_bytes_in_flight`, 16 MiB here) holds the rest back.
//! 2. **A big ledger read** in batches of 100 entries, each range read going
//!    through the read window (`read_window`, 256 entries).
//! 3. **Recovery of a `BENCH_RECOVERY_ENTRIES`-entry ledger** (default 100,000
//!    entries of 1 KiB) whose writer crashed before any entry was confirmed:
//!    every entry is written straight to the bookies with last add confirmed
//!    -1, so the recovery open reads and writes back all of them, through its
//!    window (`recovery_window`, 64 entries).
//!
//! Each step prints the heap's high-water mark above what was live before it,
//! and fails if it is over its bound.
//!
//! Run with: `cargo bench -p bkswitch-bench --bench bookkeeper_memory`.

#![allow(unsafe_code, reason = "the counting allocator needs unsafe impls")]

#[path = "shared/counting_alloc.rs"]
mod counting_alloc;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, ReadHandle, WriteHandle};
use bkswitch_bk_harness::BkCluster;
use bkswitch_bookkeeper::testkit::write_unconfirmed;
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bytes::Bytes;
use counting_alloc::{Counting, CURRENT, PEAK};
use futures::stream::{FuturesUnordered, StreamExt};

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: f64 = 1048576.0;

/// Runs `f`, returning its result and the heap's high-water mark above what
/// was live when it started.
async fn peak_of<T>(f: impl std::future::Future<Output = T>) -> (T, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f.await;
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

fn env_or<T: std::str::FromStr>(name: &str, default: T) -> T {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Writes entries `0..count` of `ledger_id` straight to `bookie` with last
/// add confirmed -1 (a writer that crashed before confirming anything), 256
/// requests in flight.
async fn raw_adds(bookie: &str, ledger_id: i64, count: i64, payload: &Bytes) {
    write_unconfirmed(bookie, ledger_id, DigestType::Crc32c, count, payload, 256)
        .await
        .unwrap();
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a.starts_with("--format")) {
        return;
    }
    bkswitch_bk_harness::require_bk();
    let read_mib: u64 = env_or("BENCH_READ_MIB", 1024);
    let recovery_entries: i64 = env_or("BENCH_RECOVERY_ENTRIES", 100_000);
    let cluster = BkCluster::on_shared_zk(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let budget = 16usize << 20;
        let config = ClientConfig::default()
            .with_max_add_bytes_in_flight(budget)
            .with_read_window(256)
            .with_recovery_window(64);
        let bk = BookKeeperClient::connect(&cluster.metadata_service_uri(), config.clone())
            .await
            .unwrap();
        let cfg = LedgerConfig::default().with_quorums(3, 2, 2);

        // 1. Every add issued at once; the budget holds them back.
        let entry = 64 * 1024usize;
        let entries = (read_mib << 20) / entry as u64;
        let payload = Bytes::from((0..entry).map(|i| (i % 251) as u8).collect::<Vec<u8>>());
        let w = bk.create_ledger(&cfg).await.unwrap();
        let started = Instant::now();
        let mut max_in_flight = 0usize;
        let (_, write_peak) = peak_of(async {
            let mut adds: FuturesUnordered<_> =
                (0..entries).map(|_| w.add_entry(payload.clone())).collect();
            while let Some(r) = adds.next().await {
                r.unwrap();
                max_in_flight = max_in_flight.max(bk.add_bytes_in_flight());
            }
        })
        .await;
        let write_secs = started.elapsed().as_secs_f64();
        w.close().await.unwrap();
        let ledger = w.id();
        drop(w);

        // 2. The whole ledger read back in batches of 100 entries.
        let r = bk
            .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
            .await
            .unwrap();
        let started = Instant::now();
        let ((read_bytes, read_entries), read_peak) = peak_of(async {
            let last = r.last_add_confirmed();
            let (mut bytes, mut n) = (0usize, 0u64);
            let mut first = 0;
            while first <= last {
                let to = (first + 99).min(last);
                for e in r.read_entries(first, to).await.unwrap() {
                    assert_eq!(e.data.len(), entry);
                    bytes += e.data.len();
                    n += 1;
                }
                first = to + 1;
            }
            (bytes, n)
        })
        .await;
        let read_secs = started.elapsed().as_secs_f64();
        assert_eq!(read_entries, entries);
        drop(r);
        bk.delete_ledger(ledger).await.unwrap();

        // 3. Recovery of a ledger none of whose entries was confirmed.
        let small = Bytes::from(vec![7u8; 1024]);
        let w = bk
            .create_ledger(&LedgerConfig::default().with_quorums(2, 2, 2))
            .await
            .unwrap();
        let crashed = w.id();
        let ensemble = w.metadata().ensembles[0].bookies.clone();
        let started = Instant::now();
        let writes: Vec<_> = ensemble
            .iter()
            .map(|b| raw_adds(b, crashed, recovery_entries, &small))
            .collect();
        futures::future::join_all(writes).await;
        let raw_secs = started.elapsed().as_secs_f64();
        // The writer is gone (never closed): a second client recovers.
        let recoverer = Arc::new(
            BookKeeperClient::connect(&cluster.metadata_service_uri(), config)
                .await
                .unwrap(),
        );
        let started = Instant::now();
        let (recovered, recovery_peak) = peak_of(async {
            recoverer
                .open_ledger(crashed, DigestType::Crc32c, b"")
                .await
                .unwrap()
        })
        .await;
        let recovery_secs = started.elapsed().as_secs_f64();
        assert_eq!(recovered.last_add_confirmed(), recovery_entries - 1);
        assert!(recovered.is_closed());
        assert_eq!(recovered.length(), recovery_entries as u64 * 1024);
        drop(recovered);
        recoverer.delete_ledger(crashed).await.unwrap();
        recoverer.close().await.unwrap();
        drop(w);
        bk.close().await.unwrap();

        println!("| step | size | time | heap high-water mark above the start | bound |");
        println!("|---|---|---|---|---|");
        let write_bound = 64usize << 20;
        let read_bound = 64usize << 20;
        let recovery_bound = 16usize << 20;
        println!(
            "| {entries} adds of 64 KiB issued at once (budget {} MiB; at most {:.1} MiB seen in flight) | {read_mib} MiB | {write_secs:.1} s | {:.1} MiB | {} MiB |",
            budget >> 20,
            max_in_flight as f64 / MIB,
            write_peak as f64 / MIB,
            write_bound >> 20
        );
        println!(
            "| read back in batches of 100 entries | {:.0} MiB | {read_secs:.1} s | {:.1} MiB | {} MiB |",
            read_bytes as f64 / MIB,
            read_peak as f64 / MIB,
            read_bound >> 20
        );
        println!(
            "| recovery of {recovery_entries} unconfirmed entries of 1 KiB (written raw in {raw_secs:.1} s) | {:.0} MiB | {recovery_secs:.1} s | {:.1} MiB | {} MiB |",
            recovery_entries as f64 * 1024.0 / MIB,
            recovery_peak as f64 / MIB,
            recovery_bound >> 20
        );
        assert!(max_in_flight <= budget, "{max_in_flight} bytes in flight");
        assert!(write_peak < write_bound, "write peak {write_peak}");
        assert!(read_peak < read_bound, "read peak {read_peak}");
        assert!(recovery_peak < recovery_bound, "recovery peak {recovery_peak}");
    });
}
