//! [`MemoryBookKeeper`]: a client of a [`MemoryCluster`].

use std::fmt;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use async_trait::async_trait;

use super::cluster::{remove_locked, FencedRecreateFailure, MemoryCluster, OpKind};
use super::handle::{ClientState, Ctx, MemoryReadHandle, MemoryWriteHandle};
use super::ledger::{Completions, LedgerCell};
use super::replicas::corrupt_metadata_error;
use crate::api::{BookKeeper, ReadHandle, WriteHandle};
use crate::error::{BkError, BkErrorKind, Result};
use crate::types::{
    DeleteMissing, DigestType, LedgerConfig, LedgerId, LedgerMetadata, LedgerState, NO_ENTRY,
};

/// A [`BookKeeper`] client of an in-memory [`MemoryCluster`].
///
/// Follows BookKeeper's ledger semantics exactly (see the [`BookKeeper`] contracts);
/// reads hand out shared [`Bytes`](bytes::Bytes) without copying.
///
/// ```
/// use bkswitch_bk_client::{BookKeeper, MemoryBookKeeper, MemoryCluster};
///
/// let cluster = MemoryCluster::new("bk-a");
/// let a = cluster.client();
/// let b = cluster.client();
/// assert_eq!(a.cluster_name(), "bk-a");
/// assert_eq!(b.cluster().name(), "bk-a");
/// // A standalone client on a new cluster of its own:
/// let solo = MemoryBookKeeper::new("solo");
/// assert_eq!(solo.cluster().next_ledger_id(), 0);
/// ```
#[derive(Clone)]
pub struct MemoryBookKeeper {
    cluster: MemoryCluster,
    state: Arc<ClientState>,
}

impl fmt::Debug for MemoryBookKeeper {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryBookKeeper")
            .field("cluster", &self.cluster.name())
            .field("closed", &self.state.is_closed())
            .finish()
    }
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0)
}

impl MemoryBookKeeper {
    /// A client of a new cluster called `cluster_name` with default settings.
    pub fn new(cluster_name: impl Into<String>) -> MemoryBookKeeper {
        MemoryCluster::new(cluster_name).client()
    }

    fn on_cluster(cluster: MemoryCluster) -> MemoryBookKeeper {
        MemoryBookKeeper {
            cluster,
            state: Arc::default(),
        }
    }

    /// The cluster this client talks to (settings, faults, introspection).
    pub fn cluster(&self) -> &MemoryCluster {
        &self.cluster
    }

    /// Whether [`BookKeeper::close`] was called on this client.
    pub fn is_closed(&self) -> bool {
        self.state.is_closed()
    }

    fn ctx(&self) -> Ctx {
        Ctx {
            cluster: self.cluster.inner.clone(),
            client: self.state.clone(),
        }
    }

    fn check_open(&self, what: &str, ledger: Option<LedgerId>) -> Result<()> {
        if self.state.is_closed() {
            return Err(self.cluster.inner.err(
                BkErrorKind::ClientClosed,
                ledger,
                format!("{what} failed: this client was closed"),
            ));
        }
        Ok(())
    }

    fn validate_config(
        &self,
        what: &str,
        ledger: Option<LedgerId>,
        c: &LedgerConfig,
    ) -> Result<()> {
        let problem = if c.ack_quorum_size == 0 {
            Some(format!("ack quorum {} must be > 0", c.ack_quorum_size))
        } else if c.ack_quorum_size > c.write_quorum_size {
            Some(format!(
                "ack quorum {} must be <= write quorum {}",
                c.ack_quorum_size, c.write_quorum_size
            ))
        } else if c.write_quorum_size > c.ensemble_size {
            Some(format!(
                "write quorum {} must be <= ensemble size {}",
                c.write_quorum_size, c.ensemble_size
            ))
        } else {
            None
        };
        match problem {
            Some(p) => Err(self.cluster.inner.err(
                BkErrorKind::InvalidArgument,
                ledger,
                format!("{what} failed: {p}"),
            )),
            None => Ok(()),
        }
    }

    fn check_bookies(&self, what: &str, ledger: Option<LedgerId>, c: &LedgerConfig) -> Result<()> {
        let available = self.cluster.inner.bookies.len();
        if c.ensemble_size as usize > available {
            return Err(self.cluster.inner.err(
                BkErrorKind::NotEnoughBookies,
                ledger,
                format!(
                    "{what} failed: an ensemble of {} bookies is needed but the cluster has {available}",
                    c.ensemble_size
                ),
            ));
        }
        Ok(())
    }

    fn new_metadata(&self, ledger_id: LedgerId, c: &LedgerConfig) -> LedgerMetadata {
        LedgerMetadata {
            ledger_id,
            ensembles: vec![crate::types::Ensemble {
                first_entry_id: 0,
                bookies: self
                    .cluster
                    .inner
                    .ensemble_for(ledger_id, c.ensemble_size as usize),
            }],
            ensemble_size: c.ensemble_size,
            write_quorum_size: c.write_quorum_size,
            ack_quorum_size: c.ack_quorum_size,
            digest_type: c.digest_type,
            password: c.password.clone(),
            custom_metadata: c.custom_metadata.clone(),
            state: LedgerState::Open,
            last_entry_id: NO_ENTRY,
            length: 0,
            ctime: now_millis(),
        }
    }

    async fn open(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
        recovery: bool,
    ) -> Result<Arc<dyn ReadHandle>> {
        let what = if recovery {
            "open (recovery)"
        } else {
            "open (no recovery)"
        };
        let inner = &self.cluster.inner;
        self.check_open(what, Some(ledger_id))?;
        let missing = || {
            inner.err(
                BkErrorKind::NoSuchLedgerOnMetadataServer,
                Some(ledger_id),
                format!("{what} failed: the ledger does not exist"),
            )
        };
        if ledger_id < 0 {
            return Err(missing());
        }
        inner.gate(OpKind::Open, Some(ledger_id)).await?;
        let cell = inner.ledger(ledger_id).ok_or_else(missing)?;
        let mut done = Completions::default();
        let view = {
            let mut d = cell.data.lock();
            if d.deleted {
                return Err(missing());
            }
            if d.metadata_corrupt {
                return Err(corrupt_metadata_error(&inner.name, ledger_id, what));
            }
            if d.metadata.password != password {
                return Err(inner.err(
                    BkErrorKind::UnauthorizedAccess,
                    Some(ledger_id),
                    format!("{what} failed: the password does not match the ledger's"),
                ));
            }
            if !inner.digest_autodetection && d.metadata.digest_type != digest_type {
                return Err(inner.err(
                    BkErrorKind::DigestMismatch,
                    Some(ledger_id),
                    format!(
                        "{what} failed: digest {digest_type:?} requested but the ledger uses {:?}",
                        d.metadata.digest_type
                    ),
                ));
            }
            if recovery && d.metadata.state != LedgerState::Closed {
                // Fence, then close at the last recoverable entry. The
                // bookies' headers confirm the entry before the last one: the
                // last is read from any bookie still holding it and written
                // back to its whole write set; with no copy left the recovery
                // cannot tell whether it was acknowledged (replicas.rs).
                d.fenced = true;
                let lac = d.lac;
                let unknown = lac >= 0 && d.copies(lac) == 0;
                if unknown {
                    let ws = d.write_set(lac).len();
                    let cluster = inner.name.clone();
                    d.fail_pending(&mut done, |entry_id| {
                        BkError::new(
                            BkErrorKind::LedgerFenced,
                            format!(
                                "add of entry {entry_id} failed: a recovery open fenced the ledger"
                            ),
                        )
                        .with_cluster(cluster.clone())
                        .with_ledger(ledger_id)
                    });
                    drop(d);
                    done.fire();
                    return Err(inner.err(
                        BkErrorKind::Unavailable,
                        Some(ledger_id),
                        format!(
                            "{what} failed: recovery cannot tell whether entry {lac} was \
                             acknowledged: none of the {ws} bookies of its write set holds a copy"
                        ),
                    ));
                }
                if lac >= 0 {
                    d.rereplicate(lac);
                }
                d.seal();
                let cluster = inner.name.clone();
                d.fail_pending(&mut done, |entry_id| {
                    BkError::new(
                        BkErrorKind::LedgerFenced,
                        format!(
                            "add of entry {entry_id} failed: a recovery open fenced the ledger"
                        ),
                    )
                    .with_cluster(cluster.clone())
                    .with_ledger(ledger_id)
                });
            }
            let (lac, length) = if d.metadata.is_closed() {
                (d.metadata.last_entry_id, d.metadata.length)
            } else {
                (d.lac, d.length)
            };
            super::handle::View {
                lac,
                length,
                metadata: d.metadata.clone(),
            }
        };
        done.fire();
        Ok(Arc::new(MemoryReadHandle::new(self.ctx(), cell, view)))
    }
}

/// Making clients is the client's concern: the cluster itself does not know
/// the client type.
impl MemoryCluster {
    /// A new client of this cluster.
    pub fn client(&self) -> MemoryBookKeeper {
        MemoryBookKeeper::on_cluster(self.clone())
    }
}

#[async_trait]
impl BookKeeper for MemoryBookKeeper {
    fn cluster_name(&self) -> &str {
        self.cluster.name()
    }

    /// `None`: an in-memory cluster has no bookies.
    fn writable_bookies(&self) -> Option<usize> {
        None
    }

    async fn advance_ledger_ids_beyond(&self, above: LedgerId) -> Result<()> {
        if above < 0 {
            return Err(self.cluster.inner.err(
                BkErrorKind::InvalidArgument,
                None,
                format!("cannot advance the ledger id generator beyond {above}: ids are >= 0"),
            ));
        }
        self.cluster.inner.gate(OpKind::Create, None).await?;
        let next = above.saturating_add(1);
        if self.cluster.next_ledger_id() >= next {
            return Ok(());
        }
        match self.cluster.advance_ledger_id_to(next) {
            // Another caller moved it past `next` meanwhile.
            Err(_) if self.cluster.next_ledger_id() >= next => Ok(()),
            r => r,
        }
    }

    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
        const WHAT: &str = "create_ledger";
        self.validate_config(WHAT, None, config)?;
        self.check_open(WHAT, None)?;
        self.check_bookies(WHAT, None, config)?;
        let inner = &self.cluster.inner;
        inner.gate(OpKind::Create, None).await?;
        let cell = {
            let mut reg = inner.registry.lock();
            // Skip ids taken by create_ledger_adv, like LedgerCreateOp's retry.
            let mut id = reg.next_id;
            while reg.ledgers.contains_key(&id) {
                id = id
                    .checked_add(1)
                    .ok_or_else(|| overflow(inner.name.as_str()))?;
            }
            reg.next_id = id
                .checked_add(1)
                .ok_or_else(|| overflow(inner.name.as_str()))?;
            let cell = Arc::new(LedgerCell::new(self.new_metadata(id, config), false, false));
            reg.ledgers.insert(id, cell.clone());
            cell
        };
        Ok(Arc::new(MemoryWriteHandle::new(self.ctx(), cell)))
    }

    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>> {
        const WHAT: &str = "create_ledger_adv";
        let inner = &self.cluster.inner;
        self.validate_config(WHAT, Some(ledger_id), config)?;
        if ledger_id < 0 {
            return Err(inner.err(
                BkErrorKind::InvalidArgument,
                Some(ledger_id),
                format!("{WHAT} failed: ledger id {ledger_id} is negative; ids must be >= 0"),
            ));
        }
        self.check_open(WHAT, Some(ledger_id))?;
        self.check_bookies(WHAT, Some(ledger_id), config)?;
        inner.gate(OpKind::Create, Some(ledger_id)).await?;
        let cell = {
            let mut reg = inner.registry.lock();
            if reg.ledgers.contains_key(&ledger_id) {
                return Err(inner.err(
                    BkErrorKind::LedgerExists,
                    Some(ledger_id),
                    format!("{WHAT} failed: a ledger with this id already exists"),
                ));
            }
            let mut fail_adds_fenced = false;
            if reg.fenced_recreates > 0 && reg.fenced_then_deleted.contains(&ledger_id) {
                reg.fenced_recreates -= 1;
                match reg.fenced_recreate_failure {
                    FencedRecreateFailure::OnCreate => {
                        return Err(inner.err(
                            BkErrorKind::LedgerFenced,
                            Some(ledger_id),
                            format!(
                                "{WHAT} failed: the bookies still hold a fence for this id, \
                                 which was fenced and then deleted"
                            ),
                        ))
                    }
                    FencedRecreateFailure::OnFirstAdd => fail_adds_fenced = true,
                }
            }
            let cell = Arc::new(LedgerCell::new(
                self.new_metadata(ledger_id, config),
                true,
                fail_adds_fenced,
            ));
            reg.ledgers.insert(ledger_id, cell.clone());
            cell
        };
        Ok(Arc::new(MemoryWriteHandle::new(self.ctx(), cell)))
    }

    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        self.open(ledger_id, digest_type, password, true).await
    }

    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        self.open(ledger_id, digest_type, password, false).await
    }

    async fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        const WHAT: &str = "delete_ledger";
        let inner = &self.cluster.inner;
        if ledger_id < 0 {
            return Err(inner.err(
                BkErrorKind::InvalidArgument,
                Some(ledger_id),
                format!("{WHAT} failed: ledger id {ledger_id} is negative; ids must be >= 0"),
            ));
        }
        self.check_open(WHAT, Some(ledger_id))?;
        inner.gate(OpKind::Delete, Some(ledger_id)).await?;
        let mut done = Completions::default();
        let outcome = {
            let mut reg = inner.registry.lock();
            if remove_locked(&mut reg, &inner.name, ledger_id, &mut done) {
                Ok(())
            } else {
                match reg.delete_missing {
                    DeleteMissing::Succeed => Ok(()),
                    DeleteMissing::NoSuchLedger => Err(inner.err(
                        BkErrorKind::NoSuchLedger,
                        Some(ledger_id),
                        format!("{WHAT} failed: the ledger does not exist"),
                    )),
                    DeleteMissing::NoSuchLedgerOnMetadataServer => Err(inner.err(
                        BkErrorKind::NoSuchLedgerOnMetadataServer,
                        Some(ledger_id),
                        format!("{WHAT} failed: the ledger does not exist"),
                    )),
                }
            }
        };
        done.fire();
        outcome
    }

    async fn close(&self) -> Result<()> {
        self.state.close();
        Ok(())
    }
}

fn overflow(cluster: &str) -> BkError {
    BkError::from_code(
        -106,
        "create_ledger failed: the ledger id generator is exhausted; \
         advance it below the maximum id or use create_ledger_adv",
    )
    .with_cluster(cluster)
}
