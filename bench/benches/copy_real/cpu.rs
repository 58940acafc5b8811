//! Where the CPU goes during a phase: this process, its descendant JVMs grouped
//! by what they run (the source bookies, the destination bookies, ZooKeeper,
//! the Java client), and the rest of the machine.

use std::collections::HashMap;
use std::time::Instant;

/// Clock ticks per second of `/proc/<pid>/stat` (`sysconf(_SC_CLK_TCK)`, 100 on
/// Linux).
const TICKS: f64 = 100.0;

/// A labelled group of descendant processes: those whose command line holds
/// one of the markers (groups are tried in order, the first match wins).
pub(crate) struct Group {
    pub(crate) label: &'static str,
    pub(crate) markers: Vec<String>,
}

/// CPU seconds used so far, by this process, by each group, and by the whole
/// machine (all CPUs, busy time), with the time of the reading.
#[derive(Debug, Clone)]
pub(crate) struct CpuSnapshot {
    at: Instant,
    own: f64,
    groups: Vec<f64>,
    jit: f64,
    machine_busy: f64,
}

/// CPU used between two snapshots, in cores (CPU seconds per second).
#[derive(Debug, Clone, Default)]
pub(crate) struct CpuUse {
    /// The copying process.
    pub(crate) own: f64,
    /// Each group, in the order of the groups.
    pub(crate) groups: Vec<(&'static str, f64)>,
    /// The JVMs' JIT compiler threads (`C1 CompilerThre…`, `C2 CompilerThre…`)
    /// in all groups: compiling, not serving.
    pub(crate) jit: f64,
    /// Every other process on the machine (all busy CPU minus this process and
    /// its descendants).
    pub(crate) others: f64,
    /// The copying process's CPU seconds.
    pub(crate) own_seconds: f64,
    /// Each group's CPU seconds.
    pub(crate) group_seconds: Vec<f64>,
}

/// `(ppid, utime + stime in seconds)` of a `/proc/<pid>/stat` line.
fn parse_stat(stat: &str) -> Option<(u32, f64)> {
    let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
    // After the name: state(0) ppid(1) … utime(11) stime(12) cutime(13) cstime(14).
    let ppid = fields.get(1)?.parse().ok()?;
    let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<f64>().ok());
    Some((ppid, (ticks(11)? + ticks(12)?) / TICKS))
}

/// CPU seconds of the JIT compiler threads of process `pid`.
fn jit_seconds(pid: u32) -> f64 {
    let Ok(tasks) = std::fs::read_dir(format!("/proc/{pid}/task")) else {
        return 0.0;
    };
    tasks
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("stat")).ok())
        .filter(|stat| {
            stat.split_once('(').is_some_and(|(_, rest)| {
                rest.starts_with("C1 Compiler") || rest.starts_with("C2 Compiler")
            })
        })
        .filter_map(|stat| parse_stat(&stat))
        .map(|(_, cpu)| cpu)
        .sum()
}

/// Busy CPU seconds of the whole machine (all CPUs), from `/proc/stat`.
fn machine_busy() -> f64 {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return 0.0;
    };
    let v: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    // user nice system idle iowait irq softirq steal (guest time is in user).
    let total: f64 = v.iter().take(8).sum();
    let idle = v.get(3).copied().unwrap_or(0.0) + v.get(4).copied().unwrap_or(0.0);
    (total - idle) / TICKS
}

/// Reads the CPU used so far by this process, its descendants (by group) and
/// the machine.
pub(crate) fn snapshot(groups: &[Group]) -> CpuSnapshot {
    let me = std::process::id();
    let mut procs: HashMap<u32, (u32, f64)> = HashMap::new();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for entry in dir.flatten() {
            let Some(pid) = entry.file_name().to_str().and_then(|n| n.parse().ok()) else {
                continue;
            };
            if let Some(p) = std::fs::read_to_string(entry.path().join("stat"))
                .ok()
                .and_then(|s| parse_stat(&s))
            {
                procs.insert(pid, p);
            }
        }
    }
    let descends = |mut pid: u32| {
        for _ in 0..64 {
            match procs.get(&pid) {
                Some(&(ppid, _)) if ppid == me => return true,
                Some(&(ppid, _)) if ppid > 1 => pid = ppid,
                _ => return false,
            }
        }
        false
    };
    let mut per_group = vec![0.0; groups.len()];
    let mut jit = 0.0;
    for (&pid, &(_, cpu)) in &procs {
        if pid == me || !descends(pid) {
            continue;
        }
        let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
        let cmdline = String::from_utf8_lossy(&cmdline);
        if let Some(g) = groups
            .iter()
            .position(|g| g.markers.iter().any(|m| cmdline.contains(m.as_str())))
        {
            per_group[g] += cpu;
            jit += jit_seconds(pid);
        }
    }
    CpuSnapshot {
        at: Instant::now(),
        own: procs.get(&me).map_or(0.0, |p| p.1),
        groups: per_group,
        jit,
        machine_busy: machine_busy(),
    }
}

/// The CPU used from `before` to `after`.
pub(crate) fn used(groups: &[Group], before: &CpuSnapshot, after: &CpuSnapshot) -> CpuUse {
    let wall = after.at.duration_since(before.at).as_secs_f64().max(1e-9);
    let own_seconds = after.own - before.own;
    let group_seconds: Vec<f64> = after
        .groups
        .iter()
        .zip(&before.groups)
        .map(|(a, b)| a - b)
        .collect();
    let ours = own_seconds + group_seconds.iter().sum::<f64>();
    CpuUse {
        own: own_seconds / wall,
        groups: groups
            .iter()
            .zip(&group_seconds)
            .map(|(g, s)| (g.label, s / wall))
            .collect(),
        jit: (after.jit - before.jit) / wall,
        others: ((after.machine_busy - before.machine_busy - ours) / wall).max(0.0),
        own_seconds,
        group_seconds,
    }
}
