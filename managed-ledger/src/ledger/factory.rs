//! [`ManagedLedgerFactory`]: opens managed ledgers on one metadata store and
//! one BookKeeper client.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use bkswitch_bk_client::BookKeeper;
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{ManagedLedgerConfig, ManagedLedgerStorageClass};
use bkswitch_proto::paths::MANAGED_LEDGERS_ROOT;

use super::api::ManagedLedger;
use super::open::open;
use crate::ctx::Ctx;
use crate::error::{ManagedLedgerError, Result};
use crate::name::validate_managed_ledger_name;
use crate::session::MetadataSession;
use crate::{Clock, SystemClock};

/// Opens managed ledgers on one metadata store and one BookKeeper client (the
/// storage's client, used for everything no hook decides).
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap().block_on(async {
/// use std::sync::Arc;
/// use bkswitch_bk_client::MemoryCluster;
/// use bkswitch_managed_ledger::ManagedLedgerFactory;
/// use bkswitch_metadata_store::MemoryStore;
/// use bkswitch_mledger_spi::ManagedLedgerConfig;
///
/// let factory = ManagedLedgerFactory::new(
///     Arc::new(MemoryStore::new()),
///     Arc::new(MemoryCluster::new("bk").client()),
/// );
/// let ml = factory.open("t/ns/persistent/a", ManagedLedgerConfig::default()).await?;
/// let p = ml.append("hello").await?;
/// assert_eq!(ml.last_confirmed(), p);
/// # Ok::<(), bkswitch_managed_ledger::ManagedLedgerError>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct ManagedLedgerFactory {
    store: Arc<dyn MetadataStore>,
    client: Arc<dyn BookKeeper>,
    clock: Arc<dyn Clock>,
    session: Arc<MetadataSession>,
    /// Whether a task follows the store's session events (shared by clones).
    following: Arc<AtomicBool>,
}

impl ManagedLedgerFactory {
    /// A factory writing metadata to `store` and using `client` when no hook says
    /// otherwise.
    pub fn new(store: Arc<dyn MetadataStore>, client: Arc<dyn BookKeeper>) -> Self {
        ManagedLedgerFactory {
            store,
            client,
            clock: Arc::new(SystemClock),
            session: Arc::new(MetadataSession::new()),
            following: Arc::new(AtomicBool::new(false)),
        }
    }

    /// A factory on the client of a PIP-384 storage class.
    pub fn from_storage_class(
        store: Arc<dyn MetadataStore>,
        class: &dyn ManagedLedgerStorageClass,
    ) -> Self {
        ManagedLedgerFactory::new(store, class.client())
    }

    /// Use `clock` for ledger timestamps, rollover ages and retention.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    /// The metadata store's session as this factory's managed ledgers see it:
    /// whether trims and rollovers run, and how many were deferred while it
    /// was lost ([`MetadataSession`]).
    pub fn metadata_session(&self) -> Arc<MetadataSession> {
        self.session.clone()
    }

    /// Starts following the store's session events, once per factory (and
    /// its clones). When the watch cannot be armed (a transient store
    /// error), it is tried again in the background until it is, with a
    /// growing pause (50 ms to 2 s): managed ledgers already open must pause
    /// their trims and rollovers at the next session loss even if no other
    /// ledger opens (found by the nemesis's buggify: one failed watch at the
    /// first open left a node that never paused).
    async fn follow_session(&self) {
        if self.following.swap(true, Ordering::AcqRel) {
            return;
        }
        let Err(e) = self.session.follow(self.store.as_ref()).await else {
            return;
        };
        tracing::warn!(error = %e,
            "cannot follow the metadata store's session events yet; retrying in the background");
        let session = self.session.clone();
        let store = Arc::downgrade(&self.store);
        tokio::spawn(async move {
            let mut pause = std::time::Duration::from_millis(50);
            loop {
                tokio::time::sleep(pause).await;
                // The factory and its store are gone: nothing to follow.
                let Some(store) = store.upgrade() else {
                    return;
                };
                match session.follow(store.as_ref()).await {
                    Ok(()) => return,
                    Err(e) if e.kind() == bkswitch_metadata_store::ErrorKind::Closed => return,
                    Err(e) => {
                        tracing::debug!(error = %e, "following the session: retried");
                        pause = (pause * 2).min(std::time::Duration::from_secs(2));
                    }
                }
            }
        });
    }

    /// The metadata path of a managed ledger: `/managed-ledgers/<name>`.
    pub fn metadata_path(name: &str) -> String {
        format!("{MANAGED_LEDGERS_ROOT}/{name}")
    }

    /// Opens (creating if missing) the managed ledger `name`
    /// (`tenant/ns/persistent/topic`).
    ///
    /// Loads its `ManagedLedgerInfo`; recovery-opens its last ledger through the
    /// S2 resolver, which fences a previous owner
    /// ([I15](bkswitch_docs::invariants::I15)); records the last ledger's
    /// entries and size (keeping its properties and stamp), or drops it when empty;
    /// creates a new ledger through S1 and records it with its S4 properties in
    /// the same compare-and-set ([I1](bkswitch_docs::invariants::I1)); then
    /// recovers every cursor.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`] for a bad name and
    /// [`ManagedLedgerError::InvalidArgument`] for a bad config (nothing written);
    /// [`ManagedLedgerError::CorruptMetadata`] when the stored value does not
    /// decode; [`ManagedLedgerError::Fenced`] when another owner changed the
    /// metadata meanwhile; client, store and hook errors.
    pub async fn open(&self, name: &str, config: ManagedLedgerConfig) -> Result<ManagedLedger> {
        validate_managed_ledger_name(name)?;
        config
            .validate()
            .map_err(|reason| ManagedLedgerError::InvalidArgument {
                name: name.to_owned(),
                reason,
            })?;
        self.follow_session().await;
        let path = Self::metadata_path(name);
        let ctx = Arc::new(Ctx {
            name: name.to_owned(),
            path,
            store: self.store.clone(),
            client: self.client.clone(),
            config,
            clock: self.clock.clone(),
            session: self.session.clone(),
        });
        let inner = open(ctx).await?;
        Ok(ManagedLedger { inner })
    }

    /// Whether the managed ledger `name` exists in the metadata store.
    ///
    /// # Errors
    ///
    /// [`ManagedLedgerError::InvalidName`]; store errors.
    pub async fn exists(&self, name: &str) -> Result<bool> {
        validate_managed_ledger_name(name)?;
        let path = Self::metadata_path(name);
        self.store
            .exists(&path)
            .await
            .map(|s| s.is_some())
            .map_err(|e| ManagedLedgerError::metadata(format!("checking '{path}'"), e))
    }
}
