//! [`RoutedClient`]: the thin [`BookKeeper`] wrapper the router hands out, and
//! the handle wrapper that counts open handles per cluster (invariant
//! [I5](bkswitch_docs::invariants::I5)).

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, DigestType, EntryId, LedgerConfig, LedgerEntry, LedgerId,
    LedgerMetadata, ReadHandle, Result, WriteHandle,
};
use bytes::Bytes;
use parking_lot::{Mutex, RwLock};

/// Shared per-cluster state: whether the cluster is active and which handles
/// are open on it.
#[derive(Debug)]
pub(crate) struct ClusterState {
    pub(crate) name: Box<str>,
    active: AtomicBool,
    /// Whether the cluster's [`RoutedClient`] has a started client.
    pub(crate) connected: AtomicBool,
    pub(crate) connecting: AtomicBool,
    next_handle: AtomicU64,
    handles: Mutex<HashMap<u64, LedgerId>>,
    /// Operations on this cluster, while not active, that failed fast:
    /// timed out after `old_ledger_read_timeout` or found it unreachable.
    pub(crate) fail_fast: AtomicU64,
}

impl ClusterState {
    pub(crate) fn new(name: &str) -> ClusterState {
        ClusterState {
            name: name.into(),
            active: AtomicBool::new(false),
            connected: AtomicBool::new(false),
            connecting: AtomicBool::new(false),
            next_handle: AtomicU64::new(0),
            handles: Mutex::new(HashMap::new()),
            fail_fast: AtomicU64::new(0),
        }
    }

    #[inline]
    pub(crate) fn is_active(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    #[inline]
    pub(crate) fn is_connected(&self) -> bool {
        self.connected.load(Ordering::Acquire)
    }

    pub(crate) fn set_active(&self, active: bool) {
        self.active.store(active, Ordering::Release);
    }

    /// The ledger ids of the open handles, sorted (one entry per handle).
    pub(crate) fn open_handles(&self) -> Vec<LedgerId> {
        let mut ids: Vec<LedgerId> = self.handles.lock().values().copied().collect();
        ids.sort_unstable();
        ids
    }

    fn register(&self, ledger_id: LedgerId) -> u64 {
        let id = self.next_handle.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(id, ledger_id);
        id
    }

    fn release(&self, handle: u64) {
        self.handles.lock().remove(&handle);
    }
}

/// The client the router hands out for one cluster.
///
/// There is one `RoutedClient` per registered cluster for the life of the
/// storage; the underlying client is installed when the cluster is connected
/// and taken out when it is closed (a later connect installs a new one). An
/// operation while no client is installed fails with a
/// [`ClientClosed`](BkErrorKind::ClientClosed) error naming the cluster.
///
/// - [`cluster_name`](BookKeeper::cluster_name) is the **registered** name of
///   the cluster, so the S4 stamp always names a cluster the resolver knows.
/// - While the cluster is not the active one, every open, delete and read of a
///   handle opened through it is bounded by the storage's
///   `old_ledger_read_timeout`; a timeout, or an unreachable cluster, yields a
///   retryable [`BkError`] naming the cluster and the ledger
///   ([design §5.4](bkswitch_docs::design)).
///   Operations of the active cluster are passed through untouched.
/// - Every handle it returns is counted on its cluster until closed or dropped,
///   so that the client is never closed under an open read (invariant
///   [I5](bkswitch_docs::invariants::I5)).
pub struct RoutedClient {
    state: Arc<ClusterState>,
    inner: RwLock<Option<Installed>>,
}

/// The started client of a cluster and the timeout its non-active operations
/// get.
#[derive(Clone)]
struct Installed {
    client: Arc<dyn BookKeeper>,
    timeout: Duration,
}

impl fmt::Debug for RoutedClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RoutedClient")
            .field("cluster", &self.state.name)
            .field("active", &self.state.is_active())
            .field("connected", &self.state.is_connected())
            .finish()
    }
}

impl RoutedClient {
    pub(crate) fn new(state: Arc<ClusterState>) -> RoutedClient {
        RoutedClient {
            state,
            inner: RwLock::new(None),
        }
    }

    /// The wrapped client, while one is started.
    pub fn inner(&self) -> Option<Arc<dyn BookKeeper>> {
        self.inner.read().as_ref().map(|i| i.client.clone())
    }

    /// Installs a started client (the cluster becomes connected).
    pub(crate) fn install(&self, client: Arc<dyn BookKeeper>, timeout: Duration) {
        *self.inner.write() = Some(Installed { client, timeout });
        self.state.connected.store(true, Ordering::Release);
    }

    /// Takes the started client out (the cluster becomes disconnected).
    pub(crate) fn uninstall(&self) -> Option<Arc<dyn BookKeeper>> {
        self.state.connected.store(false, Ordering::Release);
        self.inner.write().take().map(|i| i.client)
    }

    fn current(&self) -> Result<Installed> {
        match &*self.inner.read() {
            Some(i) => Ok(i.clone()),
            None => Err(BkError::new(
                BkErrorKind::ClientClosed,
                format!(
                    "the client of bookie cluster '{}' is closed; resolve the ledger again \
                     (the router starts a new client) and retry",
                    self.state.name
                ),
            )
            .with_cluster(&*self.state.name)),
        }
    }

    fn track<H: ?Sized>(
        &self,
        ledger_id: LedgerId,
        handle: Arc<H>,
        timeout: Duration,
    ) -> TrackedHandle<H> {
        TrackedHandle::new(self.state.clone(), ledger_id, handle, timeout)
    }
}

/// Runs `fut`, bounded by `timeout` unless the cluster is active; maps a
/// timeout or an unreachable cluster to a structured, retryable error.
async fn guarded<T>(
    state: &ClusterState,
    timeout: Duration,
    op: &'static str,
    ledger_id: LedgerId,
    fut: impl Future<Output = Result<T>>,
) -> Result<T> {
    if state.is_active() {
        return fut.await;
    }
    match tokio::time::timeout(timeout, fut).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) if e.is_retryable() => {
            state.fail_fast.fetch_add(1, Ordering::Relaxed);
            Err(locate(e, state, ledger_id))
        }
        Ok(Err(e)) => Err(e),
        Err(_elapsed) => Err({
            state.fail_fast.fetch_add(1, Ordering::Relaxed);
            BkError::new(
                BkErrorKind::Timeout,
                format!(
                    "{op} of ledger {ledger_id} on bookie cluster '{}' did not complete within \
                 {} ms (old_ledger_read_timeout); the cluster may be down",
                    state.name,
                    timeout.as_millis()
                ),
            )
            .with_cluster(&*state.name)
            .with_ledger(ledger_id)
        }),
    }
}

#[cold]
fn locate(mut e: BkError, state: &ClusterState, ledger_id: LedgerId) -> BkError {
    if e.cluster().is_none() {
        e = e.with_cluster(&*state.name);
    }
    if e.ledger_id().is_none() {
        e = e.with_ledger(ledger_id);
    }
    e
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BookKeeper for RoutedClient {
    async fn advance_ledger_ids_beyond(&self, above: LedgerId) -> Result<()> {
        let i = self.current()?;
        (*i.client).advance_ledger_ids_beyond(above).await
    }
    fn cluster_name(&self) -> &str {
        &self.state.name
    }

    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
        let i = self.current()?;
        let handle = (*i.client).create_ledger(config).await?;
        let id = handle.id();
        Ok(Arc::new(self.track(id, handle, i.timeout)))
    }

    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>> {
        let i = self.current()?;
        let fut = (*i.client).create_ledger_adv(ledger_id, config);
        let handle = guarded(&self.state, i.timeout, "create", ledger_id, fut).await?;
        Ok(Arc::new(self.track(ledger_id, handle, i.timeout)))
    }

    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let i = self.current()?;
        let fut = (*i.client).open_ledger(ledger_id, digest_type, password);
        let handle = guarded(&self.state, i.timeout, "open", ledger_id, fut).await?;
        Ok(Arc::new(self.track(ledger_id, handle, i.timeout)))
    }

    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let i = self.current()?;
        let fut = (*i.client).open_ledger_no_recovery(ledger_id, digest_type, password);
        let handle = guarded(&self.state, i.timeout, "open", ledger_id, fut).await?;
        Ok(Arc::new(self.track(ledger_id, handle, i.timeout)))
    }

    async fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        let i = self.current()?;
        let fut = (*i.client).delete_ledger(ledger_id);
        guarded(&self.state, i.timeout, "delete", ledger_id, fut).await
    }

    /// Closes the started client, if any; the router's own close paths
    /// ([`close_client`](crate::MultiClusterManagedLedgerStorage::close_client))
    /// also enforce [I5](bkswitch_docs::invariants::I5), this one does not.
    async fn close(&self) -> Result<()> {
        match self.uninstall() {
            Some(c) => (*c).close().await,
            None => Ok(()),
        }
    }

    fn writable_bookies(&self) -> Option<usize> {
        self.current().ok()?.client.writable_bookies()
    }
}

/// A handle opened through a [`RoutedClient`]: counted on its cluster until
/// closed or dropped; reads bounded by the timeout while the cluster is not
/// active. On the active cluster a read returns the inner handle's future
/// itself (no extra allocation).
///
/// Calls go to `(*self.inner)`, never `self.inner`: `Arc<H>` itself implements
/// the handle traits through a blanket `async_trait` impl, whose call would box
/// one more future per read.
pub(crate) struct TrackedHandle<H: ?Sized> {
    state: Arc<ClusterState>,
    slot: u64,
    released: AtomicBool,
    ledger_id: LedgerId,
    timeout: Duration,
    inner: Arc<H>,
}

impl<H: ?Sized> TrackedHandle<H> {
    fn new(
        state: Arc<ClusterState>,
        ledger_id: LedgerId,
        inner: Arc<H>,
        timeout: Duration,
    ) -> TrackedHandle<H> {
        let slot = state.register(ledger_id);
        TrackedHandle {
            state,
            slot,
            released: AtomicBool::new(false),
            ledger_id,
            timeout,
            inner,
        }
    }

    fn release(&self) {
        if !self.released.swap(true, Ordering::AcqRel) {
            self.state.release(self.slot);
        }
    }
}

impl<H: ?Sized> Drop for TrackedHandle<H> {
    fn drop(&mut self) {
        self.release();
    }
}

impl<H: ?Sized> fmt::Debug for TrackedHandle<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TrackedHandle")
            .field("cluster", &self.state.name)
            .field("ledger_id", &self.ledger_id)
            .finish()
    }
}

type Fut<'a, T> = Pin<Box<dyn Future<Output = Result<T>> + Send + 'a>>;

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<H: ReadHandle + ?Sized> ReadHandle for TrackedHandle<H> {
    fn id(&self) -> LedgerId {
        (*self.inner).id()
    }

    fn metadata(&self) -> LedgerMetadata {
        (*self.inner).metadata()
    }

    fn read_entries<'life0, 'async_trait>(
        &'life0 self,
        first: EntryId,
        last: EntryId,
    ) -> Fut<'async_trait, Vec<LedgerEntry>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        if self.state.is_active() {
            (*self.inner).read_entries(first, last)
        } else {
            Box::pin(guarded(
                &self.state,
                self.timeout,
                "read",
                self.ledger_id,
                (*self.inner).read_entries(first, last),
            ))
        }
    }

    fn read_unconfirmed<'life0, 'async_trait>(
        &'life0 self,
        first: EntryId,
        last: EntryId,
    ) -> Fut<'async_trait, Vec<LedgerEntry>>
    where
        'life0: 'async_trait,
        Self: 'async_trait,
    {
        if self.state.is_active() {
            (*self.inner).read_unconfirmed(first, last)
        } else {
            Box::pin(guarded(
                &self.state,
                self.timeout,
                "read",
                self.ledger_id,
                (*self.inner).read_unconfirmed(first, last),
            ))
        }
    }

    fn last_add_confirmed(&self) -> EntryId {
        (*self.inner).last_add_confirmed()
    }

    async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        let fut = (*self.inner).read_last_add_confirmed();
        guarded(&self.state, self.timeout, "read LAC", self.ledger_id, fut).await
    }

    fn length(&self) -> u64 {
        (*self.inner).length()
    }

    fn is_closed(&self) -> bool {
        (*self.inner).is_closed()
    }

    async fn close(&self) -> Result<()> {
        let result = (*self.inner).close().await;
        self.release();
        result
    }
}

#[deny(clippy::missing_trait_methods)]
impl WriteHandle for TrackedHandle<dyn WriteHandle> {
    fn add_entry(&self, data: Bytes) -> Fut<'static, EntryId> {
        (*self.inner).add_entry(data)
    }

    fn add_entry_at(&self, entry_id: EntryId, data: Bytes) -> Fut<'static, EntryId> {
        (*self.inner).add_entry_at(entry_id, data)
    }
}
