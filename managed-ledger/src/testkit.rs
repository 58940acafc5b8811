//! Test helpers for managed-ledger users and for the crates above this one.
//!
//! - [`RecordingStore`]: a [`MetadataStore`] wrapper that records every write
//!   (path, operation, value bytes, result) and injects failures on the Nth write
//!   or on writes whose path contains a pattern.
//! - [`CountingResolver`]: an S2 resolver (data and cursor ledgers) that routes by
//!   the cluster stamp to registered clients and counts resolve calls per ledger.
//! - [`SwitchableSupplier`]: an S1 supplier whose client can be switched, counting
//!   calls.
//! - [`StampingProvider`]: an S4 provider that stamps the creating client's
//!   cluster name, counting calls, optionally failing.
//! - [`ManualClock`]: a settable clock.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{BookKeeper, LedgerId};
use bkswitch_metadata_store::{
    CreateMode, ExpectedVersion, GetResult, MetadataError, MetadataStore, Operation, Result, Stat,
    WatchStream,
};
use bkswitch_mledger_spi::{
    ActiveClientSupplier, CursorResolver, HookError, HookErrorKind, LedgerResolver,
    NewLedgerContext, NewLedgerPropertiesProvider,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedCursorInfo;
use bkswitch_proto::{Stamped, ATTR_KEY};
use parking_lot::Mutex;

use crate::clock::Clock;

/// The kind of a recorded write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WriteOp {
    /// [`MetadataStore::put`].
    Put,
    /// [`MetadataStore::create`].
    Create,
    /// [`MetadataStore::delete`].
    Delete,
}

/// One write seen by a [`RecordingStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteRecord {
    /// 1-based sequence number among all writes of the store.
    pub seq: usize,
    /// The path written.
    pub path: String,
    /// The operation.
    pub op: WriteOp,
    /// The value written (empty for deletes).
    pub value: Vec<u8>,
    /// The expected version given.
    pub expected: ExpectedVersion,
    /// The new version on success, or the error's text.
    pub result: std::result::Result<i64, String>,
    /// Whether the failure was injected.
    pub injected: bool,
}

/// What an injected failure looks like.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InjectedFailure {
    /// A retryable [`MetadataError::Unavailable`] (the write is not applied).
    Unavailable,
    /// A [`MetadataError::BadVersion`] conflict (the write is not applied).
    BadVersion,
    /// An **ambiguous** write: the inner store applies it, then the caller gets
    /// a retryable [`MetadataError::Unavailable`], as when a ZooKeeper
    /// connection drops after the server committed the write.
    AppliedThenUnavailable,
}

#[derive(Debug, Default)]
struct Faults {
    nth: Option<(usize, InjectedFailure)>,
    matching: Option<(String, usize, InjectedFailure)>,
    /// Reads (`get`, `exists`, `children`) whose path contains the pattern
    /// fail with `Unavailable` while the count lasts.
    reads: Option<(String, usize)>,
}

/// A [`MetadataStore`] wrapper recording every write and injecting failures.
///
/// Reads pass through unrecorded, unless made to fail with
/// [`fail_reads_matching`](RecordingStore::fail_reads_matching) (a connection
/// that stays down after an ambiguous write, so that reading back fails too).
/// Injected failures are returned without calling the inner store, except
/// [`InjectedFailure::AppliedThenUnavailable`], which applies the write first
/// (an ambiguous write).
#[derive(Debug)]
pub struct RecordingStore {
    inner: Arc<dyn MetadataStore>,
    writes: Mutex<Vec<WriteRecord>>,
    faults: Mutex<Faults>,
    seq: AtomicUsize,
}

impl RecordingStore {
    /// Wraps `inner`.
    pub fn new(inner: Arc<dyn MetadataStore>) -> RecordingStore {
        RecordingStore {
            inner,
            writes: Mutex::new(Vec::new()),
            faults: Mutex::new(Faults::default()),
            seq: AtomicUsize::new(0),
        }
    }

    /// Every write so far, in order.
    pub fn writes(&self) -> Vec<WriteRecord> {
        self.writes.lock().clone()
    }

    /// Successful writes whose path is exactly `path`.
    pub fn successful_writes_to(&self, path: &str) -> Vec<WriteRecord> {
        self.writes
            .lock()
            .iter()
            .filter(|w| w.path == path && w.result.is_ok())
            .cloned()
            .collect()
    }

    /// Forgets the recorded writes (the sequence number keeps counting).
    pub fn clear(&self) {
        self.writes.lock().clear();
    }

    /// The number of writes seen so far.
    pub fn write_count(&self) -> usize {
        self.seq.load(Ordering::SeqCst)
    }

    /// Makes the write with sequence number `n` (1-based, counting every write
    /// of this store since it was created) fail with `failure`.
    pub fn fail_nth_write(&self, n: usize, failure: InjectedFailure) {
        self.faults.lock().nth = Some((n, failure));
    }

    /// Makes the next `count` writes whose path contains `pattern` fail.
    pub fn fail_writes_matching(&self, pattern: &str, count: usize, failure: InjectedFailure) {
        self.faults.lock().matching = Some((pattern.to_owned(), count, failure));
    }

    /// Makes the next `count` reads (`get`, `exists`, `children`) whose path
    /// contains `pattern` fail with a retryable [`MetadataError::Unavailable`],
    /// without calling the inner store (`usize::MAX`: until
    /// [`clear_faults`](Self::clear_faults)).
    pub fn fail_reads_matching(&self, pattern: &str, count: usize) {
        self.faults.lock().reads = Some((pattern.to_owned(), count));
    }

    /// Fails a read of `path` when [`fail_reads_matching`](Self::fail_reads_matching) says so.
    fn check_read(&self, op: Operation, path: &str) -> Result<()> {
        let mut f = self.faults.lock();
        if let Some((pattern, count)) = &mut f.reads {
            if *count > 0 && path.contains(pattern.as_str()) {
                *count = count.saturating_sub(1);
                return Err(MetadataError::Unavailable {
                    op,
                    path: path.to_owned(),
                    reason: "injected read failure".to_owned(),
                });
            }
        }
        Ok(())
    }

    /// Removes every injected failure.
    pub fn clear_faults(&self) {
        *self.faults.lock() = Faults::default();
    }

    fn injected(&self, seq: usize, path: &str) -> Option<InjectedFailure> {
        let mut f = self.faults.lock();
        if let Some((n, failure)) = f.nth {
            if n == seq {
                f.nth = None;
                return Some(failure);
            }
        }
        if let Some((pattern, count, failure)) = &mut f.matching {
            if *count > 0 && path.contains(pattern.as_str()) {
                *count -= 1;
                return Some(*failure);
            }
        }
        None
    }

    fn error(op: Operation, path: &str, failure: InjectedFailure, expected: i64) -> MetadataError {
        match failure {
            InjectedFailure::Unavailable => MetadataError::Unavailable {
                op,
                path: path.to_owned(),
                reason: "injected failure".to_owned(),
            },
            InjectedFailure::AppliedThenUnavailable => MetadataError::Unavailable {
                op,
                path: path.to_owned(),
                reason: "injected failure after the write was applied".to_owned(),
            },
            InjectedFailure::BadVersion => MetadataError::BadVersion {
                op,
                path: path.to_owned(),
                expected,
            },
        }
    }

    /// Runs one write: numbers it, fails it when a fault is injected for it
    /// (without calling the inner store), and records what happened.
    async fn recorded<T, F>(
        &self,
        op: WriteOp,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
        version_of: fn(&T) -> i64,
        run: impl FnOnce() -> F,
    ) -> Result<T>
    where
        F: Future<Output = Result<T>>,
    {
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let (result, injected) = match self.injected(seq, path) {
            Some(InjectedFailure::AppliedThenUnavailable) => {
                // The write happens; only its answer is lost.
                let applied = run().await;
                let e = Self::error(
                    op.operation(),
                    path,
                    InjectedFailure::AppliedThenUnavailable,
                    expected_number(expected),
                );
                (applied.and(Err(e)), true)
            }
            Some(f) => {
                let e = Self::error(op.operation(), path, f, expected_number(expected));
                (Err(e), true)
            }
            None => (run().await, false),
        };
        self.writes.lock().push(WriteRecord {
            seq,
            path: path.to_owned(),
            op,
            value: value.to_vec(),
            expected,
            result: result.as_ref().map(version_of).map_err(|e| e.to_string()),
            injected,
        });
        result
    }
}

impl WriteOp {
    fn operation(self) -> Operation {
        match self {
            WriteOp::Put => Operation::Put,
            WriteOp::Create => Operation::Create,
            WriteOp::Delete => Operation::Delete,
        }
    }
}

fn expected_number(expected: ExpectedVersion) -> i64 {
    match expected {
        ExpectedVersion::Exactly(v) => v,
        ExpectedVersion::NotExists => -1,
        ExpectedVersion::Any => -2,
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl MetadataStore for RecordingStore {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        self.check_read(Operation::Get, path)?;
        self.inner.get(path).await
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        self.recorded(
            WriteOp::Put,
            path,
            value,
            expected,
            |s: &Stat| s.version,
            || self.inner.put(path, value, expected),
        )
        .await
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        let expected = ExpectedVersion::NotExists;
        self.recorded(
            WriteOp::Create,
            path,
            value,
            expected,
            |(_, s): &(String, Stat)| s.version,
            || self.inner.create(path, value, mode),
        )
        .await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        self.recorded(
            WriteOp::Delete,
            path,
            &[],
            expected,
            |_| -1,
            || self.inner.delete(path, expected),
        )
        .await
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.check_read(Operation::Exists, path)?;
        self.inner.exists(path).await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        self.check_read(Operation::Children, path)?;
        self.inner.children(path).await
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        self.inner.watch(path).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

/// An S2 resolver for data and cursor ledgers that routes by the cluster stamp
/// to registered clients (unstamped ledgers go to the default client) and counts
/// resolve calls per ledger id.
#[derive(Debug)]
pub struct CountingResolver {
    default: Arc<dyn BookKeeper>,
    clients: Mutex<HashMap<String, Arc<dyn BookKeeper>>>,
    ledger_calls: Mutex<HashMap<LedgerId, usize>>,
    cursor_calls: Mutex<HashMap<LedgerId, usize>>,
}

impl CountingResolver {
    /// A resolver whose unstamped (legacy) ledgers resolve to `default`; the
    /// default client is also registered under its cluster name.
    pub fn new(default: Arc<dyn BookKeeper>) -> CountingResolver {
        let mut clients = HashMap::new();
        clients.insert(default.cluster_name().to_owned(), default.clone());
        CountingResolver {
            default,
            clients: Mutex::new(clients),
            ledger_calls: Mutex::new(HashMap::new()),
            cursor_calls: Mutex::new(HashMap::new()),
        }
    }

    /// Registers `client` under its cluster name.
    pub fn add_client(&self, client: Arc<dyn BookKeeper>) {
        self.clients
            .lock()
            .insert(client.cluster_name().to_owned(), client);
    }

    /// Data-ledger resolve calls for `ledger_id`.
    pub fn ledger_calls(&self, ledger_id: LedgerId) -> usize {
        self.ledger_calls
            .lock()
            .get(&ledger_id)
            .copied()
            .unwrap_or(0)
    }

    /// Cursor-ledger resolve calls for `ledger_id`.
    pub fn cursor_calls(&self, ledger_id: LedgerId) -> usize {
        self.cursor_calls
            .lock()
            .get(&ledger_id)
            .copied()
            .unwrap_or(0)
    }

    /// Total resolve calls (data and cursor).
    pub fn total_calls(&self) -> usize {
        self.ledger_calls.lock().values().sum::<usize>()
            + self.cursor_calls.lock().values().sum::<usize>()
    }

    /// Resets every count.
    pub fn reset(&self) {
        self.ledger_calls.lock().clear();
        self.cursor_calls.lock().clear();
    }

    fn route(
        &self,
        stamp: Option<&str>,
        ledger_id: LedgerId,
    ) -> Result<Arc<dyn BookKeeper>, HookError> {
        match stamp {
            None => Ok(self.default.clone()),
            Some(name) => self.clients.lock().get(name).cloned().ok_or_else(|| {
                HookError::new(
                    HookErrorKind::UnknownCluster,
                    format!("ledger {ledger_id} is stamped with unknown cluster '{name}'"),
                )
                .with_cluster(name)
                .with_ledger(ledger_id)
            }),
        }
    }
}

fn stamp_error(e: bkswitch_proto::StampError, ledger_id: LedgerId) -> HookError {
    HookError::new(HookErrorKind::CorruptMetadata, e.to_string()).with_ledger(ledger_id)
}

impl LedgerResolver for CountingResolver {
    fn resolve_ledger(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        *self.ledger_calls.lock().entry(info.ledger_id).or_default() += 1;
        let stamp = info
            .cluster_stamp()
            .map_err(|e| stamp_error(e, info.ledger_id))?;
        self.route(stamp, info.ledger_id)
    }
}

impl CursorResolver for CountingResolver {
    fn resolve_cursor(&self, info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        *self
            .cursor_calls
            .lock()
            .entry(info.cursors_ledger_id)
            .or_default() += 1;
        let stamp = info
            .cluster_stamp()
            .map_err(|e| stamp_error(e, info.cursors_ledger_id))?;
        self.route(stamp, info.cursors_ledger_id)
    }
}

/// An S1 supplier whose client can be switched at any time; counts calls.
#[derive(Debug)]
pub struct SwitchableSupplier {
    client: Mutex<Arc<dyn BookKeeper>>,
    calls: AtomicUsize,
}

impl SwitchableSupplier {
    /// A supplier handing out `client`.
    pub fn new(client: Arc<dyn BookKeeper>) -> SwitchableSupplier {
        SwitchableSupplier {
            client: Mutex::new(client),
            calls: AtomicUsize::new(0),
        }
    }

    /// Hands out `client` from now on.
    pub fn switch_to(&self, client: Arc<dyn BookKeeper>) {
        *self.client.lock() = client;
    }

    /// Calls so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl ActiveClientSupplier for SwitchableSupplier {
    fn active_client(&self) -> Arc<dyn BookKeeper> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.client.lock().clone()
    }
}

/// An S4 provider stamping `_pulsar.bookieClusterName` with the cluster of the
/// client that created the ledger; counts calls and can be made to fail.
#[derive(Debug, Default)]
pub struct StampingProvider {
    calls: AtomicUsize,
    fail: AtomicBool,
}

impl StampingProvider {
    /// A provider that stamps.
    pub fn new() -> StampingProvider {
        StampingProvider::default()
    }

    /// Makes later calls fail (`true`) or stamp again (`false`).
    pub fn set_failing(&self, fail: bool) {
        self.fail.store(fail, Ordering::SeqCst);
    }

    /// Calls so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl NewLedgerPropertiesProvider for StampingProvider {
    fn new_ledger_properties(
        &self,
        ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(HookError::new(
                HookErrorKind::Other,
                format!("injected stamping failure for ledger {}", ctx.ledger_id),
            )
            .with_ledger(ctx.ledger_id));
        }
        Ok(vec![(
            ATTR_KEY.to_owned(),
            ctx.client.cluster_name().to_owned(),
        )])
    }
}

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
