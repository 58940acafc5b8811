//! Ledger copy (`bkswitch-ledger-copy`) on `MemoryBookKeeper` clusters:
//!
//! - `copy/throughput`: 1000 sealed ledgers × 100 entries × 1 KiB copied to a fresh
//!   destination cluster with 1, 4 or 16 copies running at once (tokio tasks on a
//!   2-worker runtime), against a baseline that reads each whole ledger into memory
//!   and writes it back (`read_all_then_add_all`, not bounded).
//! - `copy/large_ledger`: one ledger (32 MiB by default, `COPY_PEAK_MIB` to change it,
//!   e.g. 256 or 1024) of 64 KiB entries, copied with windows 16/64/256 to a
//!   destination that stores the data (`memory`) and to one that drops it (`sink`).
//!   A counting global allocator records the heap high-water mark during each copy;
//!   the figures are printed at the end (see bench/RESULTS.md for how to read them).
//!
//! Run with: cargo bench -p bkswitch-bench --bench copy
//! (large ledger only: COPY_PEAK_MIB=256 cargo bench -p bkswitch-bench --bench copy -- large_ledger)
#![allow(unsafe_code)]

use std::collections::BTreeMap;
use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_bk_client::testkit::async_trait;
use bkswitch_bk_client::{
    BkError, BookKeeper, DigestType, EntryId, LedgerConfig, LedgerEntry, LedgerId, LedgerMetadata,
    MemoryBookKeeper, ReadHandle, ReadHandleExt, Result as BkResult, WriteHandle, WriteHandleExt,
};
use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyOptions};
use bytes::Bytes;
use criterion::{criterion_group, BenchmarkId, Criterion, SamplingMode, Throughput};
use futures::future::{BoxFuture, FutureExt};
use futures::StreamExt;
use parking_lot::Mutex;

// ----- counting allocator -----

#[path = "shared/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Counting, CURRENT, PEAK};

#[global_allocator]
static GLOBAL: Counting = Counting;

fn heap() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

fn reset_peak() -> usize {
    let now = heap();
    PEAK.store(now, Ordering::Relaxed);
    now
}

fn peak() -> usize {
    PEAK.load(Ordering::Relaxed)
}

const MIB: f64 = 1024.0 * 1024.0;

// ----- throughput -----

const LEDGERS: usize = 1000;
const ENTRIES: usize = 100;
const ENTRY_SIZE: usize = 1024;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn source(ledgers: usize, entries: usize, size: usize) -> (MemoryBookKeeper, Vec<LedgerId>) {
    let src = MemoryBookKeeper::new("bk-old");
    let mut ids = Vec::with_capacity(ledgers);
    for l in 0..ledgers {
        let w = src.create_ledger(&LedgerConfig::default()).await.unwrap();
        w.add_all((0..entries).map(|e| Bytes::from(vec![(l + e) as u8; size])))
            .await
            .unwrap();
        w.close().await.unwrap();
        ids.push(w.id());
    }
    (src, ids)
}

/// The unbounded way: hold each whole ledger in memory.
async fn read_all_then_add_all(id: LedgerId, src: &dyn BookKeeper, dst: &dyn BookKeeper) {
    let h = src
        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let entries = h.read_all().await.unwrap();
    let w = dst
        .create_ledger_adv(id, &LedgerConfig::from_metadata(&h.metadata()))
        .await
        .unwrap();
    let acks: Vec<_> = entries
        .into_iter()
        .map(|e| w.add_entry_at(e.entry_id, e.data))
        .collect();
    for a in acks {
        a.await.unwrap();
    }
    w.close().await.unwrap();
}

fn throughput(c: &mut Criterion) {
    let rt = runtime();
    let (src, ids) = rt.block_on(source(LEDGERS, ENTRIES, ENTRY_SIZE));
    let src: Arc<dyn BookKeeper> = Arc::new(src);
    let ids = Arc::new(ids);
    let mut g = c.benchmark_group("copy/throughput");
    g.sample_size(10)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .throughput(Throughput::ElementsAndBytes {
            elements: (LEDGERS * ENTRIES) as u64,
            bytes: (LEDGERS * ENTRIES * ENTRY_SIZE) as u64,
        });
    g.bench_function("read_all_then_add_all/1", |b| {
        b.to_async(&rt).iter_custom(|iters| {
            let (src, ids) = (src.clone(), ids.clone());
            async move {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    let dst = MemoryBookKeeper::new("bk-new");
                    let start = Instant::now();
                    for &id in ids.iter() {
                        read_all_then_add_all(id, &*src, &dst).await;
                    }
                    total += start.elapsed();
                    black_box(dst);
                }
                total
            }
        })
    });
    for concurrency in [1usize, 4, 16] {
        g.bench_with_input(
            BenchmarkId::new("copy_ledger_preserving_ids", concurrency),
            &concurrency,
            |b, &concurrency| {
                b.to_async(&rt).iter_custom(|iters| {
                    let (src, ids) = (src.clone(), ids.clone());
                    async move {
                        let mut total = Duration::ZERO;
                        for _ in 0..iters {
                            let dst: Arc<dyn BookKeeper> =
                                Arc::new(MemoryBookKeeper::new("bk-new"));
                            let start = Instant::now();
                            let reports: Vec<_> = futures::stream::iter(ids.iter().copied())
                                .map(|id| {
                                    let (src, dst) = (src.clone(), dst.clone());
                                    tokio::spawn(async move {
                                        copy_ledger_preserving_ids(
                                            id,
                                            &*src,
                                            &*dst,
                                            &CopyOptions::default(),
                                        )
                                        .await
                                    })
                                })
                                .buffer_unordered(concurrency)
                                .map(|joined| joined.unwrap().unwrap())
                                .collect()
                                .await;
                            total += start.elapsed();
                            assert_eq!(reports.len(), LEDGERS);
                            black_box(dst);
                        }
                        total
                    }
                })
            },
        );
    }
    g.finish();
}

// ----- large ledger, peak memory -----

const LARGE_ENTRY: usize = 64 * 1024;

/// A source client whose reads return fresh copies of the payloads, as a network
/// client does (the in-memory client would hand out shared buffers).
#[derive(Debug)]
struct CopyingSource(MemoryBookKeeper);

#[derive(Debug)]
struct CopyingHandle(Arc<dyn ReadHandle>);

#[async_trait]
impl BookKeeper for CopyingSource {
    async fn advance_ledger_ids_beyond(
        &self,
        _above: bkswitch_bk_client::LedgerId,
    ) -> bkswitch_bk_client::Result<()> {
        Err(bkswitch_bk_client::BkError::new(
            bkswitch_bk_client::BkErrorKind::IllegalOp,
            "this test client has no ledger id generator to advance",
        ))
    }

    fn writable_bookies(&self) -> Option<usize> {
        None
    }

    fn cluster_name(&self) -> &str {
        self.0.cluster_name()
    }
    async fn create_ledger(&self, config: &LedgerConfig) -> BkResult<Arc<dyn WriteHandle>> {
        self.0.create_ledger(config).await
    }
    async fn create_ledger_adv(
        &self,
        id: LedgerId,
        config: &LedgerConfig,
    ) -> BkResult<Arc<dyn WriteHandle>> {
        self.0.create_ledger_adv(id, config).await
    }
    async fn open_ledger(
        &self,
        id: LedgerId,
        digest: DigestType,
        password: &[u8],
    ) -> BkResult<Arc<dyn ReadHandle>> {
        self.0.open_ledger(id, digest, password).await
    }
    async fn open_ledger_no_recovery(
        &self,
        id: LedgerId,
        digest: DigestType,
        password: &[u8],
    ) -> BkResult<Arc<dyn ReadHandle>> {
        let h = self.0.open_ledger_no_recovery(id, digest, password).await?;
        Ok(Arc::new(CopyingHandle(h)))
    }
    async fn delete_ledger(&self, id: LedgerId) -> BkResult<()> {
        self.0.delete_ledger(id).await
    }
    async fn close(&self) -> BkResult<()> {
        self.0.close().await
    }
}

#[async_trait]
impl ReadHandle for CopyingHandle {
    fn id(&self) -> LedgerId {
        self.0.id()
    }
    fn metadata(&self) -> LedgerMetadata {
        self.0.metadata()
    }
    async fn read_entries(&self, first: EntryId, last: EntryId) -> BkResult<Vec<LedgerEntry>> {
        let entries = self.0.read_entries(first, last).await?;
        Ok(entries
            .into_iter()
            .map(|e| LedgerEntry {
                entry_id: e.entry_id,
                data: Bytes::copy_from_slice(&e.data),
            })
            .collect())
    }
    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> BkResult<Vec<LedgerEntry>> {
        self.0.read_unconfirmed(first, last).await
    }
    fn last_add_confirmed(&self) -> EntryId {
        self.0.last_add_confirmed()
    }
    async fn read_last_add_confirmed(&self) -> BkResult<EntryId> {
        self.0.read_last_add_confirmed().await
    }
    fn length(&self) -> u64 {
        self.0.length()
    }
    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
    async fn close(&self) -> BkResult<()> {
        self.0.close().await
    }
}

/// A destination that acknowledges every add and drops the payload.
#[derive(Debug)]
struct Sink;

#[derive(Debug)]
struct SinkHandle(LedgerId, Mutex<(EntryId, u64)>, LedgerMetadata);

#[async_trait]
impl BookKeeper for Sink {
    async fn advance_ledger_ids_beyond(
        &self,
        _above: bkswitch_bk_client::LedgerId,
    ) -> bkswitch_bk_client::Result<()> {
        Err(bkswitch_bk_client::BkError::new(
            bkswitch_bk_client::BkErrorKind::IllegalOp,
            "this test client has no ledger id generator to advance",
        ))
    }

    fn writable_bookies(&self) -> Option<usize> {
        None
    }

    fn cluster_name(&self) -> &str {
        "sink"
    }
    async fn create_ledger(&self, _: &LedgerConfig) -> BkResult<Arc<dyn WriteHandle>> {
        unreachable!("the copy uses create_ledger_adv")
    }
    async fn create_ledger_adv(
        &self,
        id: LedgerId,
        config: &LedgerConfig,
    ) -> BkResult<Arc<dyn WriteHandle>> {
        let meta = MemoryBookKeeper::new("template")
            .create_ledger_adv(id, config)
            .await?
            .metadata();
        Ok(Arc::new(SinkHandle(id, Mutex::new((-1, 0)), meta)))
    }
    async fn open_ledger(
        &self,
        id: LedgerId,
        _: DigestType,
        _: &[u8],
    ) -> BkResult<Arc<dyn ReadHandle>> {
        Err(BkError::new(
            bkswitch_bk_client::BkErrorKind::NoSuchLedgerOnMetadataServer,
            format!("sink has no ledger {id}"),
        ))
    }
    async fn open_ledger_no_recovery(
        &self,
        id: LedgerId,
        d: DigestType,
        p: &[u8],
    ) -> BkResult<Arc<dyn ReadHandle>> {
        self.open_ledger(id, d, p).await
    }
    async fn delete_ledger(&self, _: LedgerId) -> BkResult<()> {
        Ok(())
    }
    async fn close(&self) -> BkResult<()> {
        Ok(())
    }
}

#[async_trait]
impl ReadHandle for SinkHandle {
    fn id(&self) -> LedgerId {
        self.0
    }
    fn metadata(&self) -> LedgerMetadata {
        self.2.clone()
    }
    async fn read_entries(&self, _: EntryId, _: EntryId) -> BkResult<Vec<LedgerEntry>> {
        Ok(Vec::new())
    }
    async fn read_unconfirmed(&self, _: EntryId, _: EntryId) -> BkResult<Vec<LedgerEntry>> {
        Ok(Vec::new())
    }
    fn last_add_confirmed(&self) -> EntryId {
        self.1.lock().0
    }
    async fn read_last_add_confirmed(&self) -> BkResult<EntryId> {
        Ok(self.1.lock().0)
    }
    fn length(&self) -> u64 {
        self.1.lock().1
    }
    fn is_closed(&self) -> bool {
        false
    }
    async fn close(&self) -> BkResult<()> {
        Ok(())
    }
}

impl WriteHandle for SinkHandle {
    fn add_entry(&self, _: Bytes) -> BoxFuture<'static, BkResult<EntryId>> {
        unreachable!("the copy uses add_entry_at")
    }
    fn add_entry_at(
        &self,
        entry_id: EntryId,
        data: Bytes,
    ) -> BoxFuture<'static, BkResult<EntryId>> {
        let mut s = self.1.lock();
        s.0 = entry_id;
        s.1 += data.len() as u64;
        futures::future::ready(Ok(entry_id)).boxed()
    }
}

/// Peak figures of one configuration, worst over the iterations (bytes).
#[derive(Debug, Default, Clone, Copy)]
struct PeakFigures {
    /// Heap after the copy minus the heap before (data kept by the destination).
    retained: usize,
    /// Upper bound of the copy's own memory: per progress interval, the peak minus
    /// the bytes the destination had acknowledged (and so stored) at its start.
    transient_bound: usize,
}

static PEAKS: Mutex<BTreeMap<String, PeakFigures>> = Mutex::new(BTreeMap::new());

async fn copy_measuring(
    id: LedgerId,
    src: &CopyingSource,
    dst: &dyn BookKeeper,
    window: usize,
    stores: bool,
) -> PeakFigures {
    let before = reset_peak();
    let bound = Arc::new(Mutex::new((0usize, 0u64)));
    let b = bound.clone();
    let options = CopyOptions::default()
        .with_window(window)
        .with_progress(move |p| {
            let mut b = b.lock();
            let stored_at_start = if stores { b.1 as usize } else { 0 };
            let interval_peak = peak();
            b.0 =
                b.0.max(interval_peak.saturating_sub(before + stored_at_start));
            b.1 = p.bytes_copied;
            PEAK.store(heap(), Ordering::Relaxed);
        });
    let report = copy_ledger_preserving_ids(id, src, dst, &options)
        .await
        .unwrap();
    let stored_at_start = if stores { bound.lock().1 as usize } else { 0 };
    let last = peak().saturating_sub(before + stored_at_start);
    let transient_bound = bound.lock().0.max(last);
    black_box(report);
    PeakFigures {
        retained: heap().saturating_sub(before),
        transient_bound,
    }
}

fn large_ledger(c: &mut Criterion) {
    let mib: usize = std::env::var("COPY_PEAK_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32);
    let entries = mib * 1024 * 1024 / LARGE_ENTRY;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (src, ids) = rt.block_on(source(1, entries, LARGE_ENTRY));
    let src = CopyingSource(src);
    let id = ids[0];
    let mut g = c.benchmark_group("copy/large_ledger");
    g.sampling_mode(SamplingMode::Flat)
        .sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Bytes((entries * LARGE_ENTRY) as u64));
    for dst_kind in ["memory", "sink"] {
        for window in [16usize, 64, 256] {
            let label = format!("{dst_kind}/{mib}MiB/window_{window}");
            g.bench_function(
                BenchmarkId::new(dst_kind, format!("{mib}MiB/window_{window}")),
                |b| {
                    b.to_async(&rt).iter_custom(|iters| {
                        let (src, label) = (&src, label.clone());
                        async move {
                            let mut total = Duration::ZERO;
                            for _ in 0..iters {
                                let memory = MemoryBookKeeper::new("bk-new");
                                let dst: &dyn BookKeeper =
                                    if dst_kind == "memory" { &memory } else { &Sink };
                                let start = Instant::now();
                                let f = copy_measuring(id, src, dst, window, dst_kind == "memory")
                                    .await;
                                total += start.elapsed();
                                drop(memory);
                                let mut peaks = PEAKS.lock();
                                let e = peaks.entry(label.clone()).or_default();
                                e.retained = e.retained.max(f.retained);
                                e.transient_bound = e.transient_bound.max(f.transient_bound);
                            }
                            total
                        }
                    })
                },
            );
        }
    }
    g.finish();
    let peaks = PEAKS.lock();
    if !peaks.is_empty() {
        println!(
            "\ncopy/large_ledger heap figures ({mib} MiB ledger, {} KiB entries):",
            LARGE_ENTRY / 1024
        );
        println!("| destination / ledger / window | window x entry | copy's own peak (bound) | retained by destination |");
        for (label, f) in peaks.iter() {
            let window: usize = label.rsplit('_').next().unwrap().parse().unwrap();
            println!(
                "| {label} | {:.1} MiB | {:.2} MiB | {:.1} MiB |",
                (window * LARGE_ENTRY) as f64 / MIB,
                f.transient_bound as f64 / MIB,
                f.retained as f64 / MIB
            );
        }
    }
}

criterion_group!(benches, throughput, large_ledger);

fn main() {
    benches();
    Criterion::default().configure_from_args().final_summary();
}
