//! Shared helpers: source ledgers, dump of a copied ledger, and a probing client
//! wrapper that counts entries in flight and injects failures.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, DigestType, EntryId, LedgerConfig, LedgerEntry, LedgerId,
    LedgerMetadata, MemoryBookKeeper, ReadHandle, ReadHandleExt, Result, WriteHandle,
    WriteHandleExt,
};
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use parking_lot::Mutex;

/// Payload `i` of a test ledger: `len` bytes derived from `i`.
pub fn payload(i: usize, len: usize) -> Bytes {
    Bytes::from(
        (0..len)
            .map(|j| (i * 31 + j * 7) as u8)
            .collect::<Vec<u8>>(),
    )
}

/// A configuration with non-default quorums, digest, password and custom metadata.
pub fn rich_config() -> LedgerConfig {
    LedgerConfig::default()
        .with_quorums(3, 2, 1)
        .with_digest_type(DigestType::Crc32)
        .with_password(b"pw".to_vec())
        .with_custom_metadata("application", b"pulsar".to_vec())
        .with_custom_metadata("component", b"managed-ledger".to_vec())
}

/// Create a ledger on `bk` with `payloads`; close it when `close`. Returns the writer.
pub async fn write_ledger(
    bk: &MemoryBookKeeper,
    config: &LedgerConfig,
    payloads: &[Bytes],
    close: bool,
) -> Arc<dyn WriteHandle> {
    let w = bk.create_ledger(config).await.unwrap();
    w.add_all(payloads.iter().cloned()).await.unwrap();
    if close {
        w.close().await.unwrap();
    }
    w
}

/// Metadata and entries of a ledger as stored on `bk`'s cluster (read without
/// recovery, so nothing is fenced).
pub async fn dump(bk: &MemoryBookKeeper, id: LedgerId) -> (LedgerMetadata, Vec<LedgerEntry>) {
    let meta = bk.cluster().ledger_metadata(id).expect("ledger exists");
    let h = bk
        .open_ledger_no_recovery(id, meta.digest_type, &meta.password)
        .await
        .unwrap();
    (meta, h.read_all().await.unwrap())
}

/// Counters shared by the probed source and destination of one copy.
#[derive(Debug, Default)]
pub struct Probe {
    /// Entries read from the source and not yet acknowledged by the destination.
    in_flight: AtomicI64,
    max_in_flight: AtomicI64,
    /// Adds issued and not yet acknowledged.
    adds: AtomicI64,
    max_adds: AtomicI64,
    /// Fail the add of this entry id with a retryable error.
    pub fail_add_at: Mutex<Option<EntryId>>,
    /// Fail a read whose range holds this entry id with a retryable error.
    pub fail_read_at: Mutex<Option<EntryId>>,
}

impl Probe {
    pub fn max_in_flight(&self) -> i64 {
        self.max_in_flight.load(Ordering::SeqCst)
    }

    pub fn max_adds(&self) -> i64 {
        self.max_adds.load(Ordering::SeqCst)
    }

    fn up(counter: &AtomicI64, max: &AtomicI64, n: i64) {
        let now = counter.fetch_add(n, Ordering::SeqCst) + n;
        max.fetch_max(now, Ordering::SeqCst);
    }
}

fn injected(what: &str, id: EntryId) -> BkError {
    BkError::new(
        BkErrorKind::Unavailable,
        format!("{what} of entry {id} failed: injected fault"),
    )
    .with_cluster("probe")
}

/// A client wrapper counting entries in flight through a [`Probe`].
#[derive(Debug, Clone)]
pub struct Probed {
    pub inner: Arc<dyn BookKeeper>,
    pub probe: Arc<Probe>,
}

impl Probed {
    pub fn new(inner: Arc<dyn BookKeeper>, probe: Arc<Probe>) -> Probed {
        Probed { inner, probe }
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BookKeeper for Probed {
    async fn advance_ledger_ids_beyond(&self, above: bkswitch_bk_client::LedgerId) -> Result<()> {
        self.inner.advance_ledger_ids_beyond(above).await
    }
    fn cluster_name(&self) -> &str {
        self.inner.cluster_name()
    }

    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
        let inner = self.inner.create_ledger(config).await?;
        Ok(Arc::new(ProbedHandle {
            inner,
            probe: self.probe.clone(),
        }))
    }

    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>> {
        let inner = self.inner.create_ledger_adv(ledger_id, config).await?;
        Ok(Arc::new(ProbedHandle {
            inner,
            probe: self.probe.clone(),
        }))
    }

    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let inner = self
            .inner
            .open_ledger(ledger_id, digest_type, password)
            .await?;
        Ok(Arc::new(ProbedRead {
            inner,
            probe: self.probe.clone(),
        }))
    }

    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let inner = self
            .inner
            .open_ledger_no_recovery(ledger_id, digest_type, password)
            .await?;
        Ok(Arc::new(ProbedRead {
            inner,
            probe: self.probe.clone(),
        }))
    }

    async fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        self.inner.delete_ledger(ledger_id).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    fn writable_bookies(&self) -> Option<usize> {
        self.inner.writable_bookies()
    }
}

#[derive(Debug)]
struct ProbedRead {
    inner: Arc<dyn ReadHandle>,
    probe: Arc<Probe>,
}

async fn probed_read(
    inner: &dyn ReadHandle,
    probe: &Probe,
    first: EntryId,
    last: EntryId,
) -> Result<Vec<LedgerEntry>> {
    if let Some(at) = *probe.fail_read_at.lock() {
        if (first..=last).contains(&at) {
            return Err(injected("read", at));
        }
    }
    let entries = inner.read_entries(first, last).await?;
    Probe::up(&probe.in_flight, &probe.max_in_flight, entries.len() as i64);
    Ok(entries)
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ReadHandle for ProbedRead {
    fn id(&self) -> LedgerId {
        self.inner.id()
    }
    fn metadata(&self) -> LedgerMetadata {
        self.inner.metadata()
    }
    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        probed_read(self.inner.as_ref(), &self.probe, first, last).await
    }
    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        self.inner.read_unconfirmed(first, last).await
    }
    fn last_add_confirmed(&self) -> EntryId {
        self.inner.last_add_confirmed()
    }
    async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        self.inner.read_last_add_confirmed().await
    }
    fn length(&self) -> u64 {
        self.inner.length()
    }
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

#[derive(Debug)]
struct ProbedHandle {
    inner: Arc<dyn WriteHandle>,
    probe: Arc<Probe>,
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ReadHandle for ProbedHandle {
    fn id(&self) -> LedgerId {
        self.inner.id()
    }
    fn metadata(&self) -> LedgerMetadata {
        self.inner.metadata()
    }
    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        self.inner.read_entries(first, last).await
    }
    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        self.inner.read_unconfirmed(first, last).await
    }
    fn last_add_confirmed(&self) -> EntryId {
        self.inner.last_add_confirmed()
    }
    async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        self.inner.read_last_add_confirmed().await
    }
    fn length(&self) -> u64 {
        self.inner.length()
    }
    fn is_closed(&self) -> bool {
        self.inner.is_closed()
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}

#[deny(clippy::missing_trait_methods)]
impl WriteHandle for ProbedHandle {
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        self.inner.add_entry(data)
    }

    fn add_entry_at(&self, entry_id: EntryId, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        if *self.probe.fail_add_at.lock() == Some(entry_id) {
            return futures::future::ready(Err(injected("add", entry_id))).boxed();
        }
        let probe = self.probe.clone();
        Probe::up(&probe.adds, &probe.max_adds, 1);
        let add = self.inner.add_entry_at(entry_id, data);
        async move {
            let r = add.await;
            probe.adds.fetch_sub(1, Ordering::SeqCst);
            probe.in_flight.fetch_sub(1, Ordering::SeqCst);
            r
        }
        .boxed()
    }
}
