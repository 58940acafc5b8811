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
    let mut latencies = Vec::with_capacity(entries as usize);
    let mut pending = FuturesUnordered::new();
    let started = Instant::now();
    let mut issued = 0u32;
    while issued < entries {
        while pending.len() < inflight && issued < entries {
            // From before the call, as the Java side times it (the call
            // encodes and sends the entry).
            let sent = Instant::now();
            let add = w.add_entry(payload.clone());
            pending.push(async move {
                let r = add.await;
                (r, sent.elapsed())
            });
            issued += 1;
        }
        // One completion, then every other one already complete, each timed
        // before the next add is made: the Java side times each add in its
        // callback as it completes, on the client's own thread, while its
        // issuing thread sends the next ones. Timing one, sending one, timing
        // the next would count the sends in the later adds' latencies.
        let (r, took): (bkswitch_bk_client::Result<i64>, Duration) = pending.next().await.unwrap();
        r.unwrap();
        latencies.push(took);
        while let Some(Some((r, took))) = pending.next().now_or_never() {
            r.unwrap();
            latencies.push(took);
        }
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
