//! The copying process's memory: a counting global allocator (heap high-water)
//! and a sampler of the resident set.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

// ----- counting allocator (heap high-water) -----

#[path = "../shared/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Counting, CURRENT as HEAP, PEAK as HEAP_PEAK};

#[global_allocator]
static GLOBAL: Counting = Counting;

// ----- process memory -----

pub(crate) const MIB: f64 = 1024.0 * 1024.0;

/// A `kB` field of `/proc/self/status` (`VmRSS`, `VmHWM`), in KiB.
pub(crate) fn status_kib(field: &str) -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .unwrap_or(0)
}

/// The peak resident set since the last [`MemProbe::begin`]: the kernel's
/// `VmHWM`, reset through `/proc/self/clear_refs`, or where that reset is not
/// allowed, `VmRSS` sampled every 2 ms on a thread of its own (which would
/// cost the copying process CPU in every round, so it runs only then).
pub(crate) struct MemProbe {
    rss_peak: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

/// The memory state at the start of a measured phase.
pub(crate) struct MemMark {
    rss_kib: u64,
    hwm_reset: bool,
    heap: usize,
}

/// Memory figures of one phase: resident set and heap, at the start and at
/// their peak.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct MemFigures {
    pub(crate) rss_start_kib: u64,
    pub(crate) rss_peak_kib: u64,
    pub(crate) heap_start: usize,
    pub(crate) heap_peak: usize,
}

impl MemProbe {
    /// Starts the sampling thread when `VmHWM` cannot be reset (stopped when
    /// the probe is dropped).
    pub(crate) fn start() -> MemProbe {
        let rss_peak = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (peak, halt) = (rss_peak.clone(), stop.clone());
        let hwm_resets = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let thread = (!hwm_resets).then(|| {
            std::thread::spawn(move || {
                while !halt.load(Ordering::Relaxed) {
                    peak.fetch_max(status_kib("VmRSS"), Ordering::Relaxed);
                    std::thread::sleep(Duration::from_millis(2));
                }
            })
        });
        MemProbe {
            rss_peak,
            stop,
            thread,
        }
    }

    /// Marks the start of a measured phase: resets the peaks.
    pub(crate) fn begin(&self) -> MemMark {
        // Writing 5 to clear_refs resets the peak resident set (VmHWM) to the
        // current one (Linux 4.0 and later).
        let hwm_reset = std::fs::write("/proc/self/clear_refs", "5").is_ok();
        let rss_kib = status_kib("VmRSS");
        self.rss_peak.store(rss_kib, Ordering::Relaxed);
        let heap = HEAP.load(Ordering::Relaxed);
        HEAP_PEAK.store(heap, Ordering::Relaxed);
        MemMark {
            rss_kib,
            hwm_reset,
            heap,
        }
    }

    /// The figures of the phase that `mark` started.
    pub(crate) fn end(&self, mark: &MemMark) -> MemFigures {
        let mut peak = self
            .rss_peak
            .load(Ordering::Relaxed)
            .max(status_kib("VmRSS"));
        if mark.hwm_reset {
            peak = peak.max(status_kib("VmHWM"));
        }
        MemFigures {
            rss_start_kib: mark.rss_kib,
            rss_peak_kib: peak,
            heap_start: mark.heap,
            heap_peak: HEAP_PEAK.load(Ordering::Relaxed).max(mark.heap),
        }
    }
}

impl Drop for MemProbe {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The 1-minute load average.
pub(crate) fn load_average() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(f64::NAN)
}
