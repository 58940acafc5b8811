//! Ledger handles: the write path ([`write`]), the read path ([`read`]) and
//! recovery ([`recovery`]), over what one ledger needs to talk to bookies
//! ([`LedgerCtx`]).

pub(crate) mod batch;
pub(crate) mod ensemble;
pub(crate) mod read;
pub(crate) mod recovery;
pub(crate) mod write;

use std::sync::Arc;

use bkswitch_bk_client::{BkError, BkErrorKind, DigestType, EntryId, LedgerId};

use crate::digest::{master_key, DigestManager, MASTER_KEY_LEN};
use crate::inner::ClientInner;
use crate::wire::codec::rc;
use crate::wire::conn::{ConnError, ConnErrorKind};

/// What every handle of one ledger shares: the client, the digest and the key.
pub(crate) struct LedgerCtx {
    pub(crate) client: Arc<ClientInner>,
    pub(crate) ledger_id: LedgerId,
    pub(crate) digest: DigestManager,
    pub(crate) master_key: [u8; MASTER_KEY_LEN],
    /// The ensemble index sticky reads ask first (random at first, moved on
    /// when that bookie fails).
    pub(crate) sticky: std::sync::atomic::AtomicUsize,
}

impl std::fmt::Debug for LedgerCtx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LedgerCtx")
            .field("cluster", &self.client.name)
            .field("ledger_id", &self.ledger_id)
            .field("digest", &self.digest)
            .finish()
    }
}

impl LedgerCtx {
    pub(crate) fn new(
        client: Arc<ClientInner>,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Arc<LedgerCtx> {
        Arc::new(LedgerCtx {
            client,
            ledger_id,
            digest: DigestManager::new(digest_type, password),
            master_key: master_key(password),
            sticky: std::sync::atomic::AtomicUsize::new(fastrand::usize(..1 << 16)),
        })
    }

    /// An error about this ledger on this cluster.
    pub(crate) fn error(&self, kind: BkErrorKind, message: impl Into<String>) -> BkError {
        BkError::new(kind, message)
            .with_cluster(&self.client.name)
            .with_ledger(self.ledger_id)
    }

    /// An error with an exact BookKeeper code about this ledger.
    pub(crate) fn code_error(&self, code: i32, message: impl Into<String>) -> BkError {
        BkError::from_code(code, message)
            .with_cluster(&self.client.name)
            .with_ledger(self.ledger_id)
    }

    /// `ClientClosed` (-19) when the client was closed.
    pub(crate) fn check_open(&self) -> Result<(), BkError> {
        self.client
            .check_open()
            .map_err(|e| e.with_ledger(self.ledger_id))
    }

    /// The error for a bookie's status code, as BookKeeper's client maps it.
    pub(crate) fn status_error(
        &self,
        op: Op,
        entry_id: EntryId,
        bookie: &str,
        status: i32,
    ) -> BkError {
        let (code, what) = match status {
            rc::ENOLEDGER => (-7, "the bookie does not know the ledger"),
            rc::ENOENTRY => (-13, "the bookie does not have the entry"),
            rc::EBADVERSION => (-16, "the bookie refused the protocol version"),
            rc::EUA => (
                -102,
                "the bookie refused the ledger's master key (wrong password)",
            ),
            rc::EFENCED => (-101, "the ledger is fenced: another client recovered it"),
            rc::EREADONLY => (-104, "the bookie is read-only"),
            rc::ETOOMANYREQUESTS => (-105, "the bookie is overloaded"),
            rc::EUNKNOWNLEDGERSTATE => (-108, "the bookie cannot tell whether it has the entry"),
            _ => match op {
                Op::Add => (-12, "the bookie failed to store the entry"),
                Op::Read => (-1, "the bookie failed to read the entry"),
            },
        };
        self.code_error(
            code,
            format!(
                "{} of entry {entry_id} on bookie {bookie} failed: {what} (bookie status {status})",
                op.name()
            ),
        )
    }

    /// The error for a request that got no answer.
    pub(crate) fn conn_error(&self, op: Op, entry_id: EntryId, e: &ConnError) -> BkError {
        let message = format!("{} of entry {entry_id}: {e}", op.name());
        match e.kind {
            ConnErrorKind::Timeout => self.error(BkErrorKind::Timeout, message),
            ConnErrorKind::Connect | ConnErrorKind::Closed => {
                self.client.quarantine(&e.bookie);
                if self.client.is_closed() {
                    self.error(BkErrorKind::ClientClosed, message)
                } else {
                    self.error(BkErrorKind::Unavailable, message)
                }
            }
        }
    }
}

/// The request kinds, for error messages and code mapping.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Add,
    Read,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Add => "add",
            Op::Read => "read",
        }
    }
}
