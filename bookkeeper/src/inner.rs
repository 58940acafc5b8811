//! What every handle of a client shares ([`ClientInner`]): the cluster's
//! metadata, its bookies, the connections to them, and the placement of new
//! ensembles. Below both the client API and the ledger handles.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{BkError, BkErrorKind};
use parking_lot::Mutex;
use tokio::runtime::Handle;

use crate::bookies::Bookies;
use crate::config::ClientConfig;
use crate::errors::zk_error;
use crate::meta::ClusterMeta;
use crate::uri::MetadataServiceUri;
use crate::wire::conn::{BookieConn, ConnSettings, Resolver, WireStats};

/// What every handle of a client shares.
pub(crate) struct ClientInner {
    pub(crate) name: String,
    pub(crate) uri: MetadataServiceUri,
    pub(crate) config: ClientConfig,
    pub(crate) meta: ClusterMeta,
    pub(crate) bookies: Arc<Bookies>,
    pub(crate) runtime: Handle,
    /// What the client's connections have written.
    pub(crate) wire_stats: Arc<WireStats>,
    /// The budget of add bytes in flight.
    pub(crate) add_budget: AddBudget,
    conns: Mutex<HashMap<String, Arc<BookieConn>>>,
    /// The budget of add bytes in flight of each bookie's connection.
    conn_budgets: Mutex<HashMap<String, Arc<AddBudget>>>,
    quarantine: Mutex<HashMap<String, std::time::Instant>>,
    /// The bookies' racks (empty: unknown) and when they were read.
    racks: Mutex<(Racks, Option<std::time::Instant>)>,
    closed: AtomicBool,
    owns_store: bool,
    tls: Option<crate::wire::tls::Tls>,
}

impl ClientInner {
    #[allow(
        clippy::too_many_arguments,
        reason = "called once, by the client's constructor"
    )]
    pub(crate) fn new(
        name: String,
        uri: MetadataServiceUri,
        config: ClientConfig,
        meta: ClusterMeta,
        bookies: Arc<Bookies>,
        runtime: Handle,
        owns_store: bool,
        tls: Option<crate::wire::tls::Tls>,
    ) -> ClientInner {
        let add_budget = AddBudget::new(config.max_add_bytes_in_flight);
        ClientInner {
            name,
            uri,
            config,
            meta,
            bookies,
            runtime,
            wire_stats: Arc::default(),
            add_budget,
            conns: Mutex::new(HashMap::new()),
            conn_budgets: Mutex::new(HashMap::new()),
            quarantine: Mutex::new(HashMap::new()),
            racks: Mutex::new((Arc::default(), None)),
            closed: AtomicBool::new(false),
            owns_store,
            tls,
        }
    }

    /// Closes every connection, stops following the bookies and, when the
    /// client opened it, ends the ZooKeeper session. Idempotent.
    pub(crate) async fn close(&self) -> Result<(), BkError> {
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        // Adds waiting for the budget give up (their writers fail them).
        self.add_budget.semaphore.close();
        let conns: Vec<_> = self.conns.lock().drain().map(|(_, c)| c).collect();
        for c in conns {
            c.shutdown();
        }
        self.bookies.stop();
        if self.owns_store {
            self.meta
                .store()
                .close()
                .await
                .map_err(|e| zk_error(&self.name, "closing the ZooKeeper session", e))?;
        }
        Ok(())
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    pub(crate) fn check_open(&self) -> Result<(), BkError> {
        if self.is_closed() {
            Err(
                BkError::new(BkErrorKind::ClientClosed, "the client was closed")
                    .with_cluster(&self.name),
            )
        } else {
            Ok(())
        }
    }

    /// The connection to `bookie` (created on first use).
    pub(crate) fn conn(&self, bookie: &str) -> Arc<BookieConn> {
        let mut conns = self.conns.lock();
        if let Some(c) = conns.get(bookie) {
            return c.clone();
        }
        let bookies = Arc::downgrade(&self.bookies);
        let resolver: Resolver = Arc::new(move |id: String| {
            let bookies = bookies.clone();
            Box::pin(async move {
                match bookies.upgrade() {
                    Some(b) => b.resolve(&id).await,
                    None => Err("client closed".to_owned()),
                }
            })
        });
        let conn = BookieConn::new(
            bookie.to_owned(),
            ConnSettings {
                connect_timeout: self.config.connect_timeout,
                sweep_interval: sweep_interval(&self.config),
                stats: self.wire_stats.clone(),
                tls: self.tls.clone(),
                hold_adds: self.config.add_coalescing,
            },
            resolver,
            self.runtime.clone(),
        );
        conns.insert(bookie.to_owned(), conn.clone());
        conn
    }

    /// The budget of add bytes in flight to `bookie`
    /// ([`ClientConfig::max_add_bytes_in_flight_per_bookie`]).
    pub(crate) fn conn_budget(&self, bookie: &str) -> Arc<AddBudget> {
        let mut budgets = self.conn_budgets.lock();
        if let Some(b) = budgets.get(bookie) {
            return b.clone();
        }
        let b = Arc::new(AddBudget::new(
            self.config.max_add_bytes_in_flight_per_bookie,
        ));
        budgets.insert(bookie.to_owned(), b.clone());
        b
    }

    /// The most add bytes in flight to one bookie now.
    pub(crate) fn max_conn_bytes_in_flight(&self) -> usize {
        self.conn_budgets
            .lock()
            .values()
            .map(|b| b.in_flight())
            .max()
            .unwrap_or(0)
    }

    /// Requests sent so far, by bookie.
    pub(crate) fn requests_by_bookie(&self) -> std::collections::BTreeMap<String, u64> {
        self.conns
            .lock()
            .iter()
            .map(|(b, c)| (b.clone(), c.requests_sent()))
            .collect()
    }

    /// Remembers that `bookie` could not be reached: new ensembles avoid it for
    /// a while (its registration outlives a crash by the bookie's ZooKeeper
    /// session timeout).
    pub(crate) fn quarantine(&self, bookie: &str) {
        let until = std::time::Instant::now() + self.config.bookie_quarantine;
        self.quarantine.lock().insert(bookie.to_owned(), until);
    }

    /// Reads the bookies' racks from [`ClientConfig::rack_info_path`] (nothing
    /// without one; an empty map when the node is missing or unreadable).
    pub(crate) async fn refresh_racks(&self) {
        let Some(path) = &self.config.rack_info_path else {
            return;
        };
        let racks = match self.meta.store().get(path).await {
            Ok(Some(found)) => parse_racks(&found.value),
            Ok(None) => HashMap::new(),
            Err(e) => {
                tracing::warn!(cluster = %self.name, %path, error = %e, "cannot read the bookies' racks; placing at random");
                HashMap::new()
            }
        };
        *self.racks.lock() = (Arc::new(racks), Some(std::time::Instant::now()));
    }

    /// The racks as last read; starts a re-read when they are older than 30 s.
    fn racks(self: &Arc<Self>) -> Arc<HashMap<String, String>> {
        if self.config.rack_info_path.is_none() {
            return Arc::default();
        }
        let mut racks = self.racks.lock();
        let stale = racks
            .1
            .is_none_or(|at| at.elapsed() > Duration::from_secs(30));
        if stale {
            // One re-read at a time: mark it fresh now.
            racks.1 = Some(std::time::Instant::now());
            let this = self.clone();
            self.runtime
                .spawn(async move { this.refresh_racks().await });
        }
        racks.0.clone()
    }

    /// `count` writable bookies, none of `exclude`, in random order; bookies in
    /// quarantine come last. With racks known, each next bookie comes from the
    /// rack least used so far (counting `exclude`, the rest of the ensemble).
    pub(crate) fn place(
        self: &Arc<Self>,
        count: usize,
        exclude: &[String],
    ) -> Result<Vec<String>, BkError> {
        let set = self.bookies.current();
        let mut candidates: Vec<&String> = set
            .writable
            .iter()
            .filter(|b| !exclude.contains(b))
            .collect();
        fastrand::shuffle(&mut candidates);
        let quarantined = {
            let now = std::time::Instant::now();
            let mut q = self.quarantine.lock();
            q.retain(|_, until| *until > now);
            q.keys().cloned().collect::<std::collections::HashSet<_>>()
        };
        candidates.sort_by_key(|b| quarantined.contains(*b));
        if candidates.len() < count {
            return Err(BkError::new(
                BkErrorKind::NotEnoughBookies,
                format!(
                    "{count} writable bookies are needed but the cluster has {} available{} \
                     (writable: {:?}, read-only: {:?})",
                    candidates.len(),
                    if exclude.is_empty() {
                        String::new()
                    } else {
                        format!(" outside {exclude:?}")
                    },
                    set.writable,
                    set.readonly
                ),
            )
            .with_cluster(&self.name));
        }
        let racks = self.racks();
        if racks.is_empty() {
            return Ok(candidates.into_iter().take(count).cloned().collect());
        }
        let rack_of = |b: &str| racks.get(b).map_or(DEFAULT_RACK, String::as_str);
        let mut used: HashMap<&str, usize> = HashMap::new();
        for b in exclude {
            *used.entry(rack_of(b)).or_default() += 1;
        }
        let mut chosen = Vec::with_capacity(count);
        while chosen.len() < count {
            let (at, _) = candidates
                .iter()
                .enumerate()
                .min_by_key(|(i, b)| {
                    (
                        quarantined.contains(**b),
                        used.get(rack_of(b)).copied().unwrap_or(0),
                        *i,
                    )
                })
                .expect("enough candidates, checked above");
            let b = candidates.remove(at);
            *used.entry(rack_of(b)).or_default() += 1;
            chosen.push(b.clone());
        }
        Ok(chosen)
    }
}

/// Bookie id → rack.
type Racks = Arc<HashMap<String, String>>;

/// The rack of a bookie the rack information does not list (Pulsar's
/// `/default-rack`).
const DEFAULT_RACK: &str = "/default-rack";

/// Bookie id → rack, from Pulsar's `BookiesRackConfiguration` JSON
/// (`{"<group>": {"<bookie id>": {"rack": "/r1", …}}}`); what is not in that
/// shape is skipped.
fn parse_racks(bytes: &[u8]) -> HashMap<String, String> {
    let mut racks = HashMap::new();
    let Ok(serde_json::Value::Object(groups)) = serde_json::from_slice(bytes) else {
        return racks;
    };
    for (_, group) in groups {
        let serde_json::Value::Object(bookies) = group else {
            continue;
        };
        for (bookie, info) in bookies {
            if let Some(rack) = info.get("rack").and_then(|r| r.as_str()) {
                racks.insert(bookie, rack.to_owned());
            }
        }
    }
    racks
}

/// A budget of add bytes in flight: the client's
/// ([`ClientConfig::max_add_bytes_in_flight`]), one permit per byte, taken by an
/// add when it is sent and given back when the ack quorum has it (or it leaves
/// the writer: failed or closed); or one bookie connection's
/// ([`ClientConfig::max_add_bytes_in_flight_per_bookie`]), given back when that
/// bookie answers (or the request fails or times out).
pub(crate) struct AddBudget {
    pub(crate) semaphore: Arc<tokio::sync::Semaphore>,
    total: u32,
}

impl AddBudget {
    fn new(bytes: usize) -> AddBudget {
        let total =
            u32::try_from(bytes.clamp(1, tokio::sync::Semaphore::MAX_PERMITS)).unwrap_or(u32::MAX);
        AddBudget {
            semaphore: Arc::new(tokio::sync::Semaphore::new(total as usize)),
            total,
        }
    }

    /// The permits an entry of `len` payload bytes takes: its size with the
    /// frame's overhead, and never more than the whole budget (one entry
    /// larger than the budget goes alone).
    pub(crate) fn cost(&self, len: usize) -> u32 {
        u32::try_from(len.saturating_add(64))
            .unwrap_or(u32::MAX)
            .min(self.total)
    }

    /// `cost` permits, never more than the whole budget.
    pub(crate) fn clamp(&self, cost: u32) -> u32 {
        cost.min(self.total)
    }

    /// The bytes in flight now.
    pub(crate) fn in_flight(&self) -> usize {
        self.total as usize - self.semaphore.available_permits()
    }
}

fn sweep_interval(config: &ClientConfig) -> Duration {
    (config.add_timeout.min(config.read_timeout) / 10)
        .clamp(Duration::from_millis(10), Duration::from_millis(250))
}
