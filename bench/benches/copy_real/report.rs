//! The printed report: Markdown tables, ready for bench/RESULTS.md.

use super::cpu::CpuUse;
use super::memory::{MemFigures, MIB};
use super::raw::{Raw, RawOp};
use super::{
    Figures, Round, Settings, BUILD_CONCURRENCY, ENTRY_SIZE, LARGE_ENTRIES, SMALL_ENTRIES,
};

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find_map(|l| {
            Some(
                l.strip_prefix("model name")?
                    .split_once(':')?
                    .1
                    .trim()
                    .to_owned(),
            )
        })
        .unwrap_or_else(|| "unknown".to_owned())
}

/// A row of the CPU table: cores used by each party.
fn cpu_row(label: &str, cpu: &CpuUse) {
    let groups: Vec<String> = cpu.groups.iter().map(|(_, c)| format!("{c:.2}")).collect();
    println!(
        "| {label} | {:.2} | {} | {:.2} | {:.2} |",
        cpu.own,
        groups.join(" | "),
        cpu.jit,
        cpu.others
    );
}

/// CPU seconds of the group `label` in `cpu`.
fn group(cpu: &CpuUse, label: &str) -> f64 {
    cpu.groups
        .iter()
        .position(|(l, _)| *l == label)
        .map_or(0.0, |i| cpu.group_seconds[i])
}

/// CPU per entry of every party, in µs, and the sum.
struct PerEntry {
    client: f64,
    dst: f64,
    src: f64,
    zk: f64,
}

impl PerEntry {
    fn new(client_seconds: f64, cpu: &CpuUse, entries: f64) -> PerEntry {
        let us = |seconds: f64| seconds * 1e6 / entries;
        PerEntry {
            client: us(client_seconds),
            dst: us(group(cpu, "destination bookies")),
            src: us(group(cpu, "source bookies")),
            zk: us(group(cpu, "ZooKeeper")),
        }
    }

    fn all(&self) -> f64 {
        self.client + self.dst + self.src + self.zk
    }

    /// MiB/s that `cores` allow at this cost per 1 KiB entry.
    fn ceiling(&self, cores: usize) -> f64 {
        cores as f64 * 1e6 / self.all() * ENTRY_SIZE as f64 / MIB
    }

    fn row(&self, label: &str, cores: usize) {
        println!(
            "| {label} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |",
            self.client,
            self.dst,
            self.src,
            self.zk,
            self.all(),
            self.ceiling(cores)
        );
    }
}

impl Raw {
    /// CPU per entry; the client is the Java client of the cluster used.
    fn per_entry(&self) -> PerEntry {
        let client = match self.op {
            RawOp::Add { .. } => group(&self.cpu, "Java client (destination)"),
            RawOp::RustAdd { .. } => self.cpu.own_seconds,
            RawOp::Read { .. } => group(&self.cpu, "Java client (source)"),
        };
        PerEntry::new(client, &self.cpu, self.entries as f64)
    }
}

impl Round {
    /// CPU per entry; the client is this process.
    fn per_entry(&self, entries: usize) -> PerEntry {
        PerEntry::new(
            self.cpu.own_seconds,
            &self.cpu,
            (self.ledgers * entries) as f64,
        )
    }
}

/// Prints the whole report.
pub(crate) fn report(s: &Settings, f: &Figures) {
    let (raw, rounds, large) = (&f.raw, &f.rounds, &f.large);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!();
    println!(
        "copy_real ({}): CPU \"{}\", {cores} CPUs; load average (1 min) {:.2} before the run; \
         took {:.0} s",
        if s.quick { "quick" } else { "default" },
        cpu_model(),
        f.load_before,
        f.took.as_secs_f64()
    );
    let (e, w, a) = super::settings::quorums();
    println!(
        "Ledgers of ensemble {e} / write quorum {w} / ack quorum {a}, CRC32C, {ENTRY_SIZE}-byte \
         entries; copy window {}.",
        s.window
    );
    println!();
    println!(
        "Raw: BookKeeper's Java client (throttle=0) adding to the destination bookies, and \
         reading a source ledger; for reference, the copy's Rust client adding:"
    );
    println!();
    println!("| measurement | entries/s | MiB/s | p50 add µs | p99 add µs |");
    println!("|---|---|---|---|---|");
    for r in raw {
        let (p50, p99) = r
            .latency_micros
            .map_or(("—".to_owned(), "—".to_owned()), |(a, b)| {
                (format!("{a:.0}"), format!("{b:.0}"))
            });
        println!(
            "| {} | {:.0} | {:.1} | {p50} | {p99} |",
            r.label(),
            r.entries_per_sec,
            r.mib_per_sec
        );
    }
    let best = |read: bool| {
        raw.iter()
            .filter(|r| match r.op {
                RawOp::Add { .. } => !read,
                RawOp::RustAdd { .. } => false,
                RawOp::Read { .. } => read,
            })
            .map(|r| r.mib_per_sec)
            .fold(0.0, f64::max)
    };
    let raw_limit = best(false);
    println!();
    println!(
        "Raw limit (best of the Java adds): {raw_limit:.1} MiB/s. Best raw read of the source: \
         {:.1} MiB/s.",
        best(true)
    );
    println!();
    println!(
        "| copies in flight | ledgers × entries | seconds | ledgers/s | MiB/s | % of raw | load \
         (1 min) |"
    );
    println!("|---|---|---|---|---|---|---|");
    let all: Vec<(usize, usize, &Round)> = rounds
        .iter()
        .map(|(c, r)| (*c, SMALL_ENTRIES, r))
        .chain(std::iter::once((BUILD_CONCURRENCY, LARGE_ENTRIES, large)))
        .collect();
    for (c, entries, r) in &all {
        println!(
            "| {c} | {} × {entries} | {:.2} | {:.0} | {:.1} | {:.0} % | {:.2} |",
            r.ledgers,
            r.seconds,
            r.ledgers_per_sec(),
            r.mib_per_sec(),
            100.0 * r.mib_per_sec() / raw_limit,
            r.load
        );
    }

    println!();
    println!(
        "Where a copy's time goes (mean ms per ledger; \"reads\": time with at least one \
         source read in flight, adds overlapping; \"acks only\": the rest of the streaming, \
         waiting for the destination's acknowledgements alone):"
    );
    println!();
    println!(
        "| copies in flight | entries | open | create (adv) | reads (calls) | acks only | \
         close | sum | verify pass (s, untimed) |"
    );
    println!("|---|---|---|---|---|---|---|---|---|");
    for (c, entries, r) in &all {
        let p = r.phases;
        println!(
            "| {c} | {entries} | {:.2} | {:.2} | {:.2} ({:.1}) | {:.2} | {:.2} | {:.2} | {:.1} |",
            p.open,
            p.create,
            p.read,
            p.reads_per_ledger,
            p.acks,
            p.close,
            p.open + p.create + p.read + p.acks + p.close,
            r.verify_seconds
        );
    }

    println!();
    println!("CPU used during each measurement (cores; {cores} = the whole machine):");
    println!();
    let labels: Vec<&str> = f.idle.groups.iter().map(|(l, _)| *l).collect();
    println!(
        "| measurement | copy process | {} | of which JIT compiling | other processes |",
        labels.join(" | ")
    );
    println!("|---|---|{}---|---|", "---|".repeat(labels.len()));
    cpu_row("idle, 2 s before the raw measurements", &f.idle);
    for r in raw {
        cpu_row(&r.label(), &r.cpu);
    }
    for (c, entries, r) in &all {
        cpu_row(
            &format!("copy, {c} in flight, {entries}-entry ledgers"),
            &r.cpu,
        );
    }

    println!();
    println!(
        "CPU per entry (µs; the client is the Java client for the raw figures, this process for \
         the copies) and the throughput that cost allows when the {cores} cores do nothing else:"
    );
    println!();
    println!(
        "| measurement | client | destination bookies | source bookies | ZooKeeper | all | \
         ceiling MiB/s |"
    );
    println!("|---|---|---|---|---|---|---|");
    for r in raw {
        r.per_entry().row(&r.label(), cores);
    }
    for (c, entries, r) in &all {
        r.per_entry(*entries).row(
            &format!("copy, {c} in flight, {entries}-entry ledgers"),
            cores,
        );
    }
    // A copy reads every entry on the source and adds it on the destination,
    // here on the same cores. Its bookies' work compared with the raw figures'.
    let cheapest = |read: bool, part: fn(&PerEntry) -> f64| {
        raw.iter()
            .filter(|r| match r.op {
                RawOp::Add { .. } => !read,
                RawOp::RustAdd { .. } => false,
                RawOp::Read { .. } => read,
            })
            .map(|r| part(&r.per_entry()))
            .fold(f64::INFINITY, f64::min)
    };
    let (add_dst, read_src) = (cheapest(false, |p| p.dst), cheapest(true, |p| p.src));
    if let Some((c, entries, r)) = all
        .iter()
        .max_by(|a, b| a.2.mib_per_sec().total_cmp(&b.2.mib_per_sec()))
    {
        let p = r.per_entry(*entries);
        let ideal = add_dst + read_src + p.client + p.zk;
        let ceiling = cores as f64 * 1e6 / ideal * ENTRY_SIZE as f64 / MIB;
        println!();
        println!(
            "Bookies' CPU per entry: a raw Java add cost the destination bookies {add_dst:.1} µs, a \
             raw read cost the source bookies {read_src:.1} µs. The fastest copy round ({c} in \
             flight, {entries}-entry ledgers) cost the destination bookies {:.1} µs and the \
             source bookies {:.1} µs per entry, this process {:.1} µs and ZooKeeper {:.1} µs. A \
             copy whose bookies worked as cheaply as in the raw figures would still need \
             {ideal:.1} µs per entry: at most {ceiling:.1} MiB/s on {cores} cores ({:.0} % of \
             the raw limit).",
            p.dst,
            p.src,
            p.client,
            p.zk,
            100.0 * ceiling / raw_limit
        );
    }
    super::duel::report(&f.duel, cores as f64, &f.java_conf);
    memory_report(rounds, large, &f.control, s.window);
}

fn memory_report(rounds: &[(usize, Round)], large: &Round, control: &Round, window: usize) {
    let small = rounds
        .iter()
        .find(|(c, _)| *c == BUILD_CONCURRENCY)
        .map(|(_, r)| r)
        .unwrap_or(&rounds.last().expect("at least one round").1);
    let growth = |m: &MemFigures| (m.heap_peak as f64 - m.heap_start as f64) / MIB;
    let mem_row = |label: String, m: &MemFigures| {
        let rss = |k: u64| k as f64 / 1024.0;
        println!(
            "| {label} | {:.2} | {:.2} | {:+.2} | {:.3} | {:.3} | {:+.3} |",
            rss(m.rss_start_kib),
            rss(m.rss_peak_kib),
            rss(m.rss_peak_kib) - rss(m.rss_start_kib),
            m.heap_start as f64 / MIB,
            m.heap_peak as f64 / MIB,
            growth(m)
        );
    };
    println!();
    println!("Copying process memory (MiB) over a round at {BUILD_CONCURRENCY} copies in flight:");
    println!();
    println!(
        "| ledgers | RSS at start | RSS peak | RSS growth | heap at start | heap peak | heap \
         growth |"
    );
    println!("|---|---|---|---|---|---|---|");
    mem_row(
        format!("{} × {SMALL_ENTRIES} entries", small.ledgers),
        &small.memory,
    );
    mem_row(
        format!("{} × {LARGE_ENTRIES} entries", large.ledgers),
        &large.memory,
    );
    mem_row(
        format!(
            "control: {} × {LARGE_ENTRIES} entries, each ledger read whole then added",
            control.ledgers
        ),
        &control.memory,
    );
    let whole = (BUILD_CONCURRENCY * LARGE_ENTRIES * ENTRY_SIZE) as f64 / MIB;
    let windows = (BUILD_CONCURRENCY * window * ENTRY_SIZE) as f64 / MIB;
    let flat = growth(&large.memory) < growth(&small.memory) + windows
        && growth(&large.memory) < whole / 2.0;
    println!();
    println!(
        "Verdict: {} — heap growth {:.2} MiB with {SMALL_ENTRIES}-entry ledgers, {:.2} MiB with \
         {LARGE_ENTRIES}-entry ones; {BUILD_CONCURRENCY} windows of data are {windows:.1} MiB, \
         {BUILD_CONCURRENCY} whole {LARGE_ENTRIES}-entry ledgers would be {whole:.1} MiB.",
        if flat {
            "flat in ledger size"
        } else {
            "NOT flat in ledger size"
        },
        growth(&small.memory),
        growth(&large.memory)
    );
    println!(
        "Control (not BUILD's copy; run last): {LARGE_ENTRIES}-entry ledgers copied whole (read \
         in one call, then added), {BUILD_CONCURRENCY} at once: heap growth {:.2} MiB, {:.1} \
         MiB/s.",
        growth(&control.memory),
        control.mib_per_sec()
    );
}
