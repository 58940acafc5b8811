//! Plain data of the store API.

use std::fmt;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures::Stream;
use tokio::sync::mpsc;

/// Metadata of a node, with ZooKeeper's semantics.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Stat {
    /// Data version: 0 on creation, +1 on every write of the value.
    pub version: i64,
    /// Children version, as ZooKeeper reports it: +1 on every creation and every
    /// deletion of a direct child (not on writes of a child's value).
    ///
    /// Not the sequential suffix once a child was deleted: ZooKeeper numbers
    /// sequential children by the count of child *creations*; see
    /// [`Stat::next_sequential_suffix`].
    pub cversion: i64,
    /// Creation time, milliseconds since the Unix epoch.
    pub created_ms: i64,
    /// Time of the last write of the value, milliseconds since the Unix epoch.
    pub modified_ms: i64,
    /// Whether the node is ephemeral (deleted when its session ends).
    pub ephemeral: bool,
    /// Number of direct children.
    pub num_children: i64,
}

impl Stat {
    /// The suffix the next sequential child of this node will get: the number
    /// of children created so far.
    ///
    /// ZooKeeper stores that creation count and reports
    /// `cversion = 2 × creations − children` (creations plus deletions), so the
    /// count is `(cversion + num_children) / 2`. It equals `cversion` only while
    /// no child was ever deleted: BookKeeper's id generator creates and deletes
    /// `ID-` nodes at once, so its next id is `cversion / 2`, not `cversion`.
    pub fn next_sequential_suffix(&self) -> i64 {
        (self.cversion + self.num_children) / 2
    }
}

/// A value and its metadata.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct GetResult {
    /// The node's value.
    pub value: Vec<u8>,
    /// The node's metadata.
    pub stat: Stat,
}

/// The condition of a write: Pulsar's `Optional<Long> expectedVersion`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ExpectedVersion {
    /// No condition: create the node or overwrite it, whatever its version.
    #[default]
    Any,
    /// The node must not exist (Pulsar's `Optional.of(-1L)`): create-if-absent.
    NotExists,
    /// The node must exist with exactly this version (compare-and-set).
    Exactly(i64),
}

impl ExpectedVersion {
    /// Converts Pulsar's encoding: `None` → [`Any`](Self::Any), `Some(-1)` →
    /// [`NotExists`](Self::NotExists), `Some(v)` → [`Exactly(v)`](Self::Exactly).
    pub fn from_pulsar(expected: Option<i64>) -> Self {
        match expected {
            None => ExpectedVersion::Any,
            Some(-1) => ExpectedVersion::NotExists,
            Some(v) => ExpectedVersion::Exactly(v),
        }
    }
}

/// How [`MetadataStore::create`](crate::MetadataStore::create) creates a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct CreateMode {
    /// Delete the node when the session that created it ends.
    pub ephemeral: bool,
    /// Append the parent's count of child creations as a 10-digit, zero-padded
    /// suffix (`%010d`), exactly as ZooKeeper does (see
    /// [`Stat::next_sequential_suffix`]).
    pub sequential: bool,
}

impl CreateMode {
    /// A plain node.
    pub const PERSISTENT: CreateMode = CreateMode {
        ephemeral: false,
        sequential: false,
    };
    /// A node deleted with its session.
    pub const EPHEMERAL: CreateMode = CreateMode {
        ephemeral: true,
        sequential: false,
    };
    /// A plain node with a sequence suffix.
    pub const PERSISTENT_SEQUENTIAL: CreateMode = CreateMode {
        ephemeral: false,
        sequential: true,
    };
    /// A node with a sequence suffix, deleted with its session (BookKeeper's id
    /// generator, leader election).
    pub const EPHEMERAL_SEQUENTIAL: CreateMode = CreateMode {
        ephemeral: true,
        sequential: true,
    };
}

/// A change of the store's session, reported on every watch stream of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SessionEvent {
    /// The connection dropped; the session may still be alive. Operations wait
    /// (up to their timeout) for the connection to come back.
    ConnectionLost,
    /// The connection is back with the same session. The watch is re-armed and
    /// changes made meanwhile are reported as ordinary notifications (after
    /// this event).
    Reconnected,
    /// The session ended: its ephemeral nodes are gone. The store opens a new
    /// session by itself.
    SessionExpired,
    /// A new session is up after [`SessionEvent::SessionExpired`]. The watch is
    /// re-armed and changes made meanwhile (the expired session's ephemeral
    /// nodes are gone) are reported as ordinary notifications, after this event
    /// on ZooKeeper, between the two events on [`MemoryStore`](crate::MemoryStore).
    SessionReestablished,
}

/// A change observed by a watch.
///
/// Notifications are hints: read the node to learn its state. Several quick
/// changes may be reported as one notification, but the last change is never
/// lost (see [`MetadataStore::watch`](crate::MetadataStore::watch)).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Notification {
    /// The watched node was created.
    Created {
        /// The watched path.
        path: String,
    },
    /// The watched node's value was written.
    Modified {
        /// The watched path.
        path: String,
    },
    /// The watched node was deleted.
    Deleted {
        /// The watched path.
        path: String,
    },
    /// A direct child of the watched node was created or deleted.
    ChildrenChanged {
        /// The watched path (the parent).
        path: String,
    },
    /// The store's session changed.
    Session(SessionEvent),
}

impl Notification {
    /// The path of a node notification; `None` for session events.
    pub fn path(&self) -> Option<&str> {
        match self {
            Notification::Created { path }
            | Notification::Modified { path }
            | Notification::Deleted { path }
            | Notification::ChildrenChanged { path } => Some(path),
            Notification::Session(_) => None,
        }
    }
}

/// The notifications of one watched path (see
/// [`MetadataStore::watch`](crate::MetadataStore::watch)).
///
/// Dropping the stream cancels the watch. The stream ends when the store is
/// closed.
pub struct WatchStream {
    path: String,
    rx: mpsc::UnboundedReceiver<Notification>,
    _guard: Option<Box<dyn Send + Sync>>,
}

impl WatchStream {
    /// A stream fed by `rx`; `guard` is dropped with the stream (used to
    /// unregister the watch).
    pub(crate) fn new(
        path: String,
        rx: mpsc::UnboundedReceiver<Notification>,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        Self {
            path,
            rx,
            _guard: guard,
        }
    }

    /// A stream fed by `rx`, for a store that wraps another one and forwards
    /// (or re-arms) its watches; `guard` is dropped with the stream.
    pub fn from_channel(
        path: impl Into<String>,
        rx: mpsc::UnboundedReceiver<Notification>,
        guard: Option<Box<dyn Send + Sync>>,
    ) -> Self {
        Self::new(path.into(), rx, guard)
    }

    /// The watched path.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// A notification that is already queued, without waiting.
    pub fn try_next(&mut self) -> Option<Notification> {
        self.rx.try_recv().ok()
    }
}

impl fmt::Debug for WatchStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WatchStream")
            .field("path", &self.path)
            .field("queued", &self.rx.len())
            .finish()
    }
}

impl Stream for WatchStream {
    type Item = Notification;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Notification>> {
        self.rx.poll_recv(cx)
    }
}
