//! The bench's settings (environment variables) and the check that the
//! bookies' folders have room for the run.

use bkswitch_ledger_copy::CopyOptions;

use super::raw::RAW_INFLIGHT;
use super::{BUILD_CONCURRENCY, ENTRY_SIZE, LARGE_ENTRIES, SMALL_ENTRIES};

/// The pipelined Java copier's client settings, as BookKeeper's and Pulsar's
/// own tuning has them (BookKeeper 4.17's `ClientConfiguration`): no throttle
/// (Pulsar turns the 5,000 adds/s default off), the v2 wire protocol (the
/// session's default; Pulsar's brokers use it), Netty's pooled buffers
/// (`nettyUsePooledBuffers`, the default, stated), reads ordered by the
/// bookies' health (`reorderReadSequenceEnabled`, Pulsar's default), sticky
/// and batched reads on (`stickyReadSEnabled` — BookKeeper spells the key so —
/// and `batchReadEnabled`; both apply only to ledgers whose ensemble equals
/// their write quorum, so for the E3/W2 ledgers here the client falls back to
/// ordinary reads), one channel per bookie and BookKeeper's default threads
/// (2 × cores Netty I/O threads, `cores` workers, per client; the copier's
/// session holds two clients). One I/O and one worker thread per client, and
/// Pulsar's 16 channels per bookie, measured no faster on this machine (see
/// RESULTS.md). Netty's epoll transport is used when available (the copier
/// reports it).
pub(crate) const JAVA_COPIER_CONF: &str = "throttle=0,nettyUsePooledBuffers=true,\
    reorderReadSequenceEnabled=true,stickyReadSEnabled=true,batchReadEnabled=true,\
    numChannelsPerBookie=1";

/// The Java copier's JVM settings, as Pulsar's `pulsar_env.sh` runs its
/// brokers (whose BookKeeper client does the same adds): a fixed heap, G1 with
/// Pulsar's pause target and young-generation share, and Netty's leak
/// detection off (its default samples buffers). The harness adds
/// `-XX:MaxDirectMemorySize=256m` and `-XX:-UsePerfData`.
pub(crate) const JAVA_COPIER_JVM: &str = "-Xms512m -Xmx512m -XX:+UseG1GC \
    -XX:MaxGCPauseMillis=10 -XX:+ParallelRefProcEnabled -XX:+UnlockExperimentalVMOptions \
    -XX:G1NewSizePercent=50 -XX:+DisableExplicitGC -Dio.netty.leakDetectionLevel=disabled \
    -Dio.netty.recycler.maxCapacityPerThread=4096";

pub(crate) struct Settings {
    pub(crate) quick: bool,
    pub(crate) ledgers: usize,
    pub(crate) large_ledgers: usize,
    pub(crate) concurrency: Vec<usize>,
    pub(crate) raw_entries: u32,
    pub(crate) warmup_adds: u32,
    pub(crate) warmup_ledgers: usize,
    pub(crate) control_ledgers: usize,
    pub(crate) window: usize,
    /// Rounds of the duel (each round: every concurrency, both copiers).
    pub(crate) rounds: usize,
    /// Rounds run before those and not reported (`COPY_REAL_DISCARD_ROUNDS`,
    /// default 1): the first round after the warm-up costs the bookies more
    /// than any later one, for whichever copier meets it.
    pub(crate) discard_rounds: usize,
    /// The pipelined Java copier's entries per read.
    pub(crate) java_read_batch: u32,
    /// The Java copier's client settings (`key=value`, comma-separated).
    pub(crate) java_conf: Vec<(String, String)>,
    /// The Java copier's JVM arguments (besides the harness's own).
    pub(crate) java_jvm: Vec<String>,
    /// Whether each round also runs the earlier copy loop (serial reads).
    pub(crate) serial: bool,
}

/// The source ledgers' ensemble, write and ack quorum sizes:
/// `COPY_REAL_QUORUMS=e,w,a`, default `3,2,2` (striped: no client can read
/// more than one entry per request from the Java client's batched reads;
/// `2,2,2`, Pulsar's default, lets both copiers batch their reads).
pub(crate) fn quorums() -> (u32, u32, u32) {
    let parsed: Option<Vec<u32>> = std::env::var("COPY_REAL_QUORUMS")
        .ok()
        .map(|v| v.split(',').filter_map(|q| q.trim().parse().ok()).collect());
    match parsed.as_deref() {
        Some(&[e, w, a]) if e >= w && w >= a && a >= 1 => (e, w, a),
        Some(_) => panic!("COPY_REAL_QUORUMS must be e,w,a with e >= w >= a >= 1"),
        None => (3, 2, 2),
    }
}

pub(crate) fn env<T: std::str::FromStr>(name: &str) -> Option<T> {
    std::env::var(name).ok().and_then(|v| v.trim().parse().ok())
}

impl Settings {
    pub(crate) fn from_env() -> Settings {
        let quick = std::env::var("COPY_REAL_QUICK").is_ok_and(|v| v != "0");
        let concurrency = std::env::var("COPY_REAL_CONCURRENCY")
            .ok()
            .map(|v| {
                v.split(',')
                    .filter_map(|c| c.trim().parse().ok())
                    .filter(|&c| c > 0)
                    .collect::<Vec<usize>>()
            })
            .filter(|v| !v.is_empty())
            .unwrap_or_else(|| vec![1, 4, 16, 64]);
        Settings {
            quick,
            ledgers: env("COPY_REAL_LEDGERS").unwrap_or(if quick { 100 } else { 200 }),
            large_ledgers: env("COPY_REAL_LARGE_LEDGERS").unwrap_or(if quick { 20 } else { 100 }),
            concurrency,
            raw_entries: env("COPY_REAL_RAW_ENTRIES").unwrap_or(if quick {
                10_000
            } else {
                50_000
            }),
            warmup_adds: env("COPY_REAL_WARMUP").unwrap_or(if quick { 40_000 } else { 100_000 }),
            warmup_ledgers: if quick { 200 } else { 500 },
            control_ledgers: 2 * BUILD_CONCURRENCY,
            window: env("COPY_REAL_WINDOW").unwrap_or(CopyOptions::default().window),
            rounds: env("COPY_REAL_ROUNDS").unwrap_or(if quick { 2 } else { 6 }),
            discard_rounds: env("COPY_REAL_DISCARD_ROUNDS").unwrap_or(if quick { 0 } else { 1 }),
            java_read_batch: env("COPY_REAL_JAVA_READ_BATCH").unwrap_or(16),
            serial: env::<u8>("COPY_REAL_SERIAL").unwrap_or(0) != 0,
            java_jvm: std::env::var("COPY_REAL_JAVA_JVM")
                .unwrap_or_else(|_| JAVA_COPIER_JVM.to_owned())
                .split_whitespace()
                .map(str::to_owned)
                .collect(),
            java_conf: std::env::var("COPY_REAL_JAVA_CONF")
                .unwrap_or_else(|_| JAVA_COPIER_CONF.to_owned())
                .split(',')
                .filter_map(|kv| {
                    let (k, v) = kv.trim().split_once('=')?;
                    Some((k.to_owned(), v.to_owned()))
                })
                .collect(),
        }
    }
}

/// KiB available in the folder the bookies' folders go to (`TMPDIR`), from
/// `df`; `None` when `df` cannot tell.
fn available_kib(dir: &std::path::Path) -> Option<u64> {
    let out = std::process::Command::new("df")
        .arg("-Pk")
        .arg(dir)
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().nth(1)?.split_whitespace().nth(3)?.parse().ok()
}

/// Refuses to start when the bookies' folders cannot hold the run: a bookie
/// whose disk fills up turns read-only and the run fails midway.
pub(crate) fn check_space(s: &Settings) {
    // Every entry is stored twice (write quorum 2), in a journal and in an
    // entry log: 4 KiB per 1 KiB entry, on the source and on the destination.
    // Each concurrency copies a set with the Rust copy and one with the Java copier.
    let sides = if s.serial { 3 } else { 2 };
    let copied = (2 * s.warmup_ledgers
        + sides * (s.rounds + s.discard_rounds) * s.concurrency.len() * s.ledgers)
        * SMALL_ENTRIES
        + (s.large_ledgers + s.control_ledgers) * LARGE_ENTRIES;
    // The raw adds on the destination (Java's and the Rust client's) and the
    // source ledger of the raw reads.
    let raw = s.warmup_adds as usize + (2 * (RAW_INFLIGHT.len() + 1) + 1) * s.raw_entries as usize;
    let need_kib = ((2 * copied + raw) * 4 * ENTRY_SIZE / 1024) as u64 + 1024 * 1024;
    let dir = std::env::temp_dir();
    if let Some(available) = available_kib(&dir) {
        assert!(
            available >= need_kib,
            "the bookies' folders go to {} (TMPDIR), which has {:.1} GiB free; this run needs \
             about {:.1} GiB. Point TMPDIR at a larger folder or a tmpfs, or set \
             COPY_REAL_QUICK=1.",
            dir.display(),
            available as f64 / (1024.0 * 1024.0),
            need_kib as f64 / (1024.0 * 1024.0)
        );
    }
}
