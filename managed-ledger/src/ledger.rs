//! The managed ledger and its factory.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, BookKeeperExt, EntryId, LedgerId, ReadHandle, WriteHandle,
};
use bkswitch_metadata_store::{ErrorKind as MdErrorKind, ExpectedVersion, MetadataStore};
use bkswitch_mledger_spi::{LedgerPurpose, ManagedLedgerConfig, ManagedLedgerStorageClass};
use bkswitch_proto::codec::{decode_managed_ledger_info, encode_managed_ledger_info};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedLedgerInfo;
use bytes::Bytes;
use futures::future::{BoxFuture, FutureExt, Shared};

use crate::clock::{Clock, SystemClock};
use crate::ctx::{merge_key_values, Ctx, ROOT};
use crate::cursor::{CursorInner, InitialPosition, ManagedCursor};
use crate::error::{ManagedLedgerError, Result};
use crate::name::{validate_cursor_name, validate_managed_ledger_name};
use crate::position::{Entry, Position};

/// Opens managed ledgers on one metadata store and one BookKeeper client (the
/// storage's client, used for everything no hook decides).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use bkswitch_bk_client::MemoryCluster;
/// use bkswitch_managed_ledger::ManagedLedgerFactory;
/// use bkswitch_metadata_store::MemoryStore;
/// use bkswitch_mledger_spi::ManagedLedgerConfig;
///
/// let factory = ManagedLedgerFactory::new(
///     Arc::new(MemoryStore::new()),
///     Arc::new(MemoryCluster::new("bk").client()),
/// );
/// let ml = factory.open("t/ns/persistent/a", ManagedLedgerConfig::default()).await?;
/// let p = ml.append("hello").await?;
/// assert_eq!(ml.last_confirmed(), p);
/// # Ok::<(), bkswitch_managed_ledger::ManagedLedgerError>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct ManagedLedgerFactory {
    store: Arc<dyn MetadataStore>,
    client: Arc<dyn BookKeeper>,
    clock: Arc<dyn Clock>,
}

impl ManagedLedgerFactory {
    /// A factory writing metadata to `store` and using `client` when no hook says
    /// otherwise.
    pub fn new(store: Arc<dyn MetadataStore>, client: Arc<dyn BookKeeper>) -> Self {
        ManagedLedgerFactory {
            store,
            client,
            clock: Arc::new(SystemClock),
        }
    }

    /// A factory on the client of a PIP-384 storage class.
    pub fn from_storage_class(
        store: Arc<dyn MetadataStore>,
        class: &dyn ManagedLedgerStorageClass,
    ) -> Self {
        ManagedLedgerFactory::new(store, class.client())
    }

    /// Use `clock` for ledger timestamps, rollover ages and retention.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The metadata path of a managed ledger: `/managed-ledgers/<name>`.
    pub fn metadata_path(name: &str) -> String {
        format!("{ROOT}/{name}")
    }

    /// Opens (creating if missing) the managed ledger `name`
    /// (`tenant/ns/persistent/topic`).
    ///
    /// Loads its `ManagedLedgerInfo`; recovery-opens its last ledger through the
    /// S2 resolver, which fences a previous owner (I15); records the last ledger's
    /// entries and size (keeping its properties and stamp), or drops it when empty;
    /// creates a new ledger through S1 and records it with its S4 properties in
    /// the same compare-and-set (I1); then recovers every cursor.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`] for a bad name and
    /// [`ManagedLedgerError::InvalidArgument`] for a bad config (nothing written);
    /// [`ManagedLedgerError::CorruptMetadata`] when the stored value does not
    /// decode; [`ManagedLedgerError::Fenced`] when another owner changed the
    /// metadata meanwhile; client, store and hook errors.
    pub async fn open(&self, name: &str, config: ManagedLedgerConfig) -> Result<ManagedLedger> {
        validate_managed_ledger_name(name)?;
        config
            .validate()
            .map_err(|reason| ManagedLedgerError::InvalidArgument {
                name: name.to_owned(),
                reason,
            })?;
        let path = Self::metadata_path(name);
        let ctx = Arc::new(Ctx {
            name: name.to_owned(),
            path,
            store: self.store.clone(),
            client: self.client.clone(),
            config,
            clock: self.clock.clone(),
        });
        ManagedLedger::open(ctx).await
    }

    /// Whether the managed ledger `name` exists in the metadata store.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`]; store errors.
    pub async fn exists(&self, name: &str) -> Result<bool> {
        validate_managed_ledger_name(name)?;
        let path = Self::metadata_path(name);
        self.store
            .exists(&path)
            .await
            .map(|s| s.is_some())
            .map_err(|e| ManagedLedgerError::metadata(format!("checking '{path}'"), e))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Status {
    Open,
    Fenced,
    Closed,
    Terminated(Position),
    Deleted,
}

type AddFuture = Shared<BoxFuture<'static, std::result::Result<EntryId, BkError>>>;

#[derive(Debug)]
struct Current {
    handle: Arc<dyn WriteHandle>,
    id: LedgerId,
    created_ms: i64,
    entries: u64,
    bytes: u64,
    last_add: Option<AddFuture>,
    broken: Arc<AtomicBool>,
}

#[derive(Debug, Default)]
struct Writer {
    current: Option<Current>,
    /// Final entries/size of a closed ledger whose recording failed.
    closed_unrecorded: Option<LedgerInfo>,
}

#[derive(Debug)]
struct MlState {
    info: ManagedLedgerInfo,
    version: i64,
    current: Option<(LedgerId, Arc<dyn WriteHandle>)>,
    last_confirmed: Position,
    status: Status,
}

#[derive(Debug)]
pub(crate) struct MlInner {
    pub(crate) ctx: Arc<Ctx>,
    writer: tokio::sync::Mutex<Writer>,
    state: parking_lot::Mutex<MlState>,
    read_handles: parking_lot::Mutex<HashMap<LedgerId, Arc<dyn ReadHandle>>>,
    cursors: parking_lot::Mutex<BTreeMap<String, Arc<CursorInner>>>,
}

/// A managed ledger: an append-only log of entries over a sequence of
/// BookKeeper ledgers, with named cursors.
///
/// Cheap to clone (shared). Appends are ordered and pipelined: concurrent
/// `append` futures are sequenced in the order they first run and await their
/// BookKeeper acknowledgements concurrently. See the crate documentation for the
/// hook call sites.
#[derive(Debug, Clone)]
pub struct ManagedLedger {
    pub(crate) inner: Arc<MlInner>,
}

fn last_confirmed_of(info: &ManagedLedgerInfo, current: Option<LedgerId>) -> Position {
    for li in info.ledger_info.iter().rev() {
        if let Some(n) = li.entries {
            if n > 0 {
                return Position::new(li.ledger_id, n - 1);
            }
        }
    }
    match current.or_else(|| info.ledger_info.first().map(|l| l.ledger_id)) {
        Some(id) => Position::new(id, -1),
        None => Position::new(-1, -1),
    }
}

impl ManagedLedger {
    async fn open(ctx: Arc<Ctx>) -> Result<ManagedLedger> {
        let (info, version) = load_or_create(&ctx).await?;
        let last_confirmed = last_confirmed_of(&info, None);
        let terminated = info.terminated_position.as_ref().map(Position::from_nested);
        let inner = Arc::new(MlInner {
            ctx: ctx.clone(),
            writer: tokio::sync::Mutex::new(Writer::default()),
            state: parking_lot::Mutex::new(MlState {
                info: info.clone(),
                version,
                current: None,
                last_confirmed,
                status: match terminated {
                    Some(p) => Status::Terminated(p),
                    None => Status::Open,
                },
            }),
            read_handles: parking_lot::Mutex::new(HashMap::new()),
            cursors: parking_lot::Mutex::new(BTreeMap::new()),
        });
        if terminated.is_none() {
            inner.recover_and_start(info, version).await?;
        }
        let ml = ManagedLedger { inner };
        ml.recover_cursors().await?;
        Ok(ml)
    }

    async fn recover_cursors(&self) -> Result<()> {
        let ctx = &self.inner.ctx;
        let names = ctx.store.children(&ctx.path).await.map_err(|e| {
            ManagedLedgerError::metadata(
                format!("listing the cursors of managed ledger '{}'", ctx.name),
                e,
            )
        })?;
        for name in names {
            let cursor =
                CursorInner::recover(Arc::downgrade(&self.inner), ctx.clone(), &name).await?;
            if let Some(cursor) = cursor {
                self.inner.cursors.lock().insert(name, cursor);
            }
        }
        Ok(())
    }

    /// The managed ledger's name.
    pub fn name(&self) -> &str {
        &self.inner.ctx.name
    }

    /// The config it was opened with.
    pub fn config(&self) -> &ManagedLedgerConfig {
        &self.inner.ctx.config
    }

    /// The position of the last acknowledged entry (`(ledger, -1)` when there is
    /// none yet).
    pub fn last_confirmed(&self) -> Position {
        self.inner.state.lock().last_confirmed
    }

    /// The id of the ledger appends go to now, if one is open.
    pub fn current_ledger_id(&self) -> Option<LedgerId> {
        self.inner.state.lock().current.as_ref().map(|(id, _)| *id)
    }

    /// The `ManagedLedgerInfo` last written by this instance and its store version.
    pub fn metadata(&self) -> (ManagedLedgerInfo, i64) {
        let s = self.inner.state.lock();
        (s.info.clone(), s.version)
    }

    /// Ids of the ledgers recorded, oldest first (the last one is the current
    /// ledger while the managed ledger is open).
    pub fn ledger_ids(&self) -> Vec<LedgerId> {
        self.inner
            .state
            .lock()
            .info
            .ledger_info
            .iter()
            .map(|l| l.ledger_id)
            .collect()
    }

    /// Whether this instance was fenced by another owner.
    pub fn is_fenced(&self) -> bool {
        self.inner.state.lock().status == Status::Fenced
    }

    /// The terminated position, if the managed ledger is terminated.
    pub fn terminated_position(&self) -> Option<Position> {
        match self.inner.state.lock().status {
            Status::Terminated(p) => Some(p),
            _ => None,
        }
    }

    /// Appends an entry and returns its position once BookKeeper acknowledged it.
    ///
    /// Rolls the current ledger over first when a threshold of the config is
    /// reached (entries or bytes once `min_ledger_rollover_time` has passed, or
    /// `max_ledger_rollover_time`).
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`] when another owner opened the managed
    /// ledger; [`ManagedLedgerError::Terminated`], [`ManagedLedgerError::Closed`];
    /// client, store and hook errors of the append or of a rollover.
    pub async fn append(&self, data: impl Into<Bytes>) -> Result<Position> {
        let data = data.into();
        let (fut, id, broken) = {
            let mut w = self.inner.writer.lock().await;
            self.inner.check_writable()?;
            let full = match &w.current {
                None => Some("no current ledger"),
                Some(c) => self.inner.full_reason(c),
            };
            if let Some(reason) = full {
                self.inner.rollover_locked(&mut w, reason).await?;
            }
            let Some(c) = w.current.as_mut() else {
                return Err(self.inner.closed_error());
            };
            let len = data.len() as u64;
            let fut = c.handle.add_entry(data).shared();
            c.last_add = Some(fut.clone());
            c.entries += 1;
            c.bytes += len;
            (fut, c.id, c.broken.clone())
        };
        match fut.await {
            Ok(entry_id) => {
                let p = Position::new(id, entry_id);
                let mut s = self.inner.state.lock();
                if p > s.last_confirmed {
                    s.last_confirmed = p;
                }
                Ok(p)
            }
            Err(e) => {
                broken.store(true, Ordering::Release);
                let err = ManagedLedgerError::from_add(&self.inner.ctx.name, id, e);
                if matches!(err, ManagedLedgerError::Fenced { .. }) {
                    self.inner.mark_fenced("append");
                }
                Err(err)
            }
        }
    }

    /// Forces a rollover: closes the current ledger, records its entries and size,
    /// and creates a new one through S1 with its S4 properties in one CAS.
    ///
    /// # Errors
    ///
    /// As [`append`](Self::append); on failure nothing unrecorded is left behind.
    pub async fn rollover(&self) -> Result<()> {
        let mut w = self.inner.writer.lock().await;
        self.inner.check_writable()?;
        self.inner.rollover_locked(&mut w, "forced").await
    }

    /// Reads up to `max_entries` entries starting at `start`, across ledgers, up
    /// to the last confirmed entry.
    ///
    /// Ledgers are read through cached handles: the S2 resolver is consulted once
    /// when a handle is opened (I4); the current ledger is read through its write
    /// handle.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidPosition`] for a negative position, a ledger
    /// the managed ledger does not hold, or a start beyond the last confirmed
    /// entry; client and hook errors (the failing handle is dropped from the cache).
    pub async fn read_entries(&self, start: Position, max_entries: usize) -> Result<Vec<Entry>> {
        self.inner.validate_read_start(start)?;
        self.inner.read_from(start, max_entries).await
    }

    /// Terminates the managed ledger: seals the current ledger and records the
    /// terminated position; later appends fail with
    /// [`ManagedLedgerError::Terminated`]. Returns the last position.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`], [`ManagedLedgerError::Closed`]; client and
    /// store errors.
    pub async fn terminate(&self) -> Result<Position> {
        let mut w = self.inner.writer.lock().await;
        if let Status::Terminated(p) = self.inner.state.lock().status {
            return Ok(p);
        }
        self.inner.check_writable()?;
        let now = self.inner.ctx.now();
        self.inner.finish_current(&mut w, now).await?;
        let (mut info, version, lc) = {
            let s = self.inner.state.lock();
            (s.info.clone(), s.version, s.last_confirmed)
        };
        if let Some(li) = &w.closed_unrecorded {
            replace_ledger_info(&mut info, li.clone());
        }
        info.terminated_position = Some(lc.to_nested());
        let new_version = self.inner.write_info(&info, version).await?;
        w.closed_unrecorded = None;
        let mut s = self.inner.state.lock();
        s.info = info;
        s.version = new_version;
        s.status = Status::Terminated(lc);
        tracing::info!(managed_ledger = %self.inner.ctx.name, position = %lc, "terminated");
        Ok(lc)
    }

    /// Closes the managed ledger: waits for pending appends, seals the current
    /// ledger and closes the cursors. No metadata is written (the next open
    /// records the last ledger's size, as Pulsar does).
    ///
    /// # Errors
    ///
    /// Client errors of sealing the ledger (the instance is closed anyway).
    pub async fn close(&self) -> Result<()> {
        let mut w = self.inner.writer.lock().await;
        let cursors: Vec<_> = self.inner.cursors.lock().values().cloned().collect();
        for c in cursors {
            c.close().await;
        }
        let result = match w.current.take() {
            Some(mut c) => {
                if let Some(f) = c.last_add.take() {
                    let _ = f.await;
                }
                c.handle.close().await.map_err(|e| {
                    ManagedLedgerError::client(
                        format!(
                            "sealing ledger {} while closing managed ledger '{}'",
                            c.id, self.inner.ctx.name
                        ),
                        e,
                    )
                })
            }
            None => Ok(()),
        };
        {
            let mut s = self.inner.state.lock();
            s.current = None;
            if !matches!(s.status, Status::Deleted) {
                s.status = Status::Closed;
            }
        }
        self.inner.read_handles.lock().clear();
        result
    }

    /// Deletes the managed ledger: every ledger (through the S2 resolver, I15),
    /// every cursor (its cursor ledger through the cursor resolver) and the
    /// metadata.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`] when the metadata changed under this owner;
    /// client, store and hook errors (a failed ledger delete stops the deletion
    /// before the metadata is removed, so it can be retried).
    pub async fn delete(&self) -> Result<()> {
        let mut w = self.inner.writer.lock().await;
        if let Some(mut c) = w.current.take() {
            if let Some(f) = c.last_add.take() {
                let _ = f.await;
            }
            let _ = c.handle.close().await;
        }
        let cursors: Vec<_> = {
            let mut map = self.inner.cursors.lock();
            std::mem::take(&mut *map).into_values().collect()
        };
        for c in cursors {
            c.delete().await?;
        }
        let (info, version) = {
            let mut s = self.inner.state.lock();
            s.current = None;
            (s.info.clone(), s.version)
        };
        self.inner.read_handles.lock().clear();
        for li in &info.ledger_info {
            self.inner
                .delete_ledger(li, "managed-ledger delete")
                .await?;
        }
        let ctx = &self.inner.ctx;
        match ctx
            .store
            .delete(&ctx.path, ExpectedVersion::Exactly(version))
            .await
        {
            Ok(()) => {}
            Err(e) if e.kind() == MdErrorKind::NotFound => {}
            Err(e) if e.is_conflict() => {
                self.inner.mark_fenced("delete");
                return Err(self
                    .inner
                    .fenced_error("its metadata changed before delete"));
            }
            Err(e) => {
                return Err(ManagedLedgerError::metadata(
                    format!("deleting the metadata of managed ledger '{}'", ctx.name),
                    e,
                ))
            }
        }
        self.inner.state.lock().status = Status::Deleted;
        tracing::info!(managed_ledger = %ctx.name, "deleted");
        Ok(())
    }

    /// Deletes the ledgers every cursor has consumed that retention no longer
    /// keeps, oldest first, never the current ledger. Returns the deleted ids.
    ///
    /// A consumed ledger is deleted when no retention is configured, when it was
    /// closed longer than `retention_time` ago, or while the retained size exceeds
    /// `retention_size_bytes` (either configured limit triggers deletion). The
    /// metadata is updated first (one CAS), then each ledger is deleted through the
    /// S2 resolver (I15) and its cached read handle dropped.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::Fenced`], [`ManagedLedgerError::Closed`]; store and
    /// hook errors. A failing BookKeeper delete is logged, not returned: the
    /// ledger is no longer recorded.
    pub async fn trim_consumed_ledgers(&self) -> Result<Vec<LedgerId>> {
        let _w = self.inner.writer.lock().await;
        {
            let s = self.inner.state.lock();
            match s.status {
                Status::Open | Status::Terminated(_) => {}
                Status::Fenced => return Err(self.inner.fenced_error("trim refused")),
                Status::Closed | Status::Deleted => return Err(self.inner.closed_error()),
            }
        }
        let slowest = self.slowest_mark_delete();
        let ctx = &self.inner.ctx;
        let now = ctx.now();
        let (info, version) = {
            let s = self.inner.state.lock();
            (s.info.clone(), s.version)
        };
        let current = self.current_ledger_id();
        let mut remaining: u64 = info
            .ledger_info
            .iter()
            .map(|l| l.size.unwrap_or(0).max(0) as u64)
            .sum();
        let rt = ctx.config.retention_time;
        let rs = ctx.config.retention_size_bytes;
        let mut doomed = Vec::new();
        for li in &info.ledger_info {
            if Some(li.ledger_id) == current || li.entries.is_none() {
                break;
            }
            let entries = li.entries.unwrap_or(0);
            let consumed = li.ledger_id < slowest.ledger_id
                || (li.ledger_id == slowest.ledger_id && slowest.entry_id >= entries - 1);
            if !consumed {
                break;
            }
            let expired = match rt {
                None => rs.is_none(),
                Some(t) => {
                    let ts = li.timestamp.unwrap_or(0);
                    ts > 0 && now.saturating_sub(ts) > t.as_millis() as i64
                }
            };
            let over_size = match rs {
                None => rt.is_none(),
                Some(limit) => remaining > limit,
            };
            if !(expired || over_size) {
                break;
            }
            remaining = remaining.saturating_sub(li.size.unwrap_or(0).max(0) as u64);
            doomed.push(li.clone());
        }
        if doomed.is_empty() {
            return Ok(Vec::new());
        }
        let mut new_info = info;
        new_info
            .ledger_info
            .retain(|l| !doomed.iter().any(|d| d.ledger_id == l.ledger_id));
        let new_version = self.inner.write_info(&new_info, version).await?;
        {
            let mut s = self.inner.state.lock();
            s.info = new_info;
            s.version = new_version;
        }
        let mut ids = Vec::with_capacity(doomed.len());
        for li in &doomed {
            if let Some(h) = self.inner.read_handles.lock().remove(&li.ledger_id) {
                drop(h);
            }
            if let Err(e) = self.inner.delete_ledger(li, "trim").await {
                tracing::warn!(managed_ledger = %ctx.name, ledger_id = li.ledger_id, error = %e,
                    "trimmed ledger could not be deleted from its cluster");
            }
            ids.push(li.ledger_id);
        }
        tracing::info!(managed_ledger = %ctx.name, ledgers = ?ids, slowest = %slowest, "trimmed consumed ledgers");
        Ok(ids)
    }

    /// The mark-delete position of the slowest cursor, or the last confirmed
    /// position when there is no cursor.
    pub fn slowest_mark_delete(&self) -> Position {
        let cursors = self.inner.cursors.lock();
        cursors
            .values()
            .map(|c| c.mark_delete_position())
            .min()
            .unwrap_or_else(|| self.last_confirmed())
    }

    /// Opens the cursor `name`, creating it at the end of the managed ledger
    /// (Pulsar's `Latest`) when it does not exist.
    ///
    /// # Errors
    ///
    /// As [`open_cursor_at`](Self::open_cursor_at).
    pub async fn open_cursor(&self, name: &str) -> Result<ManagedCursor> {
        self.open_cursor_at(name, InitialPosition::Latest).await
    }

    /// Opens the cursor `name`, creating it at `initial` when it does not exist.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`]; [`ManagedLedgerError::Closed`];
    /// store errors.
    pub async fn open_cursor_at(
        &self,
        name: &str,
        initial: InitialPosition,
    ) -> Result<ManagedCursor> {
        validate_cursor_name(name)?;
        self.inner.check_open_for_cursor()?;
        if let Some(c) = self.inner.cursors.lock().get(name) {
            return Ok(ManagedCursor { inner: c.clone() });
        }
        let md = match initial {
            InitialPosition::Latest => self.last_confirmed(),
            InitialPosition::Earliest => {
                let s = self.inner.state.lock();
                match s.info.ledger_info.first() {
                    Some(l) => Position::new(l.ledger_id, -1),
                    None => s.last_confirmed,
                }
            }
        };
        let cursor = CursorInner::create(
            Arc::downgrade(&self.inner),
            self.inner.ctx.clone(),
            name,
            md,
        )
        .await?;
        let mut map = self.inner.cursors.lock();
        let c = map.entry(name.to_owned()).or_insert(cursor).clone();
        Ok(ManagedCursor { inner: c })
    }

    /// The open cursor `name`.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::NoSuchCursor`].
    pub fn cursor(&self, name: &str) -> Result<ManagedCursor> {
        self.inner
            .cursors
            .lock()
            .get(name)
            .map(|c| ManagedCursor { inner: c.clone() })
            .ok_or_else(|| ManagedLedgerError::NoSuchCursor {
                name: self.inner.ctx.name.clone(),
                cursor: name.to_owned(),
            })
    }

    /// Every cursor, by name.
    pub fn cursors(&self) -> Vec<ManagedCursor> {
        self.inner
            .cursors
            .lock()
            .values()
            .map(|c| ManagedCursor { inner: c.clone() })
            .collect()
    }

    /// Deletes the cursor `name`: its cursor ledger (through the cursor
    /// resolver) and its metadata.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`], [`ManagedLedgerError::NoSuchCursor`];
    /// client, store and hook errors.
    pub async fn delete_cursor(&self, name: &str) -> Result<()> {
        validate_cursor_name(name)?;
        let c = self.cursor(name)?;
        c.inner.delete().await?;
        self.inner.cursors.lock().remove(name);
        Ok(())
    }
}

fn replace_ledger_info(info: &mut ManagedLedgerInfo, li: LedgerInfo) {
    if let Some(slot) = info
        .ledger_info
        .iter_mut()
        .find(|l| l.ledger_id == li.ledger_id)
    {
        *slot = li;
    }
}

async fn load_or_create(ctx: &Ctx) -> Result<(ManagedLedgerInfo, i64)> {
    for _ in 0..3 {
        let got = ctx.store.get(&ctx.path).await.map_err(|e| {
            ManagedLedgerError::metadata(
                format!("reading the metadata of managed ledger '{}'", ctx.name),
                e,
            )
        })?;
        if let Some(r) = got {
            let info = decode_managed_ledger_info(&r.value).map_err(|e| {
                ManagedLedgerError::corrupt(format!("managed ledger '{}'", ctx.name), &ctx.path, e)
            })?;
            return Ok((info, r.stat.version));
        }
        let info = ManagedLedgerInfo::default();
        let bytes = encode_info(ctx, &info)?;
        match ctx
            .store
            .put(&ctx.path, &bytes, ExpectedVersion::NotExists)
            .await
        {
            Ok(stat) => return Ok((info, stat.version)),
            Err(e) if e.kind() == MdErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(ManagedLedgerError::metadata(
                    format!("creating the metadata of managed ledger '{}'", ctx.name),
                    e,
                ))
            }
        }
    }
    Err(ManagedLedgerError::Fenced {
        name: ctx.name.clone(),
        reason: "its metadata kept changing while it was being created".into(),
    })
}

fn encode_info(ctx: &Ctx, info: &ManagedLedgerInfo) -> Result<Vec<u8>> {
    encode_managed_ledger_info(info, ctx.config.ledger_info_compression).map_err(|e| {
        ManagedLedgerError::InvalidArgument {
            name: ctx.name.clone(),
            reason: format!("cannot encode its ManagedLedgerInfo: {e}"),
        }
    })
}

impl MlInner {
    pub(crate) fn closed_error(&self) -> ManagedLedgerError {
        ManagedLedgerError::Closed {
            what: format!("managed ledger '{}'", self.ctx.name),
        }
    }

    pub(crate) fn fenced_error(&self, reason: &str) -> ManagedLedgerError {
        ManagedLedgerError::Fenced {
            name: self.ctx.name.clone(),
            reason: reason.to_owned(),
        }
    }

    fn mark_fenced(&self, during: &str) {
        let mut s = self.state.lock();
        if s.status == Status::Open {
            s.status = Status::Fenced;
            tracing::warn!(managed_ledger = %self.ctx.name, during, "fenced by another owner");
        }
    }

    fn check_writable(&self) -> Result<()> {
        match self.state.lock().status {
            Status::Open => Ok(()),
            Status::Fenced => Err(self.fenced_error("an earlier operation found it fenced")),
            Status::Terminated(p) => Err(ManagedLedgerError::Terminated {
                name: self.ctx.name.clone(),
                position: p,
            }),
            Status::Closed | Status::Deleted => Err(self.closed_error()),
        }
    }

    pub(crate) fn check_open_for_cursor(&self) -> Result<()> {
        match self.state.lock().status {
            Status::Closed | Status::Deleted => Err(self.closed_error()),
            _ => Ok(()),
        }
    }

    fn full_reason(&self, c: &Current) -> Option<&'static str> {
        if c.broken.load(Ordering::Acquire) {
            return Some("the current ledger failed");
        }
        let cfg = &self.ctx.config;
        let age = self.ctx.now().saturating_sub(c.created_ms).max(0) as u128;
        if c.entries > 0 && age >= cfg.max_ledger_rollover_time.as_millis() {
            return Some("max ledger age reached");
        }
        if age < cfg.min_ledger_rollover_time.as_millis() {
            return None;
        }
        if c.entries >= cfg.max_entries_per_ledger {
            return Some("max entries per ledger reached");
        }
        if c.bytes >= cfg.max_size_per_ledger_bytes {
            return Some("max ledger size reached");
        }
        None
    }

    /// Writes `info` with a compare-and-set on `version`; a conflict means
    /// another owner took over (fenced). Returns the new version.
    async fn write_info(&self, info: &ManagedLedgerInfo, version: i64) -> Result<i64> {
        let bytes = encode_info(&self.ctx, info)?;
        self.cas(&bytes, version).await
    }

    async fn cas(&self, bytes: &[u8], version: i64) -> Result<i64> {
        let ctx = &self.ctx;
        match ctx
            .store
            .put(&ctx.path, bytes, ExpectedVersion::Exactly(version))
            .await
        {
            Ok(stat) => Ok(stat.version),
            Err(e) if e.is_conflict() => {
                self.mark_fenced("metadata update");
                Err(ManagedLedgerError::Fenced {
                    name: ctx.name.clone(),
                    reason: format!("its metadata version moved past {version} ({e})"),
                })
            }
            Err(e) => {
                // A retryable failure may hide an applied write: check.
                if let Ok(Some(r)) = ctx.store.get(&ctx.path).await {
                    if r.value == bytes && r.stat.version == version + 1 {
                        return Ok(r.stat.version);
                    }
                }
                Err(ManagedLedgerError::metadata(
                    format!("updating the metadata of managed ledger '{}'", ctx.name),
                    e,
                ))
            }
        }
    }

    /// Waits for pending adds and seals the current ledger; its final
    /// `LedgerInfo` (entries, size, close timestamp, properties kept) is left in
    /// `w.closed_unrecorded` for the caller to record.
    async fn finish_current(&self, w: &mut Writer, now: i64) -> Result<()> {
        let Some(mut c) = w.current.take() else {
            return Ok(());
        };
        if let Some(f) = c.last_add.take() {
            let _ = f.await;
        }
        self.state.lock().current = None;
        if let Err(e) = c.handle.close().await {
            if e.kind() == BkErrorKind::LedgerFenced {
                self.mark_fenced("sealing the current ledger");
                return Err(ManagedLedgerError::from_add(&self.ctx.name, c.id, e));
            }
            tracing::warn!(managed_ledger = %self.ctx.name, ledger_id = c.id, error = %e,
                "sealing the current ledger failed; recording what it acknowledged");
        }
        let lac = c.handle.last_add_confirmed();
        let len = c.handle.length();
        let mut li = {
            let s = self.state.lock();
            s.info
                .ledger_info
                .iter()
                .find(|l| l.ledger_id == c.id)
                .cloned()
                .unwrap_or_else(|| LedgerInfo {
                    ledger_id: c.id,
                    ..Default::default()
                })
        };
        li.entries = Some(lac + 1);
        li.size = Some(i64::try_from(len).unwrap_or(i64::MAX));
        li.timestamp = Some(now);
        w.closed_unrecorded = Some(li);
        let as_read: Arc<dyn ReadHandle> = c.handle;
        self.read_handles.lock().insert(c.id, as_read);
        Ok(())
    }

    async fn rollover_locked(&self, w: &mut Writer, reason: &str) -> Result<()> {
        let now = self.ctx.now();
        let old = w.current.as_ref().map(|c| c.id);
        self.finish_current(w, now).await?;
        let (mut info, version) = {
            let s = self.state.lock();
            (s.info.clone(), s.version)
        };
        if let Some(li) = &w.closed_unrecorded {
            replace_ledger_info(&mut info, li.clone());
        }
        let (current, info, new_version) = self.create_and_record(info, version, now).await?;
        w.closed_unrecorded = None;
        tracing::info!(managed_ledger = %self.ctx.name, old_ledger = ?old, new_ledger = current.id,
            reason, "rolled over");
        self.install(w, current, info, new_version);
        Ok(())
    }

    fn install(&self, w: &mut Writer, current: Current, info: ManagedLedgerInfo, version: i64) {
        let mut s = self.state.lock();
        s.info = info;
        s.version = version;
        s.current = Some((current.id, current.handle.clone()));
        if s.last_confirmed.ledger_id < 0 {
            s.last_confirmed = Position::new(current.id, -1);
        }
        w.current = Some(current);
    }

    /// Creates a ledger through S1, asks S4 for its properties and records it in
    /// `info` with one compare-and-set (I1). On any failure after creation the
    /// ledger is deleted (through the resolver once it carries its properties).
    async fn create_and_record(
        &self,
        mut info: ManagedLedgerInfo,
        version: i64,
        now: i64,
    ) -> Result<(Current, ManagedLedgerInfo, i64)> {
        let ctx = &self.ctx;
        let client = ctx.creation_client();
        let handle = client
            .create_ledger(&ctx.config.data_ledger_config())
            .await
            .map_err(|e| {
                ManagedLedgerError::client(
                    format!("creating a ledger for managed ledger '{}'", ctx.name),
                    e,
                )
            })?;
        let id = handle.id();
        if let Some(last) = info.ledger_info.last() {
            if id <= last.ledger_id {
                let _ = handle.close().await;
                ctx.delete_orphan(client.as_ref(), id).await;
                return Err(ManagedLedgerError::client(
                    format!("creating a ledger for managed ledger '{}'", ctx.name),
                    BkError::new(
                        BkErrorKind::Other,
                        format!(
                            "new ledger id {id} is not above the last recorded ledger {}: \
                             positions would go backwards; advance the cluster's ledger id \
                             generator (run the idgen precheck) before writing to it",
                            last.ledger_id
                        ),
                    )
                    .with_cluster(client.cluster_name())
                    .with_ledger(id),
                ));
            }
        }
        let props = match ctx.new_ledger_properties(LedgerPurpose::Data, id, client.as_ref()) {
            Ok(p) => p,
            Err(e) => {
                let _ = handle.close().await;
                // No properties (no stamp) exist to route by: delete on the creator.
                ctx.delete_orphan(client.as_ref(), id).await;
                return Err(e);
            }
        };
        let mut li = LedgerInfo {
            ledger_id: id,
            timestamp: Some(0),
            ..Default::default()
        };
        merge_key_values(&mut li.properties, props);
        info.ledger_info.push(li.clone());
        let recorded = match encode_info(ctx, &info) {
            Ok(bytes) => self.cas(&bytes, version).await,
            Err(e) => Err(e),
        };
        match recorded {
            Ok(new_version) => Ok((
                Current {
                    handle,
                    id,
                    created_ms: now,
                    entries: 0,
                    bytes: 0,
                    last_add: None,
                    broken: Arc::new(AtomicBool::new(false)),
                },
                info,
                new_version,
            )),
            Err(e) => {
                let _ = handle.close().await;
                match ctx.resolve_ledger(&li) {
                    Ok(c) => ctx.delete_orphan(c.as_ref(), id).await,
                    Err(re) => {
                        tracing::warn!(managed_ledger = %ctx.name, ledger_id = id, error = %re,
                            "resolver refused the unrecorded ledger; deleting on its creator");
                        ctx.delete_orphan(client.as_ref(), id).await;
                    }
                }
                Err(e)
            }
        }
    }

    async fn recover_and_start(&self, mut info: ManagedLedgerInfo, version: i64) -> Result<()> {
        let ctx = &self.ctx;
        let mut w = self.writer.lock().await;
        let now = ctx.now();
        let mut dropped: Option<LedgerInfo> = None;
        if let Some(last) = info.ledger_info.last_mut() {
            if last.entries.is_none() {
                let client = ctx.resolve_ledger(last)?;
                let cfg = &ctx.config;
                let h = client
                    .open_ledger(last.ledger_id, cfg.digest_type, &cfg.password)
                    .await
                    .map_err(|e| {
                        ManagedLedgerError::client(
                            format!(
                                "recovering the last ledger {} of managed ledger '{}'",
                                last.ledger_id, ctx.name
                            ),
                            e,
                        )
                    })?;
                let lac = h.last_add_confirmed();
                if lac < 0 {
                    dropped = info.ledger_info.pop();
                } else {
                    last.entries = Some(lac + 1);
                    last.size = Some(i64::try_from(h.length()).unwrap_or(i64::MAX));
                    last.timestamp = Some(now);
                    self.read_handles.lock().insert(last.ledger_id, h);
                }
            }
        }
        {
            let mut s = self.state.lock();
            s.last_confirmed = last_confirmed_of(&info, None);
        }
        let (current, info, new_version) = self.create_and_record(info, version, now).await?;
        {
            let mut s = self.state.lock();
            if s.last_confirmed.ledger_id < 0
                || !info.ledger_info.iter().any(|l| l.entries.unwrap_or(0) > 0)
            {
                s.last_confirmed = Position::new(current.id, -1);
            }
        }
        self.install(&mut w, current, info, new_version);
        if let Some(li) = dropped {
            if let Err(e) = self
                .delete_ledger(&li, "dropping the empty last ledger")
                .await
            {
                tracing::warn!(managed_ledger = %ctx.name, ledger_id = li.ledger_id, error = %e,
                    "empty last ledger could not be deleted");
            }
        }
        Ok(())
    }

    /// Deletes a recorded ledger through the S2 resolver (I15).
    async fn delete_ledger(&self, li: &LedgerInfo, why: &str) -> Result<()> {
        let client = self.ctx.resolve_ledger(li)?;
        client
            .delete_ledger_if_exists(li.ledger_id)
            .await
            .map(|_| ())
            .map_err(|e| {
                ManagedLedgerError::client(
                    format!(
                        "deleting ledger {} of managed ledger '{}' ({why})",
                        li.ledger_id, self.ctx.name
                    ),
                    e,
                )
            })
    }

    pub(crate) fn last_confirmed(&self) -> Position {
        self.state.lock().last_confirmed
    }

    fn entries_of(li: &LedgerInfo, lc: Position) -> i64 {
        match li.entries {
            Some(n) => n,
            None if lc.ledger_id == li.ledger_id => lc.entry_id + 1,
            None => 0,
        }
    }

    /// The first readable position at or after `pos` and the last readable entry
    /// of its ledger; `None` when nothing is readable there yet.
    pub(crate) fn locate(&self, pos: Position) -> Option<(Position, EntryId)> {
        let s = self.state.lock();
        let lc = s.last_confirmed;
        let mut pos = pos;
        for li in &s.info.ledger_info {
            if li.ledger_id < pos.ledger_id {
                continue;
            }
            if li.ledger_id > pos.ledger_id {
                pos = Position::new(li.ledger_id, 0);
            }
            let n = Self::entries_of(li, lc);
            let first = pos.entry_id.max(0);
            if first < n {
                return Some((Position::new(li.ledger_id, first), n - 1));
            }
        }
        None
    }

    /// The position after `pos`: the next entry of its ledger, or the first
    /// entry of the next ledger that has (or may get) entries.
    pub(crate) fn next_position(&self, pos: Position) -> Position {
        let s = self.state.lock();
        let lc = s.last_confirmed;
        let current = s.current.as_ref().map(|(id, _)| *id);
        let mut found = false;
        for li in &s.info.ledger_info {
            if li.ledger_id < pos.ledger_id {
                continue;
            }
            if li.ledger_id > pos.ledger_id || found {
                if Some(li.ledger_id) == current || Self::entries_of(li, lc) > 0 {
                    return Position::new(li.ledger_id, 0);
                }
                continue;
            }
            found = true;
            if Some(li.ledger_id) == current || pos.entry_id + 1 < Self::entries_of(li, lc) {
                return Position::new(pos.ledger_id, pos.entry_id + 1);
            }
        }
        Position::new(pos.ledger_id, pos.entry_id + 1)
    }

    pub(crate) fn holds_ledger(&self, ledger_id: LedgerId) -> bool {
        self.state
            .lock()
            .info
            .ledger_info
            .iter()
            .any(|l| l.ledger_id == ledger_id)
    }

    fn validate_read_start(&self, start: Position) -> Result<()> {
        let invalid = |reason: String| ManagedLedgerError::InvalidPosition {
            name: self.ctx.name.clone(),
            position: start,
            reason,
        };
        if start.ledger_id < 0 || start.entry_id < 0 {
            return Err(invalid("ledger and entry ids must not be negative".into()));
        }
        let s = self.state.lock();
        let Some(li) = s
            .info
            .ledger_info
            .iter()
            .find(|l| l.ledger_id == start.ledger_id)
        else {
            return Err(invalid(format!(
                "the managed ledger holds no ledger {} (trimmed or never part of it); \
                 its ledgers are {:?}",
                start.ledger_id,
                s.info
                    .ledger_info
                    .iter()
                    .map(|l| l.ledger_id)
                    .collect::<Vec<_>>()
            )));
        };
        if start.entry_id >= Self::entries_of(li, s.last_confirmed) {
            return Err(invalid(format!(
                "beyond the end: the last confirmed entry is {}; read from an earlier \
                 position or wait for more entries",
                s.last_confirmed
            )));
        }
        Ok(())
    }

    /// Reads up to `max` entries from `start` (lenient: empty when nothing is
    /// readable there).
    pub(crate) async fn read_from(&self, start: Position, max: usize) -> Result<Vec<Entry>> {
        let mut out = Vec::new();
        let mut pos = start;
        while out.len() < max {
            let Some((first, last_avail)) = self.locate(pos) else {
                break;
            };
            let want = (max - out.len()) as i64;
            let last = last_avail.min(first.entry_id + want - 1);
            let handle = self.read_handle(first.ledger_id).await?;
            match handle.read_entries(first.entry_id, last).await {
                Ok(entries) => {
                    out.extend(entries.into_iter().map(|e| Entry {
                        position: Position::new(first.ledger_id, e.entry_id),
                        data: e.data,
                    }));
                }
                Err(e) => {
                    self.read_handles.lock().remove(&first.ledger_id);
                    return Err(ManagedLedgerError::client(
                        format!(
                            "reading entries {}..={} of ledger {} of managed ledger '{}'",
                            first.entry_id, last, first.ledger_id, self.ctx.name
                        ),
                        e,
                    ));
                }
            }
            pos = Position::new(first.ledger_id, last + 1);
        }
        Ok(out)
    }

    /// The handle to read `ledger_id`: the write handle of the current ledger,
    /// a cached handle, or a new one opened on the client S2 names (I4).
    async fn read_handle(&self, ledger_id: LedgerId) -> Result<Arc<dyn ReadHandle>> {
        let li = {
            let s = self.state.lock();
            if let Some((id, h)) = &s.current {
                if *id == ledger_id {
                    let r: Arc<dyn ReadHandle> = h.clone();
                    return Ok(r);
                }
            }
            if let Some(h) = self.read_handles.lock().get(&ledger_id) {
                return Ok(h.clone());
            }
            s.info
                .ledger_info
                .iter()
                .find(|l| l.ledger_id == ledger_id)
                .cloned()
        };
        let Some(li) = li else {
            return Err(ManagedLedgerError::InvalidPosition {
                name: self.ctx.name.clone(),
                position: Position::new(ledger_id, 0),
                reason: "the ledger was trimmed while being read".into(),
            });
        };
        let client = self.ctx.resolve_ledger(&li)?;
        let cfg = &self.ctx.config;
        let h = client
            .open_ledger_no_recovery(ledger_id, cfg.digest_type, &cfg.password)
            .await
            .map_err(|e| {
                ManagedLedgerError::client(
                    format!(
                        "opening ledger {ledger_id} of managed ledger '{}' for reading",
                        self.ctx.name
                    ),
                    e,
                )
            })?;
        let mut cache = self.read_handles.lock();
        Ok(cache.entry(ledger_id).or_insert(h).clone())
    }
}
