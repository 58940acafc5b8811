//! The printed tables: each round, the thread groups, and medians.

use super::*;

/// Figures of one point, by client, over the rounds.
pub(crate) type Series = BTreeMap<(String, u32, u32, &'static str), Vec<Figures>>;

/// The bookies' CPU by thread group of one point, by client, over the rounds.
pub(crate) type ThreadSeries = BTreeMap<(String, u32, u32, &'static str), Vec<GroupFigures>>;

/// The points measured (operation, entry size, in flight), in order.
pub(crate) fn points(series: &Series) -> Vec<(&'static str, u32, u32)> {
    let mut points: Vec<_> = series
        .keys()
        .filter(|(c, ..)| c == "Rust")
        .map(|(_, s, i, op)| (*op, *s, *i))
        .collect();
    points.sort();
    points
}

/// The bookies' CPU per entry round by round, with which client went first:
/// the second client of a round meets the bookies as the first one left them
/// (their caches, their memtable), so a median over an odd number of rounds
/// puts one client first more often than the other. For adds, also the
/// paired comparison: the median over the rounds of each round's Rust / Java
/// ratio (both clients of a round meet the same machine, so the round-to-round
/// swings of the shared machine cancel out of each ratio).
pub(crate) fn print_round_table(series: &Series) {
    println!();
    println!(
        "The bookies' CPU µs per entry, round by round (Rust / Java; `R` or `J`: who went first; \
         for adds also the p99 from the call and from the window, and the rate):"
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
                        "{first} {:.1} / {:.1} (p99 {:.1} / {:.1} ms, from the window {:.1} / {:.1} ms, \
                         {:.0} / {:.0} entries/s)",
                        r.bookie_cpu_us,
                        j.bookie_cpu_us,
                        r.p99_us / 1e3,
                        j.p99_us / 1e3,
                        r.window_p99_us / 1e3,
                        j.window_p99_us / 1e3,
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
                let ratios = |g: fn(&Figures) -> f64| {
                    middle(rust.iter().zip(java).map(|(r, j)| g(r) / g(j)).collect())
                };
                let ahead = rust
                    .iter()
                    .zip(java)
                    .filter(|(r, j)| r.entries_per_sec > j.entries_per_sec)
                    .count();
                format!(
                    ", p99 {:.1} / {:.1} ms, from the window {:.1} / {:.1} ms, in flight {:.0} / {:.0}; \
                     paired: median round ratio {:.2} (rate), {:.2} (p99), {:.2} (p99 from the window), \
                     Rust ahead in {ahead} of {} rounds",
                    mean(rust, |f| f.p99_us) / 1e3,
                    mean(java, |f| f.p99_us) / 1e3,
                    mean(rust, |f| f.window_p99_us) / 1e3,
                    mean(java, |f| f.window_p99_us) / 1e3,
                    mean(rust, |f| f.in_flight),
                    mean(java, |f| f.in_flight),
                    ratios(|f| f.entries_per_sec),
                    ratios(|f| f.p99_us),
                    ratios(|f| f.window_p99_us),
                    rust.len().min(java.len()),
                )
            } else {
                String::new()
            }
        );
    }
}

/// Where the bookies' CPU went, by thread group, Rust against Java: the
/// groups that took at least 1 % of either client's bookie CPU, medians over
/// the rounds, and the range over the rounds of the bookies' total.
pub(crate) fn print_thread_table(series: &Series, threads: &ThreadSeries) {
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

pub(crate) fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}

/// The median of `v`, the mean of the two middle values for an even count.
pub(crate) fn middle(mut v: Vec<f64>) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(|a, b| a.total_cmp(b));
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}
