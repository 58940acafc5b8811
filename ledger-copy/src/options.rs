//! [`CopyOptions`], [`CopyProgress`], [`CopyOutcome`] and [`CopyReport`].

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{DigestType, EntryId, LedgerId};
use futures::future::BoxFuture;

/// The default [`CopyOptions::window`].
pub const DEFAULT_WINDOW: usize = 64;

/// A progress callback, called from the copying task (keep it cheap).
pub type ProgressFn = Arc<dyn Fn(&CopyProgress) + Send + Sync>;

/// Called once the destination ledger has been created, before any entry is
/// written to it: what a caller uses to record that it created the ledger, so
/// that a copy interrupted by a crash can later be told apart from a ledger
/// someone else created under the same id (see
/// [`CopyOptions::on_created`]). An `Err(reason)` abandons the copy: the
/// ledger just created is deleted and the copy fails with
/// [`CopyError::NotRecorded`](crate::CopyError::NotRecorded).
pub type CreatedFn = Arc<dyn Fn(LedgerId) -> BoxFuture<'static, Result<(), String>> + Send + Sync>;

/// How to copy (and verify) a ledger.
///
/// The default opens the source with CRC32C and an empty password, keeps at most
/// [`DEFAULT_WINDOW`] (64) entries in flight, verifies an existing destination and
/// reports no progress.
///
/// ```
/// use bkswitch_bk_client::DigestType;
/// use bkswitch_ledger_copy::CopyOptions;
///
/// let options = CopyOptions::new(DigestType::Crc32c, b"secret".to_vec()).with_window(16);
/// assert_eq!(options.window, 16);
/// assert!(options.verify_existing);
/// ```
#[derive(Clone)]
pub struct CopyOptions {
    /// Digest type to open the source with (default CRC32C; clients that autodetect
    /// the digest ignore it).
    pub digest_type: DigestType,
    /// Password to open the source with (default empty). The destination is created
    /// with the source's own password, taken from its metadata.
    pub password: Vec<u8>,
    /// Maximum number of entries in flight: entries read from the source and not yet
    /// handed to the destination, plus adds not yet acknowledged. The copy's memory
    /// is bounded by `window` × the largest entry, whatever the ledger's size.
    /// Must be at least 1 (default 64).
    pub window: usize,
    /// On `LedgerExists`, compare the existing destination with the source and report
    /// [`CopyOutcome::AlreadyPresent`] when identical (default true). When false the
    /// copy fails with [`CopyError::DestinationWrite`](crate::CopyError::DestinationWrite)
    /// carrying the `LedgerExists` error, without reading anything.
    pub verify_existing: bool,
    /// Called once the destination is created (nothing copied yet, the totals
    /// known), after every batch with the entries acknowledged so far, and once
    /// at the end; never twice with the same count.
    pub progress: Option<ProgressFn>,
    /// Called once this copy has created the destination ledger, before writing
    /// to it (see [`CreatedFn`]). Not called when the destination already
    /// existed.
    pub on_created: Option<CreatedFn>,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            digest_type: DigestType::Crc32c,
            password: Vec::new(),
            window: DEFAULT_WINDOW,
            verify_existing: true,
            progress: None,
            on_created: None,
        }
    }
}

impl fmt::Debug for CopyOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CopyOptions")
            .field("digest_type", &self.digest_type)
            .field("password", &format_args!("<{} bytes>", self.password.len()))
            .field("window", &self.window)
            .field("verify_existing", &self.verify_existing)
            .field("progress", &self.progress.as_ref().map(|_| "<callback>"))
            .field(
                "on_created",
                &self.on_created.as_ref().map(|_| "<callback>"),
            )
            .finish()
    }
}

impl CopyOptions {
    /// Options opening the source with `digest_type` and `password`, other settings
    /// at their defaults.
    pub fn new(digest_type: DigestType, password: impl Into<Vec<u8>>) -> CopyOptions {
        CopyOptions {
            digest_type,
            password: password.into(),
            ..CopyOptions::default()
        }
    }

    /// Set the maximum number of entries in flight (must be at least 1).
    pub fn with_window(mut self, window: usize) -> CopyOptions {
        self.window = window;
        self
    }

    /// Set whether an existing destination is verified (see
    /// [`verify_existing`](CopyOptions::verify_existing)).
    pub fn with_verify_existing(mut self, verify: bool) -> CopyOptions {
        self.verify_existing = verify;
        self
    }

    /// Set the progress callback.
    pub fn with_progress(
        mut self,
        progress: impl Fn(&CopyProgress) + Send + Sync + 'static,
    ) -> CopyOptions {
        self.progress = Some(Arc::new(progress));
        self
    }

    /// Set the callback run once this copy has created the destination ledger
    /// (see [`on_created`](CopyOptions::on_created)).
    pub fn with_on_created(
        mut self,
        on_created: impl Fn(LedgerId) -> BoxFuture<'static, Result<(), String>> + Send + Sync + 'static,
    ) -> CopyOptions {
        self.on_created = Some(Arc::new(on_created));
        self
    }
}

/// Progress of one copy, as passed to [`CopyOptions::progress`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyProgress {
    /// The ledger being copied.
    pub ledger_id: LedgerId,
    /// Entries acknowledged by the destination so far.
    pub entries_copied: u64,
    /// Payload bytes of those entries.
    pub bytes_copied: u64,
    /// The highest acknowledged entry id (`-1` before the first).
    pub last_entry_id: EntryId,
    /// Entries this copy copies: the source snapshot's `LAC + 1`.
    pub entries_total: u64,
    /// Payload bytes of those entries: the source snapshot's length.
    pub bytes_total: u64,
}

/// How a successful copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CopyOutcome {
    /// The destination ledger was created and filled by this call.
    Copied,
    /// The destination already held the ledger with identical content (idempotent
    /// success after `LedgerExists`); counted by
    /// [`migration_ledger_id_conflict_total`](crate::migration_ledger_id_conflict_total).
    AlreadyPresent,
}

/// What a successful copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    /// The ledger id (the same on both clusters).
    pub ledger_id: LedgerId,
    /// Whether the copy wrote the destination or found it already present.
    pub outcome: CopyOutcome,
    /// Number of entries of the destination ledger (`last_entry_id + 1`).
    pub entries: u64,
    /// Payload bytes of those entries.
    pub bytes: u64,
    /// The last entry id copied (or verified); `-1` for an empty ledger.
    pub last_entry_id: EntryId,
    /// Wall-clock time of the call.
    pub duration: Duration,
}

/// The result of [`verify_dst_matches_src`](crate::verify_dst_matches_src).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// Same last entry id, length, configuration and entry bytes.
    Identical {
        /// The common last entry id (`-1` when empty).
        last_entry_id: EntryId,
        /// The common payload length in bytes.
        length: u64,
    },
    /// The first difference found.
    Different {
        /// What differs, naming the entry or field.
        reason: String,
    },
}

impl Verification {
    /// Whether the destination matches the source.
    pub fn is_identical(&self) -> bool {
        matches!(self, Verification::Identical { .. })
    }
}
