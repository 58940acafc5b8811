//! [`MigratingStore`]: the participant side, a [`MetadataStore`] wrapper with
//! the write gate, the dirty set and the swap to the target.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::{mpsc, watch, RwLock};

use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataError, MetadataStore, Operation, Result,
    WatchStream,
};

use crate::opener::StoreOpener;
use crate::record::{
    is_control_path, joined_path, read_current, MigrationRecord, ParticipantAck, Phase,
    PARTICIPANTS_PATH,
};

/// Settings of a [`MigratingStore`].
#[derive(Debug, Clone)]
pub struct ParticipantOptions {
    /// Name of the participant (a path segment, unique among the nodes of the
    /// cluster). Default: a random UUID.
    pub name: String,
    /// Most paths held in the dirty set; beyond it the participant reports an
    /// overflow and the coordinator re-scans the whole tree instead (no
    /// change is lost). Default 100,000.
    pub dirty_limit: usize,
    /// Largest page of published dirty paths, in bytes. Default 256 KiB.
    pub page_bytes: usize,
    /// How often the participant re-reads the migration record besides its
    /// watches. Default 500 ms.
    pub poll_interval: Duration,
    /// The node this participant belongs to, stable across the node's
    /// restarts (its node id), when [`name`](Self::name) changes with each
    /// process. A coordinator does not wait for a participant once a later
    /// one of the same node registered: that process is gone (a node id is
    /// held by one process at a time). Default `None`.
    pub node: Option<String>,
}

impl Default for ParticipantOptions {
    fn default() -> Self {
        ParticipantOptions {
            name: uuid::Uuid::new_v4().to_string(),
            dirty_limit: 100_000,
            page_bytes: 256 * 1024,
            poll_interval: Duration::from_millis(500),
            node: None,
        }
    }
}

pub(crate) struct Slot {
    pub(crate) store: Arc<dyn MetadataStore>,
    url: String,
}

#[derive(Default)]
pub(crate) struct PState {
    pub(crate) tracking: Option<String>,
    pub(crate) dirty: BTreeSet<String>,
    pub(crate) overflow: bool,
    pub(crate) paused: Option<String>,
    pub(crate) acked: Option<(String, Phase, u64)>,
    pub(crate) ephemerals: BTreeMap<String, Vec<u8>>,
    pub(crate) page_seq: u64,
    /// The record of the last migration followed to its target.
    pub(crate) completed: Option<MigrationRecord>,
    /// The store's session generation the participant registered under.
    /// While the store's generation differs (its session ended: the
    /// registration went with it) writes are refused until the participant
    /// registered again and read the record: a coordinator does not wait for
    /// a participant whose registration is gone, so it must not write
    /// without one.
    pub(crate) registered_gen: Option<u64>,
}

pub(crate) struct Inner {
    pub(crate) current: ArcSwap<Slot>,
    opener: Arc<dyn StoreOpener>,
    pub(crate) options: ParticipantOptions,
    pub(crate) state: Mutex<PState>,
    gate: RwLock<()>,
    generation: watch::Sender<u64>,
    /// `true` while the write gate is closed (mirrors `PState::paused`).
    paused_tx: watch::Sender<bool>,
    pub(crate) closed: AtomicBool,
    owns_store: bool,
    swaps: AtomicU64,
    reconcile_lock: tokio::sync::Mutex<()>,
}

/// A [`MetadataStore`] that every node puts below all its metadata users so
/// that the store can be moved to another backend under live traffic.
///
/// It forwards every operation to the current store and, while a migration
/// runs (see [`Coordinator`](crate::Coordinator)):
/// - registers as a participant (an ephemeral node under
///   [`PARTICIPANTS_PATH`]) and acknowledges each request of the coordinator;
/// - records every path it writes, creates or deletes (the dirty set,
///   bounded by [`ParticipantOptions::dirty_limit`]) and publishes it when asked;
/// - in the pause, refuses writes with [`ErrorKind::WritesPaused`] (retryable)
///   after the writes already in flight have finished;
/// - at COMPLETED opens the target, swaps to it, recreates the ephemeral
///   nodes it created, re-arms its watch streams (each reports a re-read of
///   its node) and reopens writes.
///
/// Started with the URL of a store that was migrated away, it follows the
/// recorded target and logs a warning to change the configuration.
#[derive(Clone)]
pub struct MigratingStore {
    pub(crate) inner: Arc<Inner>,
}

impl fmt::Debug for MigratingStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MigratingStore")
            .field("name", &self.inner.options.name)
            .field("url", &self.inner.current.load().url)
            .finish()
    }
}

pub(crate) fn paused_error(op: Operation, path: &str, reason: &str) -> MetadataError {
    MetadataError::WritesPaused {
        op,
        path: path.to_owned(),
        reason: reason.to_owned(),
    }
}

impl MigratingStore {
    /// Opens the store at `url` with `opener`, follows completed migrations
    /// recorded there (warning that the configuration names an old store),
    /// registers as a participant and starts following migrations.
    ///
    /// # Errors
    ///
    /// Errors of the opener and the store; `AlreadyExists` when another live
    /// participant has the same name.
    pub async fn open(
        url: &str,
        opener: Arc<dyn StoreOpener>,
        options: ParticipantOptions,
    ) -> Result<MigratingStore> {
        let store = opener.open(url).await?;
        Self::start(store, url.to_owned(), opener, options, true).await
    }

    /// Like [`open`](Self::open) on a store already open (`url` is the URL it
    /// was opened with, as recorded in migrations). The store is not closed
    /// when the participant swaps away from it.
    ///
    /// # Errors
    ///
    /// As [`open`](Self::open).
    pub async fn wrap(
        store: Arc<dyn MetadataStore>,
        url: &str,
        opener: Arc<dyn StoreOpener>,
        options: ParticipantOptions,
    ) -> Result<MigratingStore> {
        Self::start(store, url.to_owned(), opener, options, false).await
    }

    async fn start(
        mut store: Arc<dyn MetadataStore>,
        mut url: String,
        opener: Arc<dyn StoreOpener>,
        options: ParticipantOptions,
        owns_store: bool,
    ) -> Result<MigratingStore> {
        // Follow completed migrations (a node started with an old URL).
        let mut followed = None;
        for _ in 0..8 {
            match read_current(store.as_ref()).await? {
                Some((rec, _)) if rec.phase == Phase::Completed && rec.target_url != url => {
                    tracing::warn!(
                        "the metadata store {url} was migrated to {} (migration {}); using \
                         the target: change this node's configuration to {}",
                        rec.target_url,
                        rec.id,
                        rec.target_url
                    );
                    let next = opener.open(&rec.target_url).await?;
                    if owns_store {
                        let _ = store.close().await;
                    }
                    store = next;
                    url = rec.target_url.clone();
                    followed = Some(rec);
                }
                _ => break,
            }
        }
        let (generation, _) = watch::channel(0);
        let (paused_tx, _) = watch::channel(false);
        let inner = Arc::new(Inner {
            current: ArcSwap::from_pointee(Slot { store, url }),
            opener,
            options,
            state: Mutex::new(PState {
                completed: followed,
                ..PState::default()
            }),
            gate: RwLock::new(()),
            generation,
            paused_tx,
            closed: AtomicBool::new(false),
            owns_store,
            swaps: AtomicU64::new(0),
            reconcile_lock: tokio::sync::Mutex::new(()),
        });
        let this = MigratingStore { inner };
        this.register().await?;
        this.reconcile().await?;
        let weak = Arc::downgrade(&this.inner);
        tokio::spawn(crate::tasks::control_loop(weak));
        Ok(this)
    }

    /// The name of this participant.
    pub fn name(&self) -> &str {
        &self.inner.options.name
    }

    /// The URL of the store in use.
    pub fn url(&self) -> String {
        self.inner.current.load().url.clone()
    }

    /// The store in use.
    pub fn current(&self) -> Arc<dyn MetadataStore> {
        self.inner.current.load().store.clone()
    }

    /// How many times the participant swapped to a target.
    pub fn swaps(&self) -> u64 {
        self.inner.swaps.load(Ordering::Relaxed)
    }

    /// Whether writes are paused right now.
    pub fn is_paused(&self) -> bool {
        self.inner.state.lock().paused.is_some()
    }

    /// Follows [`is_paused`](Self::is_paused): the value turns `true` once
    /// the write gate is closed (after the writes in flight finished) and
    /// `false` when writes reopen (on the target after the flip, or on the
    /// source when the migration FAILED or was ABORTED).
    ///
    /// An embedder treats the pause like a lost metadata session: a node
    /// tells its managed ledgers the session is lost while the value is
    /// `true`, so that no trim, rollover or deletion is attempted in the
    /// pause (they would be refused with `WritesPaused` anyway).
    pub fn paused_watch(&self) -> watch::Receiver<bool> {
        self.inner.paused_tx.subscribe()
    }

    /// The opener this participant opens targets with: the one a coordinator
    /// started next to it should use too.
    pub fn opener(&self) -> Arc<dyn StoreOpener> {
        self.inner.opener.clone()
    }

    /// Closes (`Some`) or opens (`None`) the write gate, and tells
    /// [`paused_watch`](Self::paused_watch).
    fn set_paused(&self, st: &mut PState, reason: Option<String>) {
        let paused = reason.is_some();
        st.paused = reason;
        self.inner.paused_tx.send_if_modified(|p| {
            let changed = *p != paused;
            *p = paused;
            changed
        });
    }

    /// The record of the last migration this participant followed to its
    /// target (at the flip, or at the start when its URL named a store that
    /// was migrated away), as it read it: the record stays behind in the
    /// source store, where the store in use no longer looks.
    pub fn completed(&self) -> Option<MigrationRecord> {
        self.inner.state.lock().completed.clone()
    }

    /// Paths in the dirty set right now.
    pub fn dirty_len(&self) -> usize {
        self.inner.state.lock().dirty.len()
    }

    fn participant_path(&self) -> String {
        format!("{PARTICIPANTS_PATH}/{}", self.inner.options.name)
    }

    async fn register(&self) -> Result<()> {
        let ack = ParticipantAck {
            node: self.inner.options.node.clone(),
            ..ParticipantAck::default()
        };
        let ack = serde_json::to_vec(&ack).expect("serializes");
        let store = self.current();
        let generation = store.session_generation();
        match store
            .create(&self.participant_path(), &ack, CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => {
                self.inner.state.lock().registered_gen = generation;
                Ok(())
            }
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Err(MetadataError::AlreadyExists {
                op: Operation::Create,
                path: format!(
                    "{} (another live participant has the name `{}`: give each node its own \
                     ParticipantOptions::name)",
                    self.participant_path(),
                    self.inner.options.name
                ),
            }),
            Err(e) => Err(e),
        }
    }

    /// Reads the migration record and does what its phase asks. Runs by
    /// itself on every change of the record; public so that a caller can
    /// force it.
    ///
    /// # Errors
    ///
    /// Errors of the stores and of the opener of the target.
    pub async fn reconcile(&self) -> Result<()> {
        let _one = self.inner.reconcile_lock.lock().await;
        let store = self.current();
        self.ensure_registered(store.as_ref()).await?;
        let rec = read_current(store.as_ref()).await?;
        match rec {
            Some((rec, _)) if rec.phase.tracks() => self.follow(store, rec).await,
            // A completed migration *to* the store in use is no reason to
            // move (a pointer its coordinator did not remove).
            Some((rec, _)) if rec.phase == Phase::Completed && rec.target_url != self.url() => {
                self.flip(store, rec).await
            }
            _ => {
                let mut st = self.inner.state.lock();
                st.tracking = None;
                st.dirty.clear();
                st.overflow = false;
                self.set_paused(&mut st, None);
                Ok(())
            }
        }
    }

    /// Registers again when the store's session changed since the
    /// participant registered (the registration went with the old session),
    /// joining the migration it tracks first; until then writes are refused
    /// (see `PState::registered_gen`).
    async fn ensure_registered(&self, store: &dyn MetadataStore) -> Result<()> {
        let generation = store.session_generation();
        let tracking = {
            let st = self.inner.state.lock();
            if st.registered_gen == generation {
                return Ok(());
            }
            st.tracking.clone()
        };
        if self.inner.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        tracing::warn!(
            "participant {}: the metadata session ended; registering again (writes wait \
             until then)",
            self.inner.options.name
        );
        if let Some(id) = tracking {
            store
                .put(
                    &format!("{}/{}", joined_path(&id), self.inner.options.name),
                    b"",
                    ExpectedVersion::Any,
                )
                .await?;
        }
        let ack = ParticipantAck {
            node: self.inner.options.node.clone(),
            ..ParticipantAck::default()
        };
        let value = serde_json::to_vec(&ack).expect("serializes");
        match store
            .create(&self.participant_path(), &value, CreateMode::EPHEMERAL)
            .await
        {
            Ok(_) => {}
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let mut st = self.inner.state.lock();
        st.registered_gen = generation;
        // Answer the current request again (publish, acknowledge).
        st.acked = None;
        // The ephemeral nodes created before went with the session: never
        // recreate them at a flip (their owners create new ones).
        st.ephemerals.clear();
        Ok(())
    }

    async fn follow(&self, store: Arc<dyn MetadataStore>, rec: MigrationRecord) -> Result<()> {
        let name = self.inner.options.name.clone();
        let starting = {
            let mut st = self.inner.state.lock();
            if st.tracking.as_deref() != Some(&rec.id) {
                st.tracking = Some(rec.id.clone());
                st.dirty.clear();
                st.overflow = false;
                st.acked = None;
                true
            } else {
                false
            }
        };
        if starting {
            let marked = store
                .put(
                    &format!("{}/{name}", joined_path(&rec.id)),
                    b"",
                    ExpectedVersion::Any,
                )
                .await;
            if let Err(e) = marked {
                // Not joined: start again at the next look (the marker is
                // what makes the coordinator re-scan for a participant that
                // dies with unpublished writes; tracking without it lost
                // them). Nothing was acknowledged, so the copy still covers
                // the writes made until then.
                let mut st = self.inner.state.lock();
                if st.tracking.as_deref() == Some(rec.id.as_str()) {
                    st.tracking = None;
                }
                return Err(e);
            }
        }
        if rec.phase == Phase::Paused && !self.is_paused() {
            // Wait for the writes in flight, then close the gate.
            let _all = self.inner.gate.write().await;
            let reason = format!("migration {} to {} is in its pause", rec.id, rec.target_url);
            self.set_paused(&mut self.inner.state.lock(), Some(reason));
        }
        let want = (rec.id.clone(), rec.phase, rec.round);
        if self.inner.state.lock().acked.as_ref() == Some(&want)
            && store.exists(&self.participant_path()).await?.is_some()
        {
            return Ok(());
        }
        self.publish(store.as_ref(), &rec.id).await?;
        let ack = ParticipantAck {
            migration: Some(rec.id.clone()),
            phase: Some(rec.phase),
            round: rec.round,
            node: self.inner.options.node.clone(),
        };
        let value = serde_json::to_vec(&ack).expect("serializes");
        // The node is ephemeral: never recreate it as a persistent one. A
        // session that ended took it; register again (the dirty set is
        // still here, nothing was lost).
        let path = self.participant_path();
        match store.exists(&path).await? {
            Some(stat) => {
                store
                    .put(&path, &value, ExpectedVersion::Exactly(stat.version))
                    .await?;
            }
            None => {
                if self.inner.closed.load(Ordering::Acquire) {
                    return Ok(());
                }
                // Joined again (the coordinator waits for a joined
                // participant in the pause), then registered.
                store
                    .put(
                        &format!("{}/{name}", joined_path(&rec.id)),
                        b"",
                        ExpectedVersion::Any,
                    )
                    .await?;
                store.create(&path, &value, CreateMode::EPHEMERAL).await?;
            }
        }
        self.inner.state.lock().acked = Some(want);
        Ok(())
    }

    async fn flip(&self, old: Arc<dyn MetadataStore>, rec: MigrationRecord) -> Result<()> {
        let target = self.inner.opener.open(&rec.target_url).await?;
        let ephemerals: Vec<(String, Vec<u8>)> = self
            .inner
            .state
            .lock()
            .ephemerals
            .iter()
            .map(|(p, v)| (p.clone(), v.clone()))
            .collect();
        for (path, value) in ephemerals {
            // Only those still in the source as this participant left them:
            // one deleted meanwhile (by its session's end, or by another
            // client) does not come back.
            match old.get(&path).await {
                Ok(Some(r)) if r.stat.ephemeral && r.value == value => {}
                Ok(_) => {
                    self.inner.state.lock().ephemerals.remove(&path);
                    continue;
                }
                Err(e) => return Err(e),
            }
            match target.create(&path, &value, CreateMode::EPHEMERAL).await {
                Ok(_) => {}
                Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        let target_gen = target.session_generation();
        self.inner.current.store(Arc::new(Slot {
            store: target,
            url: rec.target_url.clone(),
        }));
        self.inner.swaps.fetch_add(1, Ordering::Relaxed);
        self.inner.generation.send_modify(|g| *g += 1);
        {
            let mut st = self.inner.state.lock();
            st.tracking = None;
            st.dirty.clear();
            st.overflow = false;
            self.set_paused(&mut st, None);
            st.acked = None;
            // Registered in the target right below; its ephemeral nodes are
            // recreated already.
            st.registered_gen = target_gen;
            st.completed = Some(rec.clone());
        }
        tracing::info!(
            "metadata store moved from {} to {} (migration {})",
            rec.source_url,
            rec.target_url,
            rec.id
        );
        // Leave the old store: the participant registers in the new one.
        let _ = old
            .delete(&self.participant_path(), ExpectedVersion::Any)
            .await;
        if self.inner.owns_store {
            let _ = old.close().await;
        }
        self.register().await
    }

    fn check_open(&self, op: Operation, path: &str) -> Result<()> {
        if self.inner.closed.load(Ordering::Acquire) {
            return Err(MetadataError::Closed {
                op,
                path: path.to_owned(),
            });
        }
        Ok(())
    }
}

impl MigratingStore {
    /// Passes the write gate: `None` for control paths (never gated), the
    /// in-flight guard otherwise (held until the write is tracked).
    ///
    /// An `ephemeral` write (creating an ephemeral node, or deleting one this
    /// participant created) passes the pause: ephemeral nodes are never
    /// copied — each participant recreates its own in the target at the flip
    /// — and refusing them in the pause deadlocks a cluster restarted during
    /// it: a node's start registers it with an ephemeral node, the election
    /// that picks the coordinator is made of them, and only a coordinator
    /// ends the pause (found by the nemesis: every node stopped in a pause,
    /// none could start again).
    async fn enter_gate_as(
        &self,
        op: Operation,
        path: &str,
        ephemeral: bool,
    ) -> Result<Option<tokio::sync::RwLockReadGuard<'_, ()>>> {
        self.check_open(op, path)?;
        if is_control_path(path) {
            return Ok(None);
        }
        let guard = self.inner.gate.read().await;
        let generation = self.current().session_generation();
        let st = self.inner.state.lock();
        if let Some(reason) = st.paused.clone().filter(|_| !ephemeral) {
            return Err(paused_error(op, path, &reason));
        }
        if st.registered_gen != generation {
            return Err(paused_error(
                op,
                path,
                "the metadata session ended and the participant has not registered again yet",
            ));
        }
        drop(st);
        Ok(Some(guard))
    }

    /// [`enter_gate_as`](Self::enter_gate_as) for a write of a persistent
    /// node.
    async fn enter_gate(
        &self,
        op: Operation,
        path: &str,
    ) -> Result<Option<tokio::sync::RwLockReadGuard<'_, ()>>> {
        self.enter_gate_as(op, path, false).await
    }
}

/// The participant decorates the store in use as a [`Layer`]: reads go to
/// the store in use (again on the target when a flip closed the source under
/// them), writes pass the write gate and are tracked for the next round's
/// copy, ephemeral nodes are remembered to be recreated in the target.
#[async_trait]
impl Layer for MigratingStore {
    /// The store in use: the source, the target after the flip.
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.current()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        let (op, path) = (call.operation(), call.path());
        match call {
            Call::Get { .. } | Call::Exists { .. } | Call::Children { .. } => {
                self.check_open(op, path)?;
                self.read(op, path, |s| async move { call.run(s.as_ref()).await })
                    .await
            }
            Call::Watch { .. } => {
                self.check_open(op, path)?;
                let mut gen_rx = self.inner.generation.subscribe();
                gen_rx.borrow_and_update();
                let first = self.current().watch(path).await?;
                let (tx, rx) = mpsc::unbounded_channel();
                let weak = Arc::downgrade(&self.inner);
                let owned = path.to_owned();
                tokio::spawn(crate::tasks::forward_watch(weak, owned, first, gen_rx, tx));
                Ok(Reply::Watch(WatchStream::from_channel(path, rx, None)))
            }
            Call::Close => self.close_participant().await.map(|()| Reply::Done),
            Call::Create { value, mode, .. } => {
                let _in_flight = self.enter_gate_as(op, path, mode.ephemeral).await?;
                let r = call.run(self.current().as_ref()).await;
                match &r {
                    Ok(Reply::Created(actual, _)) => {
                        self.track(actual);
                        if mode.ephemeral {
                            self.inner
                                .state
                                .lock()
                                .ephemerals
                                .insert(actual.clone(), value.to_vec());
                        }
                    }
                    _ => self.track(path),
                }
                r
            }
            Call::Delete { .. } => {
                let own_ephemeral = self.inner.state.lock().ephemerals.contains_key(path);
                let _in_flight = self.enter_gate_as(op, path, own_ephemeral).await?;
                let r = call.run(self.current().as_ref()).await;
                self.track(path);
                if r.is_ok() {
                    self.inner.state.lock().ephemerals.remove(path);
                }
                r
            }
            Call::Put { .. }
            | Call::PutVersion { .. }
            | Call::ImportVersion { .. }
            | Call::ImportSequentialCounter { .. } => {
                let _in_flight = self.enter_gate(op, path).await?;
                let r = call.run(self.current().as_ref()).await;
                self.track(path);
                r
            }
        }
    }
}

impl MigratingStore {
    /// Leaves cleanly: publishes what was written, then the marker; deletes
    /// the participant's node; closes the store in use if it owns it.
    async fn close_participant(&self) -> Result<()> {
        if self.inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let store = self.current();
        let tracking = self.inner.state.lock().tracking.clone();
        if let Some(id) = tracking {
            if self.publish(store.as_ref(), &id).await.is_ok() {
                let _ = store
                    .delete(
                        &format!("{}/{}", joined_path(&id), self.inner.options.name),
                        ExpectedVersion::Any,
                    )
                    .await;
            }
        }
        let _ = store
            .delete(&self.participant_path(), ExpectedVersion::Any)
            .await;
        self.inner.generation.send_modify(|g| *g += 1);
        if self.inner.owns_store {
            store.close().await
        } else {
            Ok(())
        }
    }
}
