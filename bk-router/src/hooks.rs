//! [`ClusterRouter`]: the routing hooks S1–S4 over a storage's [`State`].

use std::fmt;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, LedgerId};
use bkswitch_mledger_spi::{
    ActiveClientSupplier, CursorResolver, HookError, LedgerResolver, NewLedgerContext,
    NewLedgerPropertiesProvider,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::ManagedCursorInfo;
use bkswitch_proto::schema::PositionInfo;
use bkswitch_proto::{DuplicateStamp, StampError, Stamped, ATTR_KEY};
use bkswitch_schema_spi::SchemaClientProvider;

use crate::hook_errors;
use crate::routed::ClusterState;
use crate::state::{OverrideTables, State};
use crate::ReadMode;

/// The routing hooks of a
/// [`MultiClusterManagedLedgerStorage`](crate::MultiClusterManagedLedgerStorage):
/// S1 (active client), S2 (ledger and cursor resolvers), S3 (schema provider)
/// and S4 (stamper).
///
/// Every resolve reads an append-only table of cluster slots (clusters are
/// never removed from routing) and a few atomics: no lock, no snapshot, no
/// allocation on success; the returned client is one `Arc` clone. The stamp is
/// found by [`Stamped::scan_cluster_stamp`], the one zero-allocation scan of
/// `bkswitch-proto`.
///
/// # S1: the slot table, not `arc-swap`
///
/// [Design §2](bkswitch_docs::design) asks for an active-client supplier
/// swappable without locks, and the hook's contract
/// ([`ActiveClientSupplier`]) suggests `arc-swap` for it. S1 here is one
/// `Acquire` load of the active slot's index and an `Arc` clone of that slot's
/// client, on the table the resolvers read. It was measured against S1 on
/// `arc_swap::ArcSwap` (the active client in one `ArcSwap`, `load_full` per
/// supply) and a plain `Arc` clone, quiet and under a swap storm (another
/// thread running `switch_active_cluster` without pause, 2.8 million swaps/s),
/// by the `resolver` bench (`cargo bench -p bkswitch-bench --bench resolver --
/// --warm-up-time 1 --measurement-time 3`), on a 2-vCPU KVM guest:
///
/// | per supply | plain `Arc` clone | slot table | `ArcSwap` |
/// |---|---|---|---|
/// | quiet (criterion) | 16.5 ns | 13.2 ns (0.80×) | 23.6 ns (1.43×) |
/// | swap storm (criterion) | 16.4 ns | 19.1 ns (1.17×) | 102.8 ns (6.28×) |
/// | quiet (paired) | 13.6 ns | 15.4 ns (1.13×) | 24.1 ns (1.77×) |
/// | a swap every 100 µs (paired) | 13.6 ns | 15.6 ns (1.15×) | 24.5 ns (1.81×) |
/// | swap storm (paired) | 13.7 ns | 21.6 ns (1.57×) | 96.9 ns (7.07×) |
///
/// ("paired": the three timed in turn in short slices, median of 41 rounds,
/// which cancels the drift of a shared machine's load.) The target was S1
/// under a swap storm within 1.2× of a plain `Arc` clone. `ArcSwap` is far from
/// it (its `load_full` takes a debt slot, re-checks the pointer and pays the
/// debt back: three atomic read-modify-writes where the table has the clone's
/// one), so S1 stays on the table and the crate does not depend on
/// `arc-swap`. The table meets the target in criterion's figures; in the
/// paired ones it costs 1.57× under the storm: every swap moves the active
/// index's cache line to the swapping core, and each reading core pays one
/// transfer per swap — the floor of any supplier that sees a swap at once.
/// Real switches are rare operator actions, where the table is within 1.15×.
/// Figures and machine: `bench/RESULTS.md`, section `resolver`.
///
/// # Unstamped ledgers created after bootstrap ([I17](bkswitch_docs::invariants::I17))
///
/// A ledger without a stamp is legacy and resolves to the bootstrap cluster.
/// Ledger ids of one BookKeeper cluster increase, and every ledger stamped to
/// the bootstrap cluster was created after the bootstrap marker (the plugin
/// only stamps once it runs). So the router keeps the lowest ledger id known to
/// have been created stamped on the bootstrap cluster, learned from S4 stamping
/// by a client of the bootstrap cluster and from resolving ledgers stamped to
/// it. An unstamped ledger whose id is greater than that id was created after
/// bootstrap by a writer running without the plugin: resolving it fails with
/// [`HookErrorKind::CorruptMetadata`](bkswitch_mledger_spi::HookErrorKind::CorruptMetadata)
/// (never guessed around) and counts in
/// [`RouterMetrics::unstamped_after_bootstrap`](crate::RouterMetrics::unstamped_after_bootstrap).
///
/// Limitations: the lowest id is learned in memory only (a restarted node
/// detects nothing until it sees a stamped bootstrap ledger again); an
/// unstamped ledger created after bootstrap but before the first stamped one
/// that this node learned of has a smaller id and is not detected; and ledgers
/// created on the bootstrap cluster with a chosen id (`createLedgerAdv`, as the
/// ledger copy does) are assumed to carry ids beyond the legacy ones, as the
/// idgen precheck ([I11](bkswitch_docs::invariants::I11)) guarantees for copies.
pub struct ClusterRouter {
    state: Arc<State>,
}

impl fmt::Debug for ClusterRouter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ClusterRouter").finish_non_exhaustive()
    }
}

impl ClusterRouter {
    pub(crate) fn new(state: Arc<State>) -> ClusterRouter {
        ClusterRouter { state }
    }

    /// The client that holds the ledger stamped with `stamp` (`Ok(None)`: legacy).
    ///
    /// # Errors
    ///
    /// See [`LedgerResolver::resolve_ledger`] on this type.
    #[inline]
    pub fn route(
        &self,
        stamp: Result<Option<&str>, StampError>,
        ledger_id: LedgerId,
    ) -> Result<Arc<dyn BookKeeper>, HookError> {
        match stamp {
            Ok(s) => self.route_scanned(s, ledger_id),
            Err(e) => Err(hook_errors::corrupt(e, ledger_id)),
        }
    }

    /// Routes a message by its stamp: the scan, then the table.
    #[inline(always)]
    fn route_stamped<T: Stamped>(
        &self,
        info: &T,
        ledger_id: LedgerId,
    ) -> Result<Arc<dyn BookKeeper>, HookError> {
        match info.scan_cluster_stamp() {
            Ok(stamp) => self.route_scanned(stamp, ledger_id),
            Err(DuplicateStamp) => Err(hook_errors::duplicate_stamp(info, ledger_id)),
        }
    }

    #[inline(always)]
    fn route_scanned(
        &self,
        stamp: Option<&str>,
        ledger_id: LedgerId,
    ) -> Result<Arc<dyn BookKeeper>, HookError> {
        let state = &*self.state;
        let table = &state.table;
        let slot = match stamp {
            Some(name) => {
                let Some((index, slot)) = table.find(name) else {
                    return Err(hook_errors::unknown_cluster(name, ledger_id));
                };
                if index == table.bootstrap_index() {
                    state.learn_stamped_on_bootstrap(ledger_id);
                }
                slot
            }
            None => {
                let index = table.bootstrap_index();
                if ledger_id > state.lowest_stamped_on_bootstrap.load(Ordering::Relaxed) {
                    return Err(self.unstamped_after_bootstrap(ledger_id));
                }
                match table.get(index) {
                    Some(slot) => slot,
                    None => return Err(self.no_bootstrap_slot(ledger_id)),
                }
            }
        };
        let mode = state.read_mode.load(Ordering::Relaxed);
        if mode != 0 {
            let active = slot.state.is_active();
            let refused = match ReadMode::from_u8(mode) {
                ReadMode::NewClusterOnly => !active,
                ReadMode::OldClusterOnly => active,
                ReadMode::DualRead => false,
            };
            if refused {
                return Err(hook_errors::refused_by_mode(
                    &slot.state.name,
                    ledger_id,
                    mode,
                ));
            }
        }
        if !slot.state.is_connected() {
            return Err(self.not_connected(&slot.state, ledger_id));
        }
        Ok(slot.client.clone())
    }

    #[cold]
    fn unstamped_after_bootstrap(&self, ledger_id: LedgerId) -> HookError {
        let state = &*self.state;
        state
            .metrics
            .unstamped_after_bootstrap
            .fetch_add(1, Ordering::Relaxed);
        let lowest = state.lowest_stamped_on_bootstrap.load(Ordering::Relaxed);
        let bootstrap = state.bootstrap_cluster().unwrap_or_default();
        tracing::error!(
            ledger_id,
            stamped_ledger_id = lowest,
            bootstrap_cluster = %bootstrap,
            "unstamped ledger created after bootstrap (I17)"
        );
        hook_errors::unstamped_after_bootstrap(ledger_id, lowest, bootstrap)
    }

    #[cold]
    fn no_bootstrap_slot(&self, ledger_id: LedgerId) -> HookError {
        match self.state.bootstrap_cluster() {
            Some(name) => hook_errors::unknown_bootstrap(&name, ledger_id),
            None => hook_errors::no_bootstrap(ledger_id),
        }
    }

    #[cold]
    fn not_connected(&self, cluster: &Arc<ClusterState>, ledger_id: LedgerId) -> HookError {
        let starting = self.start_connect(cluster);
        hook_errors::not_started(&cluster.name, ledger_id, starting)
    }

    /// Starts the cluster's client in the background (once at a time).
    fn start_connect(&self, cluster: &Arc<ClusterState>) -> bool {
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return false;
        };
        if cluster.connecting.swap(true, Ordering::AcqRel) {
            return true;
        }
        let state = self.state.clone();
        let cluster = cluster.clone();
        rt.spawn(async move {
            let name = cluster.name.to_string();
            let result = {
                let _admin = state.admin.lock().await;
                state.connect(&name).await
            };
            if let Err(e) = result {
                tracing::warn!(cluster = %name, error = %e, "lazy bookie cluster client start failed");
            }
            cluster.connecting.store(false, Ordering::Release);
        });
        true
    }

    fn stamp(client: &dyn BookKeeper) -> Vec<(String, String)> {
        vec![(ATTR_KEY.to_owned(), client.cluster_name().to_owned())]
    }

    /// Whether `client` is a client of the bootstrap cluster.
    fn is_bootstrap_client(&self, client: &dyn BookKeeper) -> bool {
        self.state
            .table
            .bootstrap()
            .is_some_and(|s| s.name() == client.cluster_name())
    }
}

/// S1: one `Acquire` load of the active slot's index and an `Arc` clone of its
/// client (see [S1 on the type](ClusterRouter#s1-the-slot-table-not-arc-swap)).
impl ActiveClientSupplier for ClusterRouter {
    /// Before the storage is initialized, a client whose every operation fails.
    #[inline]
    fn active_client(&self) -> Arc<dyn BookKeeper> {
        let state = &*self.state;
        match state.table.active() {
            Some(slot) => slot.client.clone(),
            None => state.not_initialized.clone(),
        }
    }

    /// The longest per-prefix override that `managed_ledger` starts with,
    /// else the active cluster. Without overrides, one extra `Acquire` load.
    #[inline]
    fn active_client_for(&self, managed_ledger: &str) -> Arc<dyn BookKeeper> {
        self.overridden(managed_ledger, |t| &t.managed_ledgers)
            .unwrap_or_else(|| self.active_client())
    }
}

impl ClusterRouter {
    /// The client of the longest prefix of `table` that `name` starts with,
    /// if any (one `Acquire` load when there is no override).
    #[inline]
    fn overridden(
        &self,
        name: &str,
        table: impl FnOnce(&OverrideTables) -> &[(Box<str>, usize)],
    ) -> Option<Arc<dyn BookKeeper>> {
        let state = &*self.state;
        if !state.has_overrides.load(Ordering::Acquire) {
            return None;
        }
        let overrides = state.overrides.read();
        table(&overrides)
            .iter()
            .find(|(prefix, _)| name.starts_with(&**prefix))
            .and_then(|(_, index)| state.table.get(*index))
            .map(|slot| -> Arc<dyn BookKeeper> { slot.client.clone() })
    }
}

impl LedgerResolver for ClusterRouter {
    /// Stamp → that cluster's client; no stamp → the bootstrap cluster
    /// ([I17](bkswitch_docs::invariants::I17)), unless the ledger is newer than
    /// a ledger created stamped on the bootstrap cluster (→ `CorruptMetadata`,
    /// see the [type docs](ClusterRouter)); unknown cluster → `UnknownCluster`;
    /// duplicate stamp → `CorruptMetadata`; refused by the read mode →
    /// `RefusedByReadMode`; registered but not started → `ClusterUnavailable`
    /// (retryable, the client is started in the background).
    #[inline(always)]
    fn resolve_ledger(&self, info: &LedgerInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        self.route_stamped(info, info.ledger_id)
    }
}

impl CursorResolver for ClusterRouter {
    #[inline(always)]
    fn resolve_cursor(&self, info: &ManagedCursorInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        self.route_stamped(info, info.cursors_ledger_id)
    }
}

impl NewLedgerPropertiesProvider for ClusterRouter {
    /// `_pulsar.bookieClusterName` = the cluster of the client that created the
    /// ledger (never re-reads the active cluster). A ledger created on the
    /// bootstrap cluster teaches the [I17](bkswitch_docs::invariants::I17)
    /// check its id.
    fn new_ledger_properties(
        &self,
        ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError> {
        if self.is_bootstrap_client(ctx.client) {
            self.state.learn_stamped_on_bootstrap(ctx.ledger_id);
        }
        Ok(Self::stamp(ctx.client))
    }
}

impl SchemaClientProvider for ClusterRouter {
    #[inline(always)]
    fn resolve(&self, position: &PositionInfo) -> Result<Arc<dyn BookKeeper>, HookError> {
        self.route_stamped(position, position.ledger_id)
    }

    fn active(&self) -> Arc<dyn BookKeeper> {
        self.active_client()
    }

    /// The longest per-prefix override whose schema-id prefix `schema_id`
    /// starts with (a canary moves its topics' new schema versions with their
    /// data), else the active cluster. Without overrides, one extra
    /// `Acquire` load.
    fn active_for(&self, schema_id: &str) -> Arc<dyn BookKeeper> {
        self.overridden(schema_id, |t| &t.schemas)
            .unwrap_or_else(|| self.active_client())
    }

    fn creation_properties(
        &self,
        client: &dyn BookKeeper,
    ) -> Result<Vec<(String, String)>, HookError> {
        Ok(Self::stamp(client))
    }
}
