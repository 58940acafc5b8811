//! The ZooKeeper backend, on the `zookeeper-async` client.
//!
//! How the client library is used, and why:
//!
//! - **Chroot** is applied here, not by the library, so that missing chroot
//!   levels can be created (at connect and after a new session) and `/` maps to
//!   the chroot node.
//! - **Timeouts.** The library queues requests while it reconnects and a request
//!   can then wait ~20 s. Every operation is bounded by
//!   [`ZkStoreOptions::operation_timeout`] and waits for the connection before
//!   sending, so nothing piles up in the library's queue while the server is
//!   unreachable; a timeout is a retryable [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable).
//! - **Connection state.** The library reports states through a listener:
//!   `Connecting` after `Connected` is a lost connection; the (deprecated)
//!   `NotConnected` state is how it reports an expired session, after which it
//!   silently opens a new session on the same handle with none of the old
//!   watches. The store therefore replaces the handle on expiry: it opens a new
//!   session itself, swaps it in (`arc-swap`), closes the old handle and re-arms
//!   every watch.
//! - **Watches.** The library does not restore watches after a reconnect (the
//!   Java client's `SetWatches`): the server forgets a connection's watches when
//!   it drops. Each watch stream is therefore a task that re-arms and re-reads
//!   after every fire, reconnection and new session, and reports the difference
//!   with what it reported last (creation id, data version, children version).
//! - **Close.** The library reports a close as done once the request is
//!   written, before the server removed the session's ephemeral nodes. The
//!   store tracks the ephemeral nodes it created in its current session and
//!   deletes them (if still its own) before closing, so that they are gone for
//!   every client when `close` returns, as with the Java client.

mod url;
mod watch;

pub use url::check_zk_host;

use std::collections::HashSet;
use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use async_trait::async_trait;
use tokio::runtime::Handle;
use tokio::sync::{broadcast, mpsc, watch as state_watch};
use tracing::{debug, info, warn};
use zookeeper_async::{Acl, ZkError, ZkState, ZooKeeper};

use crate::error::{MetadataError, Operation, Result};
use crate::memory::{check_create_args, check_delete_args, check_put_args, ephemeral_parent_error};
use crate::path::{parent, validate_path, PathUse, RESERVED_ROOT};
use crate::store::MetadataStore;
use crate::types::{CreateMode, ExpectedVersion, GetResult, SessionEvent, Stat, WatchStream};

/// Settings of a [`ZkStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkStoreOptions {
    /// Session timeout asked of ZooKeeper (the server clamps it to its
    /// `minSessionTimeout`..`maxSessionTimeout`). At least 2 s: below 1.5 s the
    /// client library's read timer rounds to zero and it reconnects in a loop.
    /// Default 30 s (Pulsar's `metadataStoreSessionTimeoutMillis`).
    pub session_timeout: Duration,
    /// Bound of every operation, waiting for the connection included. Default 10 s.
    pub operation_timeout: Duration,
    /// Bound of [`ZkStore::connect`] and of opening a new session after expiry.
    /// Default 30 s.
    pub connect_timeout: Duration,
    /// Pause between two connection attempts while no server answers. Default
    /// 100 ms.
    pub reconnect_delay: Duration,
}

impl Default for ZkStoreOptions {
    fn default() -> Self {
        ZkStoreOptions {
            session_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            reconnect_delay: Duration::from_millis(100),
        }
    }
}

impl ZkStoreOptions {
    fn validate(&self, url: &str) -> Result<()> {
        let fail = |reason: String| MetadataError::InvalidArgument {
            op: Operation::Connect,
            path: url.to_owned(),
            reason,
        };
        if self.session_timeout < Duration::from_secs(2) {
            return Err(fail(format!(
                "session_timeout {:?} is below the 2 s minimum of the ZooKeeper client",
                self.session_timeout
            )));
        }
        for (name, value) in [
            ("operation_timeout", self.operation_timeout),
            ("connect_timeout", self.connect_timeout),
            ("reconnect_delay", self.reconnect_delay),
        ] {
            if value.is_zero() {
                return Err(fail(format!("{name} must be more than zero")));
            }
        }
        Ok(())
    }
}

/// The connection state operations wait on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnState {
    Connected,
    Disconnected,
    Expired,
    Closed,
}

/// What watch tasks are told.
#[derive(Debug, Clone, Copy)]
enum Signal {
    Session(SessionEvent),
    Closed,
}

/// One ZooKeeper handle (one session).
struct Conn {
    zk: ZooKeeper,
    generation: u64,
}

/// State shared with the library's listener callbacks (which must not own the
/// store: the library keeps them alive in its own task).
struct Shared {
    state: state_watch::Sender<ConnState>,
    generation: AtomicU64,
    events: mpsc::UnboundedSender<(u64, ZkState)>,
}

struct Inner {
    url: String,
    hosts: String,
    chroot: String,
    options: ZkStoreOptions,
    conn: ArcSwap<Conn>,
    shared: Arc<Shared>,
    signals: broadcast::Sender<Signal>,
    closed: AtomicBool,
    runtime: Handle,
    owned: parking_lot::Mutex<OwnedEphemerals>,
}

/// The ephemeral nodes this store created in its current session, deleted
/// explicitly on close (see [`close_session`]).
#[derive(Debug, Default)]
struct OwnedEphemerals {
    generation: u64,
    session_id: i64,
    paths: HashSet<String>,
}

/// A [`MetadataStore`] on a ZooKeeper ensemble.
///
/// Versions, children versions, sequential names and ephemeral nodes are
/// ZooKeeper's own. Every operation is bounded by
/// [`ZkStoreOptions::operation_timeout`]. The store survives lost connections
/// (the session continues) and expired sessions (it opens a new session by
/// itself); watch streams report both and keep working.
///
/// Clones share the session. Dropping the last clone without
/// [`close`](MetadataStore::close) ends the session in the background (best
/// effort; otherwise the server expires it after the session timeout).
///
/// Known limit of the client library: a handle whose server never comes back
/// keeps trying to reconnect (every [`ZkStoreOptions::reconnect_delay`]) until
/// its runtime shuts down.
#[derive(Clone)]
pub struct ZkStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for ZkStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkStore")
            .field("url", &self.inner.url)
            .field("state", &*self.inner.shared.state.borrow())
            .field("session_generation", &self.inner.conn.load().generation)
            .finish()
    }
}

impl ZkStore {
    /// Connects to `zk://host:port[,host:port…][/chroot]`, waits for a session and
    /// creates the chroot (and its parents) if missing.
    ///
    /// Must be called within a Tokio runtime; the store's background tasks run on
    /// it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// malformed URL, bad options or no Tokio runtime;
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when no session
    /// could be opened within [`ZkStoreOptions::connect_timeout`].
    pub async fn connect(url: &str, options: ZkStoreOptions) -> Result<ZkStore> {
        let parsed = url::parse(url)?;
        options.validate(url)?;
        let runtime = Handle::try_current().map_err(|_| MetadataError::InvalidArgument {
            op: Operation::Connect,
            path: url.to_owned(),
            reason: "ZkStore::connect must run within a Tokio runtime".to_owned(),
        })?;
        let (events_tx, events_rx) = mpsc::unbounded_channel();
        let shared = Arc::new(Shared {
            state: state_watch::Sender::new(ConnState::Connected),
            generation: AtomicU64::new(1),
            events: events_tx,
        });
        let conn = open_session(url, &parsed.hosts, &parsed.chroot, &options, &shared, 1).await?;
        let (signals, _) = broadcast::channel(256);
        let inner = Arc::new(Inner {
            url: url.to_owned(),
            hosts: parsed.hosts,
            chroot: parsed.chroot,
            options,
            conn: ArcSwap::from_pointee(conn),
            shared,
            signals,
            closed: AtomicBool::new(false),
            runtime,
            owned: parking_lot::Mutex::new(OwnedEphemerals::default()),
        });
        inner
            .runtime
            .spawn(supervise(Arc::downgrade(&inner), events_rx));
        info!(url, "connected to ZooKeeper");
        Ok(ZkStore { inner })
    }

    /// The URL the store was opened with.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// Whether the store currently has a live connection.
    pub fn is_connected(&self) -> bool {
        *self.inner.shared.state.borrow() == ConnState::Connected
    }

    /// How many sessions the store has opened: 1, plus one per expiry it
    /// recovered from.
    pub fn session_generation(&self) -> u64 {
        self.inner.conn.load().generation
    }
}

/// Opens a ZooKeeper handle, waits for its session and makes sure the chroot
/// exists.
async fn open_session(
    url: &str,
    hosts: &str,
    chroot: &str,
    options: &ZkStoreOptions,
    shared: &Arc<Shared>,
    generation: u64,
) -> Result<Conn> {
    let unavailable = |reason: String| MetadataError::Unavailable {
        op: Operation::Connect,
        path: url.to_owned(),
        reason,
    };
    let connecting = ZooKeeper::connect_with_retry_time(
        hosts,
        options.session_timeout,
        |_event| {},
        options.reconnect_delay,
    );
    let deadline = tokio::time::Instant::now() + options.connect_timeout;
    let zk = match tokio::time::timeout_at(deadline, connecting).await {
        Ok(Ok(zk)) => zk,
        Ok(Err(e)) => {
            return Err(MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: url.to_owned(),
                reason: format!("the ZooKeeper client refused the hosts `{hosts}`: {e:?}"),
            })
        }
        Err(_) => {
            return Err(unavailable(format!(
                "no ZooKeeper server of `{hosts}` accepted a connection within {:?}",
                options.connect_timeout
            )))
        }
    };
    let listener_shared = shared.clone();
    zk.add_listener(move |state| on_state(&listener_shared, generation, state));
    let conn = Conn { zk, generation };
    let ready = async {
        conn.zk.exists("/", false).await?;
        create_path(&conn.zk, chroot).await
    };
    match tokio::time::timeout_at(deadline, ready).await {
        Ok(Ok(())) => Ok(conn),
        outcome => {
            let reason = match outcome {
                Ok(Err(e)) => format!("opening a session on `{hosts}` failed: {e:?}"),
                _ => format!(
                    "no ZooKeeper session on `{hosts}` within {:?}",
                    options.connect_timeout
                ),
            };
            // Best effort: lets the library's task stop once it can send it.
            tokio::spawn(async move {
                let _ = tokio::time::timeout(Duration::from_secs(5), conn.zk.close()).await;
            });
            Err(unavailable(reason))
        }
    }
}

/// Creates every level of `path` (persistent, empty), ignoring existing ones.
async fn create_path(zk: &ZooKeeper, path: &str) -> std::result::Result<(), ZkError> {
    let mut end = 0;
    while end < path.len() {
        end = path[end + 1..]
            .find('/')
            .map_or(path.len(), |i| end + 1 + i);
        match zk
            .create(
                &path[..end],
                Vec::new(),
                Acl::open_unsafe().clone(),
                zookeeper_async::CreateMode::Persistent,
            )
            .await
        {
            Ok(_) | Err(ZkError::NodeExists) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// The library's state listener: a fast path that stops operations from using
/// a lost or expired connection, and a hand-off to the supervisor.
#[allow(deprecated)]
fn on_state(shared: &Shared, generation: u64, state: ZkState) {
    if shared.generation.load(Ordering::Acquire) == generation {
        match state {
            ZkState::Connecting => {
                shared.state.send_if_modified(|s| {
                    let lost = *s == ConnState::Connected;
                    if lost {
                        *s = ConnState::Disconnected;
                    }
                    lost
                });
            }
            ZkState::NotConnected => {
                shared.state.send_if_modified(|s| {
                    let expired = *s != ConnState::Closed && *s != ConnState::Expired;
                    if expired {
                        *s = ConnState::Expired;
                    }
                    expired
                });
            }
            _ => {}
        }
    }
    let _ = shared.events.send((generation, state));
}

/// Turns the library's states into session events, and replaces the handle
/// when the session expired.
#[allow(deprecated)]
async fn supervise(store: Weak<Inner>, mut events: mpsc::UnboundedReceiver<(u64, ZkState)>) {
    let mut closed_rx = match store.upgrade() {
        Some(inner) => inner.shared.state.subscribe(),
        None => return,
    };
    let mut connected = true;
    loop {
        let (generation, state) = tokio::select! {
            event = events.recv() => match event {
                Some(event) => event,
                None => return,
            },
            changed = closed_rx.changed() => {
                if changed.is_err() || *closed_rx.borrow() == ConnState::Closed {
                    return;
                }
                continue;
            }
        };
        let Some(inner) = store.upgrade() else {
            return;
        };
        if inner.is_closed() {
            return;
        }
        if generation != inner.shared.generation.load(Ordering::Acquire) {
            continue;
        }
        match state {
            ZkState::Connecting => {
                inner.set_state_from(ConnState::Connected, ConnState::Disconnected);
                if connected {
                    connected = false;
                    warn!(url = %inner.url, "ZooKeeper connection lost");
                    inner.signal(Signal::Session(SessionEvent::ConnectionLost));
                }
            }
            ZkState::Connected | ZkState::ConnectedReadOnly => {
                inner.set_state_from(ConnState::Disconnected, ConnState::Connected);
                if !connected {
                    connected = true;
                    info!(url = %inner.url, "ZooKeeper connection re-established, same session");
                    inner.signal(Signal::Session(SessionEvent::Reconnected));
                }
            }
            ZkState::NotConnected => {
                inner.set_state_from(ConnState::Connected, ConnState::Expired);
                inner.set_state_from(ConnState::Disconnected, ConnState::Expired);
                if connected {
                    inner.signal(Signal::Session(SessionEvent::ConnectionLost));
                }
                warn!(url = %inner.url, "ZooKeeper session expired; opening a new session");
                inner.signal(Signal::Session(SessionEvent::SessionExpired));
                drop(inner);
                if !reestablish(&store).await {
                    return;
                }
                connected = true;
            }
            _ => {}
        }
    }
}

/// Opens new sessions until one works or the store goes away; false when the
/// store is closed or dropped.
async fn reestablish(store: &Weak<Inner>) -> bool {
    let mut backoff = Duration::from_millis(100);
    loop {
        let Some(inner) = store.upgrade() else {
            return false;
        };
        if inner.is_closed() {
            return false;
        }
        let generation = inner.conn.load().generation + 1;
        match open_session(
            &inner.url,
            &inner.hosts,
            &inner.chroot,
            &inner.options,
            &inner.shared,
            generation,
        )
        .await
        {
            Ok(conn) => {
                let old = inner.conn.swap(Arc::new(conn));
                inner.shared.generation.store(generation, Ordering::Release);
                inner.runtime.spawn(async move {
                    let _ = tokio::time::timeout(Duration::from_secs(5), old.zk.close()).await;
                });
                if inner.is_closed() {
                    return false;
                }
                inner.set_state_from(ConnState::Expired, ConnState::Connected);
                info!(url = %inner.url, generation, "new ZooKeeper session established");
                inner.signal(Signal::Session(SessionEvent::SessionReestablished));
                return true;
            }
            Err(e) => {
                debug!(url = %inner.url, error = %e, "opening a new ZooKeeper session failed");
                drop(inner);
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
    }
}

impl Inner {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn signal(&self, signal: Signal) {
        let _ = self.signals.send(signal);
    }

    fn set_state_from(&self, from: ConnState, to: ConnState) {
        self.shared.state.send_if_modified(|s| {
            let change = *s == from;
            if change {
                *s = to;
            }
            change
        });
    }

    /// The server-side path of a store path.
    fn full(&self, path: &str) -> String {
        if self.chroot.is_empty() {
            path.to_owned()
        } else if path == "/" {
            self.chroot.clone()
        } else {
            format!("{}{path}", self.chroot)
        }
    }

    /// The store path of a server-side path.
    fn strip<'a>(&self, full: &'a str) -> &'a str {
        match full.get(self.chroot.len()..) {
            Some("") => "/",
            Some(rest) => rest,
            None => full,
        }
    }

    fn closed_error(op: Operation, path: &str) -> MetadataError {
        MetadataError::Closed {
            op,
            path: path.to_owned(),
        }
    }

    /// Waits (within the caller's deadline) for a live connection.
    async fn conn(&self, op: Operation, path: &str) -> Result<Arc<Conn>> {
        let mut rx = self.shared.state.subscribe();
        loop {
            match *rx.borrow_and_update() {
                ConnState::Connected => return Ok(self.conn.load_full()),
                ConnState::Closed => return Err(Self::closed_error(op, path)),
                ConnState::Disconnected | ConnState::Expired => {}
            }
            if rx.changed().await.is_err() {
                return Err(Self::closed_error(op, path));
            }
        }
    }

    /// Runs one operation within the operation timeout.
    async fn run<T>(
        &self,
        op: Operation,
        path: &str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        if self.is_closed() {
            return Err(Self::closed_error(op, path));
        }
        match tokio::time::timeout(self.options.operation_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(MetadataError::Unavailable {
                op,
                path: path.to_owned(),
                reason: format!(
                    "no answer from ZooKeeper `{}` within the {:?} operation timeout \
                     (connection {})",
                    self.hosts,
                    self.options.operation_timeout,
                    match *self.shared.state.borrow() {
                        ConnState::Connected => "up",
                        ConnState::Disconnected => "lost, reconnecting",
                        ConnState::Expired => "expired, opening a new session",
                        ConnState::Closed => "closed",
                    }
                ),
            }),
        }
    }

    fn map_err(&self, e: ZkError, op: Operation, path: &str, expected: i64) -> MetadataError {
        let path = path.to_owned();
        match e {
            ZkError::NoNode => MetadataError::NotFound { op, path },
            ZkError::NodeExists => MetadataError::AlreadyExists { op, path },
            ZkError::BadVersion => MetadataError::BadVersion { op, path, expected },
            ZkError::NotEmpty => MetadataError::NotEmpty { op, path },
            ZkError::NoChildrenForEphemerals => {
                let parent = parent(&path).to_owned();
                ephemeral_parent_error(op, &path, &parent)
            }
            ZkError::ConnectionLoss | ZkError::OperationTimeout => MetadataError::Unavailable {
                op,
                path,
                reason: format!("the connection to ZooKeeper `{}` was lost", self.hosts),
            },
            ZkError::SessionExpired => MetadataError::SessionExpired { op, path },
            ZkError::BadArguments => MetadataError::InvalidArgument {
                op,
                path,
                reason: "ZooKeeper refused the request's arguments".to_owned(),
            },
            other => MetadataError::Internal {
                op,
                path,
                reason: format!("ZooKeeper error {other:?}"),
            },
        }
    }

    /// Creates `full` (with missing parents), returning the actual server path.
    async fn create_full(
        &self,
        conn: &Conn,
        op: Operation,
        path: &str,
        full: &str,
        value: &[u8],
        mode: zookeeper_async::CreateMode,
    ) -> Result<(String, zookeeper_async::Stat)> {
        let mut parents_made = false;
        loop {
            match conn
                .zk
                .create2(full, value.to_vec(), Acl::open_unsafe().clone(), mode)
                .await
            {
                Ok((actual, stat)) => {
                    if stat.ephemeral_owner != 0 {
                        self.own(conn, stat.ephemeral_owner, actual.clone());
                    }
                    return Ok((actual, stat));
                }
                Err(ZkError::NoNode) if !parents_made => {
                    parents_made = true;
                    create_path(&conn.zk, parent(full))
                        .await
                        .map_err(|e| self.map_err(e, op, path, -1))?;
                }
                Err(e) => return Err(self.map_err(e, op, path, -1)),
            }
        }
    }
}

impl Inner {
    /// Records an ephemeral node created by this store's current session.
    fn own(&self, conn: &Conn, session_id: i64, full: String) {
        let mut owned = self.owned.lock();
        if owned.generation != conn.generation {
            // Those of an earlier session are gone with it.
            *owned = OwnedEphemerals {
                generation: conn.generation,
                session_id,
                paths: HashSet::new(),
            };
        }
        owned.session_id = session_id;
        owned.paths.insert(full);
    }

    fn disown(&self, full: &str) {
        self.owned.lock().paths.remove(full);
    }

    fn take_owned(&self, conn: &Conn) -> OwnedEphemerals {
        let owned = std::mem::take(&mut *self.owned.lock());
        if owned.generation == conn.generation {
            owned
        } else {
            OwnedEphemerals::default()
        }
    }
}

/// Ends a session: deletes the ephemeral nodes the store created in it, then
/// closes the session.
///
/// The Rust client reports a close as done once the request is written, before
/// the server removed the session's ephemeral nodes (the Java client waits for
/// the server). Deleting them first (only those still owned by this session,
/// at the version read) makes them gone for every client when `close` returns,
/// as with the Java client.
async fn close_session(conn: &Conn, owned: OwnedEphemerals) -> std::result::Result<(), ZkError> {
    for path in &owned.paths {
        if let Ok(Some(stat)) = conn.zk.exists(path, false).await {
            if stat.ephemeral_owner == owned.session_id {
                let _ = conn.zk.delete(path, Some(stat.version)).await;
            }
        }
    }
    conn.zk.close().await
}

impl Drop for Inner {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            self.shared.state.send_replace(ConnState::Closed);
            let conn = self.conn.load_full();
            let owned = self.take_owned(&conn);
            let timeout = self.options.operation_timeout;
            self.runtime.spawn(async move {
                let _ = tokio::time::timeout(timeout, close_session(&conn, owned)).await;
            });
        }
    }
}

fn to_stat(s: &zookeeper_async::Stat) -> Stat {
    Stat {
        version: i64::from(s.version),
        cversion: i64::from(s.cversion),
        created_ms: s.ctime,
        modified_ms: s.mtime,
        ephemeral: s.ephemeral_owner != 0,
        num_children: i64::from(s.num_children),
    }
}

fn zk_mode(mode: CreateMode) -> zookeeper_async::CreateMode {
    match (mode.ephemeral, mode.sequential) {
        (false, false) => zookeeper_async::CreateMode::Persistent,
        (true, false) => zookeeper_async::CreateMode::Ephemeral,
        (false, true) => zookeeper_async::CreateMode::PersistentSequential,
        (true, true) => zookeeper_async::CreateMode::EphemeralSequential,
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl MetadataStore for ZkStore {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        let op = Operation::Get;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                match conn.zk.get_data(&inner.full(path), false).await {
                    Ok((value, stat)) => Ok(Some(GetResult {
                        value,
                        stat: to_stat(&stat),
                    })),
                    Err(ZkError::NoNode) => Ok(None),
                    Err(e) => Err(inner.map_err(e, op, path, -1)),
                }
            })
            .await
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, expected)?;
        let inner = &self.inner;
        let full = inner.full(path);
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let persistent = zookeeper_async::CreateMode::Persistent;
                match expected {
                    ExpectedVersion::Exactly(v) => {
                        let Ok(version) = i32::try_from(v) else {
                            // ZooKeeper versions are 32-bit: this one cannot match.
                            return match conn.zk.exists(&full, false).await {
                                Ok(Some(_)) => Err(MetadataError::BadVersion {
                                    op,
                                    path: path.to_owned(),
                                    expected: v,
                                }),
                                Ok(None) => Err(inner.map_err(ZkError::NoNode, op, path, v)),
                                Err(e) => Err(inner.map_err(e, op, path, v)),
                            };
                        };
                        conn.zk
                            .set_data(&full, value.to_vec(), Some(version))
                            .await
                            .map(|s| to_stat(&s))
                            .map_err(|e| inner.map_err(e, op, path, v))
                    }
                    ExpectedVersion::NotExists => inner
                        .create_full(&conn, op, path, &full, value, persistent)
                        .await
                        .map(|(_, stat)| to_stat(&stat)),
                    ExpectedVersion::Any => {
                        // Overwrite or create; a concurrent delete or create
                        // between the two steps makes us try the other one.
                        let mut attempts = 0;
                        loop {
                            attempts += 1;
                            match conn.zk.set_data(&full, value.to_vec(), None).await {
                                Ok(stat) => return Ok(to_stat(&stat)),
                                Err(ZkError::NoNode) => {}
                                Err(e) => return Err(inner.map_err(e, op, path, -1)),
                            }
                            match inner
                                .create_full(&conn, op, path, &full, value, persistent)
                                .await
                            {
                                Err(e)
                                    if e.kind() == crate::ErrorKind::AlreadyExists
                                        && attempts < 5 => {}
                                other => return other.map(|(_, stat)| to_stat(&stat)),
                            }
                        }
                    }
                }
            })
            .await
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        let op = Operation::Create;
        check_create_args(path, value, mode)?;
        let inner = &self.inner;
        let full = inner.full(path);
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let (actual, stat) = inner
                    .create_full(&conn, op, path, &full, value, zk_mode(mode))
                    .await?;
                Ok((inner.strip(&actual).to_owned(), to_stat(&stat)))
            })
            .await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        let op = Operation::Delete;
        check_delete_args(path, expected)?;
        let inner = &self.inner;
        let full = inner.full(path);
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let (version, expected_num) = match expected {
                    ExpectedVersion::Exactly(v) => match i32::try_from(v) {
                        Ok(v32) => (Some(v32), v),
                        // ZooKeeper versions are 32-bit: this one cannot match.
                        Err(_) => {
                            return match conn.zk.exists(&full, false).await {
                                Ok(Some(_)) => Err(MetadataError::BadVersion {
                                    op,
                                    path: path.to_owned(),
                                    expected: v,
                                }),
                                Ok(None) => Err(inner.map_err(ZkError::NoNode, op, path, v)),
                                Err(e) => Err(inner.map_err(e, op, path, v)),
                            }
                        }
                    },
                    _ => (None, -1),
                };
                conn.zk
                    .delete(&full, version)
                    .await
                    .map_err(|e| inner.map_err(e, op, path, expected_num))?;
                inner.disown(&full);
                Ok(())
            })
            .await
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        let op = Operation::Exists;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                conn.zk
                    .exists(&inner.full(path), false)
                    .await
                    .map(|s| s.as_ref().map(to_stat))
                    .map_err(|e| inner.map_err(e, op, path, -1))
            })
            .await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        let op = Operation::Children;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                let conn = inner.conn(op, path).await?;
                let mut names = match conn.zk.get_children(&inner.full(path), false).await {
                    Ok(names) => names,
                    Err(ZkError::NoNode) => Vec::new(),
                    Err(e) => return Err(inner.map_err(e, op, path, -1)),
                };
                if path == "/" && inner.chroot.is_empty() {
                    // ZooKeeper's own subtree is not part of the store.
                    names.retain(|n| n != RESERVED_ROOT);
                }
                names.sort_unstable();
                Ok(names)
            })
            .await
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        watch::start(&self.inner, path).await
    }

    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.shared.state.send_replace(ConnState::Closed);
        inner.signal(Signal::Closed);
        let conn = inner.conn.load_full();
        let owned = inner.take_owned(&conn);
        match tokio::time::timeout(inner.options.operation_timeout, close_session(&conn, owned))
            .await
        {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(inner.map_err(e, Operation::Close, "/", -1)),
            Err(_) => Err(MetadataError::Unavailable {
                op: Operation::Close,
                path: "/".to_owned(),
                reason: format!(
                    "ZooKeeper `{}` did not take the session close within {:?}; the \
                     server will expire the session",
                    inner.hosts, inner.options.operation_timeout
                ),
            }),
        }
    }
}
