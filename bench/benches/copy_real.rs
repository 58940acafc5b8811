//! The BUILD copy between two real BookKeeper clusters, measured (a table, not
//! criterion: each figure is one long measurement of real bookies).
//!
//! Two clusters of three Apache BookKeeper bookies each (`bkswitch-bk-harness`,
//! one JVM per bookie, loopback only) share one harness ZooKeeper. The Rust
//! client (`bkswitch-bookkeeper`) writes cursor-sized ledgers on the source —
//! 100 entries × 1 KiB, ensemble 3 / write quorum 2 / ack quorum 2 (`COPY_REAL_QUORUMS`), CRC32C,
//! closed — and `copy_ledger_preserving_ids` (what BUILD runs, default window
//! 64) copies them onto the destination, N copies in flight (N = 1, 4, 16, 64), each
//! copy a task, as the orchestrator runs them, and beside each round the
//! pipelined Java copier of the harness (`copy_pipelined`: asynchronous, reads of
//! a quarter of the window, several in flight, entries handed to `writeAsync`
//! as they arrive, the Java client and its JVM tuned as `JAVA_COPIER_CONF`
//! and `JAVA_COPIER_JVM` say) copies
//! another fresh set the same way (and, with `COPY_REAL_SERIAL=1`, the copy
//! loop as it was before reads were pipelined, `copy_real/serial.rs`, a
//! third). Rounds repeat
//! (`COPY_REAL_ROUNDS`, default 6), alternating whether Rust or Java goes
//! first, and the medians are reported with the bookies' and the copiers' CPU
//! per copied entry. Each round copies a fresh set of
//! source ledgers that the destination has never held, so every round copies
//! them all; afterwards every copy is compared with its source
//! (`verify_dst_matches_src`: same ledger id, configuration, last entry id,
//! length, and every entry under its id with the same bytes; not timed).
//!
//! The physical limit is the destination bookies' raw add throughput, measured
//! in the same run with BookKeeper's own Java client (`bench_add`: same entry
//! size and quorums, `throttle=0`, 64 and 256 adds in flight), before and after
//! the copy rounds; the best of those figures is "raw". A second Java client
//! reads a source ledger (`bench_read`) for the other half of a copy's work:
//! the source bookies' raw read throughput, and what a read costs them. The
//! copy's own client adding the same way (256 in flight) is measured beside
//! Java's, as a reference for what its requests cost the bookies.
//!
//! Memory: the copying process's resident set (`VmRSS` sampled every 2 ms, and
//! `VmHWM` reset through `/proc/self/clear_refs`) and its heap (a counting
//! global allocator) over the 16-copy round of 100-entry ledgers and over a
//! round of ledgers ten times longer (1,000 entries, a tenth as many ledgers).
//! The copy streams with a bounded window, so both should be the same. A
//! control that copies each 1,000-entry ledger whole (read in one call, then
//! added) shows what holding whole ledgers would cost.
//!
//! Where the time goes: each copy is timed by phase (source open, create on the
//! destination, source reads, waiting for the destination's acknowledgements,
//! close) through thin wrappers around the two clients, and the CPU used during
//! each measurement is split between this process, the source bookies, the
//! destination bookies, ZooKeeper, the Java clients, the JVMs' JIT compilers
//! and the rest of the machine (`/proc`).
//!
//! The JVMs compile their hot paths for a long time: the run warms up first
//! (Java adds, copies and reads, twice over) and reports the CPU the JIT
//! compilers still used during each measurement.
//!
//! Run with: `cargo bench -p bkswitch-bench --bench copy_real`
//! (about six minutes on a quiet machine; `COPY_REAL_QUICK=1` for a smaller run of 100
//! ledgers a round, 2 rounds). Other knobs: `COPY_REAL_LEDGERS` (ledgers per round and
//! copier, default 200), `COPY_REAL_LARGE_LEDGERS` (1,000-entry ledgers, default
//! 100), `COPY_REAL_CONCURRENCY` (default `1,4,16,64`), `COPY_REAL_WINDOW` (the
//! copy window, default 64), `COPY_REAL_ROUNDS` (default 6: each side goes first as often),
//! `COPY_REAL_DISCARD_ROUNDS` (rounds run first and not reported, default 1: the first
//! round after the warm-up is the costliest for the bookies, whichever copier meets it),
//! `COPY_REAL_SERIAL=1` (also run the earlier loop), `COPY_REAL_JAVA_CONF`
//! (the Java copier's client settings, `key=value,…`), `COPY_REAL_JAVA_JVM`
//! (its JVM arguments, space-separated), `COPY_REAL_JAVA_READ_BATCH` (its
//! entries per read, default 16), `COPY_REAL_RAW_ENTRIES` (entries per raw
//! measurement, default 50,000), `COPY_REAL_WARMUP` (Java warm-up adds on the
//! destination, default 100,000).
//!
//! The bookies keep their journals and entry logs in folders under `TMPDIR`:
//! the default run stores about 11 GiB there (every entry twice, in a journal and
//! an entry log, on both clusters) and refuses to start without the room. On a
//! small disk point `TMPDIR` at a tmpfs.

#[path = "copy_real/cpu.rs"]
mod cpu;
#[path = "copy_real/duel.rs"]
mod duel;
#[path = "copy_real/memory.rs"]
mod memory;
#[path = "copy_real/raw.rs"]
mod raw;
#[path = "copy_real/report.rs"]
mod report;
#[path = "copy_real/serial.rs"]
mod serial;
#[path = "copy_real/settings.rs"]
mod settings;
#[path = "copy_real/timed.rs"]
mod timed;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_bk_client::{
    BookKeeper, DigestType, EntryId, LedgerConfig, LedgerId, Result as BkResult,
};
use bkswitch_bk_harness::{BkCluster, JavaClient};
use bkswitch_bookkeeper::{advance_ledger_id_generator, BookKeeperClient, ClientConfig};
use bkswitch_ledger_copy::{
    copy_ledger_preserving_ids, verify_dst_matches_src, CopyOptions, CopyOutcome, CopyReport,
};
use bytes::Bytes;
use futures::StreamExt;

use cpu::{CpuUse, Group};
use memory::{load_average, MemFigures, MemProbe, MIB};
use raw::{Raw, RawJava, RAW_INFLIGHT};
use report::report;
use settings::{check_space, Settings};
use timed::{PhaseClock, Phases, Timed};

// ----- settings -----

const ENTRY_SIZE: usize = 1024;
const SMALL_ENTRIES: usize = 100;
const LARGE_ENTRIES: usize = 1000;
/// Copies in flight for the warm-up, the verification and the large-ledger run
/// (the orchestrator's default `migration_concurrency`).
const BUILD_CONCURRENCY: usize = 16;
/// The system property that marks the Java copier's JVM (for its CPU group).
const COPIER_MARKER: &str = "-Dbkswitch.bench.role=copier";
/// How many times the warm-up runs its sequence (Java adds, copies, reads).
const WARMUP_ITERATIONS: usize = 2;
// ----- the source ledgers -----

/// 256 bytes of pattern followed by one entry's worth: entry payloads are
/// slices of it at different offsets (distinct contents, no copying).
fn pattern() -> Bytes {
    Bytes::from(
        (0..256 + ENTRY_SIZE)
            .map(|i| (i * 7 % 251) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// Writes `count` closed ledgers of `entries` × 1 KiB on `bk`, as a cursor's:
/// the quorums of [`settings::quorums`] (E3/W2/A2 by default), CRC32C, no password, Pulsar's
/// custom metadata. `BUILD_CONCURRENCY` ledgers are written at once.
async fn write_source(
    bk: Arc<BookKeeperClient>,
    set: String,
    count: usize,
    entries: usize,
) -> Vec<LedgerId> {
    let pattern = pattern();
    let quorums = settings::quorums();
    let mut ids: Vec<LedgerId> = futures::stream::iter(0..count)
        .map(|l| {
            let (bk, pattern, set) = (bk.clone(), pattern.clone(), set.clone());
            tokio::spawn(async move {
                let config = LedgerConfig::default()
                    .with_quorums(quorums.0, quorums.1, quorums.2)
                    .with_digest_type(DigestType::Crc32c)
                    .with_custom_metadata("application", b"pulsar".to_vec())
                    .with_custom_metadata("component", b"managed-ledger".to_vec())
                    .with_custom_metadata(
                        "pulsar/managed-ledger",
                        format!("public/default/persistent/{set}-{l}").into_bytes(),
                    )
                    .with_custom_metadata("pulsar/cursor", b"subscription".to_vec());
                let w = bk.create_ledger(&config).await.unwrap();
                let adds: Vec<_> = (0..entries)
                    .map(|e| {
                        let at = (l * 31 + e * 7) % 256;
                        w.add_entry(pattern.slice(at..at + ENTRY_SIZE))
                    })
                    .collect();
                for a in adds {
                    a.await.unwrap();
                }
                w.close().await.unwrap();
                w.id()
            })
        })
        .buffer_unordered(BUILD_CONCURRENCY)
        .map(|joined| joined.unwrap())
        .collect()
        .await;
    ids.sort_unstable();
    ids
}

// ----- one copy round -----

/// What one round measured.
#[derive(Clone)]
struct Round {
    ledgers: usize,
    bytes: u64,
    seconds: f64,
    phases: Phases,
    memory: MemFigures,
    verify_seconds: f64,
    load: f64,
    cpu: CpuUse,
}

impl Round {
    fn ledgers_per_sec(&self) -> f64 {
        self.ledgers as f64 / self.seconds
    }
    fn mib_per_sec(&self) -> f64 {
        self.bytes as f64 / MIB / self.seconds
    }
}

/// What a round runs against: the two clients (timed), the probes.
struct Bench {
    src: Arc<dyn BookKeeper>,
    dst: Arc<dyn BookKeeper>,
    clock: Arc<PhaseClock>,
    probe: MemProbe,
    groups: Vec<Group>,
    window: usize,
}

/// How a round copies each ledger.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Method {
    /// `copy_ledger_preserving_ids`, what BUILD runs.
    Streaming,
    /// The control for the memory figures: read the whole ledger in one call,
    /// then add every entry (holds a whole ledger per copy).
    WholeLedger,
    /// The copy loop before reads were pipelined (`serial.rs`), for the
    /// same-run comparison.
    SerialReads,
}

/// The control: the whole ledger in memory at once.
async fn whole_ledger_copy(
    id: LedgerId,
    src: &dyn BookKeeper,
    dst: &dyn BookKeeper,
) -> BkResult<CopyReport> {
    let started = Instant::now();
    let h = src
        .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
        .await?;
    let last = h.last_add_confirmed();
    let entries = h.read_entries(0, last).await?;
    let w = dst
        .create_ledger_adv(id, &LedgerConfig::from_metadata(&h.metadata()))
        .await?;
    let bytes = entries.iter().map(|e| e.data.len() as u64).sum();
    let count = entries.len() as u64;
    let acks: Vec<_> = entries
        .into_iter()
        .map(|e| w.add_entry_at(e.entry_id, e.data))
        .collect();
    for a in acks {
        a.await?;
    }
    w.close().await?;
    Ok(CopyReport {
        ledger_id: id,
        outcome: CopyOutcome::Copied,
        entries: count,
        bytes,
        last_entry_id: last,
        duration: started.elapsed(),
    })
}

/// Copies every ledger of `ids` from the source to the destination,
/// `concurrency` copies in flight (each a task), checks every report, then
/// (untimed) compares every copy with its source.
async fn copy_round(
    b: &Bench,
    ids: &[LedgerId],
    entries: usize,
    concurrency: usize,
    method: Method,
) -> Round {
    let (src, dst, groups) = (&b.src, &b.dst, &b.groups);
    b.clock.take();
    let mark = b.probe.begin();
    let cpu_before = cpu::snapshot(groups);
    let started = Instant::now();
    let options = CopyOptions::default().with_window(b.window);
    let reports: Vec<CopyReport> = futures::stream::iter(ids.iter().copied())
        .map(|id| {
            let (src, dst, options) = (src.clone(), dst.clone(), options.clone());
            tokio::spawn(async move {
                match method {
                    Method::Streaming => copy_ledger_preserving_ids(id, &*src, &*dst, &options)
                        .await
                        .map_err(|e| e.to_string()),
                    Method::WholeLedger => whole_ledger_copy(id, &*src, &*dst)
                        .await
                        .map_err(|e| e.to_string()),
                    Method::SerialReads => serial::serial_copy(id, &*src, &*dst, options.window)
                        .await
                        .map_err(|e| e.to_string()),
                }
            })
        })
        .buffer_unordered(concurrency)
        .map(|joined| joined.unwrap().unwrap())
        .collect()
        .await;
    let seconds = started.elapsed().as_secs_f64();
    let cpu = cpu::used(groups, &cpu_before, &cpu::snapshot(groups));
    let memory = b.probe.end(&mark);
    let load = load_average();
    let phases = b.clock.take();
    let mut copied: Vec<LedgerId> = reports.iter().map(|r| r.ledger_id).collect();
    copied.sort_unstable();
    assert_eq!(copied, ids, "every ledger copied once, under its own id");
    for r in &reports {
        assert_eq!(r.outcome, CopyOutcome::Copied, "ledger {}", r.ledger_id);
        assert_eq!(r.entries, entries as u64, "ledger {}", r.ledger_id);
        assert_eq!(r.last_entry_id, entries as EntryId - 1);
        assert_eq!(r.bytes, (entries * ENTRY_SIZE) as u64);
    }
    let verify_started = Instant::now();
    verify_all(src, dst, ids).await;
    Round {
        ledgers: ids.len(),
        bytes: reports.iter().map(|r| r.bytes).sum(),
        seconds,
        phases,
        memory,
        verify_seconds: verify_started.elapsed().as_secs_f64(),
        load,
        cpu,
    }
}

/// Every copy matches its source: ledger id, configuration, last entry id,
/// length, and every entry under its id with the same bytes.
async fn verify_all(src: &Arc<dyn BookKeeper>, dst: &Arc<dyn BookKeeper>, ids: &[LedgerId]) {
    let failures: Vec<String> = futures::stream::iter(ids.iter().copied())
        .map(|id| {
            let (src, dst) = (src.clone(), dst.clone());
            tokio::spawn(async move {
                let v = verify_dst_matches_src(id, &*src, &*dst, &CopyOptions::default())
                    .await
                    .unwrap();
                (!v.is_identical()).then(|| format!("ledger {id}: {v:?}"))
            })
        })
        .buffer_unordered(BUILD_CONCURRENCY)
        .filter_map(|joined| async move { joined.unwrap() })
        .collect()
        .await;
    assert!(failures.is_empty(), "copies differ: {failures:?}");
}

/// Reads every ledger of `ids` whole, `BUILD_CONCURRENCY` at once, as a copy
/// does (no recovery, batches of half the default window).
async fn read_pass(src: &Arc<dyn BookKeeper>, ids: &[LedgerId]) {
    futures::stream::iter(ids.iter().copied())
        .map(|id| {
            let src = src.clone();
            tokio::spawn(async move {
                let h = src
                    .open_ledger_no_recovery(id, DigestType::Crc32c, b"")
                    .await
                    .unwrap();
                let last = h.last_add_confirmed();
                let batch = (CopyOptions::default().window / 2) as EntryId;
                let mut first = 0;
                while first <= last {
                    let to = (first + batch - 1).min(last);
                    h.read_entries(first, to).await.unwrap();
                    first = to + 1;
                }
            })
        })
        .buffer_unordered(BUILD_CONCURRENCY)
        .for_each(|joined| async move { joined.unwrap() })
        .await;
}

// ----- main -----

/// Everything the report prints.
struct Figures {
    load_before: f64,
    idle: CpuUse,
    raw: Vec<Raw>,
    rounds: Vec<(usize, Round)>,
    /// Both copiers, round after round, at each concurrency.
    duel: Vec<duel::Point>,
    /// The Java copier's client settings, as printed.
    java_conf: String,
    large: Round,
    control: Round,
    took: Duration,
}

/// The CPU groups: the bookies of each cluster (by their folders), ZooKeeper,
/// the Java clients (by their cluster's URI).
fn groups(source: &BkCluster, destination: &BkCluster) -> Vec<Group> {
    let dirs = |c: &BkCluster| {
        (0..c.bookie_count())
            .map(|i| c.bookie_dir(i).display().to_string())
            .collect()
    };
    vec![
        Group {
            label: "source bookies",
            markers: dirs(source),
        },
        Group {
            label: "destination bookies",
            markers: dirs(destination),
        },
        Group {
            label: "ZooKeeper",
            markers: vec!["org.apache.zookeeper.server".to_owned()],
        },
        // The pipelined copier's session is the one started with the
        // system property `COPIER_MARKER`.
        Group {
            label: "Java copier",
            markers: vec![format!("\0{COPIER_MARKER}\0")],
        },
        // A Java client's command line holds its cluster's URI as one argument
        // (arguments end with a NUL).
        Group {
            label: "Java client (destination)",
            markers: vec![format!("{}\0", destination.metadata_service_uri())],
        },
        Group {
            label: "Java client (source)",
            markers: vec![format!("{}\0", source.metadata_service_uri())],
        },
    ]
}

fn main() {
    if std::env::args().any(|a| a == "--list" || a.starts_with("--format")) {
        // `cargo bench -- --list` and friends: nothing to list.
        return;
    }
    bkswitch_bk_harness::require_bk();
    let s = Settings::from_env();
    check_space(&s);
    let load_before = load_average();
    let run_started = Instant::now();
    let zk = bkswitch_zk_harness::shared().connect_string();
    let (source, destination) = std::thread::scope(|scope| {
        let a = scope.spawn(|| BkCluster::on_shared_zk(3));
        let b = scope.spawn(|| BkCluster::on_shared_zk(3));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert!(source.zk_connect() == zk && destination.zk_connect() == zk);
    let groups = groups(&source, &destination);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // The operator's step before a switch: the destination's generator goes
    // beyond every id the source hands out (the source's are 31-bit), before any
    // client of the destination starts.
    rt.block_on(advance_ledger_id_generator(
        &destination.metadata_service_uri(),
        i64::from(i32::MAX),
        &ClientConfig::default(),
    ))
    .unwrap();
    // Pulsar turns the Java client's throttle (5,000 operations/s) off; so do
    // the raw measurements.
    let java_client = |uri: String| JavaClient::builder(&uri).conf("throttle", "0").start();
    let java_source = java_client(source.metadata_service_uri());
    // The source ledger of the raw reads, written first so that, like the
    // copied ledgers, it has left the bookies' write cache when it is read.
    let read_ledger = RawJava::add_with(&java_source, s.raw_entries, 256);
    // The pipelined copier's own session, with its client and JVM settings.
    let copier = s.java_conf.iter().fold(
        JavaClient::builder(&destination.metadata_service_uri()).jvm_arg(COPIER_MARKER),
        |b, (k, v)| b.conf(k.as_str(), v.as_str()),
    );
    let copier = s
        .java_jvm
        .iter()
        .fold(copier, |b, arg| b.jvm_arg(arg.as_str()))
        .start();
    let java = RawJava {
        destination: java_client(destination.metadata_service_uri()),
        source: java_source,
        read_ledger: read_ledger.ledger_id,
    };
    let (src_bk, dst_bk) = rt.block_on(async {
        let connect = |uri: String, name: &'static str| async move {
            BookKeeperClient::connect(&uri, ClientConfig::default().with_cluster_name(name))
                .await
                .unwrap()
        };
        (
            Arc::new(connect(source.metadata_service_uri(), "src").await),
            Arc::new(connect(destination.metadata_service_uri(), "dst").await),
        )
    });
    let clock = Arc::new(PhaseClock::default());
    let timed = |inner: &Arc<BookKeeperClient>| -> Arc<dyn BookKeeper> {
        Arc::new(Timed {
            inner: inner.clone(),
            clock: clock.clone(),
        })
    };
    let bench = Bench {
        src: timed(&src_bk),
        dst: timed(&dst_bk),
        clock: clock.clone(),
        probe: MemProbe::start(),
        groups,
        window: s.window,
    };
    let round = |ids: &[LedgerId], entries: usize, concurrency: usize, method: Method| {
        rt.block_on(copy_round(&bench, ids, entries, concurrency, method))
    };

    // The source ledgers: one fresh set per round, so that every round copies
    // ledgers the destination has never held.
    let write_started = Instant::now();
    let (warm_ids, java_warm_ids, sets, java_sets, large_ids, control_ids) = rt.block_on(async {
        let write = |set: String, count, entries| write_source(src_bk.clone(), set, count, entries);
        let warm = write("warmup".into(), s.warmup_ledgers, SMALL_ENTRIES).await;
        let java_warm = write("jwarmup".into(), s.warmup_ledgers, SMALL_ENTRIES).await;
        let mut sets = Vec::new();
        let mut java_sets = Vec::new();
        let mut serial_sets = Vec::new();
        for r in 0..s.rounds + s.discard_rounds {
            for c in &s.concurrency {
                sets.push(write(format!("r{r}c{c}"), s.ledgers, SMALL_ENTRIES).await);
                java_sets.push(write(format!("r{r}j{c}"), s.ledgers, SMALL_ENTRIES).await);
                if s.serial {
                    serial_sets.push(write(format!("r{r}s{c}"), s.ledgers, SMALL_ENTRIES).await);
                }
            }
        }
        let large = write("large".into(), s.large_ledgers, LARGE_ENTRIES).await;
        let control = write("control".into(), s.control_ledgers, LARGE_ENTRIES).await;
        (
            warm,
            java_warm,
            (sets, serial_sets),
            java_sets,
            large,
            control,
        )
    });
    let (sets, serial_sets) = sets;
    let written = (2 * s.warmup_ledgers + (2 * sets.len() + serial_sets.len()) * s.ledgers)
        * SMALL_ENTRIES
        + (s.large_ledgers + s.control_ledgers) * LARGE_ENTRIES;
    let write_seconds = write_started.elapsed().as_secs_f64();
    eprintln!(
        "source: {written} entries written in {write_seconds:.1} s ({:.1} MiB/s, the Rust \
         client, {BUILD_CONCURRENCY} ledgers at once)",
        written as f64 * ENTRY_SIZE as f64 / MIB / write_seconds
    );

    // Warm-up, twice over (the JVMs compile their hot paths meanwhile, and
    // compile some again once the other workload has changed their profiles):
    // the destination bookies' add path (Java adds), copies (the destination's
    // createAdv and close, the source's reads), reads of the copied ledgers.
    let halves = warm_ids.len().div_ceil(WARMUP_ITERATIONS).max(1);
    for (half, java_half) in warm_ids.chunks(halves).zip(java_warm_ids.chunks(halves)) {
        for inflight in RAW_INFLIGHT {
            java.add(
                s.warmup_adds / (WARMUP_ITERATIONS * RAW_INFLIGHT.len()) as u32,
                inflight,
            );
        }
        java.read();
        let warm = round(half, SMALL_ENTRIES, BUILD_CONCURRENCY, Method::Streaming);
        eprintln!("warm-up copy: {:.1} MiB/s", warm.mib_per_sec());
        let java_warm = copier
            .copy_pipelined(
                &source.metadata_service_uri(),
                java_half,
                BUILD_CONCURRENCY as u32,
                s.window as u32,
                s.java_read_batch,
            )
            .unwrap();
        eprintln!(
            "warm-up Java copy: {:.1} MiB/s (epoll: {})",
            java_warm.mib_per_sec, java_warm.epoll
        );
        rt.block_on(read_pass(&bench.src, half));
    }
    let idle_before = cpu::snapshot(&bench.groups);
    std::thread::sleep(Duration::from_secs(2));
    let idle = cpu::used(&bench.groups, &idle_before, &cpu::snapshot(&bench.groups));

    let mut raw = java.series(&rt, &*dst_bk, &bench.groups, s.raw_entries, "before");
    let source_uri = source.metadata_service_uri();
    // The pipelined Java copier (bk-harness `copy_pipelined`), on its own
    // fresh set, alternating which goes first; its copies verified like the
    // Rust ones (untimed).
    let java_round = |ids: &[LedgerId], c: usize, first: bool| {
        let (r, cpu) = duel::measured(&bench.groups, || {
            copier
                .copy_pipelined(
                    &source_uri,
                    ids,
                    c as u32,
                    s.window as u32,
                    s.java_read_batch,
                )
                .unwrap()
        });
        assert_eq!(r.ledgers as usize, ids.len());
        assert_eq!(r.entries as usize, ids.len() * SMALL_ENTRIES);
        rt.block_on(verify_all(&bench.src, &bench.dst, ids));
        eprintln!("Java copier at {c}: {:.1} MiB/s", r.mib_per_sec);
        duel::side(
            r.bytes,
            r.seconds,
            &cpu,
            &bench.groups,
            duel::java_client_seconds(&cpu, &bench.groups),
            first,
        )
    };
    let mut all_rounds: Vec<(usize, Round)> = Vec::new();
    let mut points: Vec<duel::Point> = s
        .concurrency
        .iter()
        .map(|&c| duel::Point {
            concurrency: c,
            ..duel::Point::default()
        })
        .collect();
    let mut sets = sets.iter().zip(&java_sets);
    let mut serial_sets = serial_sets.iter();
    for r in 0..s.rounds + s.discard_rounds {
        for (i, &c) in s.concurrency.iter().enumerate() {
            let (ids, java_ids) = sets.next().unwrap();
            if r < s.discard_rounds {
                // Run and not reported, each copier its own set, Rust first
                // at one concurrency and Java at the next.
                let java_first = i % 2 == 1;
                if java_first {
                    java_round(java_ids, c, true);
                }
                let rust = round(ids, SMALL_ENTRIES, c, Method::Streaming);
                eprintln!("copy at {c}, discarded: {:.1} MiB/s", rust.mib_per_sec());
                if !java_first {
                    java_round(java_ids, c, false);
                }
                // The earlier loop's set of a discarded round stays unused.
                let _ = serial_sets.next();
                continue;
            }
            let java_first = (r - s.discard_rounds + i) % 2 == 1;
            let serial_ids = serial_sets.next();
            let serial_round = |points: &mut Vec<duel::Point>| {
                if let Some(serial_ids) = serial_ids {
                    let old = round(serial_ids, SMALL_ENTRIES, c, Method::SerialReads);
                    eprintln!("serial-read copy at {c}: {:.1} MiB/s", old.mib_per_sec());
                    points[i].serial.push(duel::side(
                        old.bytes,
                        old.seconds,
                        &old.cpu,
                        &bench.groups,
                        old.cpu.own_seconds,
                        false,
                    ));
                }
            };
            // Java, the earlier loop, Rust; or Rust, the earlier loop, Java.
            if java_first {
                points[i].java.push(java_round(java_ids, c, true));
                serial_round(&mut points);
            }
            let rust = round(ids, SMALL_ENTRIES, c, Method::Streaming);
            eprintln!("copy at {c}: {:.1} MiB/s", rust.mib_per_sec());
            points[i].rust.push(duel::side(
                rust.bytes,
                rust.seconds,
                &rust.cpu,
                &bench.groups,
                rust.cpu.own_seconds,
                !java_first,
            ));
            all_rounds.push((c, rust));
            if !java_first {
                serial_round(&mut points);
                points[i].java.push(java_round(java_ids, c, false));
            }
        }
    }
    // The other tables take, at each concurrency, the Rust round of median
    // throughput.
    let rounds: Vec<(usize, Round)> = s
        .concurrency
        .iter()
        .filter_map(|&c| {
            let mut of_c: Vec<(usize, Round)> = all_rounds
                .iter()
                .filter(|(rc, _)| *rc == c)
                .map(|(rc, r)| (*rc, r.clone()))
                .collect();
            of_c.sort_by(|a, b| a.1.mib_per_sec().total_cmp(&b.1.mib_per_sec()));
            let mid = of_c.len() / 2;
            of_c.into_iter().nth(mid)
        })
        .collect();
    let large = round(
        &large_ids,
        LARGE_ENTRIES,
        BUILD_CONCURRENCY,
        Method::Streaming,
    );
    eprintln!("copy of long ledgers: {:.1} MiB/s", large.mib_per_sec());
    raw.extend(java.series(&rt, &*dst_bk, &bench.groups, s.raw_entries, "after"));
    // Last, as it grows the allocator's arenas: the memory control.
    let control = round(
        &control_ids,
        LARGE_ENTRIES,
        BUILD_CONCURRENCY,
        Method::WholeLedger,
    );
    rt.block_on(async {
        src_bk.close().await.unwrap();
        dst_bk.close().await.unwrap();
    });
    let figures = Figures {
        load_before,
        idle,
        raw,
        rounds,
        duel: points,
        java_conf: format!(
            "{}; JVM: `{}`",
            s.java_conf
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(", "),
            s.java_jvm.join(" ")
        ),
        large,
        control,
        took: run_started.elapsed(),
    };
    report(&s, &figures);
}
