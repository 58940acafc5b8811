//! The one error type of the client SPI: [`BkError`], with BookKeeper's numeric
//! codes kept intact so that callers (and logs) can be matched against upstream.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;

use crate::types::LedgerId;

/// Result alias used by every fallible operation of this crate.
pub type Result<T, E = BkError> = std::result::Result<T, E>;

/// What went wrong, in BookKeeper's vocabulary.
///
/// Every kind maps to one BookKeeper `BKException.Code` value (see [`BkErrorKind::code`]).
/// [`BkErrorKind::from_code`] performs the reverse mapping for client implementations
/// that receive numeric codes from a real cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum BkErrorKind {
    /// The ledger id is already taken (`LedgerExistException`, -20). Final: retrying
    /// the same create cannot succeed.
    LedgerExists,
    /// The bookies do not know the ledger, typically because it was deleted
    /// (`NoSuchLedgerExistsException`, -7). Treat as "already deleted" on delete paths.
    NoSuchLedger,
    /// The metadata service has no such ledger
    /// (`NoSuchLedgerExistsOnMetadataServerException`, -25). Treat as "already deleted"
    /// on delete paths.
    NoSuchLedgerOnMetadataServer,
    /// The entry id was already acknowledged or is pending on this handle
    /// (`DuplicateEntryIdException`, -22).
    DuplicateEntryId,
    /// The handle or the ledger is closed (`LedgerClosedException`, -11).
    LedgerClosed,
    /// A recovery open fenced the ledger; the writer must stop
    /// (`LedgerFencedException`, -101).
    LedgerFenced,
    /// The operation is not allowed on this kind of handle (`IllegalOpException`, -100).
    IllegalOp,
    /// A parameter is invalid; nothing was executed (`IncorrectParameterException`, -14).
    InvalidArgument,
    /// A read asked for entries beyond the last add confirmed. BookKeeper reports this
    /// as a generic `ReadException` (-1); a real client may use -1 for other bookie read
    /// failures too.
    ReadBeyondLac,
    /// The entry does not exist on the bookies (`NoSuchEntryException`, -13).
    NoSuchEntry,
    /// The password does not match the ledger's (`UnauthorizedAccessException`, -102).
    UnauthorizedAccess,
    /// The cluster has fewer bookies than the ensemble needs
    /// (`NotEnoughBookiesException`, -6).
    NotEnoughBookies,
    /// The digest type does not match the ledger's and digest autodetection is off
    /// (`DigestMatchException`, -5).
    DigestMismatch,
    /// The cluster cannot be reached right now. Mapped to BookKeeper's
    /// `BookieHandleNotAvailableException` (-8), the code a client reports when it has
    /// no usable connection to the bookies. Retryable.
    Unavailable,
    /// The operation did not complete in time (`TimeoutException`, -23). Retryable.
    Timeout,
    /// The client was closed (`ClientClosedException`, -19).
    ClientClosed,
    /// Any other BookKeeper code; [`BkError::code`] holds the exact value
    /// (`UnexpectedConditionException`, -999, when created from this kind).
    Other,
}

impl BkErrorKind {
    /// BookKeeper's numeric code for this kind.
    pub fn code(self) -> i32 {
        match self {
            BkErrorKind::LedgerExists => -20,
            BkErrorKind::NoSuchLedger => -7,
            BkErrorKind::NoSuchLedgerOnMetadataServer => -25,
            BkErrorKind::DuplicateEntryId => -22,
            BkErrorKind::LedgerClosed => -11,
            BkErrorKind::LedgerFenced => -101,
            BkErrorKind::IllegalOp => -100,
            BkErrorKind::InvalidArgument => -14,
            BkErrorKind::ReadBeyondLac => -1,
            BkErrorKind::NoSuchEntry => -13,
            BkErrorKind::UnauthorizedAccess => -102,
            BkErrorKind::NotEnoughBookies => -6,
            BkErrorKind::DigestMismatch => -5,
            BkErrorKind::Unavailable => -8,
            BkErrorKind::Timeout => -23,
            BkErrorKind::ClientClosed => -19,
            BkErrorKind::Other => -999,
        }
    }

    /// The kind for a BookKeeper code; codes without a dedicated kind map to
    /// [`BkErrorKind::Other`].
    ///
    /// Besides each kind's own code, the codes a real client reports when the
    /// cluster is unreachable map to the retryable kinds: `NoBookieAvailable` (-3),
    /// `ZKException` (-9), `MetaStoreException` (-18) and `TooManyRequests` (-105)
    /// to [`Unavailable`](BkErrorKind::Unavailable), `AddEntryQuorumTimeout` (-21)
    /// to [`Timeout`](BkErrorKind::Timeout). [`BkError::code`] keeps the exact code.
    pub fn from_code(code: i32) -> BkErrorKind {
        match code {
            -3 | -9 | -18 | -105 => BkErrorKind::Unavailable,
            -21 => BkErrorKind::Timeout,
            -20 => BkErrorKind::LedgerExists,
            -7 => BkErrorKind::NoSuchLedger,
            -25 => BkErrorKind::NoSuchLedgerOnMetadataServer,
            -22 => BkErrorKind::DuplicateEntryId,
            -11 => BkErrorKind::LedgerClosed,
            -101 => BkErrorKind::LedgerFenced,
            -100 => BkErrorKind::IllegalOp,
            -14 => BkErrorKind::InvalidArgument,
            -1 => BkErrorKind::ReadBeyondLac,
            -13 => BkErrorKind::NoSuchEntry,
            -102 => BkErrorKind::UnauthorizedAccess,
            -6 => BkErrorKind::NotEnoughBookies,
            -5 => BkErrorKind::DigestMismatch,
            -8 => BkErrorKind::Unavailable,
            -23 => BkErrorKind::Timeout,
            -19 => BkErrorKind::ClientClosed,
            _ => BkErrorKind::Other,
        }
    }

    /// Whether retrying the same operation later can succeed.
    pub fn is_retryable(self) -> bool {
        matches!(self, BkErrorKind::Unavailable | BkErrorKind::Timeout)
    }

    /// BookKeeper's exception name for this kind.
    pub fn bookkeeper_name(self) -> &'static str {
        match self {
            BkErrorKind::LedgerExists => "LedgerExistException",
            BkErrorKind::NoSuchLedger => "NoSuchLedgerExistsException",
            BkErrorKind::NoSuchLedgerOnMetadataServer => {
                "NoSuchLedgerExistsOnMetadataServerException"
            }
            BkErrorKind::DuplicateEntryId => "DuplicateEntryIdException",
            BkErrorKind::LedgerClosed => "LedgerClosedException",
            BkErrorKind::LedgerFenced => "LedgerFencedException",
            BkErrorKind::IllegalOp => "IllegalOpException",
            BkErrorKind::InvalidArgument => "IncorrectParameterException",
            BkErrorKind::ReadBeyondLac => "ReadException",
            BkErrorKind::NoSuchEntry => "NoSuchEntryException",
            BkErrorKind::UnauthorizedAccess => "UnauthorizedAccessException",
            BkErrorKind::NotEnoughBookies => "NotEnoughBookiesException",
            BkErrorKind::DigestMismatch => "DigestMatchException",
            BkErrorKind::Unavailable => "BookieHandleNotAvailableException",
            BkErrorKind::Timeout => "TimeoutException",
            BkErrorKind::ClientClosed => "ClientClosedException",
            BkErrorKind::Other => "UnexpectedConditionException",
        }
    }

    fn summary(self) -> &'static str {
        match self {
            BkErrorKind::LedgerExists => "ledger already exists",
            BkErrorKind::NoSuchLedger => "no such ledger on the bookies",
            BkErrorKind::NoSuchLedgerOnMetadataServer => "no such ledger in the metadata service",
            BkErrorKind::DuplicateEntryId => "duplicate entry id",
            BkErrorKind::LedgerClosed => "ledger closed",
            BkErrorKind::LedgerFenced => "ledger fenced",
            BkErrorKind::IllegalOp => "illegal operation",
            BkErrorKind::InvalidArgument => "invalid argument",
            BkErrorKind::ReadBeyondLac => "read beyond the last add confirmed",
            BkErrorKind::NoSuchEntry => "no such entry",
            BkErrorKind::UnauthorizedAccess => "unauthorized access",
            BkErrorKind::NotEnoughBookies => "not enough bookies",
            BkErrorKind::DigestMismatch => "digest type mismatch",
            BkErrorKind::Unavailable => "bookie cluster unavailable",
            BkErrorKind::Timeout => "operation timed out",
            BkErrorKind::ClientClosed => "client closed",
            BkErrorKind::Other => "unexpected BookKeeper error",
        }
    }

    fn hint(self) -> &'static str {
        match self {
            BkErrorKind::LedgerExists => {
                "pick another ledger id, or open the existing ledger and compare it with what you meant to write"
            }
            BkErrorKind::NoSuchLedger | BkErrorKind::NoSuchLedgerOnMetadataServer => {
                "check the ledger id and the cluster it belongs to; on a delete path treat it as already deleted"
            }
            BkErrorKind::DuplicateEntryId => {
                "write entry ids above the last add confirmed that are not already pending"
            }
            BkErrorKind::LedgerClosed => "open a new ledger to keep writing",
            BkErrorKind::LedgerFenced => {
                "another client recovered this ledger; stop writing to it and roll over to a new ledger"
            }
            BkErrorKind::IllegalOp => {
                "use add_entry_at on handles from create_ledger_adv and add_entry on handles from create_ledger"
            }
            BkErrorKind::InvalidArgument => "fix the request parameters; nothing was executed",
            BkErrorKind::ReadBeyondLac => {
                "read up to last_add_confirmed(), or refresh it with read_last_add_confirmed() first"
            }
            BkErrorKind::NoSuchEntry => "the entry was never written; read a smaller range",
            BkErrorKind::UnauthorizedAccess => {
                "open the ledger with the password it was created with"
            }
            BkErrorKind::NotEnoughBookies => {
                "start more bookies or lower the ensemble size"
            }
            BkErrorKind::DigestMismatch => {
                "open with the digest type the ledger was created with, or enable digest autodetection"
            }
            BkErrorKind::Unavailable => {
                "retry later; check that the bookies and the metadata service of this cluster are reachable"
            }
            BkErrorKind::Timeout => "retry later; check the health and load of this cluster",
            BkErrorKind::ClientClosed => "create a new client for this cluster",
            BkErrorKind::Other => "see the message and the cluster's logs",
        }
    }
}

impl fmt::Display for BkErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.summary())
    }
}

/// Where an error happened: `on cluster 'x', ledger 7`, or nothing when unknown.
struct Location<'a> {
    cluster: Option<&'a str>,
    ledger_id: Option<LedgerId>,
}

impl fmt::Display for Location<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.cluster, self.ledger_id) {
            (Some(c), Some(l)) => write!(f, " on cluster '{c}', ledger {l}"),
            (Some(c), None) => write!(f, " on cluster '{c}'"),
            (None, Some(l)) => write!(f, " on ledger {l}"),
            (None, None) => Ok(()),
        }
    }
}

/// An error from a BookKeeper client.
///
/// Carries BookKeeper's numeric code ([`code`](BkError::code)), a [`BkErrorKind`],
/// the cluster and ledger when known, a message saying what failed, and an
/// optional source error. Its `Display` reads like
/// `ledger fenced on cluster 'a', ledger 7 (BookKeeper code -101, LedgerFencedException):
/// add of entry 3 failed: …; another client recovered this ledger; …`.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
#[error(
    "{kind}{location} (BookKeeper code {code}, {name}): {message}; {hint}",
    location = Location { cluster: self.cluster.as_deref(), ledger_id: self.ledger_id },
    name = .kind.bookkeeper_name(),
    hint = .kind.hint()
)]
pub struct BkError {
    kind: BkErrorKind,
    code: i32,
    cluster: Option<String>,
    ledger_id: Option<LedgerId>,
    message: String,
    #[source]
    source: Option<Arc<dyn StdError + Send + Sync + 'static>>,
}

impl BkError {
    /// A new error of `kind` (its code is [`BkErrorKind::code`]) saying what failed.
    pub fn new(kind: BkErrorKind, message: impl Into<String>) -> BkError {
        BkError {
            kind,
            code: kind.code(),
            cluster: None,
            ledger_id: None,
            message: message.into(),
            source: None,
        }
    }

    /// An error for a raw BookKeeper code, e.g. one received from a real cluster.
    /// The kind is [`BkErrorKind::from_code`]; the exact code is kept.
    pub fn from_code(code: i32, message: impl Into<String>) -> BkError {
        let mut e = BkError::new(BkErrorKind::from_code(code), message);
        e.code = code;
        e
    }

    /// Attach the cluster name the operation ran on.
    pub fn with_cluster(mut self, cluster: impl Into<String>) -> BkError {
        self.cluster = Some(cluster.into());
        self
    }

    /// Attach the ledger id the operation was about.
    pub fn with_ledger(mut self, ledger_id: LedgerId) -> BkError {
        self.ledger_id = Some(ledger_id);
        self
    }

    /// Attach the underlying cause (transport error, …).
    pub fn with_source(mut self, source: impl StdError + Send + Sync + 'static) -> BkError {
        self.source = Some(Arc::new(source));
        self
    }

    /// What went wrong.
    pub fn kind(&self) -> BkErrorKind {
        self.kind
    }

    /// BookKeeper's numeric code (`BKException.Code`).
    pub fn code(&self) -> i32 {
        self.code
    }

    /// The cluster the operation ran on, when known.
    pub fn cluster(&self) -> Option<&str> {
        self.cluster.as_deref()
    }

    /// The ledger the operation was about, when known.
    pub fn ledger_id(&self) -> Option<LedgerId> {
        self.ledger_id
    }

    /// The message saying what failed (without location, code or hint).
    pub fn message(&self) -> &str {
        &self.message
    }

    /// Whether retrying the same operation later can succeed
    /// ([`Unavailable`](BkErrorKind::Unavailable) and [`Timeout`](BkErrorKind::Timeout)).
    pub fn is_retryable(&self) -> bool {
        self.kind.is_retryable()
    }

    /// Whether a delete that got this error may count the ledger as deleted:
    /// true for `NoSuchLedgerExistsException` (-7) and
    /// `NoSuchLedgerExistsOnMetadataServerException` (-25).
    pub fn is_already_deleted(&self) -> bool {
        matches!(
            self.kind,
            BkErrorKind::NoSuchLedger | BkErrorKind::NoSuchLedgerOnMetadataServer
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip() {
        for kind in [
            BkErrorKind::LedgerExists,
            BkErrorKind::NoSuchLedger,
            BkErrorKind::NoSuchLedgerOnMetadataServer,
            BkErrorKind::DuplicateEntryId,
            BkErrorKind::LedgerClosed,
            BkErrorKind::LedgerFenced,
            BkErrorKind::IllegalOp,
            BkErrorKind::InvalidArgument,
            BkErrorKind::ReadBeyondLac,
            BkErrorKind::NoSuchEntry,
            BkErrorKind::UnauthorizedAccess,
            BkErrorKind::NotEnoughBookies,
            BkErrorKind::DigestMismatch,
            BkErrorKind::Unavailable,
            BkErrorKind::Timeout,
            BkErrorKind::ClientClosed,
        ] {
            assert_eq!(BkErrorKind::from_code(kind.code()), kind, "{kind:?}");
        }
        let e = BkError::from_code(-17, "metadata version conflict");
        assert_eq!(e.kind(), BkErrorKind::Other);
        assert_eq!(e.code(), -17);
        let zk = BkError::from_code(-9, "ZooKeeper connection lost");
        assert_eq!((zk.kind(), zk.code()), (BkErrorKind::Unavailable, -9));
        assert!(zk.is_retryable());
        assert_eq!(BkErrorKind::from_code(-21), BkErrorKind::Timeout);
    }

    #[test]
    fn display_names_cluster_ledger_code_and_hint() {
        let e = BkError::new(BkErrorKind::LedgerFenced, "add of entry 3 failed")
            .with_cluster("bk-a")
            .with_ledger(7);
        let s = e.to_string();
        assert!(
            s.starts_with("ledger fenced on cluster 'bk-a', ledger 7"),
            "{s}"
        );
        assert!(
            s.contains("BookKeeper code -101, LedgerFencedException"),
            "{s}"
        );
        assert!(s.contains("add of entry 3 failed"), "{s}");
        assert!(s.contains("roll over to a new ledger"), "{s}");
        assert!(!e.is_retryable());
        let plain = BkError::new(BkErrorKind::Timeout, "open timed out");
        assert!(plain
            .to_string()
            .starts_with("operation timed out (BookKeeper code -23"));
        assert!(plain.is_retryable());
    }

    #[test]
    fn already_deleted_and_source() {
        assert!(BkError::new(BkErrorKind::NoSuchLedger, "x").is_already_deleted());
        assert!(BkError::new(BkErrorKind::NoSuchLedgerOnMetadataServer, "x").is_already_deleted());
        assert!(!BkError::new(BkErrorKind::LedgerExists, "x").is_already_deleted());
        let io = std::io::Error::other("connection reset");
        let e = BkError::new(BkErrorKind::Unavailable, "connect failed").with_source(io);
        assert_eq!(
            StdError::source(&e).map(|s| s.to_string()),
            Some("connection reset".to_string())
        );
    }
}
