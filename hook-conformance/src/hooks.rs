//! Counting and stamping hooks: what the suite installs into the implementation
//! under test, and what any test of a hooked managed ledger can reuse.
//!
//! - [`CountingResolver`]: an S2 resolver (data and cursor ledgers) that routes by
//!   the cluster stamp to registered clients and counts resolve calls per ledger.
//! - [`SwitchableSupplier`]: an S1 supplier whose client can be switched, counting
//!   calls.
//! - [`StampingProvider`]: an S4 provider that stamps the creating client's
//!   cluster name, counting calls, optionally failing.
//! - [`CountingSchemaProvider`]: an S3 provider that creates on a switchable
//!   client, stamps it, routes by stamp and counts every call.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, LedgerId};
use bkswitch_mledger_spi::{
    ActiveClientSupplier, CursorResolver, HookError, HookErrorKind, LedgerResolver,
    NewLedgerContext, NewLedgerPropertiesProvider,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedCursorInfo;
use bkswitch_proto::schema::PositionInfo;
use bkswitch_proto::{Stamped, ATTR_KEY};
use bkswitch_schema_spi::SchemaClientProvider;
use parking_lot::Mutex;

/// An S2 resolver for data and cursor ledgers that routes by the cluster stamp
/// to registered clients (unstamped ledgers go to the default client) and counts
/// resolve calls per ledger id.
#[derive(Debug)]
pub struct CountingResolver {
    default: Arc<dyn BookKeeper>,
    clients: Mutex<HashMap<String, Arc<dyn BookKeeper>>>,
    ledger_calls: Mutex<HashMap<LedgerId, usize>>,
    cursor_calls: Mutex<HashMap<LedgerId, usize>>,
}

impl CountingResolver {
    /// A resolver whose unstamped (legacy) ledgers resolve to `default`; the
    /// default client is also registered under its cluster name.
    pub fn new(default: Arc<dyn BookKeeper>) -> CountingResolver {
        let mut clients = HashMap::new();
        clients.insert(default.cluster_name().to_owned(), default.clone());
        CountingResolver {
            default,
            clients: Mutex::new(clients),
            ledger_calls: Mutex::new(HashMap::new()),
            cursor_calls: Mutex::new(HashMap::new()),
        }
    }

    /// Registers `client` under its cluster name.
    pub fn add_client(&self, client: Arc<dyn BookKeeper>) {
        self.clients
            .lock()
            .insert(client.cluster_name().to_owned(), client);
    }

    /// Data-ledger resolve calls for `ledger_id`.
    pub fn ledger_calls(&self, ledger_id: LedgerId) -> usize {
        self.ledger_calls
            .lock()
            .get(&ledger_id)
            .copied()
            .unwrap_or(0)
    }

    /// Cursor-ledger resolve calls for `ledger_id`.
    pub fn cursor_calls(&self, ledger_id: LedgerId) -> usize {
        self.cursor_calls
            .lock()
            .get(&ledger_id)
            .copied()
            .unwrap_or(0)
    }

    /// Total resolve calls (data and cursor).
    pub fn total_calls(&self) -> usize {
        self.ledger_calls.lock().values().sum::<usize>()
            + self.cursor_calls.lock().values().sum::<usize>()
    }

    /// Resets every count.
    pub fn reset(&self) {
        self.ledger_calls.lock().clear();
        self.cursor_calls.lock().clear();
    }

    fn route(
        &self,
        stamp: Option<&str>,
        ledger_id: LedgerId,
    ) -> Result<Arc<dyn BookKeeper>, HookError> {
        match stamp {
            None => Ok(self.default.clone()),
            Some(name) => self.clients.lock().get(name).cloned().ok_or_else(|| {
                HookError::new(
                    HookErrorKind::UnknownCluster,
                    format!("ledger {ledger_id} is stamped with unknown cluster '{name}'"),
                )
                .with_cluster(name)
                .with_ledger(ledger_id)
            }),
        }
    }
}

fn stamp_error(e: bkswitch_proto::StampError, ledger_id: LedgerId) -> HookError {
    HookError::new(HookErrorKind::CorruptMetadata, e.to_string()).with_ledger(ledger_id)
}

impl LedgerResolver for CountingResolver {
    fn resolve_ledger(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        *self.ledger_calls.lock().entry(info.ledger_id).or_default() += 1;
        let stamp = info
            .cluster_stamp()
            .map_err(|e| stamp_error(e, info.ledger_id))?;
        self.route(stamp, info.ledger_id)
    }
}

impl CursorResolver for CountingResolver {
    fn resolve_cursor(&self, info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        *self
            .cursor_calls
            .lock()
            .entry(info.cursors_ledger_id)
            .or_default() += 1;
        let stamp = info
            .cluster_stamp()
            .map_err(|e| stamp_error(e, info.cursors_ledger_id))?;
        self.route(stamp, info.cursors_ledger_id)
    }
}

/// An S1 supplier whose client can be switched at any time; counts calls.
#[derive(Debug)]
pub struct SwitchableSupplier {
    client: Mutex<Arc<dyn BookKeeper>>,
    calls: AtomicUsize,
}

impl SwitchableSupplier {
    /// A supplier handing out `client`.
    pub fn new(client: Arc<dyn BookKeeper>) -> SwitchableSupplier {
        SwitchableSupplier {
            client: Mutex::new(client),
            calls: AtomicUsize::new(0),
        }
    }

    /// Hands out `client` from now on.
    pub fn switch_to(&self, client: Arc<dyn BookKeeper>) {
        *self.client.lock() = client;
    }

    /// Calls so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl ActiveClientSupplier for SwitchableSupplier {
    fn active_client(&self) -> Arc<dyn BookKeeper> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        self.client.lock().clone()
    }
}

/// An S4 provider stamping `_pulsar.bookieClusterName` with the cluster of the
/// client that created the ledger; counts calls and can be made to fail.
#[derive(Debug, Default)]
pub struct StampingProvider {
    calls: AtomicUsize,
    fail: AtomicBool,
}

impl StampingProvider {
    /// A provider that stamps.
    pub fn new() -> StampingProvider {
        StampingProvider::default()
    }

    /// Makes later calls fail (`true`) or stamp again (`false`).
    pub fn set_failing(&self, fail: bool) {
        self.fail.store(fail, Ordering::SeqCst);
    }

    /// Calls so far.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

impl NewLedgerPropertiesProvider for StampingProvider {
    fn new_ledger_properties(
        &self,
        ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        if self.fail.load(Ordering::SeqCst) {
            return Err(HookError::new(
                HookErrorKind::Other,
                format!("injected stamping failure for ledger {}", ctx.ledger_id),
            )
            .with_ledger(ctx.ledger_id));
        }
        Ok(vec![(
            ATTR_KEY.to_owned(),
            ctx.client.cluster_name().to_owned(),
        )])
    }
}

/// An S3 provider for schema ledgers: creates on a switchable client, stamps
/// that client's cluster, routes every open and delete by the stamp (unstamped
/// positions go to the first client) and counts each kind of call.
#[derive(Debug)]
pub struct CountingSchemaProvider {
    active: Mutex<Arc<dyn BookKeeper>>,
    legacy: Arc<dyn BookKeeper>,
    clients: Mutex<HashMap<String, Arc<dyn BookKeeper>>>,
    resolve_calls: Mutex<HashMap<LedgerId, usize>>,
    active_calls: AtomicUsize,
    property_calls: AtomicUsize,
}

impl CountingSchemaProvider {
    /// A provider creating on `client`, which also holds legacy (unstamped)
    /// schema ledgers.
    pub fn new(client: Arc<dyn BookKeeper>) -> CountingSchemaProvider {
        let mut clients = HashMap::new();
        clients.insert(client.cluster_name().to_owned(), client.clone());
        CountingSchemaProvider {
            active: Mutex::new(client.clone()),
            legacy: client,
            clients: Mutex::new(clients),
            resolve_calls: Mutex::new(HashMap::new()),
            active_calls: AtomicUsize::new(0),
            property_calls: AtomicUsize::new(0),
        }
    }

    /// Registers `client` under its cluster name and creates on it from now on.
    pub fn switch_to(&self, client: Arc<dyn BookKeeper>) {
        self.clients
            .lock()
            .insert(client.cluster_name().to_owned(), client.clone());
        *self.active.lock() = client;
    }

    /// Resolve calls for the schema ledger `ledger_id`.
    pub fn resolve_calls(&self, ledger_id: LedgerId) -> usize {
        self.resolve_calls
            .lock()
            .get(&ledger_id)
            .copied()
            .unwrap_or(0)
    }

    /// Calls of [`SchemaClientProvider::active`] so far.
    pub fn active_calls(&self) -> usize {
        self.active_calls.load(Ordering::SeqCst)
    }

    /// Calls of [`SchemaClientProvider::creation_properties`] so far.
    pub fn property_calls(&self) -> usize {
        self.property_calls.load(Ordering::SeqCst)
    }
}

impl SchemaClientProvider for CountingSchemaProvider {
    fn resolve(&self, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        *self
            .resolve_calls
            .lock()
            .entry(position.ledger_id)
            .or_default() += 1;
        let stamp = position
            .cluster_stamp()
            .map_err(|e| stamp_error(e, position.ledger_id))?;
        match stamp {
            None => Ok(self.legacy.clone()),
            Some(name) => self.clients.lock().get(name).cloned().ok_or_else(|| {
                HookError::new(
                    HookErrorKind::UnknownCluster,
                    format!(
                        "schema ledger {} is stamped with unknown cluster '{name}'",
                        position.ledger_id
                    ),
                )
                .with_cluster(name)
                .with_ledger(position.ledger_id)
            }),
        }
    }

    fn active(&self) -> Arc<dyn BookKeeper> {
        self.active_calls.fetch_add(1, Ordering::SeqCst);
        self.active.lock().clone()
    }

    fn creation_properties(
        &self,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>, HookError> {
        self.property_calls.fetch_add(1, Ordering::SeqCst);
        Ok(vec![(
            ATTR_KEY.to_owned(),
            client.cluster_name().to_owned(),
        )])
    }
}
