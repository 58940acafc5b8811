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

mod ops;
mod session;
mod tls;
pub(crate) mod url;
mod watch;

use session::{close_session, create_path, denied_reason, node_acl, open_session, supervise};

pub use tls::ZkTls;
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
use crate::memory::{
    check_create_args, check_delete_args, check_import_version, check_put_args,
    ephemeral_parent_error,
};
use crate::path::{parent, validate_path, PathUse, RESERVED_ROOT};
use crate::secret::Secret;
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
    /// Digest credentials (`addAuthInfo("digest", "user:password")`), sent
    /// on every connection. With them, every node the store creates carries
    /// ZooKeeper's `CREATOR_ALL_ACL` (all rights to this user only, as Pulsar
    /// does with ZooKeeper authentication), and connecting checks that they
    /// can read the chroot. Default none: open ACLs, as before.
    pub auth: Option<ZkAuth>,
    /// TLS to the servers' `secureClientPort` (see [`ZkTls`]). Default none:
    /// plain TCP to `clientPort`.
    pub tls: Option<ZkTls>,
}

/// Digest credentials of a [`ZkStore`] (ZooKeeper's `digest` scheme, on by
/// default on every server). `Debug` prints the password as `***`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkAuth {
    /// The user name (no `:`).
    pub user: String,
    /// The password, e.g. from [`Secret::from_file`].
    pub password: Secret,
}

impl ZkAuth {
    /// Digest credentials of `user`.
    pub fn digest(user: impl Into<String>, password: Secret) -> ZkAuth {
        ZkAuth {
            user: user.into(),
            password,
        }
    }

    /// The ACL of the nodes the store creates with these credentials.
    fn acl() -> Vec<Acl> {
        Acl::creator_all().clone()
    }

    /// Sends the credentials on the handle's current connection.
    async fn send(&self, zk: &ZooKeeper) -> std::result::Result<(), ZkError> {
        let auth = format!("{}:{}", self.user, self.password.expose());
        zk.add_auth("digest", auth.into_bytes()).await
    }
}

impl Default for ZkStoreOptions {
    fn default() -> Self {
        ZkStoreOptions {
            session_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            reconnect_delay: Duration::from_millis(100),
            auth: None,
            tls: None,
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
        if let Some(auth) = &self.auth {
            if auth.user.is_empty() || auth.user.contains(':') {
                return Err(fail(format!(
                    "the ZooKeeper digest user `{}` must be non-empty and have no `:`",
                    auth.user
                )));
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
    /// The TLS listeners the client connects through (`hosts` names them).
    _tunnels: Option<tls::Tunnels>,
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
        let tunnels = match &options.tls {
            Some(t) => Some(tls::open(url, &parsed.hosts, t).await?),
            None => None,
        };
        let hosts = tunnels
            .as_ref()
            .map_or_else(|| parsed.hosts.clone(), |t| t.hosts.clone());
        let conn = open_session(url, &hosts, &parsed.chroot, &options, &shared, 1).await?;
        let (signals, _) = broadcast::channel(256);
        let inner = Arc::new(Inner {
            url: url.to_owned(),
            hosts,
            chroot: parsed.chroot,
            options,
            conn: ArcSwap::from_pointee(conn),
            shared,
            signals,
            closed: AtomicBool::new(false),
            runtime,
            owned: parking_lot::Mutex::new(OwnedEphemerals::default()),
            _tunnels: tunnels,
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

    /// The ACL of the nodes this store creates.
    fn acl(&self) -> Vec<Acl> {
        node_acl(&self.options)
    }

    fn denied_reason(&self) -> String {
        denied_reason(&self.options)
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
            ZkError::NoAuth | ZkError::AuthFailed => MetadataError::PermissionDenied {
                op,
                path,
                reason: self.denied_reason(),
            },
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
                .create2(full, value.to_vec(), self.acl(), mode)
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
                    create_path(&conn.zk, parent(full), self.acl())
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
