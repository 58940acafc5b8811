//! The metadata store a nemesis node sees: its own session on the shared
//! in-memory tree, read through a follower ([`StaleReads`]), behind a
//! [`Gate`] (connection loss, a crashed node's dead session) and a
//! [`RecordingStore`] (ambiguous writes:
//! [`InjectedFailure::AppliedThenUnavailable`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_managed_ledger::testkit::{InjectedFailure, RecordingStore};
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{MemoryStore, MetadataError, MetadataStore, Operation, Result};
use parking_lot::Mutex;

use crate::stale::{Follower, StaleReads};

/// A [`MetadataStore`] wrapper that can lose its connection: while it is
/// [down](Gate::set_down) every call fails at once with the retryable
/// [`MetadataError::Unavailable`], nothing is applied. A crashed node's gate
/// stays down for good, so the zombie of a crashed node writes nothing.
///
/// It also sets the trap ZooKeeper clients really fall into: a write is
/// applied, then the connection drops before the answer arrives, so the
/// caller gets `Unavailable` *and* cannot read back what happened until the
/// connection is back ([`Gate::ambiguous_then_down`]). A plain ambiguous
/// write ([`RecordingStore`]'s `AppliedThenUnavailable`) can be resolved by
/// reading back at once; this one cannot.
#[derive(Debug)]
pub struct Gate {
    inner: Arc<dyn MetadataStore>,
    down: AtomicBool,
    down_until: Mutex<Option<tokio::time::Instant>>,
    trap: Mutex<Option<(String, usize, Duration)>>,
    buggify: Mutex<Option<Buggify>>,
    /// While `true`, every call waits (a process frozen with its calls in
    /// flight): they go on when it thaws.
    frozen: tokio::sync::watch::Sender<bool>,
    /// The next writes whose path contains the pattern are answered
    /// `Unavailable` at once and applied only after the delay (a write that
    /// lands after its caller gave up).
    late: Mutex<Option<(String, usize, Duration)>>,
}

/// Store errors at any metadata call, drawn from a seed (FoundationDB's
/// BUGGIFY): each call fails with the given chance, a read clean, a write
/// either clean (not applied) or applied-then-failed.
#[derive(Debug)]
struct Buggify {
    rng: fastrand::Rng,
    per_mille: u32,
    injected: u64,
}

/// What buggify does to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Injected {
    None,
    Clean,
    AfterApplying,
}

impl Gate {
    /// Wraps `inner`, connected.
    pub fn new(inner: Arc<dyn MetadataStore>) -> Gate {
        Gate {
            inner,
            down: AtomicBool::new(false),
            down_until: Mutex::new(None),
            trap: Mutex::new(None),
            buggify: Mutex::new(None),
            frozen: tokio::sync::watch::channel(false).0,
            late: Mutex::new(None),
        }
    }

    /// Freezes (`true`) or thaws (`false`) the process's metadata calls:
    /// while frozen every call waits where it is, as in a process stopped
    /// with SIGSTOP; on thaw they all go on.
    pub fn set_frozen(&self, frozen: bool) {
        self.frozen.send_replace(frozen);
    }

    /// Waits while frozen.
    async fn thawed(&self) {
        let mut rx = self.frozen.subscribe();
        let _ = rx.wait_for(|frozen| !*frozen).await;
    }

    /// The next `count` writes whose path contains `pattern` are answered
    /// `Unavailable` at once and applied `delay` later (virtual time).
    pub fn late_writes(&self, pattern: &str, count: usize, delay: Duration) {
        *self.late.lock() = Some((pattern.to_owned(), count, delay));
    }

    /// Whether the write to `path` lands late, and after how long.
    fn late_for(&self, path: &str) -> Option<Duration> {
        let mut late = self.late.lock();
        let (pattern, count, delay) = late.as_mut()?;
        if *count == 0 || !path.contains(pattern.as_str()) {
            return None;
        }
        *count -= 1;
        Some(*delay)
    }

    fn too_late(op: Operation, path: &str) -> MetadataError {
        MetadataError::Unavailable {
            op,
            path: path.to_owned(),
            reason: "no answer in time; the write may still land (nemesis)".to_owned(),
        }
    }

    /// Makes every later call fail with a chance of `per_mille` / 1000,
    /// drawn from `seed` (0: off): reads clean, writes clean or after
    /// applying, half and half.
    pub fn buggify(&self, seed: u64, per_mille: u32) {
        *self.buggify.lock() = (per_mille > 0).then(|| Buggify {
            rng: fastrand::Rng::with_seed(seed),
            per_mille,
            injected: 0,
        });
    }

    /// How many calls buggify failed so far.
    pub fn buggified(&self) -> u64 {
        self.buggify.lock().as_ref().map_or(0, |b| b.injected)
    }

    /// Draws buggify's fate of one call.
    fn draw(&self, write: bool) -> Injected {
        let mut b = self.buggify.lock();
        let Some(b) = b.as_mut() else {
            return Injected::None;
        };
        if b.rng.u32(..1000) >= b.per_mille {
            return Injected::None;
        }
        b.injected += 1;
        if write && b.rng.bool() {
            Injected::AfterApplying
        } else {
            Injected::Clean
        }
    }

    fn buggified_error(op: Operation, path: &str, applied: bool) -> MetadataError {
        MetadataError::Unavailable {
            op,
            path: path.to_owned(),
            reason: if applied {
                "injected store error after the write was applied (buggify)".to_owned()
            } else {
                "injected store error (buggify)".to_owned()
            },
        }
    }

    /// A read's check: the connection, then buggify.
    fn check_read(&self, op: Operation, path: &str) -> Result<()> {
        self.check(op, path)?;
        if self.draw(false) != Injected::None {
            return Err(Self::buggified_error(op, path, false));
        }
        Ok(())
    }

    /// A write's check: the connection, then buggify; `Ok(true)` when the
    /// write must fail after it is applied.
    fn check_write(&self, op: Operation, path: &str) -> Result<bool> {
        self.check(op, path)?;
        match self.draw(true) {
            Injected::None => Ok(false),
            Injected::Clean => Err(Self::buggified_error(op, path, false)),
            Injected::AfterApplying => Ok(true),
        }
    }

    /// The next `count` writes whose path contains `pattern` are applied,
    /// then the connection drops for `outage` (virtual time): the caller gets
    /// `Unavailable` and every call fails until the outage ends.
    pub fn ambiguous_then_down(&self, pattern: &str, count: usize, outage: Duration) {
        *self.trap.lock() = Some((pattern.to_owned(), count, outage));
    }

    /// Removes the trap, late writes, a freeze and any outage (the manual
    /// [`set_down`](Self::set_down) stays as it is).
    pub fn clear(&self) {
        self.set_frozen(false);
        *self.late.lock() = None;
        *self.trap.lock() = None;
        *self.down_until.lock() = None;
    }

    /// Whether the write to `path` falls into the trap (and arms the outage).
    fn trapped(&self, path: &str) -> bool {
        let mut trap = self.trap.lock();
        let Some((pattern, count, outage)) = trap.as_mut() else {
            return false;
        };
        if *count == 0 || !path.contains(pattern.as_str()) {
            return false;
        }
        *count -= 1;
        *self.down_until.lock() = Some(tokio::time::Instant::now() + *outage);
        true
    }

    fn lost(op: Operation, path: &str) -> MetadataError {
        MetadataError::Unavailable {
            op,
            path: path.to_owned(),
            reason: "connection lost after the write was sent (nemesis)".to_owned(),
        }
    }

    /// Loses (`true`) or regains (`false`) the connection.
    pub fn set_down(&self, down: bool) {
        self.down.store(down, Ordering::SeqCst);
    }

    /// Whether the connection is lost.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::SeqCst)
    }

    fn check(&self, op: Operation, path: &str) -> Result<()> {
        let outage = self
            .down_until
            .lock()
            .is_some_and(|until| tokio::time::Instant::now() < until);
        if self.is_down() || outage {
            return Err(MetadataError::Unavailable {
                op,
                path: path.to_owned(),
                reason: "connection to the metadata store lost (nemesis)".to_owned(),
            });
        }
        Ok(())
    }
}

#[async_trait]
impl Layer for Gate {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.inner.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        if call == Call::Close {
            return call.run(self.inner.as_ref()).await;
        }
        self.thawed().await;
        let (op, path) = (call.operation(), call.path());
        if !call.is_write() {
            self.check_read(op, path)?;
            return call.run(self.inner.as_ref()).await;
        }
        let fail_after = self.check_write(op, path)?;
        let may_land_late = matches!(
            call,
            Call::Put { .. } | Call::PutVersion { .. } | Call::Delete { .. }
        );
        // Only these land late (a create is answered or not applied); a
        // create must not use up the armed count.
        if let Some(delay) = may_land_late.then(|| self.late_for(path)).flatten() {
            let (inner, late) = (self.inner.clone(), call.to_owned_call());
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                let _ = late.as_call().run(inner.as_ref()).await;
            });
            return Err(Self::too_late(op, path));
        }
        let r = call.run(self.inner.as_ref()).await;
        if fail_after {
            return r.and(Err(Self::buggified_error(op, path, true)));
        }
        if self.trapped(path) {
            return r.and(Err(Self::lost(op, path)));
        }
        r
    }
}

/// Every kind of metadata write a node makes, by the path it writes: an
/// ambiguous-write fault picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WriteKind {
    /// A managed ledger's info (ledger list: rollover, trim, create).
    LedgerInfo,
    /// A cursor's info (cursor ledger, mark-delete, promote).
    Cursor,
    /// A schema locator.
    Schema,
    /// The cluster registry (records, directive, overrides, bootstrap).
    Registry,
    /// Switch records and their ledger records (`created/`, leases).
    Switch,
    /// Topic ownership.
    Ownership,
    /// Any write at all.
    Any,
}

impl WriteKind {
    /// Every kind, in a fixed order (the generator picks by index).
    pub const ALL: [WriteKind; 7] = [
        WriteKind::LedgerInfo,
        WriteKind::Cursor,
        WriteKind::Schema,
        WriteKind::Registry,
        WriteKind::Switch,
        WriteKind::Ownership,
        WriteKind::Any,
    ];

    /// The path fragment a write of this kind contains, as
    /// [`RecordingStore::fail_writes_matching`] matches it.
    pub fn pattern(self) -> &'static str {
        match self {
            // Managed-ledger nodes are `/managed-ledgers/<name>`, cursors
            // `/managed-ledgers/<name>/<cursor>` (the nemesis's cursors are
            // all named `sub`): the first kind matches both.
            WriteKind::LedgerInfo => "/managed-ledgers/",
            WriteKind::Cursor => "/sub",
            WriteKind::Schema => "/schemas/",
            // Switch records live under the registry's root too.
            WriteKind::Registry => "/admin/bookie-clusters",
            WriteKind::Switch => "/orchestrator/",
            WriteKind::Ownership => "/topic-owners/",
            WriteKind::Any => "/",
        }
    }
}

/// One node's view of the metadata store: its own session, its reads
/// through a follower, the gate and the recorder, innermost first.
#[derive(Debug, Clone)]
pub struct NodeStore {
    /// The node's session on the shared tree (expire it for a session fault).
    pub session: MemoryStore,
    /// Connection loss.
    pub gate: Arc<Gate>,
    /// Ambiguous and failed writes.
    pub recorder: Arc<RecordingStore>,
    /// Reads through a follower ([`StaleReads::sync`] before a checker's
    /// read through the node).
    pub reads: Arc<StaleReads>,
}

impl NodeStore {
    /// A new session on `root`'s tree, connected, without faults; its reads
    /// go through `follower` (stale while it is on, see [`crate::stale`]).
    pub fn new(root: &MemoryStore, follower: &Arc<Follower>) -> NodeStore {
        let session = root.new_session();
        let reads = Arc::new(StaleReads::new(Arc::new(session.clone()), follower.clone()));
        let gate = Arc::new(Gate::new(reads.clone()));
        let recorder = Arc::new(RecordingStore::new(gate.clone()));
        NodeStore {
            session,
            gate,
            recorder,
            reads,
        }
    }

    /// What the node is given.
    pub fn store(&self) -> Arc<dyn MetadataStore> {
        self.recorder.clone()
    }

    /// Makes the next `count` writes of `kind` ambiguous: applied, then
    /// answered `Unavailable`.
    pub fn ambiguous_writes(&self, kind: WriteKind, count: usize) {
        self.recorder.fail_writes_matching(
            kind.pattern(),
            count,
            InjectedFailure::AppliedThenUnavailable,
        );
    }

    /// Makes the next `count` writes of `kind` ambiguous with a connection
    /// loss of `outage` right after (see [`Gate::ambiguous_then_down`]).
    pub fn ambiguous_then_down(&self, kind: WriteKind, count: usize, outage: Duration) {
        self.gate.ambiguous_then_down(kind.pattern(), count, outage);
    }

    /// Makes the next `count` writes of `kind` fail (not applied).
    pub fn failed_writes(&self, kind: WriteKind, count: usize) {
        self.recorder
            .fail_writes_matching(kind.pattern(), count, InjectedFailure::Unavailable);
    }

    /// Removes every fault: connected, no injected write failure.
    pub fn heal(&self) {
        self.gate.buggify(0, 0);
        self.gate.set_down(false);
        self.gate.clear();
        self.recorder.clear_faults();
        self.recorder.clear();
    }
}
