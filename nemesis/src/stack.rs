//! The embedded stack a history runs on: several [`Node`]s built as
//! `bkswitch_admin::testkit::start_node` builds them (one in-memory metadata
//! tree, a session of its own per node, in-memory bookie clusters `old`,
//! `new` and `third`), with REST calls served in process by each node's axum
//! router as a tower service (no socket).

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use axum::Router;
use bkswitch_admin::testkit::{node_config, ADMIN};
use bkswitch_admin::wire::BASE_PATH;
use bkswitch_admin::{rest_router, MigrationHandle, Node, NodeConfig};
use bkswitch_bk_client::{MemoryCluster, MemoryClusters};
use bkswitch_managed_ledger::Clock;
use bkswitch_metadata_migration::{
    CoordinatorOptions, MigratingStore, NamedMemoryStores, ParticipantOptions,
};
use bkswitch_metadata_store::MemoryStore;
use bkswitch_switch_orchestrator::OrchestratorConfig;
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use crate::plan::{Settings, StoreKind, CLUSTERS};
use crate::stale::Follower;
use crate::store::NodeStore;
use crate::traffic::Directory;

/// The answer of a REST call: its status and its JSON body (`Null` when
/// empty or not JSON).
#[derive(Debug, Clone, PartialEq)]
pub struct Answer {
    /// The HTTP status code.
    pub status: u16,
    /// The body as JSON.
    pub body: Value,
}

impl Answer {
    /// A 2xx answer.
    pub fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    /// The error body's `code`, if any.
    pub fn code(&self) -> &str {
        self.body.get("code").and_then(Value::as_str).unwrap_or("")
    }

    /// The error body's `error` message, if any.
    pub fn message(&self) -> &str {
        self.body.get("error").and_then(Value::as_str).unwrap_or("")
    }
}

/// One node of the stack: its store (session, gate, recorder) and, while it
/// runs, the node and its REST router.
#[derive(Debug)]
pub struct Slot {
    /// The node id.
    pub id: String,
    /// The node's metadata store.
    pub store: NodeStore,
    /// The running node (`None` after a crash).
    pub node: Option<Node>,
    /// Its REST router.
    router: Option<Router>,
    /// Bumped on every start: traffic drops handles of an older generation.
    pub generation: u64,
    /// The tree its store's session is on (faults of the store reach the
    /// node only until its participant first moves to another store).
    pub tree: String,
}

impl Slot {
    /// Whether the store's faults (connection loss, buggify, …) reach the
    /// running node: not after a migration moved it to another tree, where
    /// it opened a session of its own.
    pub fn faults_reach_node(&self) -> bool {
        let tree = format!("memory://{}", self.tree);
        self.node
            .as_ref()
            .and_then(|n| n.migration().map(|h| h.participant().clone()))
            .is_none_or(|p| p.swaps() == 0 && p.url() == tree)
    }
}

/// The embedded stack.
#[derive(Debug)]
pub struct Stack {
    /// The metadata tree in use (this handle is the checker's own session):
    /// `memory://a`, or `memory://b` after a migration moved it
    /// ([`sync_root`](Self::sync_root)).
    pub root: MemoryStore,
    /// The in-memory trees a migration moves the metadata between.
    pub trees: NamedMemoryStores,
    /// The name of the tree in use (`a` or `b`).
    pub tree: String,
    /// How many times the nodes were seen moved to the other tree.
    pub moves: u64,
    /// The bookie clusters.
    pub clusters: MemoryClusters,
    /// The nodes.
    pub slots: Vec<Slot>,
    /// The history's settings.
    pub settings: Settings,
    /// Nodes started with a duplicate id (stopped at the end).
    pub duplicates: Vec<Node>,
    /// The running nodes as the traffic sees them.
    pub directory: Directory,
    /// Every node's wall clock: virtual time, moved forward by
    /// [`Op::MoveClock`](crate::plan::Op::MoveClock).
    pub clock: Arc<VirtualClock>,
    /// What the metadata sessions of stopped and crashed nodes counted.
    stopped_sessions: SessionCounts,
    /// Buggify is on until the faults heal.
    buggify_on: AtomicBool,
    /// Calls buggify failed, on stores no longer in use.
    buggified: AtomicU64,
    /// The seed buggify draws from.
    buggify_seed: u64,
    /// Reads served stale by the followers of trees no longer in use.
    stale_reads: u64,
    /// The followers of the tree in use (stale reads, [`crate::stale`]).
    pub follower: Arc<Follower>,
}

/// What the managed ledgers' metadata sessions of a history counted
/// ([`MetadataSession`](bkswitch_managed_ledger::MetadataSession)), summed over
/// every node that ran.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct SessionCounts {
    /// Sessions lost (connection loss or expiry).
    pub losses: u64,
    /// Trims refused while a session was lost.
    pub deferred_trims: u64,
    /// Data or cursor ledger rollovers put off while a session was lost.
    pub deferred_rollovers: u64,
}

impl SessionCounts {
    fn add(&mut self, node: &Node) {
        let s = node.metadata_session();
        self.losses += s.losses();
        self.deferred_trims += s.deferred_trims();
        self.deferred_rollovers += s.deferred_rollovers();
    }
}

/// A wall clock that follows tokio's (paused, virtual) time from a fixed
/// start, plus whatever it was moved forward: the same for every run of a
/// seed, and movable past the coordinators' windows.
#[derive(Debug)]
pub struct VirtualClock {
    start: tokio::time::Instant,
    start_ms: i64,
    moved_ms: AtomicI64,
}

impl VirtualClock {
    /// The clock of a history starting now, reading 2025-01-01T00:00:00Z.
    pub fn new() -> VirtualClock {
        VirtualClock {
            start: tokio::time::Instant::now(),
            start_ms: 1_735_689_600_000,
            moved_ms: AtomicI64::new(0),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let ms = i64::try_from(by.as_millis()).unwrap_or(i64::MAX);
        self.moved_ms.fetch_add(ms, Ordering::SeqCst);
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        VirtualClock::new()
    }
}

impl Clock for VirtualClock {
    fn now_millis(&self) -> i64 {
        let elapsed = i64::try_from(self.start.elapsed().as_millis()).unwrap_or(i64::MAX);
        self.start_ms
            .saturating_add(elapsed)
            .saturating_add(self.moved_ms.load(Ordering::SeqCst))
    }
}

/// A node's wall clock: the history's, `skew_ms` ahead (or behind).
#[derive(Debug)]
struct SkewedClock {
    base: Arc<VirtualClock>,
    skew_ms: i64,
}

impl Clock for SkewedClock {
    fn now_millis(&self) -> i64 {
        self.base.now_millis().saturating_add(self.skew_ms)
    }
}

impl Stack {
    /// Starts `settings.nodes` nodes on fresh clusters, `old` ACTIVE.
    ///
    /// # Panics
    ///
    /// When a node of a fresh stack does not start (a bug of the stack, not
    /// a finding).
    pub async fn start(settings: Settings) -> Stack {
        Stack::start_seeded(settings, 0).await
    }

    /// [`start`](Self::start), with buggify (when the settings ask for it)
    /// drawing from `seed`; it is switched on once every node started.
    ///
    /// # Panics
    ///
    /// As [`start`](Self::start).
    pub async fn start_seeded(settings: Settings, seed: u64) -> Stack {
        let clusters = MemoryClusters::new();
        for name in CLUSTERS {
            clusters.get_or_create(name);
        }
        let trees = NamedMemoryStores::new();
        let root = trees.session("a");
        let follower = Follower::new(&root, seed ^ 0x666f_6c6c_6f77_6572);
        if settings.stale_reads && settings.store_kind == StoreKind::ZooKeeper {
            follower.start();
        }
        let mut stack = Stack {
            root,
            trees,
            tree: "a".to_owned(),
            clusters,
            moves: 0,
            slots: Vec::new(),
            settings,
            duplicates: Vec::new(),
            directory: Directory::default(),
            clock: Arc::new(VirtualClock::new()),
            stopped_sessions: SessionCounts::default(),
            buggify_on: AtomicBool::new(false),
            buggified: AtomicU64::new(0),
            buggify_seed: 0,
            stale_reads: 0,
            follower,
        };
        *stack.directory.lock() = vec![None; stack.settings.nodes];
        for i in 0..stack.settings.nodes {
            let store = NodeStore::new(&stack.root, &stack.follower);
            stack.slots.push(Slot {
                id: format!("node-{i}"),
                store,
                node: None,
                router: None,
                generation: 0,
                tree: "a".to_owned(),
            });
            if let Err(e) = stack.start_node(i).await {
                panic!("node-{i} of a fresh stack did not start: {e}");
            }
        }
        stack.buggify_seed = seed;
        if stack.settings.buggify_per_mille > 0 {
            stack.buggify_on.store(true, Ordering::SeqCst);
            for i in 0..stack.slots.len() {
                stack.arm_buggify(i);
            }
        }
        stack
    }

    /// `cfg` with the node's store below a migration participant on the tree
    /// in use, and the node taking part in migrations.
    async fn with_migration(
        &self,
        cfg: NodeConfig,
        store: &NodeStore,
    ) -> Result<NodeConfig, String> {
        let id = cfg.node_id.clone();
        let participant = MigratingStore::wrap(
            store.store(),
            &format!("memory://{}", self.tree),
            Arc::new(self.trees.clone()),
            ParticipantOptions {
                // A name per incarnation (the default, random); the node id
                // ties the incarnations of one node together.
                node: Some(id),
                poll_interval: Duration::from_millis(100),
                ..ParticipantOptions::default()
            },
        )
        .await
        .map_err(|e| format!("the migration participant did not start: {e}"))?;
        let mut handle = MigrationHandle::new(participant.clone());
        handle.poll_interval = Duration::from_millis(100);
        handle.coordinator = CoordinatorOptions {
            ack_timeout: Duration::from_secs(10),
            poll_interval: Duration::from_millis(20),
            ..CoordinatorOptions::default()
        };
        let mut cfg = cfg;
        cfg.store = Arc::new(participant);
        Ok(cfg.with_migration(handle))
    }

    /// Follows a migration: the tree in use is the one the running nodes'
    /// participants use (the checker's session and new nodes' sessions are
    /// opened there).
    pub fn sync_root(&mut self) {
        // A node may not have followed a completed migration yet (its reads
        // can lag), or none may have: the tree in use is where the records of
        // completed migrations lead, from any node's tree.
        let start = self
            .slots
            .iter()
            .filter_map(|s| s.node.as_ref())
            .filter_map(|n| n.migration().map(|h| h.participant().url()))
            .find_map(|url| url.strip_prefix("memory://").map(str::to_owned));
        let in_use = start.map(|mut tree| {
            for _ in 0..4 {
                match self.moved_to(&tree) {
                    Some(next) => tree = next,
                    None => break,
                }
            }
            tree
        });
        if let Some(tree) = in_use {
            if tree != self.tree {
                self.root = self.trees.session(&tree);
                self.tree = tree;
                self.moves += 1;
                // New sessions open on the other tree: their followers are
                // that tree's.
                let on = self.follower.is_on();
                self.stale_reads += self.follower.stale_reads();
                self.follower.stop();
                self.follower = Follower::new(&self.root, self.moves);
                if on {
                    self.follower.start();
                }
            }
        }
    }

    /// Where a completed migration moved the metadata from `tree` (its
    /// record stays there, naming the other tree as its target).
    fn moved_to(&self, tree: &str) -> Option<String> {
        use futures::FutureExt;
        let store = self.trees.session(tree);
        // The in-memory tree answers without waiting.
        let current = bkswitch_metadata_migration::read_current(&store).now_or_never();
        match current {
            Some(Ok(Some((rec, _))))
                if rec.phase == bkswitch_metadata_migration::Phase::Completed =>
            {
                rec.target_url
                    .strip_prefix("memory://")
                    .filter(|t| *t != tree)
                    .map(str::to_owned)
            }
            _ => None,
        }
    }

    /// Turns buggify on for slot `i`'s store, from a stream of its own.
    fn arm_buggify(&self, i: usize) {
        if !self.buggify_on.load(Ordering::SeqCst) {
            return;
        }
        let slot = &self.slots[i];
        let seed = self.buggify_seed ^ ((i as u64) << 32) ^ slot.generation;
        slot.store
            .gate
            .buggify(seed, self.settings.buggify_per_mille);
    }

    /// Metadata calls buggify failed so far, over every node.
    pub fn buggified(&self) -> u64 {
        self.buggified.load(Ordering::SeqCst)
            + self
                .slots
                .iter()
                .map(|s| s.store.gate.buggified())
                .sum::<u64>()
    }

    /// The configuration of node `id` on `store`.
    pub fn config(&self, id: &str, store: &NodeStore) -> NodeConfig {
        let mut cfg = node_config(id, store.store(), &self.clusters);
        let s = &self.settings;
        cfg.orchestrator = OrchestratorConfig::default()
            .with_rollback_window(s.rollback_window)
            .with_dual_read_timeout(Some(s.dual_read_timeout))
            .with_auto_cleanup(s.auto_cleanup_interval, 100)
            .with_promote_retry(20, Duration::from_millis(100));
        // BookKeeper's default quorums (E3 WQ2 AQ2 on the three bookies of
        // a cluster): entries striped, two copies each, so a bookie can lose
        // its copies while the other keeps them.
        cfg.ledger_config = cfg
            .ledger_config
            .with_max_entries_per_ledger(8)
            .with_quorums(3, 2, 2)
            .with_metadata_quorums(3, 2, 2);
        cfg.old_ledger_read_timeout = Duration::from_millis(2_000);
        let skew = id
            .strip_prefix("node-")
            .and_then(|i| i.parse::<usize>().ok())
            .and_then(|i| s.skew_ms.get(i).copied())
            .unwrap_or(0);
        cfg.clock = if skew == 0 {
            self.clock.clone()
        } else {
            Arc::new(SkewedClock {
                base: self.clock.clone(),
                skew_ms: skew,
            })
        };
        cfg
    }

    /// Starts node `i` (a new session, faults healed) unless it runs.
    ///
    /// # Errors
    ///
    /// The node's start error, as text.
    pub async fn start_node(&mut self, i: usize) -> Result<(), String> {
        if self.slots[i].node.is_some() {
            return Ok(());
        }
        self.sync_root();
        let store = NodeStore::new(&self.root, &self.follower);
        let mut cfg = self.config(&self.slots[i].id, &store);
        if self.settings.migrations {
            cfg = self.with_migration(cfg, &store).await?;
        }
        let started = tokio::time::timeout(Duration::from_secs(120), Node::start(cfg)).await;
        self.buggified
            .fetch_add(self.slots[i].store.gate.buggified(), Ordering::SeqCst);
        let slot = &mut self.slots[i];
        slot.store = store;
        slot.tree = self.tree.clone();
        match started {
            Ok(Ok(node)) => {
                slot.router = Some(rest_router(&node));
                slot.generation += 1;
                self.directory.lock()[i] = Some((node.clone(), slot.generation));
                slot.node = Some(node);
                self.arm_buggify(i);
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("did not start within 120 s".to_owned()),
        }
    }

    /// Crashes node `i`: its metadata connection is cut for good (the zombie
    /// writes nothing more), its session expires (ownership and other
    /// ephemeral nodes go at once, as after a ZooKeeper session timeout), and
    /// it is stopped.
    pub async fn crash(&mut self, i: usize) {
        let slot = &mut self.slots[i];
        let Some(node) = slot.node.take() else {
            return;
        };
        slot.router = None;
        self.directory.lock()[i] = None;
        self.stopped_sessions.add(&node);
        slot.store.gate.set_down(true);
        // A frozen zombie's calls go on (and fail: it is cut off).
        slot.store.gate.set_frozen(false);
        let _ = slot.store.session.expire_session();
        let _ = tokio::time::timeout(Duration::from_secs(60), node.stop()).await;
    }

    /// Stops node `i` gracefully (ownership released).
    pub async fn stop_node(&mut self, i: usize) {
        self.directory.lock()[i] = None;
        let slot = &mut self.slots[i];
        slot.router = None;
        if let Some(node) = slot.node.take() {
            self.stopped_sessions.add(&node);
            let _ = tokio::time::timeout(Duration::from_secs(60), node.stop()).await;
        }
    }

    /// Starts a second node with node `i`'s id on a session of its own.
    ///
    /// # Errors
    ///
    /// The start error (what a fixed node must answer), as text.
    pub async fn start_duplicate(&mut self, i: usize) -> Result<(), String> {
        self.sync_root();
        let store = NodeStore::new(&self.root, &self.follower);
        let mut cfg = self.config(&self.slots[i].id, &store);
        if self.settings.migrations {
            cfg = self.with_migration(cfg, &store).await?;
        }
        match tokio::time::timeout(Duration::from_secs(60), Node::start(cfg)).await {
            Ok(Ok(node)) => {
                self.duplicates.push(node);
                Ok(())
            }
            Ok(Err(e)) => Err(e.to_string()),
            Err(_) => Err("did not start within 60 s".to_owned()),
        }
    }

    /// What the metadata sessions of every node that ran counted so far.
    pub fn session_counts(&self) -> SessionCounts {
        let mut c = self.stopped_sessions;
        for node in self.slots.iter().filter_map(|s| s.node.as_ref()) {
            c.add(node);
        }
        c
    }

    /// The running node `i`, if any.
    pub fn node(&self, i: usize) -> Option<&Node> {
        self.slots.get(i).and_then(|s| s.node.as_ref())
    }

    /// The first running node on the metadata tree in use (one that has not
    /// followed a migration yet only when there is no other).
    pub fn any_node(&self) -> Option<&Node> {
        let tree = format!("memory://{}", self.tree);
        self.slots
            .iter()
            .filter_map(|s| s.node.as_ref())
            .find(|n| n.migration().is_none_or(|h| h.participant().url() == tree))
            .or_else(|| self.slots.iter().find_map(|s| s.node.as_ref()))
    }

    /// The running nodes, those on the metadata tree in use first.
    pub fn nodes_current_first(&self) -> Vec<&Node> {
        let tree = format!("memory://{}", self.tree);
        let mut nodes: Vec<&Node> = self.slots.iter().filter_map(|s| s.node.as_ref()).collect();
        nodes.sort_by_key(|n| n.migration().is_some_and(|h| h.participant().url() != tree));
        nodes
    }

    /// The in-memory cluster `name`.
    pub fn cluster(&self, name: &str) -> MemoryCluster {
        self.clusters.get_or_create(name)
    }

    /// Calls `method path` (below the API's base path) on node `i` with the
    /// admin token and a JSON body; `None` when the node does not run.
    pub async fn call(
        &self,
        i: usize,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Option<Answer> {
        let router = self.slots.get(i)?.router.clone()?;
        Some(call_router(router, method, path, body).await)
    }

    /// Calls `method path` (a full path, outside the bookie-clusters base
    /// path) on node `i`; `None` when the node does not run.
    pub async fn call_at(
        &self,
        i: usize,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> Option<Answer> {
        let router = self.slots.get(i)?.router.clone()?;
        Some(call_router_at(router, method, path, body).await)
    }

    /// Every node's session syncs (ZooKeeper's `sync()`): a checker's read
    /// through a node that follows sees the latest state.
    pub fn sync_reads(&self) {
        for s in &self.slots {
            s.store.reads.sync();
        }
    }

    /// Reads answered older than the leader's state so far.
    pub fn stale_reads(&self) -> u64 {
        self.stale_reads + self.follower.stale_reads()
    }

    /// Heals every fault: connections back, injected write failures gone,
    /// reads from the leader, clusters reachable and fast. Lost bookie copies
    /// stay lost (what is left must serve every read).
    pub fn heal(&self) {
        self.follower.stop();
        self.buggify_on.store(false, Ordering::SeqCst);
        // Slots whose node is down are counted when they start again.
        self.buggified.fetch_add(
            self.slots
                .iter()
                .filter(|s| s.node.is_some())
                .map(|s| s.store.gate.buggified())
                .sum::<u64>(),
            Ordering::SeqCst,
        );
        for s in &self.slots {
            if s.node.is_some() {
                s.store.heal();
            }
        }
        for name in CLUSTERS {
            let c = self.cluster(name);
            c.restore();
            c.set_operation_timeout(None);
        }
    }

    /// Stops every node (duplicates included).
    pub async fn shutdown(&mut self) {
        for n in std::mem::take(&mut self.duplicates) {
            let _ = tokio::time::timeout(Duration::from_secs(60), n.stop()).await;
        }
        for i in 0..self.slots.len() {
            self.stop_node(i).await;
        }
    }
}

/// Calls `method path` (below [`BASE_PATH`]) on `router` in process.
pub async fn call_router(
    router: Router,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Answer {
    call_router_at(router, method, &format!("{BASE_PATH}{path}"), body).await
}

/// [`call_router`] with a full path.
pub async fn call_router_at(
    router: Router,
    method: Method,
    path: &str,
    body: Option<Value>,
) -> Answer {
    let req = Request::builder()
        .method(method)
        .uri(path)
        .header("authorization", format!("Bearer {ADMIN}"))
        .header("content-type", "application/json");
    let req = match body {
        Some(b) => req.body(Body::from(b.to_string())),
        None => req.body(Body::empty()),
    };
    let req = match req {
        Ok(r) => r,
        Err(e) => {
            return Answer {
                status: 0,
                body: Value::String(format!("bad request built: {e}")),
            }
        }
    };
    let call = tokio::time::timeout(Duration::from_secs(600), router.oneshot(req)).await;
    let resp = match call {
        Ok(Ok(r)) => r,
        Ok(Err(never)) => match never {},
        Err(_) => {
            return Answer {
                status: 0,
                body: Value::String("no answer within 600 s".into()),
            }
        }
    };
    let status = resp.status().as_u16();
    let bytes = match resp.into_body().collect().await {
        Ok(c) => c.to_bytes(),
        Err(_) => Default::default(),
    };
    Answer {
        status,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}
