//! The client SPI: [`BookKeeper`], [`ReadHandle`], [`WriteHandle`] and [`ClientFactory`],
//! their blanket implementations for `Arc<T>`, and the convenience extension traits.
//!
//! The contracts below are BookKeeper's ledger API semantics (the project's
//! [formats §4](bkswitch_docs::formats)). [`crate::testkit`] checks an implementation against them.

use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;

use crate::error::{BkErrorKind, Result};
use crate::types::{DigestType, EntryId, LedgerConfig, LedgerEntry, LedgerId, LedgerMetadata};

/// A client of one BookKeeper cluster.
///
/// Held as `Arc<dyn BookKeeper>`; `Arc<T>` implements the trait for every
/// `T: BookKeeper + ?Sized`, so generic code taking `B: BookKeeper` also accepts
/// `Arc<dyn BookKeeper>`. Convenience methods live in [`BookKeeperExt`].
#[async_trait]
pub trait BookKeeper: Send + Sync + Debug {
    /// The name of the cluster this client talks to (used in errors and routing).
    fn cluster_name(&self) -> &str;

    /// Create a ledger with an id from the cluster's id generator.
    ///
    /// # Contract
    /// - The id comes from the cluster's id generator and was never handed out
    ///   before; if the generated id is already taken (by
    ///   [`create_ledger_adv`](BookKeeper::create_ledger_adv)) the client moves on to
    ///   the next generated id, as BookKeeper's `LedgerCreateOp` does.
    /// - The new handle is OPEN with last add confirmed `-1` and length `0`; its
    ///   metadata holds the configuration and the custom metadata as given.
    /// - Only [`WriteHandle::add_entry`] is allowed on the handle.
    ///
    /// # Errors
    /// - `ack_quorum > write_quorum`, `write_quorum > ensemble` or `ack_quorum <= 0`
    ///   → [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14), nothing created.
    /// - Client closed → [`ClientClosed`](BkErrorKind::ClientClosed) (-19).
    /// - Fewer bookies than the ensemble size →
    ///   [`NotEnoughBookies`](BkErrorKind::NotEnoughBookies) (-6).
    /// - Cluster unreachable → a retryable error
    ///   ([`Unavailable`](BkErrorKind::Unavailable) or [`Timeout`](BkErrorKind::Timeout)).
    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>>;

    /// Moves the cluster's ledger id generator forward so that every id it
    /// hands out from now on is greater than `above` (a generator already
    /// beyond is left alone: ids never go back). A managed ledger calls it
    /// when the id it was given is not above its last ledger's — positions
    /// are ordered by ledger id — and creates again
    /// (`docs/RELIABILITY.md`, N22).
    ///
    /// # Errors
    /// - `above < 0` → [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14).
    /// - A client that cannot move its cluster's generator →
    ///   [`IllegalOp`](BkErrorKind::IllegalOp) naming the cluster (a wrapper
    ///   forwards to the client it wraps).
    /// - Cluster unreachable → a retryable error.
    async fn advance_ledger_ids_beyond(&self, above: LedgerId) -> Result<()>;

    /// Create a ledger with the given id (BookKeeper's `createLedgerAdv`).
    ///
    /// # Contract
    /// - Uses exactly `ledger_id` and never touches the id generator.
    /// - The custom metadata is stored as given (empty if none).
    /// - The new handle is OPEN with last add confirmed `-1` and length `0`; only
    ///   [`WriteHandle::add_entry_at`] is allowed on it.
    ///
    /// # Errors
    /// - `ledger_id < 0` or invalid quorums (see
    ///   [`create_ledger`](BookKeeper::create_ledger)) →
    ///   [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14).
    /// - The id exists → [`LedgerExists`](BkErrorKind::LedgerExists) (-20); final, the
    ///   existing ledger is untouched.
    /// - Re-creating an id that was fenced and then deleted may fail with
    ///   [`LedgerFenced`](BkErrorKind::LedgerFenced) (-101) for a while on real bookies
    ///   (they still remember the fence); callers must tolerate it.
    /// - Otherwise as [`create_ledger`](BookKeeper::create_ledger).
    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>>;

    /// Open a ledger with recovery (BookKeeper's `openLedger`).
    ///
    /// # Contract
    /// - On an OPEN ledger it fences it — the writer's next add and its pending adds
    ///   fail with [`LedgerFenced`](BkErrorKind::LedgerFenced) (-101) — and closes it
    ///   at the last recoverable entry (the largest `k` such that entries `0..=k` are
    ///   all stored).
    /// - The returned handle is closed (`is_closed()`), its last add confirmed is the
    ///   ledger's `last_entry_id` and its length the metadata length.
    /// - On a CLOSED ledger nothing changes.
    ///
    /// # Errors
    /// - Missing ledger (or `ledger_id < 0`) →
    ///   [`NoSuchLedgerOnMetadataServer`](BkErrorKind::NoSuchLedgerOnMetadataServer) (-25).
    /// - Wrong password → [`UnauthorizedAccess`](BkErrorKind::UnauthorizedAccess) (-102).
    /// - Wrong digest type when the client does not autodetect digests →
    ///   [`DigestMismatch`](BkErrorKind::DigestMismatch) (-5).
    /// - Client closed (-19); cluster unreachable → retryable error.
    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>>;

    /// Open a ledger without recovery (BookKeeper's `openLedgerNoRecovery`).
    ///
    /// # Contract
    /// - Never fences: a live writer keeps writing.
    /// - The handle's last add confirmed is a snapshot taken at open (refresh it with
    ///   [`ReadHandle::read_last_add_confirmed`]); on an OPEN ledger `is_closed()` is
    ///   false. On a CLOSED ledger the last add confirmed is `last_entry_id` and the
    ///   length is the metadata length.
    ///
    /// # Errors
    /// As [`open_ledger`](BookKeeper::open_ledger): -25 when missing, -102 on a wrong
    /// password, -5 on a wrong digest without autodetection, -19, retryable errors.
    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>>;

    /// Delete a ledger: its metadata and entries.
    ///
    /// # Contract
    /// After success, opening the ledger fails with -25. Deleting a missing ledger
    /// succeeds with BookKeeper's ZooKeeper driver since 4.10, while other drivers
    /// return [`NoSuchLedger`](BkErrorKind::NoSuchLedger) (-7) or
    /// [`NoSuchLedgerOnMetadataServer`](BkErrorKind::NoSuchLedgerOnMetadataServer) (-25):
    /// callers must treat all three as "already deleted"
    /// ([`BkError::is_already_deleted`](crate::BkError::is_already_deleted), or
    /// [`BookKeeperExt::delete_ledger_if_exists`]).
    ///
    /// # Errors
    /// - `ledger_id < 0` → [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14).
    /// - Missing ledger → `Ok`, -7 or -25 depending on the implementation.
    /// - Client closed (-19); cluster unreachable → retryable error.
    async fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()>;

    /// Close the client and release its resources.
    ///
    /// # Contract
    /// Idempotent. Afterwards every operation of this client and of the handles it
    /// returned fails with [`ClientClosed`](BkErrorKind::ClientClosed) (-19): closing
    /// a read handle still succeeds, closing a write handle stops its adds but cannot
    /// seal the ledger. Other clients of the same cluster are unaffected, and ledgers
    /// left open stay OPEN in the cluster (a recovery open seals them).
    ///
    /// # Errors
    /// Implementations may report a failure to release resources; the client is
    /// closed anyway.
    async fn close(&self) -> Result<()>;

    /// How many bookies of the cluster accept writes now, as far as the client
    /// knows (`None`: the client has no notion of bookies — what the
    /// in-memory client answers; a wrapper forwards its inner client's).
    ///
    /// # Contract
    /// Cheap and non-blocking: answered from the client's view of the
    /// cluster's bookie registrations, which follows joins and departures.
    /// Operators' probes use it to refuse a cluster that has no bookie at all
    /// (typically a mistyped ledgers root) before anything is recorded.
    fn writable_bookies(&self) -> Option<usize>;
}

/// A handle to read one ledger.
///
/// Handles are cheap to keep open and share (`Arc<dyn ReadHandle>`); reads from a
/// cached handle are the hot read path. Convenience methods live in [`ReadHandleExt`].
#[async_trait]
pub trait ReadHandle: Send + Sync + Debug {
    /// The ledger id.
    fn id(&self) -> LedgerId;

    /// The ledger's metadata as this handle sees it.
    ///
    /// # Contract
    /// A write handle sees its own changes; a handle opened with recovery or on a
    /// CLOSED ledger sees the sealed metadata; a no-recovery handle of an OPEN ledger
    /// may lag until [`read_last_add_confirmed`](ReadHandle::read_last_add_confirmed).
    fn metadata(&self) -> LedgerMetadata;

    /// Read entries `first..=last`, all at or below the last add confirmed.
    ///
    /// # Contract
    /// Returns exactly `last - first + 1` entries in id order, payloads as written.
    ///
    /// # Errors
    /// - `first < 0 || first > last` → [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14).
    /// - `last > last_add_confirmed()` → [`ReadBeyondLac`](BkErrorKind::ReadBeyondLac)
    ///   (BookKeeper's `ReadException`, -1): so any read of an empty ledger fails.
    /// - The ledger was deleted → [`NoSuchLedger`](BkErrorKind::NoSuchLedger) (-7) (a
    ///   real cluster may still serve entries until its garbage collector runs).
    /// - Client closed (-19); cluster unreachable → retryable error.
    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>>;

    /// Read entries `first..=last` without checking the last add confirmed.
    ///
    /// # Errors
    /// - `first < 0 || first > last` → [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14).
    /// - An entry of the range is not stored → [`NoSuchEntry`](BkErrorKind::NoSuchEntry) (-13).
    /// - Deleted ledger (-7), client closed (-19), retryable errors.
    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>>;

    /// The last add confirmed known to this handle (cached, no I/O); `-1` when empty.
    fn last_add_confirmed(&self) -> EntryId;

    /// Ask the cluster for the last add confirmed and update this handle's cache.
    ///
    /// # Contract
    /// Never moves backwards. On a closed ledger it is `last_entry_id`. On a live
    /// ledger a real cluster may lag the writer by an entry (the LAC travels
    /// piggybacked on the next add); it is never beyond the writer's LAC. Needed to
    /// copy the tail of a ledger that is still being written.
    ///
    /// # Errors
    /// Deleted ledger (-7), client closed (-19), retryable errors.
    async fn read_last_add_confirmed(&self) -> Result<EntryId>;

    /// Payload bytes of the entries up to the last add confirmed known to this handle
    /// (the metadata length once closed).
    fn length(&self) -> u64;

    /// Whether the ledger is sealed as far as this handle knows.
    fn is_closed(&self) -> bool;

    /// Release the handle. On a [`WriteHandle`] this seals the ledger.
    ///
    /// # Contract (write handles)
    /// - Seals at the last add confirmed: metadata CLOSED, `last_entry_id` = LAC,
    ///   `length` = payload bytes of `0..=LAC`.
    /// - Adds still pending fail with [`LedgerClosed`](BkErrorKind::LedgerClosed) (-11);
    ///   later adds too.
    /// - A second close succeeds.
    /// - If a recovery open already sealed the ledger, close succeeds when the
    ///   recovered `last_entry_id` and length equal the writer's, and fails with
    ///   [`LedgerFenced`](BkErrorKind::LedgerFenced) (-101) otherwise (BookKeeper's
    ///   own client reports a metadata version conflict there).
    ///
    /// # Errors
    /// Write handles: -101 as above, deleted ledger (-25), client closed (-19),
    /// cluster unreachable → retryable error (the handle stays closed for adds;
    /// closing again retries the seal). Read handles: never fail.
    async fn close(&self) -> Result<()>;
}

/// A handle to write one ledger (returned by the create methods).
///
/// The add methods are not `async fn`: the entry id (or ordering slot) is taken
/// synchronously at call time, like BookKeeper's `asyncAddEntry`, so callers can
/// pipeline many adds and await them later. The returned futures are `'static`
/// and the write proceeds even if a future is dropped.
pub trait WriteHandle: ReadHandle {
    /// Append an entry with the next entry id (handles from
    /// [`BookKeeper::create_ledger`]).
    ///
    /// # Contract
    /// Entry ids are `0, 1, 2, …` in call order. Completions are delivered in entry-id
    /// order: when the future of entry `k` yields `Ok(k)`, the last add confirmed is
    /// `>= k` and every lower entry's future has its result. The length grows by the
    /// payload bytes of confirmed entries.
    ///
    /// # Errors
    /// - On a handle from [`BookKeeper::create_ledger_adv`] →
    ///   [`IllegalOp`](BkErrorKind::IllegalOp) (-100).
    /// - Handle closed → [`LedgerClosed`](BkErrorKind::LedgerClosed) (-11).
    /// - Ledger fenced by a recovery open → [`LedgerFenced`](BkErrorKind::LedgerFenced) (-101).
    /// - Ledger deleted (-7), client closed (-19), cluster unreachable → retryable
    ///   error; after such a failure the handle is closed for adds (BookKeeper closes a
    ///   handle after an unrecoverable add error) and its pending adds fail too.
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, Result<EntryId>>;

    /// Write the entry `entry_id` (handles from [`BookKeeper::create_ledger_adv`]).
    ///
    /// # Contract
    /// Entries may arrive out of order. The last add confirmed only advances
    /// contiguously (the largest `k` with `0..=k` all acknowledged), so the future of
    /// an entry above a gap stays pending until the gap is filled. Completions are
    /// delivered in entry-id order, as for [`add_entry`](WriteHandle::add_entry).
    ///
    /// # Errors
    /// Checked in this order:
    /// - On a handle from [`BookKeeper::create_ledger`] →
    ///   [`IllegalOp`](BkErrorKind::IllegalOp) (-100).
    /// - `entry_id <= last_add_confirmed()` or already pending →
    ///   [`DuplicateEntryId`](BkErrorKind::DuplicateEntryId) (-22), even on a closed handle.
    /// - Handle closed (and `entry_id > LAC`) → [`LedgerClosed`](BkErrorKind::LedgerClosed) (-11).
    /// - Then as [`add_entry`](WriteHandle::add_entry): -101, -7, -19, retryable errors.
    fn add_entry_at(&self, entry_id: EntryId, data: Bytes) -> BoxFuture<'static, Result<EntryId>>;
}

/// Turns a metadata-service URI into a client of that cluster.
#[async_trait]
pub trait ClientFactory: Send + Sync + Debug {
    /// Create a client for the cluster behind `metadata_service_uri`.
    ///
    /// # Errors
    /// An unsupported scheme or malformed URI →
    /// [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14) naming the URI and the
    /// supported schemes; a cluster that cannot be reached → retryable error.
    async fn create(&self, metadata_service_uri: &str) -> Result<Arc<dyn BookKeeper>>;

    /// Create a client for the cluster behind `metadata_service_uri`, known to
    /// its caller (the registry) as `cluster_name`.
    ///
    /// Factories whose clients can carry a name (the real BookKeeper client
    /// reports it in [`BookKeeper::cluster_name`] and in every error) give it
    /// to the client; others may ignore it and [`create`](Self::create) (the
    /// trait has no defaulted methods, so that a wrapper cannot forget to
    /// forward one). Callers that know the registered name use this method.
    ///
    /// # Errors
    /// As [`create`](Self::create).
    async fn create_named(
        &self,
        cluster_name: &str,
        metadata_service_uri: &str,
    ) -> Result<Arc<dyn BookKeeper>>;
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: BookKeeper + ?Sized> BookKeeper for Arc<T> {
    fn cluster_name(&self) -> &str {
        (**self).cluster_name()
    }

    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
        (**self).create_ledger(config).await
    }

    async fn advance_ledger_ids_beyond(&self, above: LedgerId) -> Result<()> {
        (**self).advance_ledger_ids_beyond(above).await
    }

    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>> {
        (**self).create_ledger_adv(ledger_id, config).await
    }

    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        (**self).open_ledger(ledger_id, digest_type, password).await
    }

    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        (**self)
            .open_ledger_no_recovery(ledger_id, digest_type, password)
            .await
    }

    async fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        (**self).delete_ledger(ledger_id).await
    }

    async fn close(&self) -> Result<()> {
        (**self).close().await
    }

    fn writable_bookies(&self) -> Option<usize> {
        (**self).writable_bookies()
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl<T: ReadHandle + ?Sized> ReadHandle for Arc<T> {
    fn id(&self) -> LedgerId {
        (**self).id()
    }

    fn metadata(&self) -> LedgerMetadata {
        (**self).metadata()
    }

    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        (**self).read_entries(first, last).await
    }

    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        (**self).read_unconfirmed(first, last).await
    }

    fn last_add_confirmed(&self) -> EntryId {
        (**self).last_add_confirmed()
    }

    async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        (**self).read_last_add_confirmed().await
    }

    fn length(&self) -> u64 {
        (**self).length()
    }

    fn is_closed(&self) -> bool {
        (**self).is_closed()
    }

    async fn close(&self) -> Result<()> {
        (**self).close().await
    }
}

#[deny(clippy::missing_trait_methods)]
impl<T: WriteHandle + ?Sized> WriteHandle for Arc<T> {
    fn add_entry(&self, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        (**self).add_entry(data)
    }

    fn add_entry_at(&self, entry_id: EntryId, data: Bytes) -> BoxFuture<'static, Result<EntryId>> {
        (**self).add_entry_at(entry_id, data)
    }
}

/// Conveniences over [`BookKeeper`], implemented for every client.
#[async_trait]
pub trait BookKeeperExt: BookKeeper {
    /// Delete a ledger, counting "no such ledger" (-7, -25) as success.
    /// Returns whether this call found the ledger (`false` when it was already gone
    /// and the implementation said so; implementations whose delete of a missing
    /// ledger succeeds always report `true`).
    async fn delete_ledger_if_exists(&self, ledger_id: LedgerId) -> Result<bool> {
        match self.delete_ledger(ledger_id).await {
            Ok(()) => Ok(true),
            Err(e) if e.is_already_deleted() => Ok(false),
            Err(e) => Err(e),
        }
    }

    /// Open with the digest type and password of `config` (recovery or not).
    async fn open_with(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
        recovery: bool,
    ) -> Result<Arc<dyn ReadHandle>> {
        if recovery {
            self.open_ledger(ledger_id, config.digest_type, &config.password)
                .await
        } else {
            self.open_ledger_no_recovery(ledger_id, config.digest_type, &config.password)
                .await
        }
    }
}

impl<T: BookKeeper + ?Sized> BookKeeperExt for T {}

/// Conveniences over [`ReadHandle`], implemented for every handle.
#[async_trait]
pub trait ReadHandleExt: ReadHandle {
    /// Read one entry (at or below the last add confirmed).
    async fn read_entry(&self, entry_id: EntryId) -> Result<LedgerEntry> {
        let mut entries = self.read_entries(entry_id, entry_id).await?;
        match entries.pop() {
            Some(entry) => Ok(entry),
            None => Err(crate::error::BkError::new(
                BkErrorKind::NoSuchEntry,
                format!("read of entry {entry_id} returned nothing"),
            )
            .with_ledger(self.id())),
        }
    }

    /// Read every entry up to the cached last add confirmed (empty when `-1`).
    async fn read_all(&self) -> Result<Vec<LedgerEntry>> {
        let lac = self.last_add_confirmed();
        if lac < 0 {
            return Ok(Vec::new());
        }
        self.read_entries(0, lac).await
    }
}

impl<T: ReadHandle + ?Sized> ReadHandleExt for T {}

/// Conveniences over [`WriteHandle`], implemented for every write handle.
#[async_trait]
pub trait WriteHandleExt: WriteHandle {
    /// Append each payload in order (pipelined) and wait for all; returns the ids.
    async fn add_all<I>(&self, payloads: I) -> Result<Vec<EntryId>>
    where
        I: IntoIterator<Item = Bytes> + Send,
        I::IntoIter: Send,
    {
        let futures: Vec<_> = payloads.into_iter().map(|p| self.add_entry(p)).collect();
        let mut ids = Vec::with_capacity(futures.len());
        for f in futures {
            ids.push(f.await?);
        }
        Ok(ids)
    }
}

impl<T: WriteHandle + ?Sized> WriteHandleExt for T {}
