//! The printed report: Markdown tables, ready for bench/RESULTS.md.

use super::cpu::CpuUse;
use super::memory::{MemFigures, MIB};
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

/// Prints the whole report.
pub(crate) fn report(s: &Settings, f: &Figures) {
    let (raw, rounds, large) = (&f.raw, &f.rounds, &f.large);
    let (load_before, took) = (f.load_before, f.took);
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let window = s.window;
    println!();
    println!(
        "copy_real ({}): CPU \"{}\", {cores} CPUs; load average (1 min) {load_before:.2} before \
         the run; took {:.0} s",
        if s.quick { "quick" } else { "default" },
        cpu_model(),
        took.as_secs_f64()
    );
    println!(
        "Ledgers of ensemble 3 / write quorum 2 / ack quorum 2, CRC32C, {ENTRY_SIZE}-byte \
         entries; copy window {window}."
    );
    println!();
    println!("Raw: BookKeeper's Java client adding to the destination bookies (throttle=0):");
    println!();
    println!("| when | adds in flight | entries/s | MiB/s | p50 add µs | p99 add µs |");
    println!("|---|---|---|---|---|---|");
    for r in raw {
        let j = &r.result;
        println!(
            "| {} the copies | {} | {:.0} | {:.1} | {:.0} | {:.0} |",
            r.when, r.inflight, j.entries_per_sec, j.mib_per_sec, j.p50_micros, j.p99_micros
        );
    }
    let raw_limit = raw.iter().map(|r| r.result.mib_per_sec).fold(0.0, f64::max);
    println!();
    println!("Raw limit (best of the above): {raw_limit:.1} MiB/s");
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
        "Where a copy's time goes (mean ms per ledger; a copy awaits its reads and its \
         acknowledgements in turn):"
    );
    println!();
    println!(
        "| copies in flight | entries | open | create (adv) | reads (calls) | waiting for acks | \
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
    println!("CPU used during each measurement (cores; 2 = the whole machine):");
    println!();
    let labels: Vec<&str> = raw
        .first()
        .map(|r| r.cpu.groups.iter().map(|(l, _)| *l).collect())
        .unwrap_or_default();
    println!(
        "| measurement | copy process | {} | of which JIT compiling | other processes |",
        labels.join(" | ")
    );
    println!("|---|---|{}---|---|", "---|".repeat(labels.len()));
    cpu_row("idle, 2 s before the raw adds", &f.idle);
    for r in raw {
        cpu_row(
            &format!("raw, {} in flight ({})", r.inflight, r.when),
            &r.cpu,
        );
    }
    for (c, entries, r) in &all {
        cpu_row(
            &format!("copy, {c} in flight, {entries}-entry ledgers"),
            &r.cpu,
        );
    }
    println!();
    println!(
        "CPU per entry (µs), and the throughput that CPU cost allows when {cores} cores do \
         nothing else:"
    );
    println!();
    println!(
        "| measurement | client | destination bookies | source bookies | ZooKeeper | all | \
         ceiling MiB/s |"
    );
    println!("|---|---|---|---|---|---|---|");
    let group = |cpu: &CpuUse, label: &str| {
        cpu.groups
            .iter()
            .position(|(l, _)| *l == label)
            .map_or(0.0, |i| cpu.group_seconds[i])
    };
    let per_entry_row = |label: String, client: f64, cpu: &CpuUse, n: f64| {
        let (dst, src, zk) = (
            group(cpu, "destination bookies"),
            group(cpu, "source bookies"),
            group(cpu, "ZooKeeper"),
        );
        let all = client + dst + src + zk;
        let ceiling = cores as f64 * n / all * ENTRY_SIZE as f64 / MIB;
        println!(
            "| {label} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {ceiling:.1} |",
            client * 1e6 / n,
            dst * 1e6 / n,
            src * 1e6 / n,
            zk * 1e6 / n,
            all * 1e6 / n
        );
    };
    for r in raw {
        per_entry_row(
            format!("raw, {} in flight ({}); client: Java", r.inflight, r.when),
            group(&r.cpu, "Java client"),
            &r.cpu,
            r.result.entries as f64,
        );
    }
    for (c, entries, r) in &all {
        per_entry_row(
            format!("copy, {c} in flight, {entries}-entry ledgers; client: this process"),
            r.cpu.own_seconds + group(&r.cpu, "Java client"),
            &r.cpu,
            (r.ledgers * entries) as f64,
        );
    }
    memory_report(rounds, large, &f.control, window);
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
