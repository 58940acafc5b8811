//! The client's heap stays under a fixed bound whatever a caller asks,
//! measured by a counting global allocator (the live heap of the whole test
//! process, the fake bookies' buffers included): a burst of adds of 1 GiB
//! issued at once, the read of that 1 GiB ledger, and the recovery of a
//! 100,000-entry ledger whose writer confirmed nothing.
//!
//! The bookies are the test kit's in-process fake bookies, which keep no data
//! (they acknowledge adds and generate the entries they are asked for), so the
//! sizes cost CPU only; the metadata is a `MemoryStore`. The same steps run
//! against real bookies in the `bookkeeper_memory` bench.
//!
//! One test in this file: the peak is process-wide.

#![allow(unsafe_code, reason = "the counting allocator needs unsafe impls")]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use bkswitch_bk_client::{BookKeeper, DigestType, LedgerConfig, ReadHandle, WriteHandle};
use bkswitch_bookkeeper::testkit::{generated_payload, FakeBookies};
use bkswitch_bookkeeper::ClientConfig;
use futures::stream::{FuturesOrdered, StreamExt};

struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(n: usize) {
    let now = CURRENT.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: delegates every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grow(new_size - layout.size());
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

const MIB: usize = 1 << 20;

/// Runs `f`, returning its result and the heap's high-water mark above what
/// was live when it started.
async fn peak_of<T>(f: impl std::future::Future<Output = T>) -> (T, usize) {
    let base = CURRENT.load(Ordering::Relaxed);
    PEAK.store(base, Ordering::Relaxed);
    let out = f.await;
    (out, PEAK.load(Ordering::Relaxed).saturating_sub(base))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_1_gib_burst_and_read_and_a_100_000_entry_recovery_stay_under_fixed_bounds() {
    let client_budget = 16 * MIB;
    let bookie_budget = 8 * MIB;
    let (fakes, bk) = FakeBookies::with_client(
        3,
        ClientConfig::default()
            .with_max_add_bytes_in_flight(client_budget)
            .with_max_add_bytes_in_flight_per_bookie(bookie_budget)
            .with_read_window(256)
            .with_recovery_window(64),
    )
    .await
    .unwrap();
    let config = LedgerConfig::default().with_quorums(3, 2, 2);

    // 1. 16,384 adds of 64 KiB (1 GiB), every one issued before any is awaited.
    const ENTRY: usize = 64 * 1024;
    const ENTRIES: i64 = 16 * 1024;
    let w = bk.create_ledger(&config).await.unwrap();
    let ((max_client, max_bookie), write_peak) = peak_of(async {
        let mut adds = FuturesOrdered::new();
        for i in 0..ENTRIES {
            adds.push_back(w.add_entry(generated_payload(i, ENTRY)));
        }
        let (mut max_client, mut max_bookie) = (0, 0);
        let mut expected = 0;
        while let Some(r) = adds.next().await {
            assert_eq!(r.unwrap(), expected);
            expected += 1;
            max_client = max_client.max(bk.add_bytes_in_flight());
            max_bookie = max_bookie.max(bk.max_bookie_bytes_in_flight());
        }
        (max_client, max_bookie)
    })
    .await;
    w.close().await.unwrap();
    eprintln!(
        "1 GiB burst: heap peak {:.1} MiB, at most {:.1} MiB in flight, {:.1} MiB to one bookie",
        write_peak as f64 / MIB as f64,
        max_client as f64 / MIB as f64,
        max_bookie as f64 / MIB as f64
    );
    assert!(max_client <= client_budget, "{max_client} bytes in flight");
    assert!(
        max_bookie <= bookie_budget,
        "{max_bookie} bytes to one bookie"
    );
    assert!(max_client > client_budget / 4, "the budget was hardly used");
    assert!(
        write_peak < 64 * MIB,
        "a 1 GiB burst of adds took {write_peak} bytes of heap"
    );

    // 2. The 1 GiB ledger read back in batches of 128 entries.
    fakes.generate(w.id(), ENTRIES, ENTRY, DigestType::Crc32c);
    let r = bk
        .open_ledger_no_recovery(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), ENTRIES - 1);
    let ((), read_peak) = peak_of(async {
        for first in (0..ENTRIES).step_by(128) {
            let got = r.read_entries(first, first + 127).await.unwrap();
            assert_eq!(got.len(), 128);
            for e in &got {
                assert_eq!(e.data, generated_payload(e.entry_id, ENTRY));
            }
        }
    })
    .await;
    eprintln!(
        "1 GiB read: heap peak {:.1} MiB",
        read_peak as f64 / MIB as f64
    );
    assert!(
        read_peak < 64 * MIB,
        "reading 1 GiB took {read_peak} bytes of heap"
    );

    // 3. Recovery of 100,000 unconfirmed entries of 1 KiB: read ahead and
    // written back through the recovery window.
    const RECOVERED: i64 = 100_000;
    let crashed = bk.create_ledger(&config).await.unwrap();
    let id = crashed.id();
    drop(crashed);
    fakes.generate(id, RECOVERED, 1024, DigestType::Crc32c);
    let (recovered, recovery_peak) = peak_of(bk.open_ledger(id, DigestType::Crc32c, b"")).await;
    let recovered = recovered.unwrap();
    eprintln!(
        "recovery of {RECOVERED} entries: heap peak {:.1} MiB",
        recovery_peak as f64 / MIB as f64
    );
    assert_eq!(recovered.last_add_confirmed(), RECOVERED - 1);
    assert_eq!(recovered.length(), RECOVERED as u64 * 1024);
    assert!(recovered.is_closed());
    assert!(
        recovery_peak < 16 * MIB,
        "recovering {RECOVERED} entries took {recovery_peak} bytes of heap"
    );
    bk.close().await.unwrap();
}
