//! Each copy timed by phase, through thin wrappers around the two clients.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use bkswitch_bk_client::testkit::async_trait;
use bkswitch_bk_client::{
    BookKeeper, DigestType, EntryId, LedgerConfig, LedgerEntry, LedgerId, LedgerMetadata,
    ReadHandle, Result as BkResult, WriteHandle,
};
use bytes::Bytes;
use futures::future::BoxFuture;

/// Time spent in each phase of the copies of a round, summed over the copies
/// (nanoseconds), and how many calls.
#[derive(Default)]
pub(crate) struct PhaseClock {
    open_ns: AtomicU64,
    create_ns: AtomicU64,
    read_ns: AtomicU64,
    reads: AtomicU64,
    stream_ns: AtomicU64,
    close_ns: AtomicU64,
    closes: AtomicU64,
}

impl PhaseClock {
    pub(crate) fn add(counter: &AtomicU64, since: Instant) {
        counter.fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
    }

    pub(crate) fn take(&self) -> Phases {
        let ms = |c: &AtomicU64| c.swap(0, Ordering::Relaxed) as f64 / 1e6;
        let n = self.closes.swap(0, Ordering::Relaxed).max(1) as f64;
        let reads = self.reads.swap(0, Ordering::Relaxed);
        let read = ms(&self.read_ns);
        Phases {
            open: ms(&self.open_ns) / n,
            create: ms(&self.create_ns) / n,
            read: read / n,
            reads_per_ledger: reads as f64 / n,
            acks: (ms(&self.stream_ns) - read) / n,
            close: ms(&self.close_ns) / n,
        }
    }
}

/// Mean milliseconds per ledger copy in each phase.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Phases {
    pub(crate) open: f64,
    pub(crate) create: f64,
    pub(crate) read: f64,
    pub(crate) reads_per_ledger: f64,
    /// Waiting for the destination's acknowledgements with no source read in
    /// flight: the streaming time (created → close called) minus the time
    /// during which at least one read was in flight (adds overlap those).
    pub(crate) acks: f64,
    pub(crate) close: f64,
}

/// A client wrapper that times the calls the copy makes; adds pass straight
/// through (no extra future per entry).
#[derive(Debug)]
pub(crate) struct Timed {
    pub(crate) inner: Arc<dyn BookKeeper>,
    pub(crate) clock: Arc<PhaseClock>,
}

/// A source read handle whose reads are timed: the time during which at
/// least one of its reads is in flight (reads overlap).
#[derive(Debug)]
struct TimedSource {
    inner: Arc<dyn ReadHandle>,
    clock: Arc<PhaseClock>,
    /// Reads in flight, and since when at least one has been.
    busy: parking_lot::Mutex<(usize, Option<Instant>)>,
}

/// A destination write handle that times the streaming (from its creation
/// until close is called) and the close.
#[derive(Debug)]
struct TimedDest {
    inner: Arc<dyn WriteHandle>,
    clock: Arc<PhaseClock>,
    created: Instant,
}

impl std::fmt::Debug for PhaseClock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("PhaseClock")
    }
}

#[async_trait]
impl BookKeeper for Timed {
    async fn advance_ledger_ids_beyond(&self, above: LedgerId) -> BkResult<()> {
        self.inner.advance_ledger_ids_beyond(above).await
    }
    fn writable_bookies(&self) -> Option<usize> {
        self.inner.writable_bookies()
    }

    fn cluster_name(&self) -> &str {
        self.inner.cluster_name()
    }
    async fn create_ledger(&self, config: &LedgerConfig) -> BkResult<Arc<dyn WriteHandle>> {
        self.inner.create_ledger(config).await
    }
    async fn create_ledger_adv(
        &self,
        id: LedgerId,
        config: &LedgerConfig,
    ) -> BkResult<Arc<dyn WriteHandle>> {
        let t = Instant::now();
        let inner = self.inner.create_ledger_adv(id, config).await?;
        PhaseClock::add(&self.clock.create_ns, t);
        Ok(Arc::new(TimedDest {
            inner,
            clock: self.clock.clone(),
            created: Instant::now(),
        }))
    }
    async fn open_ledger(
        &self,
        id: LedgerId,
        digest: DigestType,
        password: &[u8],
    ) -> BkResult<Arc<dyn ReadHandle>> {
        self.inner.open_ledger(id, digest, password).await
    }
    async fn open_ledger_no_recovery(
        &self,
        id: LedgerId,
        digest: DigestType,
        password: &[u8],
    ) -> BkResult<Arc<dyn ReadHandle>> {
        let t = Instant::now();
        let inner = self
            .inner
            .open_ledger_no_recovery(id, digest, password)
            .await?;
        PhaseClock::add(&self.clock.open_ns, t);
        Ok(Arc::new(TimedSource {
            inner,
            clock: self.clock.clone(),
            busy: parking_lot::Mutex::new((0, None)),
        }))
    }
    async fn delete_ledger(&self, id: LedgerId) -> BkResult<()> {
        self.inner.delete_ledger(id).await
    }
    async fn close(&self) -> BkResult<()> {
        self.inner.close().await
    }
}

#[async_trait]
impl ReadHandle for TimedSource {
    fn id(&self) -> LedgerId {
        self.inner.id()
    }
    fn metadata(&self) -> LedgerMetadata {
        self.inner.metadata()
    }
    async fn read_entries(&self, first: EntryId, last: EntryId) -> BkResult<Vec<LedgerEntry>> {
        {
            let mut busy = self.busy.lock();
            if busy.0 == 0 {
                busy.1 = Some(Instant::now());
            }
            busy.0 += 1;
        }
        let r = self.inner.read_entries(first, last).await;
        {
            let mut busy = self.busy.lock();
            busy.0 -= 1;
            if busy.0 == 0 {
                if let Some(since) = busy.1.take() {
                    PhaseClock::add(&self.clock.read_ns, since);
                }
            }
        }
        self.clock.reads.fetch_add(1, Ordering::Relaxed);
        r
    }
    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> BkResult<Vec<LedgerEntry>> {
        self.inner.read_unconfirmed(first, last).await
    }
    fn last_add_confirmed(&self) -> EntryId {
        self.inner.last_add_confirmed()
    }
    async fn read_last_add_confirmed(&self) -> BkResult<EntryId> {
        self.inner.read_last_add_confirmed().await
    }
    fn length(&self) -> u64 {
        self.inner.length()
    }
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
    async fn close(&self) -> BkResult<()> {
        self.inner.close().await
    }
}

#[async_trait]
impl ReadHandle for TimedDest {
    fn id(&self) -> LedgerId {
        self.inner.id()
    }
    fn metadata(&self) -> LedgerMetadata {
        self.inner.metadata()
    }
    async fn read_entries(&self, first: EntryId, last: EntryId) -> BkResult<Vec<LedgerEntry>> {
        self.inner.read_entries(first, last).await
    }
    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> BkResult<Vec<LedgerEntry>> {
        self.inner.read_unconfirmed(first, last).await
    }
    fn last_add_confirmed(&self) -> EntryId {
        self.inner.last_add_confirmed()
    }
    async fn read_last_add_confirmed(&self) -> BkResult<EntryId> {
        self.inner.read_last_add_confirmed().await
    }
    fn length(&self) -> u64 {
        self.inner.length()
    }
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
    async fn close(&self) -> BkResult<()> {
        PhaseClock::add(&self.clock.stream_ns, self.created);
        let t = Instant::now();
        let r = self.inner.close().await;
        PhaseClock::add(&self.clock.close_ns, t);
        self.clock.closes.fetch_add(1, Ordering::Relaxed);
        r
    }
}

impl WriteHandle for TimedDest {
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, BkResult<EntryId>> {
        self.inner.add_entry(data)
    }
    fn add_entry_at(
        &self,
        entry_id: EntryId,
        data: Bytes,
    ) -> BoxFuture<'static, BkResult<EntryId>> {
        self.inner.add_entry_at(entry_id, data)
    }
}
