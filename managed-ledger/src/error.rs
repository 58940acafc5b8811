//! The one error type of the managed ledger and cursor: [`ManagedLedgerError`].

use bkswitch_bk_client::{BkError, BkErrorKind, LedgerId};
use bkswitch_metadata_store::MetadataError;
use bkswitch_mledger_spi::HookError;
use bkswitch_proto::CodecError;

use crate::position::Position;

/// Result alias of this crate.
pub type Result<T, E = ManagedLedgerError> = std::result::Result<T, E>;

/// The category of a [`ManagedLedgerError`], for matching without destructuring.
///
/// Named apart from the metadata store's `ErrorKind` so that code using both
/// needs no renamed import.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ManagedLedgerErrorKind {
    /// Another owner took over (fenced ledger, or metadata changed under us).
    Fenced,
    /// The managed ledger or cursor is closed (or deleted).
    Closed,
    /// The managed ledger is terminated: no more appends.
    Terminated,
    /// A managed-ledger or cursor name is invalid.
    InvalidName,
    /// A position is invalid or out of range.
    InvalidPosition,
    /// Another argument is invalid (e.g. a reserved property key).
    InvalidArgument,
    /// The cursor does not exist.
    NoSuchCursor,
    /// The cursor ledger is not the one the caller expected.
    CursorRolledOver,
    /// This node does not create ledgers on the cluster an operation needs yet.
    NotOnActiveCluster,
    /// A metadata compare-and-set lost against another writer.
    MetadataConflict,
    /// Stored metadata cannot be decoded or is inconsistent.
    CorruptMetadata,
    /// The BookKeeper client failed.
    Client,
    /// The metadata store failed.
    Metadata,
    /// A PIP-477 hook failed.
    Hook,
    /// Risky work was deferred: the metadata store's session is lost.
    MetadataSessionLost,
}

/// The lower-layer error behind a [`ManagedLedgerError::Fenced`]: kept typed so
/// that callers can inspect it (its retryable/permanent answer included).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceCause {
    /// BookKeeper refused to write: a recovery open by another owner fenced
    /// the ledger.
    #[error(transparent)]
    Ledger(BkError),
    /// A metadata compare-and-set lost: another owner wrote the metadata.
    #[error(transparent)]
    Metadata(MetadataError),
}

/// An error of a managed ledger or cursor operation.
///
/// Every message names the managed ledger (and cursor or ledger when relevant),
/// says what failed and what the caller or operator can do.
/// [`is_retryable`](ManagedLedgerError::is_retryable) says whether retrying the
/// same operation later can help.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ManagedLedgerError {
    /// Another owner opened the managed ledger (or took over the cursor): this
    /// instance must stop writing. Close it and reopen if it should own it again.
    #[error(
        "managed ledger '{name}' is fenced: {reason}; another owner opened it. Stop \
         using this instance; close it and reopen the managed ledger if this node \
         should own it"
    )]
    Fenced {
        /// The managed ledger.
        name: String,
        /// What revealed the fencing.
        reason: String,
        /// The lower-layer error that revealed it, when one did (a fenced
        /// ledger, a lost compare-and-set).
        #[source]
        source: Option<Box<FenceCause>>,
    },
    /// The managed ledger or cursor was closed or deleted.
    #[error("{what} is closed; open it again to keep using it")]
    Closed {
        /// What is closed (`managed ledger 'x'` or `cursor 'c' of managed ledger 'x'`).
        what: String,
    },
    /// The managed ledger is terminated; no entry can be appended any more.
    #[error(
        "managed ledger '{name}' is terminated at {position}: no more entries can be \
         appended; read up to the terminated position or delete the managed ledger"
    )]
    Terminated {
        /// The managed ledger.
        name: String,
        /// The last entry of the managed ledger.
        position: Position,
    },
    /// A managed-ledger or cursor name is invalid.
    #[error("invalid {what} name {name:?}: {reason}")]
    InvalidName {
        /// `managed ledger` or `cursor`.
        what: &'static str,
        /// The offending name (escaped when printed).
        name: String,
        /// The rule it breaks.
        reason: &'static str,
    },
    /// A position is invalid for this managed ledger.
    #[error("invalid position {position} for managed ledger '{name}': {reason}")]
    InvalidPosition {
        /// The managed ledger.
        name: String,
        /// The offending position.
        position: Position,
        /// What is wrong and what to do.
        reason: String,
    },
    /// Another argument is invalid; nothing was changed.
    #[error("invalid argument for managed ledger '{name}': {reason}")]
    InvalidArgument {
        /// The managed ledger.
        name: String,
        /// What is wrong and what to do.
        reason: String,
    },
    /// The cursor does not exist.
    #[error(
        "managed ledger '{name}' has no cursor '{cursor}'; open (create) it first or \
         check the name"
    )]
    NoSuchCursor {
        /// The managed ledger.
        name: String,
        /// The cursor.
        cursor: String,
    },
    /// The cursor ledger rolled over since the caller read it.
    #[error(
        "cursor '{cursor}' of managed ledger '{name}' rolled over: expected cursor \
         ledger {expected}, found {actual}; re-read the cursor metadata and decide again"
    )]
    CursorRolledOver {
        /// The managed ledger.
        name: String,
        /// The cursor.
        cursor: String,
        /// The cursor ledger id the caller expected.
        expected: LedgerId,
        /// The cursor ledger id now recorded.
        actual: LedgerId,
    },
    /// The operation needs a new ledger on `target`, but this node creates new
    /// ledgers on `active` (it has not applied the switch yet).
    #[error(
        "cursor '{cursor}' of managed ledger '{name}' must move to bookie cluster \
         '{target}', but this node creates ledgers on '{active}'; retry once the node \
         has applied the switch"
    )]
    NotOnActiveCluster {
        /// The managed ledger.
        name: String,
        /// The cursor.
        cursor: String,
        /// The cluster the operation targets.
        target: String,
        /// The cluster this node creates ledgers on.
        active: String,
    },
    /// A metadata compare-and-set lost against another writer.
    #[error("metadata of {what} changed concurrently at '{path}'; re-read it and retry")]
    MetadataConflict {
        /// What was being written.
        what: String,
        /// The metadata path.
        path: String,
        /// The store's error.
        #[source]
        source: MetadataError,
    },
    /// Stored metadata cannot be decoded or is inconsistent.
    #[error(
        "corrupt metadata of {what} at '{path}': {reason}; repair or restore the value \
         before opening it"
    )]
    CorruptMetadata {
        /// What the metadata describes.
        what: String,
        /// The metadata path.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The BookKeeper client failed.
    #[error("{context}: {source}")]
    Client {
        /// What the managed ledger was doing, naming it and the ledger.
        context: String,
        /// The client's error (cluster, ledger, BookKeeper code, hint).
        #[source]
        source: BkError,
    },
    /// The metadata store failed.
    #[error("{context}: {source}")]
    Metadata {
        /// What the managed ledger was doing.
        context: String,
        /// The store's error (operation, path, hint).
        #[source]
        source: MetadataError,
    },
    /// Risky work (a trim, a forced rollover, a delete) was not done because the
    /// metadata store's session is lost (see
    /// [`MetadataSession`](crate::MetadataSession)); nothing changed. Retry
    /// once the session is back.
    #[error(
        "managed ledger '{name}': {deferred} deferred: the metadata store's session is lost; \
         nothing was changed, retry once the session is back"
    )]
    MetadataSessionLost {
        /// The managed ledger.
        name: String,
        /// What was deferred.
        deferred: &'static str,
    },
    /// A PIP-477 hook (S1/S2/S4) failed.
    #[error("{context}: hook failed: {source}")]
    Hook {
        /// What the managed ledger was doing.
        context: String,
        /// The hook's error.
        #[source]
        source: HookError,
    },
}

impl ManagedLedgerError {
    /// The category of the error.
    pub fn kind(&self) -> ManagedLedgerErrorKind {
        match self {
            ManagedLedgerError::Fenced { .. } => ManagedLedgerErrorKind::Fenced,
            ManagedLedgerError::Closed { .. } => ManagedLedgerErrorKind::Closed,
            ManagedLedgerError::Terminated { .. } => ManagedLedgerErrorKind::Terminated,
            ManagedLedgerError::InvalidName { .. } => ManagedLedgerErrorKind::InvalidName,
            ManagedLedgerError::InvalidPosition { .. } => ManagedLedgerErrorKind::InvalidPosition,
            ManagedLedgerError::InvalidArgument { .. } => ManagedLedgerErrorKind::InvalidArgument,
            ManagedLedgerError::NoSuchCursor { .. } => ManagedLedgerErrorKind::NoSuchCursor,
            ManagedLedgerError::CursorRolledOver { .. } => ManagedLedgerErrorKind::CursorRolledOver,
            ManagedLedgerError::NotOnActiveCluster { .. } => {
                ManagedLedgerErrorKind::NotOnActiveCluster
            }
            ManagedLedgerError::MetadataConflict { .. } => ManagedLedgerErrorKind::MetadataConflict,
            ManagedLedgerError::CorruptMetadata { .. } => ManagedLedgerErrorKind::CorruptMetadata,
            ManagedLedgerError::Client { .. } => ManagedLedgerErrorKind::Client,
            ManagedLedgerError::Metadata { .. } => ManagedLedgerErrorKind::Metadata,
            ManagedLedgerError::Hook { .. } => ManagedLedgerErrorKind::Hook,
            ManagedLedgerError::MetadataSessionLost { .. } => {
                ManagedLedgerErrorKind::MetadataSessionLost
            }
        }
    }

    /// Whether retrying the same operation later can succeed: retryable client,
    /// store and hook failures, and metadata conflicts (after re-reading).
    pub fn is_retryable(&self) -> bool {
        match self {
            ManagedLedgerError::Client { source, .. } => source.is_retryable(),
            ManagedLedgerError::Metadata { source, .. } => source.is_retryable(),
            ManagedLedgerError::Hook { source, .. } => source.is_retryable(),
            ManagedLedgerError::MetadataConflict { .. } => true,
            ManagedLedgerError::NotOnActiveCluster { .. } => true,
            ManagedLedgerError::MetadataSessionLost { .. } => true,
            _ => false,
        }
    }

    /// The BookKeeper error behind a [`Client`](ManagedLedgerError::Client) error.
    pub fn bk_error(&self) -> Option<&BkError> {
        match self {
            ManagedLedgerError::Client { source, .. } => Some(source),
            _ => None,
        }
    }

    /// A [`Fenced`](ManagedLedgerError::Fenced) error no lower error revealed.
    pub(crate) fn fenced(name: &str, reason: impl Into<String>) -> Self {
        ManagedLedgerError::Fenced {
            name: name.to_owned(),
            reason: reason.into(),
            source: None,
        }
    }

    /// A [`Fenced`](ManagedLedgerError::Fenced) error revealed by `cause`; the
    /// reason names it too.
    pub(crate) fn fenced_by(name: &str, reason: impl Into<String>, cause: FenceCause) -> Self {
        ManagedLedgerError::Fenced {
            name: name.to_owned(),
            reason: reason.into(),
            source: Some(Box::new(cause)),
        }
    }

    pub(crate) fn client(context: impl Into<String>, source: BkError) -> Self {
        ManagedLedgerError::Client {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn metadata(context: impl Into<String>, source: MetadataError) -> Self {
        ManagedLedgerError::Metadata {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn hook(context: impl Into<String>, source: HookError) -> Self {
        ManagedLedgerError::Hook {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corrupt(what: impl Into<String>, path: &str, e: CodecError) -> Self {
        ManagedLedgerError::CorruptMetadata {
            what: what.into(),
            path: path.to_owned(),
            reason: e.to_string(),
        }
    }

    /// A client error, or [`Fenced`](ManagedLedgerError::Fenced) when the client
    /// reports the ledger fenced.
    pub(crate) fn from_add(name: &str, ledger_id: LedgerId, source: BkError) -> Self {
        if source.kind() == BkErrorKind::LedgerFenced {
            ManagedLedgerError::fenced_by(
                name,
                format!("ledger {ledger_id} was fenced by a recovery open ({source})"),
                FenceCause::Ledger(source),
            )
        } else {
            ManagedLedgerError::client(
                format!("append to ledger {ledger_id} of managed ledger '{name}' failed"),
                source,
            )
        }
    }
}
