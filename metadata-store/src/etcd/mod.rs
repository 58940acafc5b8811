//! The etcd backend, on the `etcd-client` crate (etcd v3 API, gRPC).
//!
//! Layout (see `docs/FORMATS.md`, "Metadata on etcd"): every node is the etcd
//! key of its path (under the URL's prefix), its value the node's bytes, as
//! Pulsar's `EtcdMetadataStore` stores them; the node's version is etcd's key
//! version − 1 (plus an imported offset, see
//! [`MetadataStore::import_version`]).
//! What etcd does not keep for a key lives in *side keys* outside the `/` key
//! space (`~bkswitch` + path + NUL + kind), so that Pulsar's prefix listings and
//! watches never see them:
//!
//! | kind | value | meaning |
//! |---|---|---|
//! | `t` | creation time, ms, decimal | written once, with the node |
//! | `m` | last write time, ms, decimal | written with every write of the value |
//! | `c` | empty | its etcd version counts the node's child creations |
//! | `co` | decimal | added to `c`'s count: an imported sequential counter |
//! | `k` + name | empty | one per direct child (on the child's lease): counts children, reports their changes |
//! | `o` | decimal | version offset of an imported node |
//!
//! Every write is one etcd transaction (node key, side keys and the parent's
//! counter and index together), so the side keys never disagree with the node.
//! Ephemeral nodes, their side keys and their parent-index entry are put on the
//! store's lease: when the lease ends, etcd deletes all of them at one revision.
//!
//! Watches watch the side-key range of the watched node from a known revision
//! and resume from the last revision seen after a lost connection, so no change
//! is lost or reordered; when etcd compacted that revision away the watch
//! re-reads the node and reports what differs.

mod batch;
mod endpoints;
mod url;

pub use batch::{ReadBatches, WriteBatches};
pub use url::check_etcd_url;

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use etcd_client::{
    Client, Compare, CompareOp, ConnectOptions, DeleteOptions, EventType, GetOptions, GetResponse,
    KeyValue, KvClient, PutOptions, Txn, TxnOp, TxnOpResponse, TxnResponse, WatchOptions,
};
use tokio::sync::{broadcast, mpsc};
use tracing::{debug, info, warn};

use crate::error::{MetadataError, Operation, Result};
use crate::memory::{
    check_create_args, check_delete_args, check_import_counter, check_import_version,
    check_put_args, ephemeral_counter_error, ephemeral_parent_error,
};
use crate::path::{check_value, name, parent, validate_path, PathUse};
use crate::store::MetadataStore;
use crate::types::{
    CreateMode, ExpectedVersion, GetResult, Notification, SessionEvent, Stat, WatchStream,
};

/// Start of the side keys (outside the `/` key space, and above `0`, the end of
/// the range Pulsar's store watches).
const SIDE: &[u8] = b"~bkswitch";

/// Settings of an [`EtcdStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStoreOptions {
    /// TTL of the store's lease (its session): ephemeral nodes go when the store
    /// stops renewing it for this long. Whole seconds, at least 2 s. Default
    /// 30 s (Pulsar's `metadataStoreSessionTimeoutMillis`).
    pub session_timeout: Duration,
    /// Bound of every operation. Default 10 s.
    pub operation_timeout: Duration,
    /// Bound of [`EtcdStore::connect`]. Default 30 s.
    pub connect_timeout: Duration,
    /// Keys read per request when listing children (a parent with 100,000
    /// children is listed in pages, never one huge reply). Default 1,000.
    pub children_page_size: i64,
}

impl Default for EtcdStoreOptions {
    fn default() -> Self {
        EtcdStoreOptions {
            session_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            children_page_size: 1_000,
        }
    }
}

impl EtcdStoreOptions {
    fn validate(&self, url: &str) -> Result<()> {
        let fail = |reason: String| MetadataError::InvalidArgument {
            op: Operation::Connect,
            path: url.to_owned(),
            reason,
        };
        if self.session_timeout < Duration::from_secs(2) {
            return Err(fail(format!(
                "session_timeout {:?} is below the 2 s minimum of an etcd lease",
                self.session_timeout
            )));
        }
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(fail(
                "operation_timeout and connect_timeout must be more than zero".to_owned(),
            ));
        }
        if self.children_page_size < 2 {
            return Err(fail("children_page_size must be at least 2".to_owned()));
        }
        Ok(())
    }
}

/// What watch tasks are told.
#[derive(Debug, Clone, Copy)]
enum Signal {
    Session(SessionEvent),
    Closed,
}

struct Inner {
    url: String,
    hosts: String,
    prefix: String,
    options: EtcdStoreOptions,
    client: Client,
    lease: AtomicI64,
    generation: AtomicU64,
    connected: AtomicBool,
    closed: AtomicBool,
    signals: broadcast::Sender<Signal>,
    /// Keeps the client off members that refuse connections (several
    /// endpoints only).
    doctor: Option<Arc<endpoints::Doctor>>,
    /// Coalesces concurrent writes of node values (see `batch.rs`).
    batcher: batch::Batcher,
    read_batcher: batch::Batcher,
}

/// A [`MetadataStore`] on an etcd cluster (etcd 3.4 or later).
///
/// Paths are etcd keys and values are stored as they are, as Pulsar's
/// `EtcdMetadataStore` stores them; versions, children versions, sequential
/// names, times and ephemeral nodes follow ZooKeeper's semantics (the module
/// documentation and `docs/FORMATS.md` tell how). The session is an etcd
/// lease that the store keeps alive; when etcd ends it (the store could not
/// renew it in time), watch streams report
/// [`SessionEvent::SessionExpired`], the ephemeral nodes are gone, and the
/// store takes a new lease ([`SessionEvent::SessionReestablished`]).
///
/// Clones share the session. Dropping the last clone without
/// [`close`](MetadataStore::close) revokes the lease in the background.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.inner.url)
            .field("lease", &self.inner.lease.load(Ordering::Relaxed))
            .field("generation", &self.inner.generation.load(Ordering::Relaxed))
            .finish()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

/// The smallest key after every key starting with `prefix`.
fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn parse_i64(kv: Option<&KeyValue>) -> Option<i64> {
    kv.and_then(|kv| std::str::from_utf8(kv.value()).ok()?.parse().ok())
}

fn get_resp(r: &TxnOpResponse) -> Option<&GetResponse> {
    match r {
        TxnOpResponse::Get(g) => Some(g),
        _ => None,
    }
}

/// The `i`-th response of a transaction, a range read.
fn nth_get(resp: &TxnResponse, i: usize) -> Option<GetResponse> {
    resp.op_responses().get(i).and_then(get_resp).cloned()
}

fn first_kv(g: &Option<GetResponse>) -> Option<KeyValue> {
    g.as_ref().and_then(|g| g.kvs().first().cloned())
}

/// The child counter from a prefix read of the `c` side key: the etcd
/// version of `c` (one per child creation) plus the imported offset in `co`.
/// Also returns `c`'s own version, which writes compare.
fn counter_of(g: &Option<GetResponse>) -> (i64, i64) {
    let mut raw = 0;
    let mut offset = 0;
    for kv in g.as_ref().map_or(&[][..], |g| g.kvs()) {
        if kv.key().last() == Some(&b'o') {
            offset = parse_i64(Some(kv)).unwrap_or(0);
        } else {
            raw = kv.version();
        }
    }
    (raw + offset, raw)
}

impl EtcdStore {
    /// Connects to `etcd://host:port[,host:port…][/prefix]` and takes a lease.
    ///
    /// Must be called within a Tokio runtime; the store's background tasks run
    /// on it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// malformed URL or bad options;
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when etcd does
    /// not answer within [`EtcdStoreOptions::connect_timeout`].
    pub async fn connect(url: &str, options: EtcdStoreOptions) -> Result<EtcdStore> {
        let parsed = url::parse(url)?;
        options.validate(url)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: url.to_owned(),
                reason: "EtcdStore::connect must run within a Tokio runtime".to_owned(),
            });
        }
        let unavailable = |reason: String| MetadataError::Unavailable {
            op: Operation::Connect,
            path: url.to_owned(),
            reason,
        };
        let connect = async {
            let client = Client::connect(
                &parsed.endpoints,
                Some(
                    ConnectOptions::new()
                        .with_connect_timeout(options.connect_timeout)
                        .with_timeout(options.operation_timeout)
                        .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
                        .with_keep_alive_while_idle(true),
                ),
            )
            .await
            .map_err(|e| unavailable(format!("cannot connect to etcd `{}`: {e}", parsed.hosts)))?;
            let lease = client
                .lease_client()
                .grant(options.session_timeout.as_secs() as i64, None)
                .await
                .map_err(|e| unavailable(format!("etcd `{}` granted no lease: {e}", parsed.hosts)))?
                .id();
            Ok::<_, MetadataError>((client, lease))
        };
        let (client, lease) = tokio::time::timeout(options.connect_timeout, connect)
            .await
            .map_err(|_| {
                unavailable(format!(
                    "no answer from etcd `{}` within the {:?} connect timeout",
                    parsed.hosts, options.connect_timeout
                ))
            })??;
        let (signals, _) = broadcast::channel(256);
        let doctor = endpoints::doctor_for(&parsed.endpoints);
        let inner = Arc::new(Inner {
            url: url.to_owned(),
            hosts: parsed.hosts,
            prefix: parsed.prefix,
            options,
            client,
            lease: AtomicI64::new(lease),
            generation: AtomicU64::new(1),
            connected: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            signals,
            doctor: doctor.clone(),
            batcher: batch::Batcher::default(),
            read_batcher: batch::Batcher::default(),
        });
        if let Some(doctor) = doctor {
            let weak = Arc::downgrade(&inner);
            tokio::spawn(endpoints::run(
                Arc::downgrade(&doctor),
                parsed.endpoints.clone(),
                move || {
                    weak.upgrade()
                        .filter(|i| !i.is_closed())
                        .map(|i| i.client.clone())
                },
            ));
        }
        tokio::spawn(keep_alive(Arc::downgrade(&inner), lease));
        info!(url, lease, "connected to etcd");
        Ok(EtcdStore { inner })
    }

    /// The URL the store was opened with.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// How many writes left together with others in one etcd request so far.
    ///
    /// Writes of node values (`put` of an existing node) that arrive while
    /// the store already has requests in flight are sent together as soon as
    /// one completes, each as a nested transaction with its own compares and
    /// outcome; a write is never held back waiting for company.
    pub fn write_batches(&self) -> WriteBatches {
        self.inner.batcher.stats()
    }

    /// How many reads (`get`, `exists` and the reads behind watches) left
    /// together with others in one etcd request so far.
    ///
    /// Reads that arrive while the store already has two reads in flight are
    /// sent together as soon as one completes: their range reads side by side
    /// in one read-only transaction (at most 16 reads), which etcd serves
    /// with one linearizable read. A read is never held back waiting for
    /// company.
    pub fn read_batches(&self) -> ReadBatches {
        self.inner.read_batcher.read_stats()
    }

    /// The id of the store's current lease (its session).
    pub fn lease_id(&self) -> i64 {
        self.inner.lease.load(Ordering::Acquire)
    }

    /// How many leases the store has taken: 1, plus one per lost lease.
    pub fn session_generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }
}

impl Inner {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn signal(&self, signal: Signal) {
        let _ = self.signals.send(signal);
    }

    fn kv(&self) -> KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(batch::MAX_ANSWER_BYTES)
    }

    /// The etcd key of a node.
    fn key(&self, path: &str) -> Vec<u8> {
        if path == "/" && !self.prefix.is_empty() {
            self.prefix.as_bytes().to_vec()
        } else {
            format!("{}{path}", self.prefix).into_bytes()
        }
    }

    /// The key prefix of a node's descendants (`key/`).
    fn children_prefix(&self, path: &str) -> Vec<u8> {
        let mut k = self.key(path);
        if k.last() != Some(&b'/') {
            k.push(b'/');
        }
        k
    }

    /// The start of a node's side keys (`~bkswitch` + key + NUL).
    fn side_base(&self, path: &str) -> Vec<u8> {
        let mut k = SIDE.to_vec();
        k.extend_from_slice(&self.key(path));
        if path == "/" {
            k.push(b'/');
        }
        k.push(0);
        k
    }

    fn side(&self, path: &str, kind: &str) -> Vec<u8> {
        let mut k = self.side_base(path);
        k.extend_from_slice(kind.as_bytes());
        k
    }

    fn child_index(&self, parent: &str, child: &str) -> Vec<u8> {
        let mut k = self.side(parent, "k");
        k.extend_from_slice(child.as_bytes());
        k
    }

    fn unavailable(&self, op: Operation, path: &str, reason: String) -> MetadataError {
        MetadataError::Unavailable {
            op,
            path: path.to_owned(),
            reason,
        }
    }

    fn map_err(&self, e: etcd_client::Error, op: Operation, path: &str) -> MetadataError {
        self.map_err_ref(&e, op, path)
    }

    fn map_err_ref(&self, e: &etcd_client::Error, op: Operation, path: &str) -> MetadataError {
        let text = e.to_string();
        if text.contains("requested lease not found") {
            return MetadataError::SessionExpired {
                op,
                path: path.to_owned(),
            };
        }
        match e {
            etcd_client::Error::GRpcStatus(status)
                if !matches!(
                    format!("{:?}", status.code()).as_str(),
                    "Unavailable"
                        | "DeadlineExceeded"
                        | "Cancelled"
                        | "Unknown"
                        | "ResourceExhausted"
                ) =>
            {
                MetadataError::Internal {
                    op,
                    path: path.to_owned(),
                    reason: format!("etcd `{}` answered {status}", self.hosts),
                }
            }
            other => self.unavailable(
                op,
                path,
                format!("etcd `{}` cannot be reached: {other}", self.hosts),
            ),
        }
    }

    /// Runs one operation within the operation timeout.
    async fn run<T>(
        &self,
        op: Operation,
        path: &str,
        fut: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        if self.is_closed() {
            return Err(MetadataError::Closed {
                op,
                path: path.to_owned(),
            });
        }
        match tokio::time::timeout(self.options.operation_timeout, fut).await {
            Ok(result) => result,
            Err(_) => Err(self.unavailable(
                op,
                path,
                format!(
                    "no answer from etcd `{}` within the {:?} operation timeout",
                    self.hosts, self.options.operation_timeout
                ),
            )),
        }
    }

    /// Whether an operation that failed with `e` is sent again: its request
    /// never reached etcd (a member refused the connection) and the store is
    /// open. The endpoint doctor is woken to take that member out of use; the
    /// operation timeout of [`run`](Self::run) bounds the resends.
    async fn resend(&self, e: &etcd_client::Error) -> bool {
        if self.is_closed() || !endpoints::is_connect_error(e) {
            return false;
        }
        let Some(doctor) = &self.doctor else {
            return false;
        };
        doctor.wake();
        tokio::time::sleep(endpoints::RESEND_DELAY).await;
        true
    }

    async fn txn(&self, op: Operation, path: &str, txn: Txn) -> Result<TxnResponse> {
        self.txn_raw(txn)
            .await
            .map_err(|e| self.map_err(e, op, path))
    }

    /// A transaction, sent again while its request never reached etcd.
    async fn txn_raw(&self, txn: Txn) -> std::result::Result<TxnResponse, etcd_client::Error> {
        loop {
            match self.kv().txn(txn.clone()).await {
                Err(e) if self.resend(&e).await => {}
                r => return r,
            }
        }
    }

    /// A range read, sent again like [`txn`](Self::txn).
    async fn get(
        &self,
        op: Operation,
        path: &str,
        key: Vec<u8>,
        options: Option<GetOptions>,
    ) -> Result<GetResponse> {
        loop {
            match self.kv().get(key.clone(), options.clone()).await {
                Err(e) if self.resend(&e).await => {}
                r => return r.map_err(|e| self.map_err(e, op, path)),
            }
        }
    }

    /// What a read of `path` asks etcd for, in one transaction: the node,
    /// its child counter (`c`, `co`), its times and version offset (`m`,
    /// `o`, `t`: one range, as no other side key's kind sorts between `m`
    /// and `u`) and its child count; [`read_stat`](Self::read_stat) reads
    /// the answer.
    fn stat_reads(&self, path: &str) -> Vec<TxnOp> {
        vec![
            TxnOp::get(self.key(path), None),
            self.counter_read(path),
            TxnOp::get(
                self.side(path, "m"),
                Some(GetOptions::new().with_range(self.side(path, "u"))),
            ),
            self.child_count_read(path),
        ]
    }

    /// The child counter of `path`: `c` and `co` (see [`counter_of`]).
    fn counter_read(&self, path: &str) -> TxnOp {
        TxnOp::get(self.side(path, "c"), Some(GetOptions::new().with_prefix()))
    }

    /// The number of direct children of `path`: a count of its `k` keys.
    fn child_count_read(&self, path: &str) -> TxnOp {
        let k = self.side(path, "k");
        TxnOp::get(
            k.clone(),
            Some(
                GetOptions::new()
                    .with_range(prefix_end(&k))
                    .with_count_only(),
            ),
        )
    }

    /// What a value write reads back for its [`Stat`]: the node without its
    /// value (version, lease), the child counter, the creation time, the
    /// child count and, when the compare did not fix it, the version offset.
    /// The modification time is the one the write sets.
    fn put_stat_reads(&self, path: &str, with_offset: bool) -> Vec<TxnOp> {
        let mut reads = vec![
            TxnOp::get(self.key(path), Some(GetOptions::new().with_keys_only())),
            self.counter_read(path),
            TxnOp::get(self.side(path, "t"), None),
            self.child_count_read(path),
        ];
        if with_offset {
            reads.push(TxnOp::get(self.side(path, "o"), None));
        }
        reads
    }

    /// The [`Stat`] of a value write from [`put_stat_reads`](Self::put_stat_reads)
    /// starting at `at`; `offset` when the compare fixed it.
    fn read_put_stat(
        resp: &TxnResponse,
        at: usize,
        modified_ms: i64,
        offset: Option<i64>,
    ) -> Option<Stat> {
        let rs = resp.op_responses();
        let get_at = |i: usize| rs.get(i).and_then(get_resp);
        let first = |i: usize| get_at(i).and_then(|g| g.kvs().first());
        let node = first(at)?;
        let (c, _) = counter_of(&get_at(at + 1).cloned());
        let t = parse_i64(first(at + 2)).unwrap_or(0);
        let children = get_at(at + 3).map_or(0, |g| g.count());
        let o = offset.unwrap_or_else(|| parse_i64(first(at + 4)).unwrap_or(0));
        Some(Stat {
            version: (node.version() - 1).max(0) + o,
            cversion: (2 * c - children).max(0),
            created_ms: t,
            modified_ms,
            ephemeral: node.lease() != 0,
            num_children: children,
        })
    }

    /// The node read by [`stat_reads`](Self::stat_reads) starting at `at`.
    /// `rs` is the transaction's answers (`op_responses`, which copies
    /// every answer: taken once by the caller, not once per read).
    fn read_stat(path: &str, rs: &[TxnOpResponse], at: usize) -> Option<(Vec<u8>, Stat)> {
        let get_at = |i: usize| rs.get(i).and_then(get_resp);
        let node = get_at(at).and_then(|g| g.kvs().first());
        let (value, version, lease) = match node {
            Some(node) => (node.value().to_vec(), node.version() - 1, node.lease()),
            // The root always exists: empty, version 0, until written.
            None if path == "/" => (Vec::new(), 0, 0),
            None => return None,
        };
        let (c, _) = counter_of(&get_at(at + 1).cloned());
        let (mut m, mut t, mut o) = (None, 0, 0);
        if let Some(sides) = get_at(at + 2) {
            // The range holds only `m`, `o` and `t`: the kind is the last byte.
            for kv in sides.kvs() {
                match kv.key().last() {
                    Some(b'm') => m = parse_i64(Some(kv)),
                    Some(b't') => t = parse_i64(Some(kv)).unwrap_or(0),
                    Some(b'o') => o = parse_i64(Some(kv)).unwrap_or(0),
                    _ => {}
                }
            }
        }
        let children = get_at(at + 3).map_or(0, |g| g.count());
        let stat = Stat {
            version: version.max(0) + o,
            cversion: (2 * c - children).max(0),
            created_ms: t,
            modified_ms: m.unwrap_or(t),
            ephemeral: lease != 0,
            num_children: children,
        };
        Some((value, stat))
    }

    async fn read(self: &Arc<Self>, op: Operation, path: &str) -> Result<Option<(Vec<u8>, Stat)>> {
        let rs = self.batched_reads(op, path, self.stat_reads(path)).await?;
        Ok(Self::read_stat(path, &rs, 0))
    }

    fn lease_of(&self, mode: CreateMode) -> i64 {
        if mode.ephemeral {
            self.lease.load(Ordering::Acquire)
        } else {
            0
        }
    }

    /// Creates `path` (not sequential: the actual path), creating missing
    /// parents. `offset` is the imported version (0 for a plain create).
    async fn create_node(
        &self,
        op: Operation,
        path: &str,
        value: &[u8],
        mode: CreateMode,
        offset: i64,
    ) -> Result<(String, Stat)> {
        let parent_path = parent(path).to_owned();
        let mut parents_made = false;
        for _ in 0..1_000 {
            let (actual, counter) = if mode.sequential {
                let resp = self
                    .get(
                        op,
                        path,
                        self.side(&parent_path, "c"),
                        Some(GetOptions::new().with_prefix()),
                    )
                    .await?;
                let (n, raw) = counter_of(&Some(resp));
                (format!("{path}{n:010}"), Some(raw))
            } else {
                (path.to_owned(), None)
            };
            let key = self.key(&actual);
            let mut when = vec![Compare::create_revision(key.clone(), CompareOp::Equal, 0)];
            if parent_path != "/" {
                let pk = self.key(&parent_path);
                when.push(Compare::create_revision(pk.clone(), CompareOp::Greater, 0));
                when.push(Compare::lease(pk, CompareOp::Equal, 0));
            }
            if let Some(n) = counter {
                when.push(Compare::version(
                    self.side(&parent_path, "c"),
                    CompareOp::Equal,
                    n,
                ));
            }
            let lease = self.lease_of(mode);
            let put = |v: Vec<u8>| {
                if lease != 0 {
                    Some(PutOptions::new().with_lease(lease))
                } else {
                    None
                }
                .map_or_else(|| (v.clone(), None), |o| (v.clone(), Some(o)))
            };
            let now = now_ms().to_string().into_bytes();
            let mut ops = Vec::new();
            let (v, o) = put(value.to_vec());
            ops.push(TxnOp::put(key.clone(), v, o));
            let (v, o) = put(now.clone());
            ops.push(TxnOp::put(self.side(&actual, "t"), v, o));
            let (v, o) = put(now);
            ops.push(TxnOp::put(self.side(&actual, "m"), v, o));
            if offset != 0 {
                ops.push(TxnOp::put(
                    self.side(&actual, "o"),
                    offset.to_string(),
                    None,
                ));
            } else {
                // A node deleted by another etcd client (Pulsar's store deletes
                // only the node key) may have left its offset behind: a new
                // node starts at version 0.
                ops.push(TxnOp::delete(self.side(&actual, "o"), None));
            }
            let (v, o) = put(Vec::new());
            ops.push(TxnOp::put(
                self.child_index(&parent_path, name(&actual)),
                v,
                o,
            ));
            ops.push(TxnOp::put(self.side(&parent_path, "c"), Vec::new(), None));
            let reads_at = ops.len();
            ops.extend(self.stat_reads(&actual));
            let resp = self
                .txn(
                    op,
                    path,
                    Txn::new().when(when).and_then(ops).or_else(vec![
                        TxnOp::get(key, None),
                        TxnOp::get(self.key(&parent_path), None),
                        TxnOp::get(self.side(&parent_path, "c"), None),
                    ]),
                )
                .await?;
            if resp.succeeded() {
                let (_, stat) = Self::read_stat(&actual, &resp.op_responses(), reads_at)
                    .ok_or_else(|| MetadataError::Internal {
                        op,
                        path: path.to_owned(),
                        reason: "the created node was not read back".to_owned(),
                    })?;
                return Ok((actual, stat));
            }
            let node = first_kv(&nth_get(&resp, 0));
            let parent_node = first_kv(&nth_get(&resp, 1));
            let c = first_kv(&nth_get(&resp, 2)).map_or(0, |kv| kv.version());
            if let Some(n) = counter {
                if c != n {
                    continue; // another sequential child took the number
                }
            }
            if node.is_some() {
                return Err(MetadataError::AlreadyExists { op, path: actual });
            }
            match parent_node {
                Some(p) if p.lease() != 0 => {
                    return Err(ephemeral_parent_error(op, &actual, &parent_path))
                }
                Some(_) => continue,
                None if !parents_made => {
                    parents_made = true;
                    self.create_parents(op, &parent_path).await?;
                }
                None => parents_made = false, // deleted meanwhile: make it again
            }
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the node could not be created after 1000 attempts (constant contention)"
                .to_owned(),
        })
    }

    /// Raises the child counter of `path` to at least `next`: one transaction
    /// that writes `c` (so that a sequential create racing it retries) and the
    /// offset `co`, compared on `c`'s version.
    async fn import_counter(
        self: &Arc<Self>,
        op: Operation,
        path: &str,
        next: i64,
    ) -> Result<Stat> {
        let c_key = self.side(path, "c");
        for _ in 0..1_000 {
            let resp = self
                .txn(
                    op,
                    path,
                    Txn::new().and_then(vec![
                        TxnOp::get(self.key(path), Some(GetOptions::new().with_keys_only())),
                        self.counter_read(path),
                    ]),
                )
                .await?;
            let node = first_kv(&nth_get(&resp, 0));
            match &node {
                None if path != "/" => {
                    return Err(MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    })
                }
                Some(n) if n.lease() != 0 => return Err(ephemeral_counter_error(path)),
                _ => {}
            }
            let (counter, raw) = counter_of(&nth_get(&resp, 1));
            if counter >= next {
                return self
                    .read(op, path)
                    .await?
                    .map(|(_, stat)| stat)
                    .ok_or_else(|| MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    });
            }
            let mut when = vec![Compare::version(c_key.clone(), CompareOp::Equal, raw)];
            if let Some(n) = &node {
                when.push(Compare::create_revision(
                    self.key(path),
                    CompareOp::Equal,
                    n.create_revision(),
                ));
            }
            let mut ops = vec![
                TxnOp::put(c_key.clone(), Vec::new(), None),
                TxnOp::put(self.side(path, "co"), (next - raw - 1).to_string(), None),
            ];
            let reads_at = ops.len();
            ops.extend(self.stat_reads(path));
            let resp = self
                .txn(op, path, Txn::new().when(when).and_then(ops))
                .await?;
            if resp.succeeded() {
                return Self::read_stat(path, &resp.op_responses(), reads_at)
                    .map(|(_, stat)| stat)
                    .ok_or_else(|| MetadataError::Internal {
                        op,
                        path: path.to_owned(),
                        reason: "the node was not read back after its counter import".to_owned(),
                    });
            }
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the counter could not be imported after 1000 attempts (constant contention)"
                .to_owned(),
        })
    }

    /// Creates `path` and its missing ancestors, persistent and empty.
    async fn create_parents(&self, op: Operation, path: &str) -> Result<()> {
        let mut missing = Vec::new();
        let mut p = path;
        while p != "/" {
            let resp = self
                .get(
                    op,
                    p,
                    self.key(p),
                    Some(GetOptions::new().with_count_only()),
                )
                .await?;
            if resp.count() > 0 {
                break;
            }
            missing.push(p.to_owned());
            p = parent(p);
        }
        for p in missing.iter().rev() {
            match Box::pin(self.create_node(op, p, b"", CreateMode::PERSISTENT, 0)).await {
                Ok(_) => {}
                Err(e) if e.kind() == crate::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Writes an existing node's value; `expected` is `Any` or `Exactly`.
    /// `Ok(None)` when the node does not exist (for `Any`). Without
    /// `with_stat` and with `Exactly`, nothing is read back: only the
    /// returned version is meaningful.
    async fn update_node(
        self: &Arc<Self>,
        op: Operation,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
        with_stat: bool,
    ) -> Result<Option<Stat>> {
        let key = self.key(path);
        let m = self.side(path, "m");
        let mut offset: Option<i64> = None;
        // The fast path: a node of bkswitch's layout (its `m` side key
        // exists), so `m` is a plain put and the reply reads only what the
        // write does not tell. A node without `m` (the root, a node written
        // by another etcd client) takes the general path.
        let mut fast = path != "/";
        for _ in 0..100 {
            let mut when = Vec::new();
            if path != "/" || expected != ExpectedVersion::Any {
                when.push(Compare::create_revision(key.clone(), CompareOp::Greater, 0));
            }
            if let ExpectedVersion::Exactly(v) = expected {
                match offset {
                    None => {
                        when.push(Compare::version(key.clone(), CompareOp::Equal, v + 1));
                        when.push(Compare::version(self.side(path, "o"), CompareOp::Equal, 0));
                    }
                    Some(o) => {
                        when.push(Compare::version(key.clone(), CompareOp::Equal, v + 1 - o));
                        when.push(Compare::value(
                            self.side(path, "o"),
                            CompareOp::Equal,
                            o.to_string(),
                        ));
                    }
                }
            }
            let now = now_ms();
            let keep_lease = Some(PutOptions::new().with_ignore_lease());
            let mut ops;
            if fast {
                when.push(Compare::create_revision(m.clone(), CompareOp::Greater, 0));
                ops = vec![
                    TxnOp::put(key.clone(), value.to_vec(), keep_lease.clone()),
                    TxnOp::put(m.clone(), now.to_string(), keep_lease),
                ];
            } else if path == "/" {
                // The root has no lease: a plain put.
                ops = vec![
                    TxnOp::put(key.clone(), value.to_vec(), None),
                    TxnOp::put(m.clone(), now.to_string(), None),
                ];
            } else {
                ops = vec![
                    TxnOp::put(key.clone(), value.to_vec(), keep_lease),
                    self.touch_modified(path),
                ];
            }
            let reads_at = ops.len();
            let known_offset = match expected {
                ExpectedVersion::Exactly(_) => Some(offset.unwrap_or(0)),
                _ => None,
            };
            // Without a `Stat` wanted and with the version fixed by the
            // compare, the write is the whole transaction.
            let bare = fast && !with_stat && known_offset.is_some();
            if fast && !bare {
                ops.extend(self.put_stat_reads(path, known_offset.is_none()));
            } else if !fast {
                ops.extend(self.stat_reads(path));
            }
            // Concurrent writes of other nodes leave in one request.
            let resp = self
                .batched_txn(
                    op,
                    path,
                    Txn::new().when(when).and_then(ops).or_else(vec![
                        TxnOp::get(key.clone(), None),
                        TxnOp::get(self.side(path, "o"), None),
                        TxnOp::get(m.clone(), Some(GetOptions::new().with_keys_only())),
                    ]),
                    value.len(),
                )
                .await?;
            if resp.succeeded() {
                if let (true, ExpectedVersion::Exactly(v)) = (bare, expected) {
                    // Only the version is meant to be read (`put_version`).
                    return Ok(Some(Stat {
                        version: v + 1,
                        cversion: 0,
                        created_ms: 0,
                        modified_ms: now,
                        ephemeral: false,
                        num_children: 0,
                    }));
                }
                return Ok(if fast {
                    Self::read_put_stat(&resp, reads_at, now, known_offset)
                } else {
                    Self::read_stat(path, &resp.op_responses(), reads_at).map(|(_, s)| s)
                });
            }
            if fast && first_kv(&nth_get(&resp, 2)).is_none() {
                fast = false;
            }
            let node = first_kv(&nth_get(&resp, 0));
            let o = parse_i64(first_kv(&nth_get(&resp, 1)).as_ref());
            let Some(node) = node else {
                return match expected {
                    ExpectedVersion::Exactly(_) => Err(MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    }),
                    _ => Ok(None),
                };
            };
            if let ExpectedVersion::Exactly(v) = expected {
                let o_now = o.unwrap_or(0);
                if node.version() - 1 + o_now != v {
                    return Err(MetadataError::BadVersion {
                        op,
                        path: path.to_owned(),
                        expected: v,
                    });
                }
                offset = o;
            }
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the write did not settle after 100 attempts".to_owned(),
        })
    }

    /// Writes the node's `m` side key, on the lease it has. A node written by
    /// another etcd client (Pulsar's store) has none: a persistent one gets
    /// one (so that bkswitch's watches see its writes); an ephemeral one is
    /// left without (its lease is not this store's to extend to a side key).
    fn touch_modified(&self, path: &str) -> TxnOp {
        let m = self.side(path, "m");
        let now = now_ms().to_string();
        let foreign = Txn::new()
            .when(vec![Compare::lease(self.key(path), CompareOp::Equal, 0)])
            .and_then(vec![TxnOp::put(m.clone(), now.clone(), None)]);
        TxnOp::txn(
            Txn::new()
                .when(vec![Compare::create_revision(
                    m.clone(),
                    CompareOp::Greater,
                    0,
                )])
                .and_then(vec![TxnOp::put(
                    m,
                    now,
                    Some(PutOptions::new().with_ignore_lease()),
                )])
                .or_else(vec![TxnOp::txn(foreign)]),
        )
    }

    async fn delete_node(
        &self,
        op: Operation,
        path: &str,
        expected: ExpectedVersion,
    ) -> Result<()> {
        let key = self.key(path);
        let below = self.children_prefix(path);
        let parent_path = parent(path);
        let mut offset: Option<i64> = None;
        for _ in 0..100 {
            let mut when = vec![
                Compare::create_revision(key.clone(), CompareOp::Greater, 0),
                Compare::create_revision(below.clone(), CompareOp::Equal, 0)
                    .with_range(prefix_end(&below)),
            ];
            if let ExpectedVersion::Exactly(v) = expected {
                let o = offset.unwrap_or(0);
                when.push(Compare::version(key.clone(), CompareOp::Equal, v + 1 - o));
                if o == 0 {
                    when.push(Compare::version(self.side(path, "o"), CompareOp::Equal, 0));
                } else {
                    when.push(Compare::value(
                        self.side(path, "o"),
                        CompareOp::Equal,
                        o.to_string(),
                    ));
                }
            }
            let base = self.side_base(path);
            let mut base_end = base.clone();
            if let Some(last) = base_end.last_mut() {
                *last = 1;
            }
            let ops = vec![
                TxnOp::delete(key.clone(), None),
                TxnOp::delete(base, Some(DeleteOptions::new().with_range(base_end))),
                TxnOp::delete(self.child_index(parent_path, name(path)), None),
            ];
            let resp = self
                .txn(
                    op,
                    path,
                    Txn::new().when(when).and_then(ops).or_else(vec![
                        TxnOp::get(key.clone(), None),
                        TxnOp::get(self.side(path, "o"), None),
                        TxnOp::get(
                            below.clone(),
                            Some(
                                GetOptions::new()
                                    .with_range(prefix_end(&below))
                                    .with_count_only(),
                            ),
                        ),
                    ]),
                )
                .await?;
            if resp.succeeded() {
                return Ok(());
            }
            let Some(node) = first_kv(&nth_get(&resp, 0)) else {
                return Err(MetadataError::NotFound {
                    op,
                    path: path.to_owned(),
                });
            };
            let o = parse_i64(first_kv(&nth_get(&resp, 1)).as_ref());
            if let ExpectedVersion::Exactly(v) = expected {
                if node.version() - 1 + o.unwrap_or(0) != v {
                    return Err(MetadataError::BadVersion {
                        op,
                        path: path.to_owned(),
                        expected: v,
                    });
                }
            }
            if nth_get(&resp, 2).is_some_and(|g| g.count() > 0) {
                return Err(MetadataError::NotEmpty {
                    op,
                    path: path.to_owned(),
                });
            }
            offset = o;
        }
        Err(MetadataError::Internal {
            op,
            path: path.to_owned(),
            reason: "the delete did not settle after 100 attempts".to_owned(),
        })
    }

    async fn list_children(&self, op: Operation, path: &str) -> Result<Vec<String>> {
        let prefix = self.children_prefix(path);
        let end = prefix_end(&prefix);
        let mut start = prefix.clone();
        let mut names: Vec<String> = Vec::new();
        loop {
            let resp = self
                .get(
                    op,
                    path,
                    start.clone(),
                    Some(
                        GetOptions::new()
                            .with_range(end.clone())
                            .with_keys_only()
                            .with_limit(self.options.children_page_size),
                    ),
                )
                .await?;
            let mut last_child: Option<(String, bool)> = None;
            for kv in resp.kvs() {
                let rest = &kv.key()[prefix.len()..];
                let (child, deeper) = match rest.iter().position(|&b| b == b'/') {
                    Some(i) => (&rest[..i], true),
                    None => (rest, false),
                };
                let child = String::from_utf8_lossy(child).into_owned();
                if names.last() != Some(&child) {
                    names.push(child.clone());
                }
                last_child = Some((child, deeper));
            }
            if !resp.more() {
                break;
            }
            // Next page: after the last key, or past the whole subtree of the
            // last child when that key was below it.
            let last_key = resp.kvs().last().map(|kv| kv.key().to_vec());
            start = match (last_child, last_key) {
                (Some((child, true)), _) => {
                    let mut sub = prefix.clone();
                    sub.extend_from_slice(child.as_bytes());
                    sub.push(b'/');
                    prefix_end(&sub)
                }
                (_, Some(mut key)) => {
                    key.push(0);
                    key
                }
                _ => break,
            };
        }
        names.sort();
        names.dedup();
        Ok(names)
    }
}

#[async_trait]
impl MetadataStore for EtcdStore {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        let op = Operation::Get;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                Ok(inner
                    .read(op, path)
                    .await?
                    .map(|(value, stat)| GetResult { value, stat }))
            })
            .await
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, expected)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                loop {
                    match expected {
                        ExpectedVersion::NotExists => {
                            return inner
                                .create_node(op, path, value, CreateMode::PERSISTENT, 0)
                                .await
                                .map(|(_, s)| s)
                        }
                        ExpectedVersion::Exactly(_) => {
                            return inner
                                .update_node(op, path, value, expected, true)
                                .await?
                                .ok_or_else(|| MetadataError::NotFound {
                                    op,
                                    path: path.to_owned(),
                                })
                        }
                        ExpectedVersion::Any => {
                            if let Some(stat) =
                                inner.update_node(op, path, value, expected, true).await?
                            {
                                return Ok(stat);
                            }
                            match inner
                                .create_node(op, path, value, CreateMode::PERSISTENT, 0)
                                .await
                            {
                                Ok((_, stat)) => return Ok(stat),
                                Err(e) if e.kind() == crate::ErrorKind::AlreadyExists => {}
                                Err(e) => return Err(e),
                            }
                        }
                    }
                }
            })
            .await
    }

    async fn put_version(
        &self,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
    ) -> Result<i64> {
        let ExpectedVersion::Exactly(_) = expected else {
            // Creating, or writing whatever version is there: the version has
            // to be read anyway.
            return Ok(self.put(path, value, expected).await?.version);
        };
        let op = Operation::Put;
        check_put_args(path, value, expected)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                inner
                    .update_node(op, path, value, expected, false)
                    .await?
                    .map(|s| s.version)
                    .ok_or_else(|| MetadataError::NotFound {
                        op,
                        path: path.to_owned(),
                    })
            })
            .await
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        let op = Operation::Create;
        check_create_args(path, value, mode)?;
        check_value(op, path, value)?;
        let inner = &self.inner;
        inner
            .run(op, path, inner.create_node(op, path, value, mode, 0))
            .await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        let op = Operation::Delete;
        check_delete_args(path, expected)?;
        let inner = &self.inner;
        inner
            .run(op, path, inner.delete_node(op, path, expected))
            .await
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        let op = Operation::Exists;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                Ok(inner.read(op, path).await?.map(|(_, s)| s))
            })
            .await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        let op = Operation::Children;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        inner.run(op, path, inner.list_children(op, path)).await
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        let op = Operation::Watch;
        validate_path(op, path, PathUse::Read)?;
        let inner = &self.inner;
        let signals = inner.signals.subscribe();
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let task = tokio::spawn(watch_task(
            Arc::downgrade(inner),
            path.to_owned(),
            tx,
            signals,
            ready_tx,
        ));
        let abort = task.abort_handle();
        let armed = inner
            .run(op, path, async {
                ready_rx.await.unwrap_or_else(|_| {
                    Err(MetadataError::Closed {
                        op,
                        path: path.to_owned(),
                    })
                })
            })
            .await;
        if let Err(e) = armed {
            abort.abort();
            return Err(e);
        }
        struct AbortOnDrop(tokio::task::AbortHandle);
        impl Drop for AbortOnDrop {
            fn drop(&mut self) {
                self.0.abort();
            }
        }
        Ok(WatchStream::new(
            path.to_owned(),
            rx,
            Some(Box::new(AbortOnDrop(abort))),
        ))
    }

    async fn close(&self) -> Result<()> {
        let inner = &self.inner;
        if inner.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        inner.signal(Signal::Closed);
        let lease = inner.lease.load(Ordering::Acquire);
        let revoked = tokio::time::timeout(
            inner.options.operation_timeout,
            inner.client.lease_client().revoke(lease),
        )
        .await;
        match revoked {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) if e.to_string().contains("requested lease not found") => Ok(()),
            Ok(Err(e)) => Err(inner.map_err(e, Operation::Close, "/")),
            Err(_) => Err(inner.unavailable(
                Operation::Close,
                "/",
                format!(
                    "etcd `{}` did not revoke the lease within {:?}; it expires by itself",
                    inner.hosts, inner.options.operation_timeout
                ),
            )),
        }
    }

    fn can_import_versions(&self) -> bool {
        true
    }

    fn session_generation(&self) -> Option<u64> {
        Some(self.inner.generation.load(Ordering::Acquire))
    }

    /// etcd numbers versions itself, so the store keeps the difference in a
    /// side key (`o`) and adds it when reading; a conditional write of an
    /// imported node costs one more round trip than of a plain one. Pulsar's
    /// store, which knows no offset, reads such a node's version as if it had
    /// just been created.
    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_put_args(path, value, ExpectedVersion::NotExists)?;
        check_import_version(path, version)?;
        let inner = &self.inner;
        inner
            .run(op, path, async {
                inner
                    .create_node(op, path, value, CreateMode::PERSISTENT, version)
                    .await
                    .map(|(_, stat)| stat)
            })
            .await
    }

    /// etcd cannot set a key's version, so the counter is the etcd version of
    /// the `c` side key plus an offset kept in `co`: one transaction,
    /// whatever the difference.
    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat> {
        let op = Operation::Put;
        check_import_counter(path, next)?;
        let inner = &self.inner;
        inner
            .run(op, path, inner.import_counter(op, path, next))
            .await
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if self.is_closed() {
            return;
        }
        let lease = self.lease.load(Ordering::Acquire);
        let mut leases = self.client.lease_client();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = leases.revoke(lease).await;
            });
        }
    }
}

/// Keeps the lease alive; reports lost and regained connections, and a lost
/// lease as an expired session followed by a new one.
async fn keep_alive(inner: Weak<Inner>, first_lease: i64) {
    let mut lease = first_lease;
    let (ttl, mut leases) = match inner.upgrade() {
        Some(i) => (i.options.session_timeout, i.client.lease_client()),
        None => return,
    };
    let period = ttl / 3;
    let mut stream: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)> = None;
    loop {
        tokio::time::sleep(period).await;
        let Some(store) = inner.upgrade() else { return };
        if store.is_closed() {
            return;
        }
        let answer: std::result::Result<i64, String> = async {
            if stream.is_none() {
                stream = Some(leases.keep_alive(lease).await.map_err(|e| e.to_string())?);
            }
            let (keeper, replies) = stream.as_mut().expect("opened above");
            keeper.keep_alive().await.map_err(|e| e.to_string())?;
            match tokio::time::timeout(period, replies.message()).await {
                Ok(Ok(Some(reply))) => Ok(reply.ttl()),
                Ok(Ok(None)) => Err("the keep-alive stream ended".to_owned()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no keep-alive answer in time".to_owned()),
            }
        }
        .await;
        let answer = match answer {
            Err(e) if e.contains("lease not found") => Ok(0),
            other => other,
        };
        match answer {
            Ok(ttl_left) if ttl_left > 0 => {
                if !store.connected.swap(true, Ordering::AcqRel) {
                    info!(url = %store.url, "etcd connection back, lease alive");
                    store.signal(Signal::Session(SessionEvent::Reconnected));
                }
            }
            Ok(_) => {
                warn!(url = %store.url, lease, "etcd lease expired: session lost");
                stream = None;
                store.connected.store(true, Ordering::Release);
                store.signal(Signal::Session(SessionEvent::SessionExpired));
                loop {
                    if store.is_closed() {
                        return;
                    }
                    match leases.grant(ttl.as_secs() as i64, None).await {
                        Ok(granted) => {
                            lease = granted.id();
                            store.lease.store(lease, Ordering::Release);
                            store.generation.fetch_add(1, Ordering::AcqRel);
                            info!(url = %store.url, lease, "new etcd lease");
                            store.signal(Signal::Session(SessionEvent::SessionReestablished));
                            break;
                        }
                        Err(e) => {
                            debug!(error = %e, "etcd lease grant failed; retrying");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            }
            Err(reason) => {
                stream = None;
                if store.connected.swap(false, Ordering::AcqRel) {
                    warn!(url = %store.url, %reason, "etcd connection lost");
                    store.signal(Signal::Session(SessionEvent::ConnectionLost));
                }
            }
        }
    }
}

/// What a watch reported last, to report differences after a resync.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    exists: bool,
    children: i64,
    modified_rev: i64,
}

/// Reads the watched node's side keys; the state and the revision read at.
async fn snapshot(inner: &Inner, path: &str) -> std::result::Result<(Seen, i64), String> {
    let resp = inner
        .kv()
        .txn(Txn::new().and_then(vec![
            TxnOp::get(inner.key(path), Some(GetOptions::new().with_count_only())),
            TxnOp::get(inner.side(path, "m"), None),
            inner.child_count_read(path),
        ]))
        .await
        .map_err(|e| e.to_string())?;
    let rev = resp.header().map_or(0, |h| h.revision());
    let exists = path == "/" || nth_get(&resp, 0).is_some_and(|g| g.count() > 0);
    let modified_rev = first_kv(&nth_get(&resp, 1)).map_or(0, |kv| kv.mod_revision());
    let children = nth_get(&resp, 2).map_or(0, |g| g.count());
    Ok((
        Seen {
            exists,
            children,
            modified_rev,
        },
        rev,
    ))
}

async fn watch_task(
    inner: Weak<Inner>,
    path: String,
    tx: mpsc::UnboundedSender<Notification>,
    mut signals: broadcast::Receiver<Signal>,
    ready: tokio::sync::oneshot::Sender<Result<()>>,
) {
    let mut ready = Some(ready);
    // The state and revision the stream starts from.
    let (mut seen, mut rev) = loop {
        let Some(store) = inner.upgrade() else { return };
        match snapshot(&store, &path).await {
            Ok(s) => break s,
            Err(e) => {
                debug!(error = %e, "watch snapshot failed; retrying");
                drop(store);
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    };
    let send = |n: Notification| tx.send(n).is_ok();
    'outer: loop {
        let Some(store) = inner.upgrade() else { return };
        if store.is_closed() {
            return;
        }
        let base = store.side_base(&path);
        let mut end = base.clone();
        if let Some(last) = end.last_mut() {
            *last = 1;
        }
        let opened = store
            .client
            .watch_client()
            .watch(
                base.clone(),
                Some(
                    WatchOptions::new()
                        .with_range(end)
                        .with_start_revision(rev + 1),
                ),
            )
            .await;
        let key_t = store.side(&path, "t");
        let key_m = store.side(&path, "m");
        let k_prefix = store.side(&path, "k");
        drop(store);
        let mut watch = match opened {
            Ok(w) => w,
            Err(e) => {
                debug!(error = %e, "watch not opened; retrying");
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(200)) => continue,
                    _ = tx.closed() => return,
                }
            }
        };
        loop {
            tokio::select! {
                _ = tx.closed() => return,
                signal = signals.recv() => match signal {
                    Ok(Signal::Session(event)) => {
                        if !send(Notification::Session(event)) {
                            return;
                        }
                    }
                    Ok(Signal::Closed) | Err(broadcast::error::RecvError::Closed) => return,
                    Err(broadcast::error::RecvError::Lagged(_)) => {}
                },
                message = watch.message() => {
                    let response = match message {
                        Ok(Some(r)) => r,
                        Ok(None) | Err(_) => continue 'outer,
                    };
                    if response.created() {
                        if let Some(ready) = ready.take() {
                            let _ = ready.send(Ok(()));
                        }
                    }
                    if response.compact_revision() > 0 {
                        // The history we need is gone: re-read and report what
                        // differs.
                        let Some(store) = inner.upgrade() else { return };
                        match snapshot(&store, &path).await {
                            Ok((now, at)) => {
                                for n in diff(&path, seen, now, rev) {
                                    if !send(n) {
                                        return;
                                    }
                                }
                                seen = now;
                                rev = at;
                            }
                            Err(e) => debug!(error = %e, "watch resync failed"),
                        }
                        continue 'outer;
                    }
                    if response.canceled() {
                        continue 'outer;
                    }
                    let mut i = 0;
                    let events = response.events();
                    while i < events.len() {
                        let Some(kv) = events[i].kv() else { i += 1; continue };
                        let at = kv.mod_revision();
                        let mut created = false;
                        let mut deleted = false;
                        let mut modified = false;
                        let mut children = 0i64;
                        let mut children_changed = false;
                        while i < events.len() {
                            let Some(kv) = events[i].kv() else { i += 1; continue };
                            if kv.mod_revision() != at {
                                break;
                            }
                            let key = kv.key();
                            let put = events[i].event_type() == EventType::Put;
                            if key == key_t.as_slice() {
                                if put { created = true } else { deleted = true }
                            } else if key == key_m.as_slice() {
                                if put { modified = true }
                            } else if key.starts_with(&k_prefix) {
                                children_changed = true;
                                children += if put && kv.version() == 1 { 1 } else if put { 0 } else { -1 };
                            }
                            i += 1;
                        }
                        if created {
                            seen.exists = true;
                            if !send(Notification::Created { path: path.clone() }) { return; }
                        } else if deleted {
                            seen.exists = false;
                            if !send(Notification::Deleted { path: path.clone() }) { return; }
                        } else if modified {
                            seen.modified_rev = at;
                            if !send(Notification::Modified { path: path.clone() }) { return; }
                        }
                        if children_changed && !deleted {
                            seen.children += children;
                            if !send(Notification::ChildrenChanged { path: path.clone() }) { return; }
                        }
                        rev = rev.max(at);
                    }
                    if let Some(h) = response.header() {
                        // Events up to the header's revision were all sent.
                        if events.is_empty() && !response.created() {
                            rev = rev.max(h.revision());
                        }
                    }
                }
            }
        }
    }
}

/// Notifications that turn `before` into `now` (after a compaction).
fn diff(path: &str, before: Seen, now: Seen, rev: i64) -> Vec<Notification> {
    let path = path.to_owned();
    let mut out = Vec::new();
    match (before.exists, now.exists) {
        (false, true) => out.push(Notification::Created { path: path.clone() }),
        (true, false) => out.push(Notification::Deleted { path: path.clone() }),
        (true, true) if now.modified_rev > rev => {
            out.push(Notification::Modified { path: path.clone() })
        }
        _ => {}
    }
    if now.children != before.children {
        out.push(Notification::ChildrenChanged { path });
    }
    out
}
