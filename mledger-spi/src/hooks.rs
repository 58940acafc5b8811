//! The PIP-477 hooks a managed ledger consults: S1 (which client creates new
//! ledgers), S2 (which client holds an existing ledger) and S4 (which properties a
//! new ledger is recorded with).
//!
//! Every hook is optional. A managed ledger with no hook set uses its storage's
//! single client for everything and records no extra property, so its behaviour
//! and the bytes it writes are those of a plain single-cluster managed ledger.

use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{BookKeeper, LedgerId};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedCursorInfo;

/// S1 — the client new ledgers are created on.
///
/// # Contract
///
/// - Consulted at **every** ledger creation: data-ledger create and rollover,
///   cursor-ledger create and rollover, schema-ledger creation (through S3).
/// - Must be cheap and must not block: implementations hot-swap the client without
///   locks (e.g. with `arc-swap`). It is never consulted on a read path.
/// - The client returned is the one the ledger is created on; the S4 providers are
///   then told *that* client (see [`NewLedgerContext::client`]), so a switch that
///   happens between creation and recording can never stamp a ledger with a
///   cluster that does not hold it.
pub trait ActiveClientSupplier: Send + Sync + Debug {
    /// The client new ledgers are created on now.
    fn active_client(&self) -> Arc<dyn BookKeeper>;

    /// The client new ledgers of the managed ledger `managed_ledger` (its
    /// name, `tenant/namespace/domain/topic`) are created on now: what a
    /// per-prefix override (a canary namespace moved first) routes. The
    /// default is [`active_client`](Self::active_client). Same contract:
    /// cheap, never blocking, consulted at every data- and cursor-ledger
    /// creation of that managed ledger.
    fn active_client_for(&self, managed_ledger: &str) -> Arc<dyn BookKeeper> {
        let _ = managed_ledger;
        self.active_client()
    }
}

/// S2 — the client that holds an existing data ledger.
///
/// # Contract
///
/// - Consulted **once per handle open** (invariant [I4](bkswitch_docs::invariants::I4)): the managed ledger caches
///   the handle it opened and never re-resolves for later reads of that handle.
/// - Consulted on **every** open and delete path (invariant [I15](bkswitch_docs::invariants::I15)): data read open,
///   recovery open of the last ledger at load, trim delete, delete of a ledger
///   whose id could not be recorded (orphan delete).
/// - Must not allocate on the hot path and must never fall back silently: a stamp
///   that names an unknown cluster is an error, not the active client.
///
/// # Errors
///
/// A [`HookError`] that names the ledger, the cluster and what the operator can do.
pub trait LedgerResolver: Send + Sync + Debug {
    /// The client that holds the ledger `info` describes.
    ///
    /// # Errors
    ///
    /// See the trait documentation.
    fn resolve_ledger(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>, HookError>;
}

/// S2 — the client that holds a cursor's current cursor ledger.
///
/// # Contract
///
/// As [`LedgerResolver`], for the cursor ledger named by
/// `ManagedCursorInfo.cursorsLedgerId`: consulted once per recovery open of the
/// cursor ledger and before deleting a cursor ledger after a rollover or with the
/// cursor.
pub trait CursorResolver: Send + Sync + Debug {
    /// The client that holds the cursor ledger `info` names.
    ///
    /// # Errors
    ///
    /// See [`LedgerResolver`].
    fn resolve_cursor(&self, info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>, HookError>;
}

/// What a new ledger is for, as told to the S4 providers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LedgerPurpose<'a> {
    /// A data ledger of the managed ledger.
    Data,
    /// The cursor ledger of the named cursor.
    Cursor {
        /// The cursor's name.
        cursor: &'a str,
    },
}

/// Everything an S4 provider may use to decide the properties of a new ledger.
#[derive(Debug, Clone, Copy)]
pub struct NewLedgerContext<'a> {
    /// The managed ledger's name (e.g. `tenant/ns/persistent/topic`).
    pub managed_ledger: &'a str,
    /// The id of the ledger just created.
    pub ledger_id: LedgerId,
    /// What the ledger is for.
    pub purpose: LedgerPurpose<'a>,
    /// The client the ledger was created on (the one S1 returned for this
    /// creation). Stampers must stamp *this* client's cluster, never re-read the
    /// active cluster: a switch may have happened since the ledger was created.
    pub client: &'a dyn BookKeeper,
}

/// S4 — properties recorded with a new ledger.
///
/// # Contract
///
/// - Invoked just before the single metadata CAS that records a new ledger id
///   (a new `LedgerInfo`, or a new `cursorsLedgerId`); the returned entries are
///   merged into `LedgerInfo.properties` / `ManagedCursorInfo.cursorProperties`
///   **in that same CAS** (invariant [I1](bkswitch_docs::invariants::I1)). A key already present is replaced in
///   place; others are appended in the order returned.
/// - Keys with the reserved prefix `_pulsar.` (invariant [I16](bkswitch_docs::invariants::I16)) may only be set by
///   providers, never through user-facing property APIs.
/// - If the provider fails, the new ledger is deleted (through the resolver) and
///   nothing is recorded: a recorded ledger is never left without its stamp.
pub trait NewLedgerPropertiesProvider: Send + Sync + Debug {
    /// The properties to record with the new ledger.
    ///
    /// # Errors
    ///
    /// A [`HookError`] saying why the ledger cannot be recorded.
    fn new_ledger_properties(
        &self,
        ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError>;
}

/// The set of hooks installed in a [`crate::ManagedLedgerConfig`].
///
/// `StorageHooks::default()` sets none: plain single-cluster behaviour.
#[derive(Debug, Clone, Default)]
pub struct StorageHooks {
    /// S1: the client new ledgers are created on. `None` → the storage's client.
    pub active_client: Option<Arc<dyn ActiveClientSupplier>>,
    /// S2: the client that holds a data ledger. `None` → the storage's client.
    pub ledger_resolver: Option<Arc<dyn LedgerResolver>>,
    /// S2: the client that holds a cursor ledger. `None` → the storage's client.
    pub cursor_resolver: Option<Arc<dyn CursorResolver>>,
    /// S4: providers for new data ledgers, applied in order.
    pub new_ledger_properties: Vec<Arc<dyn NewLedgerPropertiesProvider>>,
    /// S4: providers for new cursor ledgers, applied in order.
    pub new_cursor_ledger_properties: Vec<Arc<dyn NewLedgerPropertiesProvider>>,
}

impl StorageHooks {
    /// True when no hook is set (plain single-cluster behaviour).
    pub fn is_empty(&self) -> bool {
        self.active_client.is_none()
            && self.ledger_resolver.is_none()
            && self.cursor_resolver.is_none()
            && self.new_ledger_properties.is_empty()
            && self.new_cursor_ledger_properties.is_empty()
    }
}

/// What kind of failure a hook reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum HookErrorKind {
    /// The stamp names a cluster that is not registered.
    UnknownCluster,
    /// The metadata is corrupt (e.g. the stamp appears twice, or a ledger created
    /// after bootstrap carries no stamp). Never guessed around: repair it.
    CorruptMetadata,
    /// The cluster that holds the ledger cannot be reached now. Retryable.
    ClusterUnavailable,
    /// The current read mode forbids reading this cluster.
    RefusedByReadMode,
    /// Any other failure.
    Other,
}

/// An error from a hook: what failed, on which ledger and cluster, and whether a
/// retry can help.
///
/// The details live behind one box so that `Result<Arc<dyn BookKeeper>,
/// HookError>` stays two words wide: resolvers sit on the hot read path and
/// return through a trait object, where a wide error would be copied through
/// memory on every successful call.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{}", .inner.message)]
pub struct HookError {
    inner: Box<HookErrorInner>,
}

#[derive(Debug, Clone)]
struct HookErrorInner {
    kind: HookErrorKind,
    message: String,
    cluster: Option<String>,
    ledger_id: Option<LedgerId>,
    retry_after: Option<Duration>,
}

impl HookError {
    /// A new error of `kind`; `message` should say what failed and what to do.
    pub fn new(kind: HookErrorKind, message: impl Into<String>) -> HookError {
        HookError {
            inner: Box::new(HookErrorInner {
                kind,
                message: message.into(),
                cluster: None,
                ledger_id: None,
                retry_after: None,
            }),
        }
    }

    /// Attach the cluster concerned.
    pub fn with_cluster(mut self, cluster: impl Into<String>) -> HookError {
        self.inner.cluster = Some(cluster.into());
        self
    }

    /// Attach the ledger concerned.
    pub fn with_ledger(mut self, ledger_id: LedgerId) -> HookError {
        self.inner.ledger_id = Some(ledger_id);
        self
    }

    /// Attach a retry hint.
    pub fn with_retry_after(mut self, retry_after: Duration) -> HookError {
        self.inner.retry_after = Some(retry_after);
        self
    }

    /// The kind of failure.
    pub fn kind(&self) -> HookErrorKind {
        self.inner.kind
    }

    /// The cluster concerned, when known.
    pub fn cluster(&self) -> Option<&str> {
        self.inner.cluster.as_deref()
    }

    /// The ledger concerned, when known.
    pub fn ledger_id(&self) -> Option<LedgerId> {
        self.inner.ledger_id
    }

    /// How long to wait before retrying, when a retry can help.
    pub fn retry_after(&self) -> Option<Duration> {
        self.inner.retry_after
    }

    /// True when retrying later can succeed.
    pub fn is_retryable(&self) -> bool {
        matches!(self.inner.kind, HookErrorKind::ClusterUnavailable)
    }
}
