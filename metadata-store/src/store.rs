//! The store trait, its extension trait and the `Arc` forwarding impl.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;

use crate::error::{ErrorKind, MetadataError, Operation, Result};
use crate::path::{join, validate_path, PathUse};
use crate::types::{CreateMode, ExpectedVersion, GetResult, Stat, WatchStream};

/// A versioned key-value store with watches, shaped like Pulsar's
/// `MetadataStore`: every update of shared metadata is a compare-and-set on a
/// node version (invariant [I3](bkswitch_docs::invariants::I3)).
///
/// # Contract
///
/// Every implementation (the conformance suite in [`testkit`](crate::testkit)
/// checks each point):
///
/// - **Paths** follow [`validate_path`](crate::validate_path); a bad path fails
///   with [`ErrorKind::InvalidPath`] and changes nothing. Values longer than
///   [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN) fail with
///   [`ErrorKind::InvalidArgument`].
/// - **Versions** are ZooKeeper's: 0 when a node is created, +1 per write of its
///   value. `cversion` counts creations and deletions of direct children;
///   sequential suffixes count creations only ([`Stat::next_sequential_suffix`]).
/// - **Conditional writes** are atomic: of several writers expecting the same
///   version exactly one succeeds. A write expecting
///   [`ExpectedVersion::NotExists`] on an existing node fails with
///   [`ErrorKind::AlreadyExists`]; one expecting [`ExpectedVersion::Exactly`] on a
///   missing node fails with [`ErrorKind::NotFound`], and on another version with
///   [`ErrorKind::BadVersion`] (ZooKeeper's codes; Pulsar folds all three into
///   `BadVersionException`, see [`MetadataError::is_conflict`]). A failed write
///   changes nothing.
/// - **Missing parents** are created (persistent, empty) by `put` and `create`.
///   An ephemeral node cannot have children.
/// - **Sessions**: ephemeral nodes belong to the store's session and are deleted
///   when it ends ([`close`](Self::close), expiry, or dropping the last handle).
/// - **Retries**: [`MetadataError::is_retryable`] errors
///   ([`ErrorKind::Unavailable`], [`ErrorKind::SessionExpired`]) may hide a write
///   that was applied; re-read before retrying an unconditional write. Every
///   operation of a networked backend is bounded by a timeout.
/// - After [`close`](Self::close), every operation fails with
///   [`ErrorKind::Closed`].
///
/// # Decorating
///
/// The trait has no defaulted methods: an implementation names every one.
/// A decorator implements [`Layer`](crate::layer::Layer) instead, which turns
/// every method into one [`Call`](crate::layer::Call) and forwards what it
/// does not change, so that no method bypasses it.
#[async_trait]
pub trait MetadataStore: Send + Sync + Debug {
    /// Reads a node; `Ok(None)` when it does not exist (as in Pulsar).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidPath`], [`ErrorKind::Unavailable`],
    /// [`ErrorKind::SessionExpired`], [`ErrorKind::Closed`].
    async fn get(&self, path: &str) -> Result<Option<GetResult>>;

    /// Writes a node's value if the node matches `expected`, creating the node
    /// (and its missing parents) when `expected` allows it. Returns the new
    /// metadata.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::BadVersion`], [`ErrorKind::AlreadyExists`],
    /// [`ErrorKind::NotFound`] when `expected` does not match (nothing is
    /// written); [`ErrorKind::InvalidPath`]; [`ErrorKind::InvalidArgument`] for an
    /// oversized value, a negative expected version or an ephemeral parent;
    /// [`ErrorKind::Unavailable`], [`ErrorKind::SessionExpired`],
    /// [`ErrorKind::Closed`].
    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat>;

    /// Creates a node (and its missing parents). With `mode.sequential`, `path` is
    /// a prefix to which the parent's count of child creations is appended as
    /// `%010d`, as ZooKeeper does (see [`Stat::next_sequential_suffix`]); the
    /// actual path is returned with the new node's metadata.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::AlreadyExists`] when the (actual) path exists;
    /// [`ErrorKind::InvalidPath`]; [`ErrorKind::InvalidArgument`] for an oversized
    /// value or an ephemeral parent; [`ErrorKind::Unavailable`],
    /// [`ErrorKind::SessionExpired`], [`ErrorKind::Closed`].
    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)>;

    /// Deletes a node if it matches `expected` ([`ExpectedVersion::Any`] or
    /// [`ExpectedVersion::Exactly`]).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotFound`] when the node does not exist;
    /// [`ErrorKind::BadVersion`] when its version differs (nothing is deleted);
    /// [`ErrorKind::NotEmpty`] when it has children; [`ErrorKind::InvalidPath`]
    /// (including `/`); [`ErrorKind::InvalidArgument`] for
    /// [`ExpectedVersion::NotExists`] or a negative version;
    /// [`ErrorKind::Unavailable`], [`ErrorKind::SessionExpired`],
    /// [`ErrorKind::Closed`].
    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()>;

    /// Reads a node's metadata; `Ok(None)` when it does not exist.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidPath`], [`ErrorKind::Unavailable`],
    /// [`ErrorKind::SessionExpired`], [`ErrorKind::Closed`].
    async fn exists(&self, path: &str) -> Result<Option<Stat>>;

    /// The names of a node's direct children, sorted; empty when the node does
    /// not exist (as in Pulsar).
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidPath`], [`ErrorKind::Unavailable`],
    /// [`ErrorKind::SessionExpired`], [`ErrorKind::Closed`].
    async fn children(&self, path: &str) -> Result<Vec<String>>;

    /// Watches a path, which may not exist yet.
    ///
    /// The stream reports [`Notification::Created`](crate::Notification::Created),
    /// [`Modified`](crate::Notification::Modified) and
    /// [`Deleted`](crate::Notification::Deleted) of the node,
    /// [`ChildrenChanged`](crate::Notification::ChildrenChanged) when a direct
    /// child is created or deleted, and the store's
    /// [`SessionEvent`](crate::SessionEvent)s.
    ///
    /// Every change made after this call returns is reported, but notifications
    /// are hints: several quick changes may be reported as one (ZooKeeper's watches
    /// fire once and must be re-armed). The last change is never lost: after every
    /// notification and every reconnection or new session the store re-arms the
    /// watch, re-reads the node and reports what differs from what it reported
    /// last. The stream keeps working across reconnections and session expiry, and
    /// ends when the store is closed; dropping it cancels the watch. The stream is
    /// unbounded: a consumer that stops reading should drop it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidPath`]; [`ErrorKind::Unavailable`] when the watch cannot
    /// be armed in time; [`ErrorKind::Closed`].
    async fn watch(&self, path: &str) -> Result<WatchStream>;

    /// Ends the session (its ephemeral nodes are deleted), ends every watch stream
    /// of this store and makes further operations fail with
    /// [`ErrorKind::Closed`]. Closing twice is harmless.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::Unavailable`] when the backend could not be told in time; the
    /// store is closed locally anyway and the backend ends the session when it
    /// times out.
    async fn close(&self) -> Result<()>;

    /// Whether [`import_version`](Self::import_version) is offered: `true` for
    /// [`MemoryStore`](crate::MemoryStore), the etcd store and the ZooKeeper
    /// store (which reaches the version by writes, see `docs/FORMATS.md`).
    /// A store that cannot answers `false` and refuses imports with
    /// [`fallback::refuse_import_version`](crate::fallback::refuse_import_version).
    fn can_import_versions(&self) -> bool;

    /// The generation of the store's session: a number that changes
    /// whenever a new session replaces one that ended (ZooKeeper session
    /// expiry, a lost etcd lease, [`MemoryStore::expire_session`](crate::MemoryStore::expire_session)),
    /// read without a round trip. A client that must not write once its
    /// ephemeral nodes may be gone (a migration participant) compares it
    /// with the generation it registered under. `None`: the store has no
    /// sessions, or does not say.
    fn session_generation(&self) -> Option<u64>;

    /// Writes like [`put`](Self::put) and returns only the new version, so a
    /// store may leave out the reads that the rest of the [`Stat`] needs.
    /// Compare-and-set loops that keep nothing but the version (the managed
    /// ledger's info and cursor writes, the registry's records) use it. The
    /// etcd store then sends the bare conditional write (its `Stat` needs the
    /// counter, creation time and child count read in the same transaction);
    /// the other stores answer as `put` does
    /// ([`fallback::put_version_by_put`](crate::fallback::put_version_by_put)).
    ///
    /// # Errors
    ///
    /// Those of [`put`](Self::put).
    async fn put_version(&self, path: &str, value: &[u8], expected: ExpectedVersion)
        -> Result<i64>;

    /// Creates a node with `value` and exactly `version`, as a copy of a record
    /// read from another store (a migration): a client holding that version
    /// can then write the node conditionally here. Missing parents are created
    /// (persistent, empty). What it costs each backend is described in
    /// `docs/FORMATS.md` ("Version import").
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when the store cannot import versions
    /// ([`can_import_versions`](Self::can_import_versions) is `false`; nothing
    /// is written) or `version` is negative; [`ErrorKind::AlreadyExists`] when
    /// the node exists; and every error of [`create`](Self::create).
    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat>;

    /// Raises the sequential-child counter of the persistent node `path` so
    /// that its next sequential child gets a suffix of at least `next`
    /// ([`Stat::next_sequential_suffix`](crate::Stat::next_sequential_suffix));
    /// a counter already there or beyond is left as it is (a counter never goes
    /// back). A migration carries a parent's counter with it, so that ids taken
    /// from sequential suffixes never repeat. What it costs each backend is
    /// described in `docs/FORMATS.md` ("Sequential counter import"): memory and
    /// etcd set it in one write, ZooKeeper (which counts child creations
    /// itself) creates and deletes `next − current` children.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`] when the store does not offer it
    /// ([`fallback::refuse_import_sequential_counter`](crate::fallback::refuse_import_sequential_counter);
    /// nothing is written), `next` is negative or `path` is ephemeral;
    /// [`ErrorKind::NotFound`] when `path` does not exist; and every error of
    /// [`create`](Self::create).
    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat>;
}

#[deny(clippy::missing_trait_methods)]
#[async_trait]
impl<T: MetadataStore + ?Sized> MetadataStore for Arc<T> {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        (**self).get(path).await
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        (**self).put(path, value, expected).await
    }

    async fn put_version(
        &self,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
    ) -> Result<i64> {
        (**self).put_version(path, value, expected).await
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        (**self).create(path, value, mode).await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        (**self).delete(path, expected).await
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        (**self).exists(path).await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        (**self).children(path).await
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        (**self).watch(path).await
    }

    async fn close(&self) -> Result<()> {
        (**self).close().await
    }

    fn can_import_versions(&self) -> bool {
        (**self).can_import_versions()
    }

    fn session_generation(&self) -> Option<u64> {
        (**self).session_generation()
    }

    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat> {
        (**self).import_version(path, value, version).await
    }

    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat> {
        (**self).import_sequential_counter(path, next).await
    }
}

/// What [`MetadataStoreExt::update`] should do with the current value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Update {
    /// Write this value (compare-and-set against the version read).
    Write(Vec<u8>),
    /// Leave the node as it is and return.
    Keep,
}

/// Conveniences built on [`MetadataStore`], for every store (blanket impl).
///
/// Kept out of the main trait so that a wrapper store cannot silently inherit a
/// default that bypasses it.
#[async_trait]
pub trait MetadataStoreExt: MetadataStore {
    /// Deletes a node and everything below it, depth first. A missing node is not
    /// an error; nodes deleted concurrently are skipped. Deleting `/` deletes
    /// everything below it and keeps `/`.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::NotEmpty`] when children keep being added concurrently, and
    /// every error of [`MetadataStore::children`] and [`MetadataStore::delete`].
    async fn delete_recursive(&self, path: &str) -> Result<()>;

    /// Creates the node with `value` if it does not exist (and its parents).
    /// Returns the new metadata, or `None` when the node already existed (it is
    /// left untouched).
    ///
    /// # Errors
    ///
    /// Every error of [`MetadataStore::put`] other than
    /// [`ErrorKind::AlreadyExists`].
    async fn put_if_absent(&self, path: &str, value: &[u8]) -> Result<Option<Stat>>;

    /// Read-modify-write with compare-and-set: reads the node, calls `f` with the
    /// current value (`None` if missing), writes the result expecting the version
    /// read ([`ExpectedVersion::NotExists`] if it was missing) and starts again on
    /// a conflict, at most `max_attempts` times. Returns the new metadata, or
    /// `None` when `f` returned [`Update::Keep`].
    ///
    /// # Errors
    ///
    /// The conflict of the last attempt ([`MetadataError::is_conflict`]) after
    /// `max_attempts` conflicts, and every other error of
    /// [`MetadataStore::get`] and [`MetadataStore::put`].
    async fn update<F>(&self, path: &str, max_attempts: usize, f: F) -> Result<Option<Stat>>
    where
        F: FnMut(Option<&GetResult>) -> Update + Send;
}

#[async_trait]
impl<S: MetadataStore + ?Sized> MetadataStoreExt for S {
    async fn delete_recursive(&self, path: &str) -> Result<()> {
        validate_path(Operation::Delete, path, PathUse::Write)?;
        // Iterative post-order walk: (path, children listed yet?).
        let mut stack: Vec<(String, bool)> = vec![(path.to_owned(), false)];
        let mut relists = 0usize;
        while let Some((node, listed)) = stack.pop() {
            if !listed {
                let children = self.children(&node).await?;
                stack.push((node.clone(), true));
                for child in children.into_iter().rev() {
                    stack.push((join(&node, &child), false));
                }
                continue;
            }
            if node == "/" {
                continue;
            }
            match self.delete(&node, ExpectedVersion::Any).await {
                Ok(()) => {}
                Err(e) if e.kind() == ErrorKind::NotFound => {}
                Err(e) if e.kind() == ErrorKind::NotEmpty && relists < 100 => {
                    // A child appeared meanwhile: list again.
                    relists += 1;
                    stack.push((node, false));
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    async fn put_if_absent(&self, path: &str, value: &[u8]) -> Result<Option<Stat>> {
        match self.put(path, value, ExpectedVersion::NotExists).await {
            Ok(stat) => Ok(Some(stat)),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(e),
        }
    }

    async fn update<F>(&self, path: &str, max_attempts: usize, mut f: F) -> Result<Option<Stat>>
    where
        F: FnMut(Option<&GetResult>) -> Update + Send,
    {
        let mut last_conflict: Option<MetadataError> = None;
        for _ in 0..max_attempts.max(1) {
            let current = self.get(path).await?;
            let expected = match &current {
                Some(r) => ExpectedVersion::Exactly(r.stat.version),
                None => ExpectedVersion::NotExists,
            };
            let value = match f(current.as_ref()) {
                Update::Write(value) => value,
                Update::Keep => return Ok(None),
            };
            match self.put(path, &value, expected).await {
                Ok(stat) => return Ok(Some(stat)),
                Err(e) if e.is_conflict() => last_conflict = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last_conflict.unwrap_or_else(|| MetadataError::Internal {
            op: Operation::Put,
            path: path.to_owned(),
            reason: "update made no attempt".to_owned(),
        }))
    }
}
