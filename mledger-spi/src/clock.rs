//! The wall clock a managed ledger (and the switch coordinator) reads
//! (injectable for tests).

use std::fmt::Debug;
use std::time::{SystemTime, UNIX_EPOCH};

/// A source of wall-clock time in milliseconds since the Unix epoch.
///
/// Used for ledger timestamps in `ManagedLedgerInfo`, rollover ages and time
/// retention. [`SystemClock`] is the default; tests use a manual clock
/// (`bkswitch_managed_ledger::testkit::ManualClock`).
pub trait Clock: Send + Sync + Debug {
    /// Milliseconds since the Unix epoch.
    fn now_millis(&self) -> i64;
}

/// The system wall clock.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_millis(&self) -> i64 {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            .unwrap_or(0)
    }
}
