//! The Rust copy against the pipelined Java copier, round after round, both
//! sides in the same run, alternating which goes first; medians reported.

use super::cpu::{self, CpuUse, Group};
use super::memory::MIB;
use super::ENTRY_SIZE;

/// One side of one round at one concurrency.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Side {
    /// Payload MiB/s.
    pub(crate) mib: f64,
    /// Source and destination bookies' CPU per copied entry, µs.
    pub(crate) bookie_us: f64,
    /// The copier's own CPU per copied entry, µs (this process for Rust, the
    /// copier's JVM for Java).
    pub(crate) client_us: f64,
    /// ZooKeeper's CPU per copied entry, µs.
    pub(crate) zk_us: f64,
    /// Cores other work on the machine used meanwhile (not the bookies,
    /// ZooKeeper, the copiers or the JIT compilers of this run's JVMs).
    pub(crate) others: f64,
    /// Whether this side went first in its round.
    pub(crate) first: bool,
}

impl Side {
    /// Every party's CPU per copied entry, µs.
    pub(crate) fn all_us(&self) -> f64 {
        self.bookie_us + self.client_us + self.zk_us
    }

    /// MiB/s that `cores` fully used would allow at this cost per entry.
    pub(crate) fn ceiling(&self, cores: f64) -> f64 {
        cores * 1e6 / self.all_us() * ENTRY_SIZE as f64 / MIB
    }

    /// MiB/s that the cores other work left to this run would allow at this
    /// cost per entry: what the copy can reach on this machine at that moment.
    pub(crate) fn left_ceiling(&self, cores: f64) -> f64 {
        self.ceiling((cores - self.others).max(0.0))
    }
}

/// CPU seconds of the group `label` in `cpu`.
pub(crate) fn group_seconds(cpu: &CpuUse, groups: &[Group], label: &str) -> f64 {
    groups
        .iter()
        .position(|g| g.label == label)
        .map_or(0.0, |i| cpu.group_seconds[i])
}

/// The figures of one side from what it copied and the CPU used meanwhile;
/// `client_seconds` is the copier's own CPU.
pub(crate) fn side(
    bytes: u64,
    seconds: f64,
    cpu: &CpuUse,
    groups: &[Group],
    client_seconds: f64,
    first: bool,
) -> Side {
    let entries = bytes as f64 / ENTRY_SIZE as f64;
    let us = |s: f64| s * 1e6 / entries;
    Side {
        mib: bytes as f64 / MIB / seconds,
        bookie_us: us(group_seconds(cpu, groups, "source bookies")
            + group_seconds(cpu, groups, "destination bookies")),
        client_us: us(client_seconds),
        zk_us: us(group_seconds(cpu, groups, "ZooKeeper")),
        others: cpu.others,
        first,
    }
}

/// The CPU the Java copier's JVM used.
pub(crate) fn java_client_seconds(cpu: &CpuUse, groups: &[Group]) -> f64 {
    group_seconds(cpu, groups, "Java copier")
}

/// Runs `f` between two CPU snapshots.
pub(crate) fn measured<T>(groups: &[Group], f: impl FnOnce() -> T) -> (T, CpuUse) {
    let before = cpu::snapshot(groups);
    let out = f();
    (out, cpu::used(groups, &before, &cpu::snapshot(groups)))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        return f64::NAN;
    }
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Rounds of both sides at one concurrency.
#[derive(Debug, Default)]
pub(crate) struct Point {
    pub(crate) concurrency: usize,
    pub(crate) rust: Vec<Side>,
    pub(crate) java: Vec<Side>,
    /// The earlier Rust copy loop (serial reads), when run.
    pub(crate) serial: Vec<Side>,
}

/// The duel's tables.
pub(crate) fn report(points: &[Point], cores: f64, java_conf: &str) {
    println!();
    println!(
        "### The Rust copy against the pipelined Java copier ({} rounds, medians)",
        points.first().map_or(0, |p| p.rust.len())
    );
    println!();
    println!("Java copier's client settings: {java_conf}");
    println!();
    println!(
        "| copies in flight | Rust MiB/s | Java MiB/s | Rust / Java | bookie CPU µs/entry Rust / \
         Java (ratio) | copier CPU µs/entry Rust / Java | all CPU µs/entry Rust / Java | \
         CPU ceiling MiB/s Rust / Java | Rust % of its ceiling | other work (cores) | \
         ceiling with the CPU other work left, Rust | Rust % of that |"
    );
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    for p in points {
        let m = |v: &[Side], f: fn(&Side) -> f64| median(v.iter().map(f).collect());
        let (rm, jm) = (m(&p.rust, |s| s.mib), m(&p.java, |s| s.mib));
        let (rb, jb) = (m(&p.rust, |s| s.bookie_us), m(&p.java, |s| s.bookie_us));
        let (rc, jc) = (m(&p.rust, |s| s.client_us), m(&p.java, |s| s.client_us));
        let (ra, ja) = (m(&p.rust, Side::all_us), m(&p.java, Side::all_us));
        let ceil = |v: &[Side]| median(v.iter().map(|s| s.ceiling(cores)).collect());
        let (rceil, jceil) = (ceil(&p.rust), ceil(&p.java));
        let others = m(&p.rust, |s| s.others);
        let left = median(p.rust.iter().map(|s| s.left_ceiling(cores)).collect());
        let of_left = median(
            p.rust
                .iter()
                .map(|s| 100.0 * s.mib / s.left_ceiling(cores))
                .collect(),
        );
        println!(
            "| {} | {rm:.1} | {jm:.1} | {:.2} | {rb:.1} / {jb:.1} ({:.2}) | {rc:.1} / {jc:.1} | \
             {ra:.1} / {ja:.1} | {rceil:.1} / {jceil:.1} | {:.0} % | {others:.2} | {left:.1} | \
             {of_left:.0} % |",
            p.concurrency,
            rm / jm,
            rb / jb,
            100.0 * rm / rceil
        );
    }
    if points.iter().any(|p| !p.serial.is_empty()) {
        println!();
        println!(
            "The copy loop before this change (one read in flight per copy, issued once half \
             the window is free), same run, medians:"
        );
        println!();
        println!(
            "| copies in flight | serial reads MiB/s | pipelined reads MiB/s | bookie CPU \
             µs/entry serial / pipelined | copier CPU µs/entry serial / pipelined |"
        );
        println!("|---|---|---|---|---|");
        for p in points {
            let m = |v: &[Side], f: fn(&Side) -> f64| median(v.iter().map(f).collect());
            println!(
                "| {} | {:.1} | {:.1} | {:.1} / {:.1} | {:.1} / {:.1} |",
                p.concurrency,
                m(&p.serial, |s| s.mib),
                m(&p.rust, |s| s.mib),
                m(&p.serial, |s| s.bookie_us),
                m(&p.rust, |s| s.bookie_us),
                m(&p.serial, |s| s.client_us),
                m(&p.rust, |s| s.client_us),
            );
        }
    }
    println!();
    println!(
        "Each round (MiB/s Rust / Java, bookie CPU µs/entry Rust / Java, cores of other work \
         during Rust / Java; R or J went first):"
    );
    for p in points {
        let rounds: Vec<String> = p
            .rust
            .iter()
            .zip(&p.java)
            .map(|(r, j)| {
                format!(
                    "{} {:.1} / {:.1} ({:.0} / {:.0}; {:.2} / {:.2})",
                    if r.first { "R" } else { "J" },
                    r.mib,
                    j.mib,
                    r.bookie_us,
                    j.bookie_us,
                    r.others,
                    j.others
                )
            })
            .collect();
        println!("- {}: {}", p.concurrency, rounds.join("; "));
    }
}
