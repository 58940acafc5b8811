//! [`RecordingStore`]: a [`MetadataStore`] wrapper that records every write and
//! injects failures, for tests of anything that writes metadata.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use parking_lot::Mutex;

use crate::layer::{Call, Layer, Reply};
use crate::{ExpectedVersion, MetadataError, MetadataStore, Operation, Result};

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
    /// Watches whose path contains the pattern fail with `Unavailable`
    /// while the count lasts.
    watches: Option<(String, usize)>,
    /// Reads whose path contains the pattern wait until the sender says
    /// `true` (or is dropped), then go on to the inner store.
    held: Option<(String, tokio::sync::watch::Receiver<bool>)>,
}

/// Holds reads back (see [`RecordingStore::hold_reads_matching`]) until
/// [`release`](ReadHold::release)d or dropped.
#[derive(Debug)]
pub struct ReadHold {
    tx: tokio::sync::watch::Sender<bool>,
}

impl ReadHold {
    /// Lets the held reads, and every later one, go on.
    pub fn release(&self) {
        let _ = self.tx.send(true);
    }

    /// How many reads are waiting right now.
    pub fn waiting(&self) -> usize {
        self.tx.receiver_count().saturating_sub(1)
    }
}

impl Drop for ReadHold {
    fn drop(&mut self) {
        self.release();
    }
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

    /// Makes the next `count` watches whose path contains `pattern` fail
    /// with a retryable [`MetadataError::Unavailable`] (nothing armed).
    pub fn fail_watches_matching(&self, pattern: &str, count: usize) {
        self.faults.lock().watches = Some((pattern.to_owned(), count));
    }

    /// Makes reads (`get`, `exists`, `children`) whose path contains
    /// `pattern` wait, before they reach the inner store, until the returned
    /// hold is released: a read in flight across whatever the test does
    /// meanwhile (a store closed under it, a flip).
    pub fn hold_reads_matching(&self, pattern: &str) -> ReadHold {
        let (tx, rx) = tokio::sync::watch::channel(false);
        self.faults.lock().held = Some((pattern.to_owned(), rx));
        ReadHold { tx }
    }

    /// Waits while a [`ReadHold`] holds reads of `path`.
    async fn wait_if_held(&self, path: &str) {
        let held = {
            let f = self.faults.lock();
            match &f.held {
                Some((pattern, rx)) if path.contains(pattern.as_str()) => Some(rx.clone()),
                _ => None,
            }
        };
        if let Some(mut rx) = held {
            let _ = rx.wait_for(|released| *released).await;
        }
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
    /// Makes the write `call` on the inner store (or not, as injected) and
    /// records it.
    async fn recorded(&self, call: Call<'_>) -> Result<Reply> {
        let (op, path, value, expected) = match call {
            Call::Put {
                path,
                value,
                expected,
            }
            | Call::PutVersion {
                path,
                value,
                expected,
            } => (WriteOp::Put, path, value, expected),
            Call::ImportVersion { path, value, .. } => {
                (WriteOp::Put, path, value, ExpectedVersion::NotExists)
            }
            Call::Create { path, value, .. } => {
                (WriteOp::Create, path, value, ExpectedVersion::NotExists)
            }
            Call::Delete { path, expected } => (WriteOp::Delete, path, &[][..], expected),
            _ => return call.run(self.inner.as_ref()).await,
        };
        let seq = self.seq.fetch_add(1, Ordering::SeqCst) + 1;
        let (result, injected) = match self.injected(seq, path) {
            Some(InjectedFailure::AppliedThenUnavailable) => {
                // The write happens; only its answer is lost.
                let applied = call.run(self.inner.as_ref()).await;
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
            None => (call.run(self.inner.as_ref()).await, false),
        };
        self.writes.lock().push(WriteRecord {
            seq,
            path: path.to_owned(),
            op,
            value: value.to_vec(),
            expected,
            result: result
                .as_ref()
                .map(|reply| match reply {
                    Reply::Stat(s) | Reply::Created(_, s) => s.version,
                    Reply::Version(v) => *v,
                    _ => -1,
                })
                .map_err(|e| e.to_string()),
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
impl Layer for RecordingStore {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.inner.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        let (op, path) = (call.operation(), call.path());
        match call {
            Call::Get { .. } | Call::Exists { .. } | Call::Children { .. } => {
                self.check_read(op, path)?;
                self.wait_if_held(path).await;
                call.run(self.inner.as_ref()).await
            }
            Call::Watch { .. } => {
                {
                    let mut f = self.faults.lock();
                    if let Some((pattern, count)) = &mut f.watches {
                        if *count > 0 && path.contains(pattern.as_str()) {
                            *count -= 1;
                            return Err(MetadataError::Unavailable {
                                op,
                                path: path.to_owned(),
                                reason: "injected watch failure".to_owned(),
                            });
                        }
                    }
                }
                call.run(self.inner.as_ref()).await
            }
            // Not recorded: it changes no value or version.
            Call::Close | Call::ImportSequentialCounter { .. } => {
                call.run(self.inner.as_ref()).await
            }
            Call::Put { .. }
            | Call::PutVersion { .. }
            | Call::Create { .. }
            | Call::Delete { .. }
            | Call::ImportVersion { .. } => self.recorded(call).await,
        }
    }
}
