//! [`State`]: what a storage and its routing hooks share — the book of
//! registered clusters (authoritative, changed under a lock), the slot table the
//! hot paths read, and the operations that keep the two in step: register,
//! connect, install, activate, record the bootstrap cluster.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, ClientFactory, LedgerId};
use parking_lot::Mutex;

use crate::not_initialized::NotInitializedClient;
use crate::table::{PushError, Slot, SlotTable, MAX_CLUSTERS};
use crate::{ReadMode, RouterConfig, RouterError, RouterMetrics};

/// The authoritative state, changed under a lock; the hot paths read the slot
/// table and a few atomics instead.
#[derive(Default)]
pub(crate) struct Book {
    pub(crate) clusters: BTreeMap<String, Entry>,
    pub(crate) bootstrap: Option<String>,
    pub(crate) active: Option<String>,
}

/// A registered cluster in the [`Book`].
pub(crate) struct Entry {
    pub(crate) uri: String,
    pub(crate) slot: usize,
}

/// The state shared by a storage, its clones and its [`ClusterRouter`](crate::ClusterRouter).
pub(crate) struct State {
    pub(crate) config: Mutex<RouterConfig>,
    pub(crate) factory: Mutex<Option<Arc<dyn ClientFactory>>>,
    pub(crate) book: Mutex<Book>,
    /// What the hot paths read; kept in step with `book` under its lock.
    pub(crate) table: SlotTable,
    /// Lowest ledger id known to have been created stamped on the bootstrap
    /// cluster ([I17](bkswitch_docs::invariants::I17)); `i64::MAX` while none
    /// is known.
    pub(crate) lowest_stamped_on_bootstrap: AtomicI64,
    pub(crate) read_mode: AtomicU8,
    pub(crate) metrics: Arc<RouterMetrics>,
    /// Serializes management operations that start clients (connect, switch,
    /// close, initialize).
    pub(crate) admin: tokio::sync::Mutex<()>,
    /// The S1 answer before any cluster is active.
    pub(crate) not_initialized: Arc<dyn BookKeeper>,
    /// Per-prefix overrides of S1 and S3 (a canary namespace created on
    /// another cluster). Read only when `has_overrides` is set, so S1 without
    /// overrides costs one more load.
    pub(crate) overrides: parking_lot::RwLock<OverrideTables>,
    pub(crate) has_overrides: std::sync::atomic::AtomicBool,
}

/// The per-prefix overrides as the hooks read them: `(prefix, slot index)`,
/// longest prefix first.
#[derive(Debug, Default)]
pub(crate) struct OverrideTables {
    /// By managed-ledger name prefix (S1: data and cursor ledgers).
    pub(crate) managed_ledgers: Vec<(Box<str>, usize)>,
    /// By schema-id prefix: the same prefixes without their domain segment
    /// ([`bkswitch_registry::schema_id_prefix`]), for S3 (schema ledgers).
    pub(crate) schemas: Vec<(Box<str>, usize)>,
}

impl State {
    pub(crate) fn new(config: RouterConfig) -> State {
        State {
            config: Mutex::new(config),
            factory: Mutex::new(None),
            book: Mutex::new(Book::default()),
            table: SlotTable::default(),
            lowest_stamped_on_bootstrap: AtomicI64::new(i64::MAX),
            read_mode: AtomicU8::new(ReadMode::DualRead.to_u8()),
            metrics: Arc::new(RouterMetrics::default()),
            admin: tokio::sync::Mutex::new(()),
            not_initialized: Arc::new(NotInitializedClient),
            overrides: parking_lot::RwLock::new(OverrideTables::default()),
            has_overrides: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// The slot of the registered cluster `name`, if any.
    pub(crate) fn slot_of(&self, book: &Book, name: &str) -> Option<&Slot> {
        self.table.get(book.clusters.get(name)?.slot)
    }

    /// Recomputes the bootstrap slot index from the book.
    fn publish_bootstrap(&self, book: &Book) {
        let index = book
            .bootstrap
            .as_deref()
            .and_then(|b| book.clusters.get(b))
            .map(|e| e.slot);
        self.table.set_bootstrap(index);
    }

    pub(crate) fn set_factory(&self, factory: Arc<dyn ClientFactory>) {
        *self.factory.lock() = Some(factory);
    }

    pub(crate) fn factory(
        &self,
        operation: &'static str,
    ) -> Result<Arc<dyn ClientFactory>, RouterError> {
        self.factory
            .lock()
            .clone()
            .ok_or(RouterError::NotInitialized { operation })
    }

    pub(crate) fn bootstrap_cluster(&self) -> Option<String> {
        self.book.lock().bootstrap.clone()
    }

    pub(crate) fn unknown(&self, name: &str) -> RouterError {
        RouterError::UnknownCluster {
            name: name.to_owned(),
            registered: self.book.lock().clusters.keys().cloned().collect(),
        }
    }

    pub(crate) fn add_cluster(&self, name: &str, uri: &str) -> Result<(), RouterError> {
        if name.trim().is_empty() || name.chars().any(char::is_whitespace) {
            return Err(RouterError::InvalidSettings(format!(
                "bookie cluster name '{name}' must be non-empty and without whitespace"
            )));
        }
        let mut book = self.book.lock();
        if let Some(e) = book.clusters.get(name) {
            if e.uri == uri {
                return Ok(());
            }
            return Err(RouterError::Conflict {
                name: name.to_owned(),
                uri: uri.to_owned(),
                reason: format!("'{name}' is already registered at '{}'", e.uri),
            });
        }
        if let Some((other, _)) = book.clusters.iter().find(|(_, e)| e.uri == uri) {
            return Err(RouterError::Conflict {
                name: name.to_owned(),
                uri: uri.to_owned(),
                reason: format!("the URI is already registered as cluster '{other}'"),
            });
        }
        let index = match self.table.push(Slot::new(name)) {
            Ok(index) => index,
            Err(PushError::Full) => {
                return Err(RouterError::InvalidSettings(format!(
                    "cannot register bookie cluster '{name}': at most {MAX_CLUSTERS} clusters \
                     can be registered with one storage"
                )))
            }
            // Unreachable: the book and the table hold the same names.
            Err(PushError::Taken(index)) => {
                return Err(RouterError::InvalidSettings(format!(
                    "routing slot {index} is already taken"
                )))
            }
        };
        book.clusters.insert(
            name.to_owned(),
            Entry {
                uri: uri.to_owned(),
                slot: index,
            },
        );
        self.publish_bootstrap(&book);
        Ok(())
    }

    /// The registered cluster's slot and URI, or `UnknownCluster`.
    fn registered(&self, name: &str) -> Result<(&Slot, String), RouterError> {
        let book = self.book.lock();
        match book.clusters.get(name) {
            Some(e) => match self.table.get(e.slot) {
                Some(slot) => Ok((slot, e.uri.clone())),
                None => Err(RouterError::UnknownCluster {
                    name: name.to_owned(),
                    registered: book.clusters.keys().cloned().collect(),
                }),
            },
            None => Err(RouterError::UnknownCluster {
                name: name.to_owned(),
                registered: book.clusters.keys().cloned().collect(),
            }),
        }
    }

    /// The cluster's slot, its client started through the factory if needed.
    /// Callers hold the admin lock.
    ///
    /// Returns the slot, not a clone of its client: a switch need not touch
    /// the client's reference count, which every S1 supply increments.
    pub(crate) async fn connect(&self, name: &str) -> Result<&Slot, RouterError> {
        let (slot, uri) = self.registered(name)?;
        if slot.state.is_connected() {
            return Ok(slot);
        }
        let factory = self.factory("connecting a cluster")?;
        let raw =
            factory
                .create_named(name, &uri)
                .await
                .map_err(|source| RouterError::ClientStart {
                    name: name.to_owned(),
                    uri: uri.clone(),
                    source: Box::new(source),
                })?;
        self.install(name, raw)
    }

    /// Installs an already started client for a registered cluster (replacing
    /// nothing: a connected cluster keeps its client and `raw` is dropped).
    pub(crate) fn install(
        &self,
        name: &str,
        raw: Arc<dyn BookKeeper>,
    ) -> Result<&Slot, RouterError> {
        let (slot, uri) = self.registered(name)?;
        if !slot.state.is_connected() {
            let timeout = self.config.lock().old_ledger_read_timeout;
            slot.client.install(raw, timeout);
            tracing::info!(cluster = name, uri = %uri, "bookie cluster client started");
        }
        Ok(slot)
    }

    /// Makes `name` the active cluster; returns the previous one.
    pub(crate) fn activate(&self, name: &str) -> Result<Option<String>, RouterError> {
        let mut book = self.book.lock();
        let Some(index) = book.clusters.get(name).map(|e| e.slot) else {
            drop(book);
            return Err(self.unknown(name));
        };
        if self.table.set_active(index).is_none() {
            // Unreachable: every slot of the book is set in the table.
            drop(book);
            return Err(self.unknown(name));
        }
        Ok(book.active.replace(name.to_owned()))
    }

    pub(crate) fn set_bootstrap(&self, name: &str) -> Result<(), RouterError> {
        if name.is_empty() {
            return Err(RouterError::InvalidSettings(
                "the bootstrap cluster name must not be empty".into(),
            ));
        }
        let mut book = self.book.lock();
        match book.bootstrap.as_deref() {
            Some(current) if current == name => return Ok(()),
            Some(current) => {
                return Err(RouterError::BootstrapAlreadySet {
                    current: current.to_owned(),
                    requested: name.to_owned(),
                })
            }
            None => book.bootstrap = Some(name.to_owned()),
        }
        self.publish_bootstrap(&book);
        tracing::info!(cluster = name, "bootstrap bookie cluster recorded");
        Ok(())
    }

    /// The lowest ledger id known to have been created stamped on the
    /// bootstrap cluster, once one is known.
    pub(crate) fn lowest_stamped_on_bootstrap(&self) -> Option<LedgerId> {
        match self.lowest_stamped_on_bootstrap.load(Ordering::Relaxed) {
            i64::MAX => None,
            id => Some(id),
        }
    }

    /// [I17](bkswitch_docs::invariants::I17) learning: `ledger_id` was created
    /// stamped on the bootstrap cluster.
    #[inline]
    pub(crate) fn learn_stamped_on_bootstrap(&self, ledger_id: LedgerId) {
        if ledger_id < self.lowest_stamped_on_bootstrap.load(Ordering::Relaxed) {
            self.lowest_stamped_on_bootstrap
                .fetch_min(ledger_id, Ordering::Relaxed);
        }
    }
}
