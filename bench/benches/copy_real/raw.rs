//! The raw figures: BookKeeper's Java client adding to the destination bookies
//! (the physical limit of the copy's writes) and reading from the source
//! bookies (the limit of its reads), with the CPU each measurement used.

use std::collections::VecDeque;
use std::time::Instant;

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig};
use bkswitch_bk_harness::{BenchAddOptions, JavaClient};
use bytes::Bytes;
use futures::future::BoxFuture;

use super::cpu::{self, CpuUse, Group};
use super::{ENTRY_SIZE, MIB};

/// Adds in flight of the raw add measurements; the best is the limit.
pub(crate) const RAW_INFLIGHT: [u32; 2] = [64, 256];

/// Entries per read call of the raw read measurement (the Java client reads
/// a batch with one request per entry, all in flight, then the next batch).
pub(crate) const RAW_READ_BATCH: u32 = 1000;

/// What a raw measurement did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RawOp {
    /// Adds to the destination, this many in flight.
    Add {
        /// Adds in flight.
        inflight: u32,
    },
    /// Adds to the destination by this process's Rust client (the copy's
    /// client), this many in flight: not part of the limit, a reference for
    /// what the Rust client's adds cost the bookies.
    RustAdd {
        /// Adds in flight.
        inflight: u32,
    },
    /// Reads of a source ledger, this many entries per call.
    Read {
        /// Entries per call.
        batch: u32,
    },
}

/// One raw measurement.
pub(crate) struct Raw {
    pub(crate) when: &'static str,
    pub(crate) op: RawOp,
    /// The ledger written or read.
    pub(crate) ledger_id: i64,
    pub(crate) entries: u64,
    pub(crate) entries_per_sec: f64,
    pub(crate) mib_per_sec: f64,
    /// Median and 99th percentile add latency, µs (adds only).
    pub(crate) latency_micros: Option<(f64, f64)>,
    pub(crate) cpu: CpuUse,
}

impl Raw {
    /// How the measurement is named in the tables.
    pub(crate) fn label(&self) -> String {
        match self.op {
            RawOp::Add { inflight } => format!("raw adds, {inflight} in flight ({})", self.when),
            RawOp::RustAdd { inflight } => format!(
                "raw adds by the Rust client, {inflight} in flight ({})",
                self.when
            ),
            RawOp::Read { batch } => format!("raw reads, batches of {batch} ({})", self.when),
        }
    }
}

/// The two Java clients and the source ledger the raw reads read.
pub(crate) struct RawJava {
    /// A client of the destination cluster.
    pub(crate) destination: JavaClient,
    /// A client of the source cluster.
    pub(crate) source: JavaClient,
    /// A ledger the source client wrote at the start, for the raw reads.
    pub(crate) read_ledger: i64,
}

impl RawJava {
    /// Adds `entries` entries to a new destination ledger (1 KiB, ensemble 3
    /// / write quorum 2 / ack quorum 2, CRC32C), `inflight` in flight.
    pub(crate) fn add(&self, entries: u32, inflight: u32) -> Raw {
        Self::add_with(&self.destination, entries, inflight)
    }

    /// Adds on `client`'s cluster, as [`add`](Self::add).
    pub(crate) fn add_with(client: &JavaClient, entries: u32, inflight: u32) -> Raw {
        let r = client
            .bench_add(&BenchAddOptions {
                entries,
                size: ENTRY_SIZE as u32,
                inflight,
                ensemble: 3,
                write_quorum: 2,
                ack_quorum: 2,
            })
            .unwrap();
        Raw {
            when: "",
            op: RawOp::Add { inflight },
            ledger_id: r.ledger_id,
            entries: r.entries,
            entries_per_sec: r.entries_per_sec,
            mib_per_sec: r.mib_per_sec,
            latency_micros: Some((r.p50_micros, r.p99_micros)),
            cpu: CpuUse::default(),
        }
    }

    /// Reads the source ledger whole, `RAW_READ_BATCH` entries per call.
    pub(crate) fn read(&self) -> Raw {
        let r = self
            .source
            .bench_read(self.read_ledger, RAW_READ_BATCH)
            .unwrap();
        Raw {
            when: "",
            op: RawOp::Read {
                batch: RAW_READ_BATCH,
            },
            ledger_id: self.read_ledger,
            entries: r.entries,
            entries_per_sec: r.entries_per_sec,
            mib_per_sec: r.mib_per_sec,
            latency_micros: None,
            cpu: CpuUse::default(),
        }
    }

    /// The raw measurements, each with the CPU it used: adds at every
    /// `RAW_INFLIGHT`, the Rust client's adds at the highest, then one read of
    /// the source ledger.
    pub(crate) fn series(
        &self,
        rt: &tokio::runtime::Runtime,
        rust: &dyn BookKeeper,
        groups: &[Group],
        entries: u32,
        when: &'static str,
    ) -> Vec<Raw> {
        let measured = |f: &dyn Fn() -> Raw| {
            let before = cpu::snapshot(groups);
            let mut raw = f();
            raw.cpu = cpu::used(groups, &before, &cpu::snapshot(groups));
            raw.when = when;
            raw
        };
        let mut series: Vec<Raw> = RAW_INFLIGHT
            .iter()
            .map(|&inflight| measured(&|| self.add(entries, inflight)))
            .collect();
        let inflight = RAW_INFLIGHT[RAW_INFLIGHT.len() - 1];
        series.push(measured(&|| rt.block_on(rust_add(rust, entries, inflight))));
        series.push(measured(&|| self.read()));
        series
    }
}

/// Adds `entries` entries to a new ledger with `bk` (as the Java client's
/// `bench_add` does: 1 KiB, ensemble 3 / write quorum 2 / ack quorum 2,
/// CRC32C), at most `inflight` in flight, and closes it.
pub(crate) async fn rust_add(bk: &dyn BookKeeper, entries: u32, inflight: u32) -> Raw {
    let config = LedgerConfig::default()
        .with_quorums(3, 2, 2)
        .with_digest_type(DigestType::Crc32c);
    let w = bk.create_ledger(&config).await.unwrap();
    let payload = Bytes::from(
        (0..ENTRY_SIZE)
            .map(|i| (i % 251) as u8)
            .collect::<Vec<u8>>(),
    );
    let mut pending: VecDeque<BoxFuture<'static, bkswitch_bk_client::Result<i64>>> =
        VecDeque::with_capacity(inflight as usize);
    let started = Instant::now();
    for _ in 0..entries {
        if pending.len() >= inflight as usize {
            // Completions come in entry-id order: the oldest is the next.
            pending.pop_front().unwrap().await.unwrap();
        }
        pending.push_back(w.add_entry(payload.clone()));
    }
    for add in pending {
        add.await.unwrap();
    }
    let seconds = started.elapsed().as_secs_f64();
    w.close().await.unwrap();
    Raw {
        when: "",
        op: RawOp::RustAdd { inflight },
        ledger_id: w.id(),
        entries: u64::from(entries),
        entries_per_sec: f64::from(entries) / seconds,
        mib_per_sec: f64::from(entries) * ENTRY_SIZE as f64 / MIB / seconds,
        latency_micros: None,
        cpu: CpuUse::default(),
    }
}
