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
//! - `BENCH_BOOKIE_CONF`: extra `key=value` lines for the bookies;
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
//! In each round both clients read the same ledger (written earlier in the
//! round), one after the other: a ledger read right after it was written may
//! still be in a bookie's memtable, so reading each client's own ledger would
//! compare different bookie states.

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
    java: ProcessUsage,
    wire: bkswitch_bookkeeper::WireCounts,
    segments: u64,
    links: [u64; 4],
    threads: ThreadTimes,
    perf: Option<PerfStat>,
}

/// The bookies' system calls over a measurement, counted by `perf stat` on
/// the kernel's syscall tracepoints, with `BENCH_PERF=1` (counting every
/// system call costs the bookies CPU: the other figures of such a run are
/// higher than without it).
struct PerfStat {
    child: std::process::Child,
    out: std::path::PathBuf,
}

/// The system calls counted: every one, and those that tell how requests
/// arrive and threads wake.
const PERF_EVENTS: &str = "raw_syscalls:sys_enter,syscalls:sys_enter_recvfrom,\
syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_pread64,\
syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait,\
syscalls:sys_enter_futex,ipi:ipi_send_cpu,ipi:ipi_send_cpumask";

/// With `BENCH_PERF=2`, only the interrupts the bookies' threads send to
/// other CPUs (to wake a thread there): few events, so counting them hardly
/// moves the other figures.
const PERF_IPI_EVENTS: &str = "ipi:ipi_send_cpu,ipi:ipi_send_cpumask";

impl PerfStat {
    fn start(pids: &[u32]) -> Option<PerfStat> {
        let events = match env_or("BENCH_PERF", 0u32) {
            _ if pids.is_empty() => return None,
            0 => return None,
            2 => PERF_IPI_EVENTS,
            _ => PERF_EVENTS,
        };
        let out = std::env::temp_dir().join(format!(
            "bookkeeper-real-perf-{}-{}.csv",
            std::process::id(),
            PERF_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let pids: Vec<String> = pids.iter().map(u32::to_string).collect();
        let child = std::process::Command::new("perf")
            .args(["stat", "--per-thread", "-x", ",", "-e", events])
            .args(["-p", &pids.join(",")])
            .arg("-o")
            .arg(&out)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .ok()?;
        // Let it attach to every thread before the measurement starts.
        std::thread::sleep(Duration::from_millis(300));
        Some(PerfStat { child, out })
    }

    /// Stops counting; the counts by system call (`all` for every one),
    /// summed over the bookies' threads (`write`) and by thread group
    /// (`write in bookie-io`).
    fn stop(mut self) -> BTreeMap<String, u64> {
        let _ = std::process::Command::new("kill")
            .args(["-INT", &self.child.id().to_string()])
            .status();
        let _ = self.child.wait();
        let text = std::fs::read_to_string(&self.out).unwrap_or_default();
        let _ = std::fs::remove_file(&self.out);
        let mut counts = BTreeMap::new();
        for line in text.lines() {
            // `<comm>-<tid>,<count>,<unit>,<event>,…`
            let f: Vec<&str> = line.split(',').collect();
            if f.len() < 4 {
                continue;
            }
            let Ok(n) = f[1].trim().parse::<u64>() else {
                continue;
            };
            let Some((comm, _tid)) = f[0].trim().rsplit_once('-') else {
                continue;
            };
            let call = match f[3].trim() {
                "raw_syscalls:sys_enter" => "all".to_owned(),
                "ipi:ipi_send_cpu" | "ipi:ipi_send_cpumask" => "IPI sent".to_owned(),
                e => e.trim_start_matches("syscalls:sys_enter_").to_owned(),
            };
            *counts
                .entry(format!("{call} in {}", thread_group(comm)))
                .or_default() += n;
            *counts.entry(call).or_default() += n;
        }
        counts
    }
}

static PERF_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// CPU time, runs on a CPU and moves between CPUs of the bookies' threads,
/// by thread (from `/proc/<pid>/task/<tid>/schedstat`, nanoseconds, `sched`
/// and `comm`).
/// The last place: the thread's system (kernel) CPU time in clock ticks
/// (`stat`'s `stime`, 1/100 s, sampled at each tick).
type ThreadTimes = BTreeMap<(u32, u32), (String, u64, u64, u64, u64)>;

fn thread_times(pids: &[u32]) -> ThreadTimes {
    let mut out = ThreadTimes::new();
    for &pid in pids {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
            continue;
        };
        for task in tasks.flatten() {
            let Some(tid) = task
                .file_name()
                .to_str()
                .and_then(|t| t.parse::<u32>().ok())
            else {
                continue;
            };
            let dir = task.path();
            let comm = std::fs::read_to_string(dir.join("comm")).unwrap_or_default();
            let sched = std::fs::read_to_string(dir.join("schedstat")).unwrap_or_default();
            let mut f = sched
                .split_whitespace()
                .map(|x| x.parse::<u64>().unwrap_or(0));
            let (Some(ns), _, Some(runs)) = (f.next(), f.next(), f.next()) else {
                continue;
            };
            let migrations = std::fs::read_to_string(dir.join("sched"))
                .unwrap_or_default()
                .lines()
                .find(|l| l.starts_with("se.nr_migrations"))
                .and_then(|l| l.rsplit(':').next())
                .and_then(|v| v.trim().parse::<u64>().ok())
                .unwrap_or(0);
            // `stat`'s fields after the command (which may hold spaces):
            // state is the 3rd field, stime the 15th.
            let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
            let stime = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(12))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
            out.insert(
                (pid, tid),
                (thread_group(comm.trim()), ns, runs, migrations, stime),
            );
        }
    }
    out
}

/// A thread's group: its name without the numbers that tell a pool's
/// threads apart (`bookie-io-1-3` → `bookie-io`, `GC Thread#1` → `GC Thread`).
fn thread_group(comm: &str) -> String {
    comm.trim_end_matches(|c: char| c.is_ascii_digit() || "-_#".contains(c))
        .to_owned()
}

/// CPU µs and runs on a CPU per entry of each thread group over a
/// measurement; under `migrations in <group>`, the group's moves from one CPU
/// to another per entry (in the second place); under `kernel in <group>`, the
/// group's CPU µs per entry in the kernel, from clock ticks (second place).
type GroupFigures = BTreeMap<String, (f64, f64)>;

fn group_figures(before: &ThreadTimes, after: &ThreadTimes, entries: f64) -> GroupFigures {
    let mut groups = GroupFigures::new();
    for (key, (group, ns, runs, moves, stime)) in after {
        let (ns0, runs0, moves0, stime0) = before
            .get(key)
            .map(|(_, n, r, m, k)| (*n, *r, *m, *k))
            .unwrap_or((0, 0, 0, 0));
        let g = groups.entry(group.clone()).or_default();
        g.0 += ns.saturating_sub(ns0) as f64 / 1e3 / entries;
        g.1 += runs.saturating_sub(runs0) as f64 / entries;
        let m = groups.entry(format!("migrations in {group}")).or_default();
        m.1 += moves.saturating_sub(moves0) as f64 / entries;
        let k = groups.entry(format!("kernel in {group}")).or_default();
        k.1 += stime.saturating_sub(stime0) as f64 * 1e4 / entries;
    }
    groups
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

/// The kinds of TCP segment counted on the connections between the clients
/// and the bookies, in the order [`link_segments`] gives them.
const LINK_SEGMENTS: [&str; 4] = [
    "client, with data",
    "client, acknowledgement only",
    "bookies, with data",
    "bookies, acknowledgement only",
];

/// The TCP segments sent so far on every open connection to a bookie port,
/// from `ss -tin` (the kernel's `segs_out` and `data_segs_out` of each
/// socket), by side: the client's segments with data and without (pure
/// acknowledgements and window updates), then the bookies'. Only one client
/// talks to the bookies during a measurement, so the difference over it is
/// that client's.
fn link_segments(ports: &[u16]) -> [u64; 4] {
    let mut out = [0u64; 4];
    let Ok(o) = std::process::Command::new("ss").arg("-tinH").output() else {
        return out;
    };
    let text = String::from_utf8_lossy(&o.stdout);
    let port = |addr: &str| {
        addr.rsplit_once(':')
            .and_then(|(_, p)| p.parse::<u16>().ok())
    };
    let mut side: Option<usize> = None;
    for line in text.lines() {
        if !line.starts_with(char::is_whitespace) {
            // `ESTAB <recv-q> <send-q> <local> <peer>`
            let f: Vec<&str> = line.split_whitespace().collect();
            side = match (
                f.get(3).and_then(|a| port(a)),
                f.get(4).and_then(|a| port(a)),
            ) {
                (Some(l), _) if ports.contains(&l) => Some(2),
                (_, Some(p)) if ports.contains(&p) => Some(0),
                _ => None,
            };
            continue;
        }
        let Some(at) = side.take() else { continue };
        let field = |name: &str| {
            line.split_whitespace()
                .find_map(|f| f.strip_prefix(name))
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0)
        };
        let (all, data) = (field("segs_out:"), field("data_segs_out:"));
        out[at] += data;
        out[at + 1] += all.saturating_sub(data);
    }
    out
}

fn bookie_ports(cluster: &BkCluster) -> Vec<u16> {
    (0..cluster.bookie_count())
        .map(|i| cluster.bookie_port(i))
        .collect()
}

/// With `BENCH_PHASES=1`, prints a measurement's start or end to stderr, in
/// ms since the epoch (to line it up with the bookies' own logs).
fn phase(what: &str) {
    if env_or("BENCH_PHASES", 0u32) != 0 {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        eprintln!("phase {ms} {what}");
    }
}

impl<'a> Meter<'a> {
    fn start(cluster: &'a BkCluster, bk: &'a BookKeeperClient) -> Meter<'a> {
        phase("start");
        Meter {
            cluster,
            bk,
            bookies: cluster.bookie_usage(),
            me: ProcessUsage::current(),
            java: java_client_pid().map(ProcessUsage::of).unwrap_or_default(),
            wire: bk.wire_counts(),
            segments: tcp_out_segments(),
            links: link_segments(&bookie_ports(cluster)),
            threads: thread_times(&bookie_pids(cluster)),
            perf: PerfStat::start(&bookie_pids(cluster)),
        }
    }

    /// Fills `f` with the usage over the measurement and gives the bookies'
    /// CPU by thread group.
    fn finish(self, entries: u64, f: &mut Figures, rust: bool) -> GroupFigures {
        phase(if rust { "end Rust" } else { "end Java" });
        let bookies = self.cluster.bookie_usage() - self.bookies;
        let n = entries.max(1) as f64;
        let mut groups = group_figures(&self.threads, &thread_times(&bookie_pids(self.cluster)), n);
        if let Some(perf) = self.perf {
            for (call, count) in perf.stop() {
                groups.insert(format!("syscall {call}"), (0.0, count as f64 / n));
            }
        }
        f.bookie_cpu_us = bookies.cpu_seconds * 1e6 / n;
        f.bookie_reads = bookies.read_calls as f64 / n;
        f.segments = tcp_out_segments().saturating_sub(self.segments) as f64 / n;
        let links = link_segments(&bookie_ports(self.cluster));
        for (i, name) in LINK_SEGMENTS.iter().enumerate() {
            let sent = links[i].saturating_sub(self.links[i]) as f64 / n;
            groups.insert(format!("segments {name}"), (0.0, sent));
        }
        if rust {
            let me = ProcessUsage::current() - self.me;
            f.client_cpu_us = me.cpu_seconds * 1e6 / n;
            let wire = self.bk.wire_counts();
            let writes = wire.writes - self.wire.writes;
            f.frames_per_write = (wire.frames - self.wire.frames) as f64 / writes.max(1) as f64;
        } else if let Some(pid) = java_client_pid() {
            let java = ProcessUsage::of(pid) - self.java;
            f.client_cpu_us = java.cpu_seconds * 1e6 / n;
        }
        groups
    }
}

/// The Java client's JVM (the harness's `BkInterop` helper; this bench starts
/// one), found by its command line.
fn java_client_pid() -> Option<u32> {
    const MAIN_CLASS: &[u8] = b"BkInterop";
    static PID: std::sync::OnceLock<Option<u32>> = std::sync::OnceLock::new();
    *PID.get_or_init(|| {
        std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
            let pid: u32 = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            let mut args = cmdline.split(|b| *b == 0);
            let java = args.next()?.ends_with(b"java");
            (java && args.any(|a| a == MAIN_CLASS)).then_some(pid)
        })
    })
}

/// With `BENCH_PIN=1`: every thread of the bookies on CPU 0, both clients'
/// (this process and the Java client's JVM) on CPU 1. The bookies' threads
/// then wake each other on their own CPU, with no interrupt to another one,
/// whatever the client's load on the other CPU.
fn pin_processes(cluster: &BkCluster) {
    let pin = |cpu: &str, pid: u32| {
        let ok = std::process::Command::new("taskset")
            .args(["-a", "-cp", cpu, &pid.to_string()])
            .stdout(std::process::Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "taskset could not pin process {pid} to CPU {cpu}");
    };
    for pid in bookie_pids(cluster) {
        pin("0", pid);
    }
    pin("1", std::process::id());
    if let Some(pid) = java_client_pid() {
        pin("1", pid);
    }
}

fn bookie_pids(cluster: &BkCluster) -> Vec<u32> {
    (0..cluster.bookie_count())
        .filter_map(|i| cluster.bookie_pid(i))
        .collect()
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
        // From before the call, as the Java side times it (the call encodes
        // and sends the entry).
        let sent = Instant::now();
        let add = w.add_entry(payload.clone());
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
    let mut next_double = java_random_doubles(7);
    let started = Instant::now();
    let mut bytes = 0usize;
    let mut pending = FuturesUnordered::new();
    for _ in 0..count {
        if pending.len() >= inflight {
            let got: Vec<bkswitch_bk_client::LedgerEntry> = pending.next().await.unwrap();
            bytes += got.iter().map(|e| e.data.len()).sum::<usize>();
        }
        let e = (next_double() * (last + 1) as f64) as i64;
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

/// The doubles `java.util.Random(seed).nextDouble()` gives, in order: the
/// Java client's random reads pick their entries with them, so both clients
/// read the same entries in the same order.
fn java_random_doubles(seed: i64) -> impl FnMut() -> f64 {
    const MULTIPLIER: i64 = 0x5DEECE66D;
    const MASK: i64 = (1 << 48) - 1;
    let mut state = (seed ^ MULTIPLIER) & MASK;
    let mut next = move |bits: u32| {
        state = (state.wrapping_mul(MULTIPLIER).wrapping_add(0xB)) & MASK;
        state >> (48 - bits)
    };
    move || ((next(26) << 27) + next(27)) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// Figures of one point, by client, over the rounds.
type Series = BTreeMap<(String, u32, u32, &'static str), Vec<Figures>>;

/// The bookies' CPU by thread group of one point, by client, over the rounds.
type ThreadSeries = BTreeMap<(String, u32, u32, &'static str), Vec<GroupFigures>>;

/// Where the bookies' CPU went, by thread group, Rust against Java: the
/// groups that took at least 1 % of either client's bookie CPU, medians over
/// the rounds, and the range over the rounds of the bookies' total.
/// The bookies' CPU per entry round by round, with which client went first:
/// the second client of a round meets the bookies as the first one left them
/// (their caches, their memtable), so a median over an odd number of rounds
/// puts one client first more often than the other.
/// The points measured (operation, entry size, in flight), in order.
fn points(series: &Series) -> Vec<(&'static str, u32, u32)> {
    let mut points: Vec<_> = series
        .keys()
        .filter(|(c, ..)| c == "Rust")
        .map(|(_, s, i, op)| (*op, *s, *i))
        .collect();
    points.sort();
    points
}

fn print_round_table(series: &Series) {
    println!();
    println!(
        "The bookies' CPU µs per entry, round by round (Rust / Java; `R` or `J`: who went first; \
         for adds also the p99 and the rate):"
    );
    println!();
    for (op, size, inflight) in points(series) {
        let get = |client: &str| series.get(&(client.to_owned(), size, inflight, op));
        let (Some(rust), Some(java)) = (get("Rust"), get("Java")) else {
            continue;
        };
        let rounds: Vec<String> = rust
            .iter()
            .zip(java)
            .enumerate()
            .map(|(i, (r, j))| {
                let first = if i % 2 == 0 { 'R' } else { 'J' };
                if op == "add" {
                    format!(
                        "{first} {:.1} / {:.1} (p99 {:.1} / {:.1} ms, {:.0} / {:.0} entries/s)",
                        r.bookie_cpu_us,
                        j.bookie_cpu_us,
                        r.p99_us / 1e3,
                        j.p99_us / 1e3,
                        r.entries_per_sec,
                        j.entries_per_sec
                    )
                } else {
                    format!("{first} {:.1} / {:.1}", r.bookie_cpu_us, j.bookie_cpu_us)
                }
            })
            .collect();
        // Each client goes first in half of an even number of rounds, so the
        // mean over the rounds weighs both places alike; a median of an even
        // number can fall on either.
        let mean = |v: &[Figures], g: fn(&Figures) -> f64| {
            v.iter().map(g).sum::<f64>() / v.len().max(1) as f64
        };
        println!(
            "- {op}, {size} B, {inflight} in flight: {}; mean {:.1} / {:.1} µs, {:.0} / {:.0} entries/s{}",
            rounds.join("; "),
            mean(rust, |f| f.bookie_cpu_us),
            mean(java, |f| f.bookie_cpu_us),
            mean(rust, |f| f.entries_per_sec),
            mean(java, |f| f.entries_per_sec),
            if op == "add" {
                format!(
                    ", p99 {:.1} / {:.1} ms",
                    mean(rust, |f| f.p99_us) / 1e3,
                    mean(java, |f| f.p99_us) / 1e3
                )
            } else {
                String::new()
            }
        );
    }
}

fn print_thread_table(series: &Series, threads: &ThreadSeries) {
    println!();
    println!(
        "Where the bookies' CPU went, by thread group (medians; CPU µs and runs on a CPU per entry), \
         and the bookies' system calls per entry (`perf stat`, in the runs columns):"
    );
    println!();
    println!("| op | entry size | in flight | thread group | Rust CPU µs | Java CPU µs | Rust runs | Java runs |");
    println!("|---|---|---|---|---|---|---|---|");
    for (op, size, inflight) in points(series) {
        let get = |client: &str| threads.get(&(client.to_owned(), size, inflight, op));
        let (Some(rust), Some(java)) = (get("Rust"), get("Java")) else {
            continue;
        };
        let col = |rounds: &[GroupFigures], group: &str, runs: bool| {
            median(
                rounds
                    .iter()
                    .map(|g| g.get(group).map_or(0.0, |v| if runs { v.1 } else { v.0 }))
                    .collect(),
            )
        };
        let mut groups: Vec<&String> = rust.iter().chain(java).flat_map(|g| g.keys()).collect();
        groups.sort();
        groups.dedup();
        let total = |rounds: &[GroupFigures]| {
            let v: Vec<f64> = rounds
                .iter()
                .map(|g| g.values().map(|x| x.0).sum())
                .collect();
            let lo = v.iter().cloned().fold(f64::INFINITY, f64::min);
            let hi = v.iter().cloned().fold(0.0, f64::max);
            (median(v), lo, hi)
        };
        let (rt, rlo, rhi) = total(rust);
        let (jt, jlo, jhi) = total(java);
        let mut rows: Vec<(f64, String)> = groups
            .into_iter()
            .filter_map(|g| {
                let (r, j) = (col(rust, g, false), col(java, g, false));
                if let Some(group) = g.strip_prefix("migrations in ") {
                    // Moves between CPUs per entry, in the "runs" columns.
                    let (rm, jm) = (col(rust, g, true), col(java, g, true));
                    return (rm.max(jm) >= 0.01).then(|| {
                        (
                            -0.5,
                            format!(
                                "| {op} | {size} | {inflight} | moves between CPUs: {group} | – | – | {rm:.2} | {jm:.2} |"
                            ),
                        )
                    });
                }
                if let Some(kind) = g.strip_prefix("segments ") {
                    let (rs, js) = (col(rust, g, true), col(java, g, true));
                    return Some((
                        -0.3,
                        format!(
                            "| {op} | {size} | {inflight} | TCP segments sent to or by the bookies: {kind} | – | – | {rs:.2} | {js:.2} |"
                        ),
                    ));
                }
                if let Some(group) = g.strip_prefix("kernel in ") {
                    // CPU µs per entry in the kernel (from clock ticks), in
                    // the "runs" columns, for groups that use much CPU.
                    let (rk, jk) = (col(rust, g, true), col(java, g, true));
                    let (ru, ju) = (col(rust, group, false), col(java, group, false));
                    return (ru.max(ju) >= rt.max(jt) * 0.1).then(|| {
                        (
                            -0.4,
                            format!(
                                "| {op} | {size} | {inflight} | of which in the kernel (ticks): {group} | – | – | {rk:.1} | {jk:.1} |"
                            ),
                        )
                    });
                }
                if let Some(call) = g.strip_prefix("syscall ") {
                    // System calls per entry, in the "runs" columns; by
                    // thread group only where they are frequent.
                    let (rc, jc) = (col(rust, g, true), col(java, g, true));
                    if call.contains(" in ") && rc.max(jc) < 0.05 {
                        return None;
                    }
                    return Some((
                        -1.0,
                        format!(
                            "| {op} | {size} | {inflight} | system calls: {call} | – | – | {:.2} | {:.2} |",
                            col(rust, g, true),
                            col(java, g, true)
                        ),
                    ));
                }
                (r >= rt * 0.01 || j >= jt * 0.01).then(|| {
                    (
                        r.max(j),
                        format!(
                            "| {op} | {size} | {inflight} | {g} | {r:.1} | {j:.1} | {:.2} | {:.2} |",
                            col(rust, g, true),
                            col(java, g, true)
                        ),
                    )
                })
            })
            .collect();
        rows.sort_by(|a, b| b.0.total_cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
        for (_, row) in rows {
            println!("{row}");
        }
        println!(
            "| {op} | {size} | {inflight} | all (range over rounds) | {rt:.1} ({rlo:.1}–{rhi:.1}) | {jt:.1} ({jlo:.1}–{jhi:.1}) | | |"
        );
    }
}

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
    let java = JavaClient::builder(&cluster.metadata_service_uri())
        .conf("throttle", "0")
        .start();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(env_or("BENCH_RUST_WORKERS", 2))
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let bk =
            BookKeeperClient::connect(&cluster.metadata_service_uri(), ClientConfig::default())
                .await
                .unwrap();
        if env_or("BENCH_PIN", 0u32) != 0 {
            pin_processes(&cluster);
        }
        // Warm up: connections, and above all the JVMs' JIT compilers (a
        // profile of a short warm-up showed half of all CPU in the bookies'
        // compiler threads).
        let (_, warm_ledger) = rust_adds(&bk, warmup, 1024, 64).await;
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
             bookie CPU µs/entry | bookie read calls/entry | TCP segments/entry | client CPU µs/entry | requests/write |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
        let mut keys: Vec<_> = series.keys().cloned().collect();
        keys.sort_by_key(|(c, s, i, op)| (*op, *s, *i, c != "Rust"));
        for key in keys {
            let v = &series[&key];
            let col = |g: fn(&Figures) -> f64| median(v.iter().map(g).collect());
            let (client, size, inflight, op) = key;
            let rust = runs_rust(&client);
            println!(
                "| {op} | {size} | {inflight} | {client} | {:.0} | {:.0}–{:.0} | {:.1} | {} | {} | {:.1} | {:.2} | {:.2} | {:.1} | {} |",
                col(|f| f.entries_per_sec),
                v.iter().map(|f| f.entries_per_sec).fold(f64::INFINITY, f64::min),
                v.iter().map(|f| f.entries_per_sec).fold(0.0, f64::max),
                col(|f| f.mib_per_sec),
                if op == "add" { format!("{:.0}", col(|f| f.p50_us)) } else { "–".into() },
                if op == "add" { format!("{:.0}", col(|f| f.p99_us)) } else { "–".into() },
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
