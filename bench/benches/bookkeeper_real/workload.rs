//! The Rust client's side of each measurement: adds, sequential and random
//! reads.

use super::*;
use futures::FutureExt;

pub(crate) fn payload(size: u32) -> Bytes {
    Bytes::from((0..size).map(|i| (i % 251) as u8).collect::<Vec<u8>>())
}

/// [`rust_adds`] in a task of the runtime, as an application's tasks run: the
/// thread of `block_on` is not one of the runtime's workers, so every
/// completion would wake it from another thread (a futex wake-up, and a wait
/// for a CPU the bookies are using), and the adds' latencies would count that
/// wake-up, where the Java side times each add in its callback on the thread
/// that completed it.
pub(crate) async fn rust_adds_on_worker(
    bk: &BookKeeperClient,
    entries: u32,
    size: u32,
    inflight: usize,
) -> (Figures, i64) {
    let bk = bk.clone();
    tokio::spawn(async move { rust_adds(&bk, entries, size, inflight).await })
        .await
        .unwrap()
}

pub(crate) async fn rust_adds(
    bk: &BookKeeperClient,
    entries: u32,
    size: u32,
    inflight: usize,
) -> (Figures, i64) {
    let cfg = LedgerConfig::default().with_quorums(3, 2, 2);
    let w = bk.create_ledger(&cfg).await.unwrap();
    let payload = payload(size);
    // Each add's call and completion instants, by the order of the calls.
    let mut sent_at = Vec::with_capacity(entries as usize);
    let mut done_at = vec![None; entries as usize];
    let mut pending = FuturesUnordered::new();
    let started = Instant::now();
    let mut issued = 0u32;
    while issued < entries {
        while pending.len() < inflight && issued < entries {
            // From before the call, as the Java side times it (the call
            // encodes and sends the entry).
            sent_at.push(Instant::now());
            let add = w.add_entry(payload.clone());
            let index = issued as usize;
            pending.push(async move {
                let r = add.await;
                (r, index, Instant::now())
            });
            issued += 1;
        }
        // One completion, then every other one already complete, each timed
        // before the next add is made: the Java side times each add in its
        // callback as it completes, on the client's own thread, while its
        // issuing thread sends the next ones. Timing one, sending one, timing
        // the next would count the sends in the later adds' latencies.
        let (r, index, done) = pending.next().await.unwrap();
        r.unwrap();
        done_at[index] = Some(done);
        while let Some(Some((r, index, done))) = pending.next().now_or_never() {
            r.unwrap();
            done_at[index] = Some(done);
        }
    }
    while let Some((r, index, done)) = pending.next().await {
        r.unwrap();
        done_at[index] = Some(done);
    }
    let seconds = started.elapsed().as_secs_f64();
    w.close().await.unwrap();
    let done_at: Vec<Instant> = done_at.into_iter().map(Option::unwrap).collect();
    if let Ok(dir) = std::env::var("BENCH_TRACE") {
        write_trace(&dir, "rust", started, &sent_at, &done_at);
    }
    let timing = AddTiming::new(started, &sent_at, &done_at, inflight);
    (
        Figures {
            entries_per_sec: f64::from(entries) / seconds,
            mib_per_sec: f64::from(entries) * f64::from(size) / 1048576.0 / seconds,
            p50_us: percentile(&timing.from_call, 0.50),
            p99_us: percentile(&timing.from_call, 0.99),
            window_p99_us: percentile(&timing.from_window, 0.99),
            in_flight: timing.in_flight,
            ..Figures::default()
        },
        w.id(),
    )
}

/// `BENCH_TRACE`: each add of a run, in the order of the calls, as a line
/// "call completion" in ns from the run's start, in `<dir>/<ms since the
/// epoch>-<client>.txt` (the Java side writes the same from its instants).
fn write_trace(dir: &str, client: &str, started: Instant, sent: &[Instant], done: &[Instant]) {
    let mut out = String::with_capacity(sent.len() * 24);
    for (s, d) in sent.iter().zip(done) {
        out += &format!(
            "{} {}\n",
            (*s - started).as_nanos(),
            (*d - started).as_nanos()
        );
    }
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let path = format!("{dir}/{ms}-{client}.txt");
    std::fs::write(&path, out).unwrap_or_else(|e| panic!("BENCH_TRACE: cannot write {path}: {e}"));
}

/// The latencies of a run of adds through a window, two ways (the Java
/// side computes the same from its own instants).
pub(crate) struct AddTiming {
    /// Each add from its call to its completion, sorted.
    pub(crate) from_call: Vec<Duration>,
    /// Each add from the moment the window let it go to its completion,
    /// sorted: the run's start for the first window's adds, then the
    /// completion that freed a place (the `k`-th add after the first window
    /// gets the place of the `k`-th completion in time). Whatever the
    /// issuing loop does between a completion and the next call counts
    /// here; with a loop that keeps up, both are nearly the same.
    pub(crate) from_window: Vec<Duration>,
    /// Adds in flight on average, from the call to the completion (the sum
    /// of the latencies from the call over the wall time; Little's law).
    pub(crate) in_flight: f64,
}

impl AddTiming {
    /// From the run's start, each add's call and completion instants (in the
    /// order of the calls) and the window.
    pub(crate) fn new(started: Instant, sent: &[Instant], done: &[Instant], window: usize) -> Self {
        let mut from_call: Vec<Duration> = sent.iter().zip(done).map(|(s, d)| *d - *s).collect();
        let wall = done.iter().max().map_or(Duration::ZERO, |d| *d - started);
        let total: Duration = from_call.iter().sum();
        let mut freed = done.to_vec();
        freed.sort();
        let mut from_window: Vec<Duration> = (0..sent.len())
            .map(|i| {
                let free = if i < window {
                    started
                } else {
                    freed[i - window].min(sent[i])
                };
                done[i] - free
            })
            .collect();
        from_call.sort();
        from_window.sort();
        let in_flight = if wall.is_zero() {
            0.0
        } else {
            total.as_secs_f64() / wall.as_secs_f64()
        };
        Self {
            from_call,
            from_window,
            in_flight,
        }
    }
}

pub(crate) async fn rust_sequential_reads(bk: &BookKeeperClient, ledger_id: i64) -> (Figures, u64) {
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

pub(crate) async fn rust_random_reads(
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
pub(crate) fn java_random_doubles(seed: i64) -> impl FnMut() -> f64 {
    const MULTIPLIER: i64 = 0x5DEECE66D;
    const MASK: i64 = (1 << 48) - 1;
    let mut state = (seed ^ MULTIPLIER) & MASK;
    let mut next = move |bits: u32| {
        state = (state.wrapping_mul(MULTIPLIER).wrapping_add(0xB)) & MASK;
        state >> (48 - bits)
    };
    move || ((next(26) << 27) + next(27)) as f64 * (1.0 / (1u64 << 53) as f64)
}
