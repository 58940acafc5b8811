//! What each measurement reads around it: the bookies' and the clients' CPU,
//! their threads, system calls (`perf`), TCP segments; pinning.

use super::*;

/// Measures `run` with the bookies' and this process's usage around it.
pub(crate) struct Meter<'a> {
    pub(crate) cluster: &'a BkCluster,
    pub(crate) bk: &'a BookKeeperClient,
    pub(crate) bookies: ProcessUsage,
    pub(crate) me: ProcessUsage,
    pub(crate) java: ProcessUsage,
    pub(crate) wire: bkswitch_bookkeeper::WireCounts,
    pub(crate) segments: u64,
    pub(crate) links: [u64; 4],
    pub(crate) threads: ThreadTimes,
    pub(crate) perf: Option<PerfStat>,
}

/// The bookies' system calls over a measurement, counted by `perf stat` on
/// the kernel's syscall tracepoints, with `BENCH_PERF=1` (counting every
/// system call costs the bookies CPU: the other figures of such a run are
/// higher than without it).
pub(crate) struct PerfStat {
    pub(crate) child: std::process::Child,
    pub(crate) out: std::path::PathBuf,
}

/// The system calls counted: every one, and those that tell how requests
/// arrive and threads wake.
pub(crate) const PERF_EVENTS: &str = "raw_syscalls:sys_enter,syscalls:sys_enter_recvfrom,\
syscalls:sys_enter_sendto,syscalls:sys_enter_read,syscalls:sys_enter_pread64,\
syscalls:sys_enter_write,syscalls:sys_enter_writev,syscalls:sys_enter_epoll_wait,\
syscalls:sys_enter_futex,ipi:ipi_send_cpu,ipi:ipi_send_cpumask";

/// With `BENCH_PERF=2`, only the interrupts the bookies' threads send to
/// other CPUs (to wake a thread there): few events, so counting them hardly
/// moves the other figures.
pub(crate) const PERF_IPI_EVENTS: &str = "ipi:ipi_send_cpu,ipi:ipi_send_cpumask";

impl PerfStat {
    pub(crate) fn start(pids: &[u32]) -> Option<PerfStat> {
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
    pub(crate) fn stop(mut self) -> BTreeMap<String, u64> {
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

pub(crate) static PERF_SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);

/// CPU time, runs on a CPU and moves between CPUs of the bookies' threads,
/// by thread (from `/proc/<pid>/task/<tid>/schedstat`, nanoseconds, `sched`
/// and `comm`).
/// The last place: the thread's system (kernel) CPU time in clock ticks
/// (`stat`'s `stime`, 1/100 s, sampled at each tick).
pub(crate) type ThreadTimes = BTreeMap<(u32, u32), (String, u64, u64, u64, u64)>;

pub(crate) fn thread_times(pids: &[u32]) -> ThreadTimes {
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
pub(crate) fn thread_group(comm: &str) -> String {
    comm.trim_end_matches(|c: char| c.is_ascii_digit() || "-_#".contains(c))
        .to_owned()
}

/// CPU µs and runs on a CPU per entry of each thread group over a
/// measurement; under `migrations in <group>`, the group's moves from one CPU
/// to another per entry (in the second place); under `kernel in <group>`, the
/// group's CPU µs per entry in the kernel, from clock ticks (second place).
pub(crate) type GroupFigures = BTreeMap<String, (f64, f64)>;

pub(crate) fn group_figures(
    before: &ThreadTimes,
    after: &ThreadTimes,
    entries: f64,
) -> GroupFigures {
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
pub(crate) fn tcp_out_segments() -> u64 {
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
pub(crate) const LINK_SEGMENTS: [&str; 4] = [
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
pub(crate) fn link_segments(ports: &[u16]) -> [u64; 4] {
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

pub(crate) fn bookie_ports(cluster: &BkCluster) -> Vec<u16> {
    (0..cluster.bookie_count())
        .map(|i| cluster.bookie_port(i))
        .collect()
}

/// With `BENCH_PHASES=1`, prints a measurement's start or end to stderr, in
/// ms since the epoch (to line it up with the bookies' own logs).
pub(crate) fn phase(what: &str) {
    if env_or("BENCH_PHASES", 0u32) != 0 {
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        eprintln!("phase {ms} {what}");
    }
}

impl<'a> Meter<'a> {
    pub(crate) fn start(cluster: &'a BkCluster, bk: &'a BookKeeperClient) -> Meter<'a> {
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
    pub(crate) fn finish(self, entries: u64, f: &mut Figures, rust: bool) -> GroupFigures {
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
pub(crate) fn java_client_pid() -> Option<u32> {
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
pub(crate) fn pin_processes(cluster: &BkCluster) {
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

pub(crate) fn bookie_pids(cluster: &BkCluster) -> Vec<u32> {
    (0..cluster.bookie_count())
        .filter_map(|i| cluster.bookie_pid(i))
        .collect()
}
