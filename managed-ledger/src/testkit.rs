//! Test helpers for managed-ledger users and for the crates above this one.
//!
//! - [`RecordingStore`] (from `bkswitch_metadata_store::testkit`): a
//!   [`MetadataStore`](bkswitch_metadata_store::MetadataStore) wrapper that
//!   records every write (path, operation, value bytes, result) and injects
//!   failures, ambiguous ones included.
//! - [`CountingResolver`], [`SwitchableSupplier`], [`StampingProvider`] (from
//!   `bkswitch_hook_conformance::hooks`): counting S2, S1 and S4 hooks.
//! - [`ManualClock`]: a settable clock.

use std::sync::atomic::{AtomicI64, Ordering};

pub use bkswitch_hook_conformance::hooks::{
    CountingResolver, StampingProvider, SwitchableSupplier,
};
pub use bkswitch_metadata_store::testkit::{InjectedFailure, RecordingStore, WriteOp, WriteRecord};

use crate::Clock;

/// A clock that only moves when told to.
#[derive(Debug)]
pub struct ManualClock {
    now: AtomicI64,
}

impl ManualClock {
    /// A clock reading `now_millis`.
    pub fn new(now_millis: i64) -> ManualClock {
        ManualClock {
            now: AtomicI64::new(now_millis),
        }
    }

    /// Sets the time.
    pub fn set(&self, now_millis: i64) {
        self.now.store(now_millis, Ordering::SeqCst);
    }

    /// Moves the time forward.
    pub fn advance(&self, millis: i64) {
        self.now.fetch_add(millis, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now_millis(&self) -> i64 {
        self.now.load(Ordering::SeqCst)
    }
}
