//! The in-memory backend: the embedded default, with ZooKeeper's semantics.

use std::collections::{BTreeSet, HashMap};
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::sync::mpsc;

use crate::error::{MetadataError, Operation, Result};
use crate::path::{check_value, name, parent, validate_path, validate_sequential_prefix, PathUse};
use crate::store::MetadataStore;
use crate::types::{
    CreateMode, ExpectedVersion, GetResult, Notification, SessionEvent, Stat, WatchStream,
};

/// An in-memory [`MetadataStore`] with ZooKeeper's semantics: versions,
/// children versions, sequential names, ephemeral nodes, sessions and
/// notifications.
///
/// A `MemoryStore` value is one session on a shared tree. Clones share the
/// session; [`MemoryStore::new_session`] opens another session on the same tree
/// (another "client"), with its own ephemeral nodes and watch streams. The
/// session ends with [`MetadataStore::close`], or when the last clone is dropped
/// (like a ZooKeeper session timing out), and can be expired on demand with
/// [`MemoryStore::expire_session`] to test session handling.
///
/// Notifications are delivered for every change, in order (no coalescing).
#[derive(Clone)]
pub struct MemoryStore {
    handle: Arc<Handle>,
}

struct Handle {
    shared: Arc<Shared>,
    id: u64,
    session: AtomicU64,
    closed: AtomicBool,
}

struct Shared {
    state: Mutex<State>,
    next_id: AtomicU64,
}

#[derive(Default)]
struct State {
    nodes: HashMap<String, Node>,
    ephemerals: HashMap<u64, BTreeSet<String>>,
    watchers: HashMap<String, Vec<WatchEntry>>,
}

struct Node {
    value: Vec<u8>,
    version: i64,
    /// Children created so far: ZooKeeper's stored `cversion`, the next
    /// sequential suffix. The reported `cversion` is derived from it.
    creations: i64,
    created_ms: i64,
    modified_ms: i64,
    owner: u64,
    children: BTreeSet<String>,
}

struct WatchEntry {
    id: u64,
    handle: u64,
    tx: mpsc::UnboundedSender<Notification>,
}

impl Node {
    fn new(value: Vec<u8>, owner: u64) -> Self {
        let now = now_ms();
        Node {
            value,
            version: 0,
            creations: 0,
            created_ms: now,
            modified_ms: now,
            owner,
            children: BTreeSet::new(),
        }
    }

    fn stat(&self) -> Stat {
        let children = self.children.len() as i64;
        Stat {
            version: self.version,
            // What ZooKeeper reports (DataNode.copyStat): creations + deletions.
            cversion: self.creations * 2 - children,
            created_ms: self.created_ms,
            modified_ms: self.modified_ms,
            ephemeral: self.owner != 0,
            num_children: children,
        }
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("handle", &self.handle.id)
            .field("session", &self.handle.session.load(Ordering::Relaxed))
            .field("closed", &self.handle.closed.load(Ordering::Relaxed))
            .finish()
    }
}

impl MemoryStore {
    /// A new, empty tree (only `/` exists) and a first session on it.
    pub fn new() -> Self {
        let mut state = State::default();
        state.nodes.insert("/".to_owned(), Node::new(Vec::new(), 0));
        let shared = Arc::new(Shared {
            state: Mutex::new(state),
            next_id: AtomicU64::new(1),
        });
        Self::open(shared)
    }

    fn open(shared: Arc<Shared>) -> Self {
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let session = shared.next_id.fetch_add(1, Ordering::Relaxed);
        MemoryStore {
            handle: Arc::new(Handle {
                shared,
                id,
                session: AtomicU64::new(session),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// Another session on the same tree, as a second client of one ZooKeeper
    /// ensemble would have.
    pub fn new_session(&self) -> MemoryStore {
        Self::open(self.handle.shared.clone())
    }

    /// Expires this session, as a ZooKeeper server does when a client is silent
    /// for longer than its session timeout: every watch stream of this session
    /// receives [`SessionEvent::SessionExpired`], the session's ephemeral nodes
    /// are deleted (with their notifications), then a new session starts and
    /// [`SessionEvent::SessionReestablished`] follows. The store keeps working.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Closed`](crate::ErrorKind::Closed) when the store is closed.
    pub fn expire_session(&self) -> Result<()> {
        self.check_open(Operation::Close, "/")?;
        let handle = &self.handle;
        let mut state = handle.shared.state.lock();
        state.notify_handle(handle.id, SessionEvent::SessionExpired);
        let new_session = handle.shared.next_id.fetch_add(1, Ordering::Relaxed);
        let old = handle.session.swap(new_session, Ordering::Relaxed);
        state.remove_ephemerals(old);
        state.notify_handle(handle.id, SessionEvent::SessionReestablished);
        Ok(())
    }

    /// Tells every watch stream of this session that its connection to the
    /// server was lost (`connected == false`:
    /// [`SessionEvent::ConnectionLost`]) or is back
    /// ([`SessionEvent::Reconnected`]), as a ZooKeeper client does during a
    /// network partition shorter than its session timeout. The session and
    /// its ephemeral nodes stay; the store's own calls keep working, so a test
    /// that also wants them to fail wraps the store in a gate of its own.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Closed`](crate::ErrorKind::Closed) when the store is closed.
    pub fn announce_connection(&self, connected: bool) -> Result<()> {
        self.check_open(Operation::Close, "/")?;
        let event = if connected {
            SessionEvent::Reconnected
        } else {
            SessionEvent::ConnectionLost
        };
        self.handle
            .shared
            .state
            .lock()
            .notify_handle(self.handle.id, event);
        Ok(())
    }

    fn check_open(&self, op: Operation, path: &str) -> Result<()> {
        if self.handle.closed.load(Ordering::Acquire) {
            return Err(MetadataError::Closed {
                op,
                path: path.to_owned(),
            });
        }
        Ok(())
    }

    fn session(&self) -> u64 {
        self.handle.session.load(Ordering::Relaxed)
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if !self.closed.swap(true, Ordering::AcqRel) {
            let mut state = self.shared.state.lock();
            state.remove_ephemerals(self.session.load(Ordering::Relaxed));
            state.remove_handle_watchers(self.id);
        }
    }
}

fn invalid_expected(op: Operation, path: &str, expected: ExpectedVersion) -> Result<()> {
    if let ExpectedVersion::Exactly(v) = expected {
        if v < 0 {
            return Err(MetadataError::InvalidArgument {
                op,
                path: path.to_owned(),
                reason: format!(
                    "expected version {v} is negative; use ExpectedVersion::NotExists for \
                     create-if-absent"
                ),
            });
        }
    }
    Ok(())
}

/// Shared argument checks of `delete` (both backends).
pub(crate) fn check_delete_args(path: &str, expected: ExpectedVersion) -> Result<()> {
    validate_path(Operation::Delete, path, PathUse::Write)?;
    if path == "/" {
        return Err(MetadataError::InvalidPath {
            op: Operation::Delete,
            path: path.to_owned(),
            rule: "the root node cannot be deleted",
        });
    }
    if expected == ExpectedVersion::NotExists {
        return Err(MetadataError::InvalidArgument {
            op: Operation::Delete,
            path: path.to_owned(),
            reason: "ExpectedVersion::NotExists makes no sense for a delete; use Any or \
                     Exactly(version)"
                .to_owned(),
        });
    }
    invalid_expected(Operation::Delete, path, expected)
}

/// Shared argument checks of `put` (both backends).
pub(crate) fn check_put_args(path: &str, value: &[u8], expected: ExpectedVersion) -> Result<()> {
    validate_path(Operation::Put, path, PathUse::Write)?;
    check_value(Operation::Put, path, value)?;
    invalid_expected(Operation::Put, path, expected)
}

/// Shared argument checks of `create` (both backends).
pub(crate) fn check_create_args(path: &str, value: &[u8], mode: CreateMode) -> Result<()> {
    if mode.sequential {
        validate_sequential_prefix(Operation::Create, path)?;
    } else {
        validate_path(Operation::Create, path, PathUse::Write)?;
        if path == "/" {
            return Err(MetadataError::AlreadyExists {
                op: Operation::Create,
                path: path.to_owned(),
            });
        }
    }
    check_value(Operation::Create, path, value)
}

/// Rejects a negative imported version.
pub(crate) fn check_import_version(path: &str, version: i64) -> Result<()> {
    if version < 0 {
        return Err(MetadataError::InvalidArgument {
            op: Operation::Put,
            path: path.to_owned(),
            reason: format!("cannot import the negative version {version}; versions start at 0"),
        });
    }
    Ok(())
}

pub(crate) fn check_import_counter(path: &str, next: i64) -> Result<()> {
    validate_path(Operation::Put, path, PathUse::Write)?;
    if next < 0 {
        return Err(MetadataError::InvalidArgument {
            op: Operation::Put,
            path: path.to_owned(),
            reason: format!(
                "cannot import the negative sequential counter {next}; suffixes start at 0"
            ),
        });
    }
    Ok(())
}

pub(crate) fn ephemeral_counter_error(path: &str) -> MetadataError {
    MetadataError::InvalidArgument {
        op: Operation::Put,
        path: path.to_owned(),
        reason: "the node is ephemeral and has no children, so no sequential counter to \
                 import; import counters on persistent parents"
            .to_owned(),
    }
}

pub(crate) fn ephemeral_parent_error(op: Operation, path: &str, parent: &str) -> MetadataError {
    MetadataError::InvalidArgument {
        op,
        path: path.to_owned(),
        reason: format!(
            "the parent `{parent}` is an ephemeral node and cannot have children; use a \
             persistent parent"
        ),
    }
}

impl State {
    fn send(&mut self, path: &str, notification: impl Fn() -> Notification) {
        if self.watchers.is_empty() {
            return;
        }
        if let Some(entries) = self.watchers.get_mut(path) {
            entries.retain(|w| w.tx.send(notification()).is_ok());
            if entries.is_empty() {
                self.watchers.remove(path);
            }
        }
    }

    fn notify_handle(&mut self, handle: u64, event: SessionEvent) {
        for entries in self.watchers.values_mut() {
            for w in entries.iter().filter(|w| w.handle == handle) {
                let _ = w.tx.send(Notification::Session(event));
            }
        }
    }

    fn remove_handle_watchers(&mut self, handle: u64) {
        self.watchers.retain(|_, entries| {
            entries.retain(|w| w.handle != handle);
            !entries.is_empty()
        });
    }

    /// Creates the missing ancestors of `path` (persistent, empty), top-down.
    fn ensure_parents(&mut self, op: Operation, path: &str) -> Result<()> {
        let mut missing = Vec::new();
        let mut p = parent(path);
        loop {
            match self.nodes.get(p) {
                Some(node) if node.owner != 0 => {
                    return Err(ephemeral_parent_error(op, path, p));
                }
                Some(_) => break,
                None => {
                    missing.push(p.to_owned());
                    p = parent(p);
                }
            }
        }
        for p in missing.into_iter().rev() {
            self.create_node(op, p, Vec::new(), 0)?;
        }
        Ok(())
    }

    /// Creates one node whose parent exists.
    fn create_node(
        &mut self,
        op: Operation,
        path: String,
        value: Vec<u8>,
        owner: u64,
    ) -> Result<Stat> {
        let parent_path = parent(&path).to_owned();
        let Some(parent_node) = self.nodes.get_mut(&parent_path) else {
            return Err(MetadataError::NotFound { op, path });
        };
        if parent_node.owner != 0 {
            return Err(ephemeral_parent_error(op, &path, &parent_path));
        }
        if parent_node.children.contains(name(&path)) {
            return Err(MetadataError::AlreadyExists { op, path });
        }
        parent_node.children.insert(name(&path).to_owned());
        parent_node.creations += 1;
        let node = Node::new(value, owner);
        let stat = node.stat();
        if owner != 0 {
            self.ephemerals
                .entry(owner)
                .or_default()
                .insert(path.clone());
        }
        self.nodes.insert(path.clone(), node);
        self.send(&path, || Notification::Created { path: path.clone() });
        self.send(&parent_path, || Notification::ChildrenChanged {
            path: parent_path.clone(),
        });
        Ok(stat)
    }

    /// Deletes one node after the checks passed.
    fn remove_node(&mut self, path: &str) {
        let Some(node) = self.nodes.remove(path) else {
            return;
        };
        if node.owner != 0 {
            if let Some(set) = self.ephemerals.get_mut(&node.owner) {
                set.remove(path);
                if set.is_empty() {
                    self.ephemerals.remove(&node.owner);
                }
            }
        }
        let parent_path = parent(path);
        if let Some(parent_node) = self.nodes.get_mut(parent_path) {
            // The reported cversion grows through the smaller child count.
            parent_node.children.remove(name(path));
        }
        self.send(path, || Notification::Deleted {
            path: path.to_owned(),
        });
        self.send(parent_path, || Notification::ChildrenChanged {
            path: parent_path.to_owned(),
        });
    }

    fn remove_ephemerals(&mut self, session: u64) {
        if let Some(paths) = self.ephemerals.remove(&session) {
            for p in paths {
                self.remove_node(&p);
            }
        }
    }
}

struct WatchGuard {
    shared: Weak<Shared>,
    path: String,
    id: u64,
}

impl Drop for WatchGuard {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.upgrade() {
            let mut state = shared.state.lock();
            if let Some(entries) = state.watchers.get_mut(&self.path) {
                entries.retain(|w| w.id != self.id);
                if entries.is_empty() {
                    state.watchers.remove(&self.path);
                }
            }
        }
    }
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl MetadataStore for MemoryStore {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        validate_path(Operation::Get, path, PathUse::Read)?;
        self.check_open(Operation::Get, path)?;
        let state = self.handle.shared.state.lock();
        Ok(state.nodes.get(path).map(|n| GetResult {
            value: n.value.clone(),
            stat: n.stat(),
        }))
    }

    async fn put_version(
        &self,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
    ) -> Result<i64> {
        // Nothing to leave out: the write answers the whole `Stat`.
        Ok(self.put(path, value, expected).await?.version)
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        check_put_args(path, value, expected)?;
        self.check_open(Operation::Put, path)?;
        let mut state = self.handle.shared.state.lock();
        if let Some(node) = state.nodes.get_mut(path) {
            match expected {
                ExpectedVersion::NotExists => {
                    return Err(MetadataError::AlreadyExists {
                        op: Operation::Put,
                        path: path.to_owned(),
                    })
                }
                ExpectedVersion::Exactly(v) if v != node.version => {
                    return Err(MetadataError::BadVersion {
                        op: Operation::Put,
                        path: path.to_owned(),
                        expected: v,
                    })
                }
                _ => {}
            }
            node.value.clear();
            node.value.extend_from_slice(value);
            node.version += 1;
            node.modified_ms = now_ms();
            let stat = node.stat();
            state.send(path, || Notification::Modified {
                path: path.to_owned(),
            });
            return Ok(stat);
        }
        if let ExpectedVersion::Exactly(_) = expected {
            return Err(MetadataError::NotFound {
                op: Operation::Put,
                path: path.to_owned(),
            });
        }
        state.ensure_parents(Operation::Put, path)?;
        state.create_node(Operation::Put, path.to_owned(), value.to_vec(), 0)
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        check_create_args(path, value, mode)?;
        self.check_open(Operation::Create, path)?;
        let owner = if mode.ephemeral { self.session() } else { 0 };
        let mut state = self.handle.shared.state.lock();
        let actual = if mode.sequential {
            state.ensure_parents(Operation::Create, path)?;
            let parent_path = parent(path);
            // ZooKeeper numbers by child creations, not by the reported cversion.
            let creations = state.nodes.get(parent_path).map_or(0, |n| n.creations);
            format!("{path}{creations:010}")
        } else {
            state.ensure_parents(Operation::Create, path)?;
            path.to_owned()
        };
        let stat = state.create_node(Operation::Create, actual.clone(), value.to_vec(), owner)?;
        Ok((actual, stat))
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        check_delete_args(path, expected)?;
        self.check_open(Operation::Delete, path)?;
        let mut state = self.handle.shared.state.lock();
        let Some(node) = state.nodes.get(path) else {
            return Err(MetadataError::NotFound {
                op: Operation::Delete,
                path: path.to_owned(),
            });
        };
        if let ExpectedVersion::Exactly(v) = expected {
            if v != node.version {
                return Err(MetadataError::BadVersion {
                    op: Operation::Delete,
                    path: path.to_owned(),
                    expected: v,
                });
            }
        }
        if !node.children.is_empty() {
            return Err(MetadataError::NotEmpty {
                op: Operation::Delete,
                path: path.to_owned(),
            });
        }
        state.remove_node(path);
        Ok(())
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        validate_path(Operation::Exists, path, PathUse::Read)?;
        self.check_open(Operation::Exists, path)?;
        let state = self.handle.shared.state.lock();
        Ok(state.nodes.get(path).map(Node::stat))
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        validate_path(Operation::Children, path, PathUse::Read)?;
        self.check_open(Operation::Children, path)?;
        let state = self.handle.shared.state.lock();
        Ok(state
            .nodes
            .get(path)
            .map(|n| n.children.iter().cloned().collect())
            .unwrap_or_default())
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        validate_path(Operation::Watch, path, PathUse::Read)?;
        self.check_open(Operation::Watch, path)?;
        let (tx, rx) = mpsc::unbounded_channel();
        let shared = &self.handle.shared;
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let mut state = shared.state.lock();
        // Checked again under the lock: `close` removes watchers under it.
        self.check_open(Operation::Watch, path)?;
        state
            .watchers
            .entry(path.to_owned())
            .or_default()
            .push(WatchEntry {
                id,
                handle: self.handle.id,
                tx,
            });
        let guard = WatchGuard {
            shared: Arc::downgrade(shared),
            path: path.to_owned(),
            id,
        };
        Ok(WatchStream::new(path.to_owned(), rx, Some(Box::new(guard))))
    }

    async fn close(&self) -> Result<()> {
        let handle = &self.handle;
        let mut state = handle.shared.state.lock();
        if handle.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        state.remove_ephemerals(handle.session.load(Ordering::Relaxed));
        state.remove_handle_watchers(handle.id);
        Ok(())
    }

    fn can_import_versions(&self) -> bool {
        true
    }

    fn session_generation(&self) -> Option<u64> {
        Some(self.handle.session.load(Ordering::Relaxed))
    }

    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, ExpectedVersion::NotExists)?;
        check_import_version(path, version)?;
        self.check_open(op, path)?;
        let mut state = self.handle.shared.state.lock();
        if state.nodes.contains_key(path) {
            return Err(MetadataError::AlreadyExists {
                op,
                path: path.to_owned(),
            });
        }
        state.ensure_parents(op, path)?;
        state.create_node(op, path.to_owned(), value.to_vec(), 0)?;
        let node = state
            .nodes
            .get_mut(path)
            .ok_or_else(|| MetadataError::Internal {
                op,
                path: path.to_owned(),
                reason: "the imported node vanished".to_owned(),
            })?;
        node.version = version;
        Ok(node.stat())
    }

    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_import_counter(path, next)?;
        self.check_open(op, path)?;
        let mut state = self.handle.shared.state.lock();
        let node = state
            .nodes
            .get_mut(path)
            .ok_or_else(|| MetadataError::NotFound {
                op,
                path: path.to_owned(),
            })?;
        if node.owner != 0 {
            return Err(ephemeral_counter_error(path));
        }
        node.creations = node.creations.max(next);
        Ok(node.stat())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_lost_connection_is_announced_to_this_session_only_and_keeps_ephemerals() {
        let a = MemoryStore::new();
        let b = a.new_session();
        a.create("/e", b"x", CreateMode::EPHEMERAL).await.unwrap();
        let mut wa = a.watch("/e").await.unwrap();
        let mut wb = b.watch("/e").await.unwrap();
        a.announce_connection(false).unwrap();
        a.announce_connection(true).unwrap();
        assert_eq!(
            wa.next().await,
            Some(Notification::Session(SessionEvent::ConnectionLost))
        );
        assert_eq!(
            wa.next().await,
            Some(Notification::Session(SessionEvent::Reconnected))
        );
        assert!(wb.try_next().is_none(), "another session heard nothing");
        assert!(b.exists("/e").await.unwrap().unwrap().ephemeral);
        a.close().await.unwrap();
        assert!(a.announce_connection(true).is_err());
    }

    #[tokio::test]
    async fn expire_session_emits_events_and_removes_ephemerals() {
        let a = MemoryStore::new();
        let b = a.new_session();
        a.create("/e", b"x", CreateMode::EPHEMERAL).await.unwrap();
        let mut wa = a.watch("/e").await.unwrap();
        let mut wb = b.watch("/e").await.unwrap();
        a.expire_session().unwrap();
        assert_eq!(
            wa.next().await,
            Some(Notification::Session(SessionEvent::SessionExpired))
        );
        assert_eq!(
            wa.next().await,
            Some(Notification::Deleted { path: "/e".into() })
        );
        assert_eq!(
            wa.next().await,
            Some(Notification::Session(SessionEvent::SessionReestablished))
        );
        assert_eq!(
            wb.next().await,
            Some(Notification::Deleted { path: "/e".into() })
        );
        assert!(wb.try_next().is_none());
        // The new session works and owns new ephemerals.
        a.create("/e", b"y", CreateMode::EPHEMERAL).await.unwrap();
        assert!(b.exists("/e").await.unwrap().unwrap().ephemeral);
        a.close().await.unwrap();
        assert!(b.exists("/e").await.unwrap().is_none());
        assert_eq!(
            wa.next().await,
            Some(Notification::Created { path: "/e".into() })
        );
        assert_eq!(
            wa.next().await,
            Some(Notification::Deleted { path: "/e".into() })
        );
        assert_eq!(wa.next().await, None, "stream ends on close");
        assert!(a.expire_session().is_err());
    }

    #[tokio::test]
    async fn dropping_the_last_clone_ends_the_session() {
        let a = MemoryStore::new();
        let b = a.new_session();
        let b2 = b.clone();
        b.create("/e", b"", CreateMode::EPHEMERAL).await.unwrap();
        drop(b);
        assert!(a.exists("/e").await.unwrap().is_some(), "a clone is alive");
        drop(b2);
        assert!(a.exists("/e").await.unwrap().is_none());
    }

    #[tokio::test]
    async fn dropped_watch_stream_unregisters() {
        let a = MemoryStore::new();
        let w = a.watch("/x").await.unwrap();
        drop(w);
        assert!(a.handle.shared.state.lock().watchers.is_empty());
    }
}
