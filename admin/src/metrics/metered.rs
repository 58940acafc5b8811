//! A [`ClientFactory`] whose clients time every ledger operation per cluster:
//! opens and creates, and on the handles they return, reads and adds.

use std::sync::Arc;
use std::time::Instant;

use async_trait::async_trait;
use bkswitch_bk_client::{
    BookKeeper, ClientFactory, DigestType, EntryId, LedgerConfig, LedgerEntry, LedgerId,
    LedgerMetadata, ReadHandle, Result, WriteHandle,
};
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

use super::{LedgerOp, NodeMetrics};

/// One cluster's instruments, resolved once per client (no label lookup on
/// the hot path).
#[derive(Debug, Clone)]
struct Ops {
    open: (Histogram, Counter),
    create: (Histogram, Counter),
    read: (Histogram, Counter),
    add: (Histogram, Counter),
}

impl Ops {
    fn new(metrics: &NodeMetrics, cluster: &str) -> Ops {
        let pair = |op| {
            (
                metrics.op_duration(cluster, op),
                metrics.op_errors(cluster, op),
            )
        };
        Ops {
            open: pair(LedgerOp::Open),
            create: pair(LedgerOp::Create),
            read: pair(LedgerOp::Read),
            add: pair(LedgerOp::Add),
        }
    }
}

fn record<T>(instrument: &(Histogram, Counter), started: Instant, result: &Result<T>) {
    instrument.0.observe(started.elapsed().as_secs_f64());
    if result.is_err() {
        instrument.1.inc();
    }
}

/// Wraps a factory so that its clients are [metered](NodeMetrics).
#[derive(Debug)]
pub(crate) struct MeteredClientFactory {
    inner: Arc<dyn ClientFactory>,
    metrics: Arc<NodeMetrics>,
}

impl MeteredClientFactory {
    pub(crate) fn new(inner: Arc<dyn ClientFactory>, metrics: Arc<NodeMetrics>) -> Self {
        MeteredClientFactory { inner, metrics }
    }

    fn wrap(&self, cluster: &str, client: Arc<dyn BookKeeper>) -> Arc<dyn BookKeeper> {
        Arc::new(MeteredClient {
            ops: Ops::new(&self.metrics, cluster),
            inner: client,
        })
    }
}

#[async_trait]
impl ClientFactory for MeteredClientFactory {
    async fn create(&self, metadata_service_uri: &str) -> Result<Arc<dyn BookKeeper>> {
        let client = self.inner.create(metadata_service_uri).await?;
        let name = client.cluster_name().to_owned();
        Ok(self.wrap(&name, client))
    }

    async fn create_named(
        &self,
        cluster_name: &str,
        metadata_service_uri: &str,
    ) -> Result<Arc<dyn BookKeeper>> {
        let client = self
            .inner
            .create_named(cluster_name, metadata_service_uri)
            .await?;
        Ok(self.wrap(cluster_name, client))
    }
}

#[derive(Debug)]
struct MeteredClient {
    inner: Arc<dyn BookKeeper>,
    ops: Ops,
}

impl MeteredClient {
    /// Records an open that started at `t` and wraps its handle.
    fn opened(&self, t: Instant, r: Result<Arc<dyn ReadHandle>>) -> Result<Arc<dyn ReadHandle>> {
        record(&self.ops.open, t, &r);
        Ok(Arc::new(Metered::new(r?, &self.ops)))
    }
}

#[async_trait]
impl BookKeeper for MeteredClient {
    async fn advance_ledger_ids_beyond(&self, above: LedgerId) -> Result<()> {
        self.inner.advance_ledger_ids_beyond(above).await
    }
    fn cluster_name(&self) -> &str {
        self.inner.cluster_name()
    }

    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
        let t = Instant::now();
        let r = self.inner.create_ledger(config).await;
        record(&self.ops.create, t, &r);
        Ok(Arc::new(Metered::new(r?, &self.ops)))
    }

    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>> {
        let t = Instant::now();
        let r = self.inner.create_ledger_adv(ledger_id, config).await;
        record(&self.ops.create, t, &r);
        Ok(Arc::new(Metered::new(r?, &self.ops)))
    }

    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let t = Instant::now();
        let r = self
            .inner
            .open_ledger(ledger_id, digest_type, password)
            .await;
        self.opened(t, r)
    }

    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let t = Instant::now();
        let r = self
            .inner
            .open_ledger_no_recovery(ledger_id, digest_type, password)
            .await;
        self.opened(t, r)
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

/// A read or write handle timing its reads (and, as a write handle, its
/// adds, from the call to the acknowledgement).
#[derive(Debug)]
struct Metered<H: ?Sized> {
    inner: Arc<H>,
    read: (Histogram, Counter),
    add: (Histogram, Counter),
}

impl<H: ?Sized> Metered<H> {
    fn new(inner: Arc<H>, ops: &Ops) -> Metered<H> {
        Metered {
            inner,
            read: ops.read.clone(),
            add: ops.add.clone(),
        }
    }
}

#[async_trait]
impl<H: ReadHandle + ?Sized> ReadHandle for Metered<H> {
    fn id(&self) -> LedgerId {
        self.inner.id()
    }

    fn metadata(&self) -> LedgerMetadata {
        self.inner.metadata()
    }

    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        let t = Instant::now();
        let r = self.inner.read_entries(first, last).await;
        record(&self.read, t, &r);
        r
    }

    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        let t = Instant::now();
        let r = self.inner.read_unconfirmed(first, last).await;
        record(&self.read, t, &r);
        r
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

impl WriteHandle for Metered<dyn WriteHandle> {
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        let t = Instant::now();
        let add = self.add.clone();
        self.inner
            .add_entry(data)
            .map(move |r| {
                record(&add, t, &r);
                r
            })
            .boxed()
    }

    fn add_entry_at(&self, entry_id: EntryId, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        let t = Instant::now();
        let add = self.add.clone();
        self.inner
            .add_entry_at(entry_id, data)
            .map(move |r| {
                record(&add, t, &r);
                r
            })
            .boxed()
    }
}
