//! The conformance suite of [`MetadataStore`]: any implementation proves it
//! keeps the trait's contract by running it.
//!
//! Implement [`StoreFactory`] (fresh isolated namespaces, several sessions on
//! one namespace), then either expand [`metadata_store_conformance!`](crate::metadata_store_conformance)
//! in a test module (one `#[tokio::test]` per case, so failures are reported by
//! name; needs `tokio` with the `macros` and `rt-multi-thread` features in the
//! dev-dependencies) or call [`run_all`] from one test:
//!
//! ```
//! use bkswitch_metadata_store::testkit::MemoryFactory;
//!
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! bkswitch_metadata_store::testkit::run_all(&MemoryFactory).await;
//! # }
//! ```
//!
//! ```
//! mod conformance {
//!     bkswitch_metadata_store::metadata_store_conformance!(
//!         bkswitch_metadata_store::testkit::MemoryFactory
//!     );
//! }
//! # fn main() {}
//! ```
//!
//! The cases tolerate coalesced notifications where a backend may coalesce
//! them: they wait until the latest state is observed rather than counting
//! events. Each case panics with a message naming what broke.

use std::collections::BTreeMap;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::{FutureExt, StreamExt};

use crate::error::{ErrorKind, MetadataError, Result};
use crate::memory::MemoryStore;
use crate::path::MAX_VALUE_LEN;
use crate::store::{MetadataStore, MetadataStoreExt, Update};
use crate::types::{CreateMode, ExpectedVersion, Notification, WatchStream};
use crate::zk::{ZkStore, ZkStoreOptions};

/// How long a case waits for an expected notification.
pub const EVENT_TIMEOUT: Duration = Duration::from_secs(10);

/// Opens isolated namespaces of the store under test.
#[async_trait]
pub trait StoreFactory: Send + Sync {
    /// A fresh, empty namespace that no other namespace can see.
    ///
    /// # Errors
    ///
    /// Any error opening it; the case fails with it.
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>>;
}

/// One isolated namespace (a tree) of the store under test.
#[async_trait]
pub trait TestNamespace: Send + Sync {
    /// A new session on the namespace (another client of the same data), with
    /// its own ephemeral nodes and watches.
    ///
    /// # Errors
    ///
    /// Any error opening it; the case fails with it.
    async fn session(&self) -> Result<Arc<dyn MetadataStore>>;
}

/// [`StoreFactory`] of [`MemoryStore`]: one tree per namespace, sessions from
/// [`MemoryStore::new_session`].
#[derive(Debug, Clone, Copy, Default)]
pub struct MemoryFactory;

struct MemoryNamespace {
    root: MemoryStore,
}

#[async_trait]
impl StoreFactory for MemoryFactory {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        Ok(Box::new(MemoryNamespace {
            root: MemoryStore::new(),
        }))
    }
}

#[async_trait]
impl TestNamespace for MemoryNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(self.root.new_session()))
    }
}

/// [`StoreFactory`] of [`ZkStore`] on a running ZooKeeper: each namespace is a
/// fresh chroot, each session a new connection.
#[derive(Debug, Clone)]
pub struct ZkFactory {
    hosts: String,
    options: ZkStoreOptions,
}

impl ZkFactory {
    /// Namespaces on the ZooKeeper at `hosts` (`host:port[,host:port…]`), with
    /// test-friendly options (5 s session and operation timeouts).
    pub fn new(hosts: impl Into<String>) -> Self {
        Self::with_options(
            hosts,
            ZkStoreOptions {
                session_timeout: Duration::from_secs(5),
                operation_timeout: Duration::from_secs(5),
                connect_timeout: Duration::from_secs(20),
                ..ZkStoreOptions::default()
            },
        )
    }

    /// Namespaces on the ZooKeeper at `hosts` with the given options.
    pub fn with_options(hosts: impl Into<String>, options: ZkStoreOptions) -> Self {
        ZkFactory {
            hosts: hosts.into(),
            options,
        }
    }
}

struct ZkNamespace {
    url: String,
    options: ZkStoreOptions,
}

#[async_trait]
impl StoreFactory for ZkFactory {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        static COUNTER: AtomicU64 = AtomicU64::new(0);
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        let nonce = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let url = format!(
            "zk://{}/conformance/{}-{n}-{nonce:x}",
            self.hosts,
            std::process::id()
        );
        Ok(Box::new(ZkNamespace {
            url,
            options: self.options.clone(),
        }))
    }
}

#[async_trait]
impl TestNamespace for ZkNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(
            ZkStore::connect(&self.url, self.options.clone()).await?,
        ))
    }
}

/// Wraps another factory so that every session is an `Arc<Arc<dyn
/// MetadataStore>>`: runs the suite through the forwarding impl of `Arc`.
#[derive(Debug, Clone)]
pub struct ViaArc<F>(pub F);

struct ViaArcNamespace(Box<dyn TestNamespace>);

#[async_trait]
impl<F: StoreFactory> StoreFactory for ViaArc<F> {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        Ok(Box::new(ViaArcNamespace(self.0.namespace().await?)))
    }
}

#[async_trait]
impl TestNamespace for ViaArcNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        let inner: Arc<dyn MetadataStore> = self.0.session().await?;
        Ok(Arc::new(inner))
    }
}

/// A future of one case.
pub type CaseFuture<'a> = Pin<Box<dyn Future<Output = ()> + Send + 'a>>;

/// One case of the suite.
#[derive(Clone, Copy)]
pub struct Case {
    /// The case's name (its function's name).
    pub name: &'static str,
    /// Runs the case; panics on failure.
    pub run: for<'a> fn(&'a dyn StoreFactory) -> CaseFuture<'a>,
}

impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Case").field("name", &self.name).finish()
    }
}

macro_rules! cases {
    ($($name:ident),* $(,)?) => {
        /// Every case of the suite, in the order [`run_all`] runs them.
        pub const CASES: &[Case] = &[
            $(Case { name: stringify!($name), run: |f| Box::pin($name(f)) }),*
        ];
    };
}

cases!(
    get_put_versions,
    put_creates_parents,
    put_not_exists_on_existing_fails,
    put_exactly_on_missing_is_not_found,
    put_wrong_version_is_bad_version,
    cas_race_exactly_one_writer_wins,
    create_if_absent_race_exactly_one_wins,
    delete_versions_and_errors,
    children_sorted_and_missing_is_empty,
    sequential_names_follow_cversion,
    cversion_counts_child_creations_and_deletions,
    ephemeral_nodes_end_with_their_session,
    invalid_paths_change_nothing,
    oversized_values_are_rejected,
    notify_created_modified_deleted,
    notify_children_changed,
    notify_latest_value_is_never_lost,
    watch_streams_are_independent,
    closed_store_fails_and_ends_streams,
    extension_helpers,
    root_node,
);

/// Runs every case in turn; panics naming the first case that fails.
pub async fn run_all(factory: &dyn StoreFactory) {
    for case in CASES {
        if let Err(panic) = AssertUnwindSafe((case.run)(factory)).catch_unwind().await {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!("conformance case `{}` failed: {message}", case.name);
        }
    }
}

/// Expands to one `#[tokio::test]` per conformance case (plus a check that no
/// case is missing), each running the case on the given factory expression
/// (evaluated once per test).
///
/// ```
/// mod conformance {
///     bkswitch_metadata_store::metadata_store_conformance!(
///         bkswitch_metadata_store::testkit::MemoryFactory
///     );
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! metadata_store_conformance {
    ($factory:expr) => {
        $crate::metadata_store_conformance!(@cases ($factory)
            get_put_versions,
            put_creates_parents,
            put_not_exists_on_existing_fails,
            put_exactly_on_missing_is_not_found,
            put_wrong_version_is_bad_version,
            cas_race_exactly_one_writer_wins,
            create_if_absent_race_exactly_one_wins,
            delete_versions_and_errors,
            children_sorted_and_missing_is_empty,
            sequential_names_follow_cversion,
            cversion_counts_child_creations_and_deletions,
            ephemeral_nodes_end_with_their_session,
            invalid_paths_change_nothing,
            oversized_values_are_rejected,
            notify_created_modified_deleted,
            notify_children_changed,
            notify_latest_value_is_never_lost,
            watch_streams_are_independent,
            closed_store_fails_and_ends_streams,
            extension_helpers,
            root_node,
        );
    };
    (@cases ($factory:expr) $($case:ident),* $(,)?) => {
        $(
            #[::tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let factory = $factory;
                $crate::testkit::$case(&factory).await;
            }
        )*

        #[test]
        fn conformance_suite_is_complete() {
            let generated: &[&str] = &[$(stringify!($case)),*];
            let all: ::std::vec::Vec<&str> =
                $crate::testkit::CASES.iter().map(|case| case.name).collect();
            assert_eq!(generated, all.as_slice(), "the macro must expand every case");
        }
    };
}

// ---------------------------------------------------------------------------
// Helpers.

type Store = Arc<dyn MetadataStore>;

async fn namespace(factory: &dyn StoreFactory) -> Box<dyn TestNamespace> {
    factory
        .namespace()
        .await
        .unwrap_or_else(|e| panic!("the factory cannot open a namespace: {e}"))
}

async fn session(ns: &dyn TestNamespace) -> Store {
    ns.session()
        .await
        .unwrap_or_else(|e| panic!("the namespace cannot open a session: {e}"))
}

fn ok<T>(what: &str, r: Result<T>) -> T {
    r.unwrap_or_else(|e| panic!("{what}: unexpected error: {e}"))
}

fn expect_kind<T: std::fmt::Debug>(what: &str, r: Result<T>, kind: ErrorKind) -> MetadataError {
    match r {
        Ok(v) => panic!("{what}: expected {kind:?}, got Ok({v:?})"),
        Err(e) => {
            assert_eq!(e.kind(), kind, "{what}: wrong error kind: {e}");
            e
        }
    }
}

async fn value(store: &Store, path: &str) -> Option<Vec<u8>> {
    ok(&format!("get {path}"), store.get(path).await).map(|r| r.value)
}

/// The next node notification (session events are skipped).
async fn next_node_event(w: &mut WatchStream, waiting_for: &str) -> Notification {
    loop {
        match tokio::time::timeout(EVENT_TIMEOUT, w.next()).await {
            Ok(Some(Notification::Session(_))) => continue,
            Ok(Some(n)) => return n,
            Ok(None) => panic!(
                "watch on {} ended while waiting for {waiting_for}",
                w.path()
            ),
            Err(_) => panic!(
                "no notification on {} within {EVENT_TIMEOUT:?} while waiting for {waiting_for}",
                w.path()
            ),
        }
    }
}

async fn expect_next(w: &mut WatchStream, expected: Notification) {
    let what = format!("{expected:?}");
    let got = next_node_event(w, &what).await;
    assert_eq!(
        got,
        expected,
        "watch on {}: unexpected notification",
        w.path()
    );
}

fn created(p: &str) -> Notification {
    Notification::Created { path: p.into() }
}
fn modified(p: &str) -> Notification {
    Notification::Modified { path: p.into() }
}
fn deleted(p: &str) -> Notification {
    Notification::Deleted { path: p.into() }
}
fn children_changed(p: &str) -> Notification {
    Notification::ChildrenChanged { path: p.into() }
}

/// Every node under `/`: path → (value, version, cversion).
async fn dump(store: &Store) -> BTreeMap<String, (Vec<u8>, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut todo = vec!["/".to_owned()];
    while let Some(p) = todo.pop() {
        if let Some(r) = ok("dump get", store.get(&p).await) {
            out.insert(p.clone(), (r.value, r.stat.version, r.stat.cversion));
        }
        for c in ok("dump children", store.children(&p).await) {
            todo.push(if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            });
        }
    }
    out
}

async fn close(stores: &[&Store]) {
    for s in stores {
        let _ = s.close().await;
    }
}

// ---------------------------------------------------------------------------
// Cases.

/// Versions start at 0 and grow by one per write; get/exists agree.
pub async fn get_put_versions(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    assert!(ok("get missing", s.get("/a").await).is_none());
    assert!(ok("exists missing", s.exists("/a").await).is_none());
    let st = ok("put create", s.put("/a", b"1", ExpectedVersion::Any).await);
    assert_eq!(
        (st.version, st.cversion, st.ephemeral, st.num_children),
        (0, 0, false, 0)
    );
    assert!(
        st.created_ms > 0 && st.modified_ms >= st.created_ms,
        "{st:?}"
    );
    let r = ok("get", s.get("/a").await).expect("/a exists");
    assert_eq!(r.value, b"1");
    assert_eq!(r.stat, st);
    let st1 = ok("put any", s.put("/a", b"2", ExpectedVersion::Any).await);
    assert_eq!(st1.version, 1);
    assert_eq!(st1.created_ms, st.created_ms);
    let st2 = ok(
        "put exactly",
        s.put("/a", b"3", ExpectedVersion::Exactly(1)).await,
    );
    assert_eq!(st2.version, 2);
    assert!(st2.modified_ms >= st1.modified_ms);
    let r = ok("get", s.get("/a").await).expect("/a exists");
    assert_eq!((r.value.as_slice(), r.stat), (&b"3"[..], st2));
    assert_eq!(ok("exists", s.exists("/a").await), Some(st2));
    let st = ok(
        "put empty",
        s.put("/empty", b"", ExpectedVersion::NotExists).await,
    );
    assert_eq!(st.version, 0);
    assert_eq!(value(&s, "/empty").await, Some(Vec::new()));
    close(&[&s]).await;
}

/// `put` and `create` create missing parents (persistent, empty, version 0).
pub async fn put_creates_parents(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    ok(
        "put deep",
        s.put("/p/q/r", b"x", ExpectedVersion::Any).await,
    );
    for parent in ["/p", "/p/q"] {
        let r = ok("get parent", s.get(parent).await).unwrap_or_else(|| panic!("{parent} missing"));
        assert_eq!(r.value, b"", "{parent}");
        assert_eq!(r.stat.version, 0, "{parent}");
        assert!(!r.stat.ephemeral, "{parent}");
    }
    assert_eq!(ok("children", s.children("/p").await), ["q"]);
    assert_eq!(value(&s, "/p/q/r").await.as_deref(), Some(&b"x"[..]));
    ok(
        "put not-exists deep",
        s.put("/p2/a/b", b"y", ExpectedVersion::NotExists).await,
    );
    assert!(ok("exists", s.exists("/p2/a").await).is_some());
    let (actual, _) = ok(
        "create deep",
        s.create("/p3/x/y", b"z", CreateMode::PERSISTENT).await,
    );
    assert_eq!(actual, "/p3/x/y");
    assert!(ok("exists", s.exists("/p3/x").await).is_some());
    let (actual, st) = ok(
        "create ephemeral deep",
        s.create("/p4/e", b"", CreateMode::EPHEMERAL).await,
    );
    assert_eq!(actual, "/p4/e");
    assert!(st.ephemeral);
    assert!(
        !ok("exists", s.exists("/p4").await).expect("/p4").ephemeral,
        "parents are persistent"
    );
    close(&[&s]).await;
}

/// `put` expecting `NotExists` on an existing node: AlreadyExists, nothing written.
pub async fn put_not_exists_on_existing_fails(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    ok("put", s.put("/a", b"1", ExpectedVersion::Any).await);
    let e = expect_kind(
        "put NotExists on existing",
        s.put("/a", b"2", ExpectedVersion::NotExists).await,
        ErrorKind::AlreadyExists,
    );
    assert!(e.is_conflict() && !e.is_retryable());
    assert_eq!(e.path(), "/a");
    assert!(e.to_string().contains("/a"), "{e}");
    let r = ok("get", s.get("/a").await).expect("/a");
    assert_eq!((r.value.as_slice(), r.stat.version), (&b"1"[..], 0));
    expect_kind(
        "create existing",
        s.create("/a", b"3", CreateMode::PERSISTENT).await,
        ErrorKind::AlreadyExists,
    );
    assert_eq!(value(&s, "/a").await.as_deref(), Some(&b"1"[..]));
    close(&[&s]).await;
}

/// `put` expecting a version of a missing node: NotFound (ZooKeeper's NoNode),
/// nothing created.
pub async fn put_exactly_on_missing_is_not_found(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    for v in [0, 5] {
        let e = expect_kind(
            "put Exactly on missing",
            s.put("/m/x", b"1", ExpectedVersion::Exactly(v)).await,
            ErrorKind::NotFound,
        );
        assert!(e.is_conflict());
        assert_eq!(e.path(), "/m/x");
    }
    assert!(ok("exists", s.exists("/m/x").await).is_none());
    assert!(
        ok("exists parent", s.exists("/m").await).is_none(),
        "no parent created"
    );
    close(&[&s]).await;
}

/// `put` with a stale version: BadVersion, nothing written; a negative version is
/// an invalid argument.
pub async fn put_wrong_version_is_bad_version(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    ok("put", s.put("/a", b"1", ExpectedVersion::Any).await);
    ok("put", s.put("/a", b"2", ExpectedVersion::Any).await);
    for v in [0, 3, i64::from(i32::MAX) + 1] {
        let e = expect_kind(
            "put stale version",
            s.put("/a", b"x", ExpectedVersion::Exactly(v)).await,
            ErrorKind::BadVersion,
        );
        assert!(e.is_conflict());
        assert!(e.to_string().contains("version"), "{e}");
    }
    expect_kind(
        "put negative version",
        s.put("/a", b"x", ExpectedVersion::Exactly(-1)).await,
        ErrorKind::InvalidArgument,
    );
    let r = ok("get", s.get("/a").await).expect("/a");
    assert_eq!((r.value.as_slice(), r.stat.version), (&b"2"[..], 1));
    close(&[&s]).await;
}

/// Two sessions compare-and-set the same version at once: exactly one wins and
/// the version grows by exactly one.
pub async fn cas_race_exactly_one_writer_wins(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    ok("put", a.put("/cas", b"start", ExpectedVersion::Any).await);
    for round in 0..20 {
        let v = ok("get", a.get("/cas").await).expect("/cas").stat.version;
        let va = format!("a{round}");
        let vb = format!("b{round}");
        let (ra, rb) = tokio::join!(
            a.put("/cas", va.as_bytes(), ExpectedVersion::Exactly(v)),
            b.put("/cas", vb.as_bytes(), ExpectedVersion::Exactly(v)),
        );
        let winner = match (ra, rb) {
            (Ok(st), Err(e)) => {
                assert_eq!(e.kind(), ErrorKind::BadVersion, "round {round}: {e}");
                assert_eq!(st.version, v + 1);
                va
            }
            (Err(e), Ok(st)) => {
                assert_eq!(e.kind(), ErrorKind::BadVersion, "round {round}: {e}");
                assert_eq!(st.version, v + 1);
                vb
            }
            other => panic!("round {round}: exactly one writer must win, got {other:?}"),
        };
        let r = ok("get", b.get("/cas").await).expect("/cas");
        assert_eq!(r.stat.version, v + 1, "round {round}");
        assert_eq!(r.value, winner.as_bytes(), "round {round}");
    }
    close(&[&a, &b]).await;
}

/// Two sessions create the same node at once (put NotExists, create): exactly
/// one succeeds.
pub async fn create_if_absent_race_exactly_one_wins(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    for round in 0..10 {
        let p = format!("/race/put-{round}");
        let (ra, rb) = tokio::join!(
            a.put(&p, b"a", ExpectedVersion::NotExists),
            b.put(&p, b"b", ExpectedVersion::NotExists),
        );
        let winner: &[u8] = match (ra, rb) {
            (Ok(st), Err(e)) | (Err(e), Ok(st)) if e.kind() == ErrorKind::AlreadyExists => {
                assert_eq!(st.version, 0);
                if value(&a, &p).await.as_deref() == Some(b"a") {
                    b"a"
                } else {
                    b"b"
                }
            }
            other => panic!("{p}: exactly one creator must win, got {other:?}"),
        };
        let r = ok("get", a.get(&p).await).expect("created");
        assert_eq!((r.value.as_slice(), r.stat.version), (winner, 0));

        let p = format!("/race/create-{round}");
        let (ra, rb) = tokio::join!(
            a.create(&p, b"a", CreateMode::PERSISTENT),
            b.create(&p, b"b", CreateMode::EPHEMERAL),
        );
        match (ra, rb) {
            (Ok(_), Err(e)) | (Err(e), Ok(_)) if e.kind() == ErrorKind::AlreadyExists => {}
            other => panic!("{p}: exactly one creator must win, got {other:?}"),
        }
    }
    close(&[&a, &b]).await;
}

/// Delete: wrong version → BadVersion (untouched); missing → NotFound; with
/// children → NotEmpty; `NotExists` → invalid; `/` → invalid path.
pub async fn delete_versions_and_errors(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    ok("put", s.put("/d", b"x", ExpectedVersion::Any).await);
    ok("put", s.put("/d", b"y", ExpectedVersion::Any).await);
    let e = expect_kind(
        "delete stale version",
        s.delete("/d", ExpectedVersion::Exactly(0)).await,
        ErrorKind::BadVersion,
    );
    assert_eq!(e.path(), "/d");
    let r = ok("get", s.get("/d").await).expect("/d untouched");
    assert_eq!((r.value.as_slice(), r.stat.version), (&b"y"[..], 1));
    expect_kind(
        "delete NotExists",
        s.delete("/d", ExpectedVersion::NotExists).await,
        ErrorKind::InvalidArgument,
    );
    expect_kind(
        "delete negative version",
        s.delete("/d", ExpectedVersion::Exactly(-2)).await,
        ErrorKind::InvalidArgument,
    );
    ok("delete", s.delete("/d", ExpectedVersion::Exactly(1)).await);
    assert!(ok("exists", s.exists("/d").await).is_none());
    expect_kind(
        "delete missing",
        s.delete("/d", ExpectedVersion::Any).await,
        ErrorKind::NotFound,
    );
    expect_kind(
        "delete missing with version",
        s.delete("/d", ExpectedVersion::Exactly(0)).await,
        ErrorKind::NotFound,
    );
    ok("put child", s.put("/d2/c", b"", ExpectedVersion::Any).await);
    let e = expect_kind(
        "delete non-empty",
        s.delete("/d2", ExpectedVersion::Any).await,
        ErrorKind::NotEmpty,
    );
    assert_eq!(e.path(), "/d2");
    assert!(ok("exists", s.exists("/d2/c").await).is_some());
    expect_kind(
        "delete root",
        s.delete("/", ExpectedVersion::Any).await,
        ErrorKind::InvalidPath,
    );
    ok(
        "delete child",
        s.delete("/d2/c", ExpectedVersion::Any).await,
    );
    ok(
        "delete parent",
        s.delete("/d2", ExpectedVersion::Exactly(0)).await,
    );
    close(&[&s]).await;
}

/// Children are names, sorted; a missing node has none.
pub async fn children_sorted_and_missing_is_empty(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    for name in ["b", "a", "c10", "c2", "A", "z-1"] {
        ok(
            "put",
            s.put(&format!("/k/{name}"), b"", ExpectedVersion::Any)
                .await,
        );
    }
    ok(
        "put grandchild",
        s.put("/k/a/deep", b"", ExpectedVersion::Any).await,
    );
    assert_eq!(
        ok("children", s.children("/k").await),
        ["A", "a", "b", "c10", "c2", "z-1"]
    );
    assert!(ok("children missing", s.children("/nope").await).is_empty());
    assert!(ok("children leaf", s.children("/k/b").await).is_empty());
    assert_eq!(ok("children /", s.children("/").await), ["k"]);
    close(&[&s]).await;
}

/// Sequential names are the prefix plus the parent's count of child creations
/// as `%010d` (ZooKeeper's stored cversion): equal to the reported `cversion`
/// until a child is deleted, `(cversion + num_children) / 2` in general.
pub async fn sequential_names_follow_cversion(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    let mut names = Vec::new();
    for i in 0..3 {
        let (actual, st) = ok(
            "create sequential",
            s.create("/seq/id-", b"v", CreateMode::PERSISTENT_SEQUENTIAL)
                .await,
        );
        assert_eq!(actual, format!("/seq/id-{i:010}"));
        assert_eq!(st.version, 0);
        assert!(!st.ephemeral);
        names.push(actual);
    }
    ok(
        "put plain child",
        s.put("/seq/plain", b"", ExpectedVersion::Any).await,
    );
    let (actual, _) = ok(
        "create sequential",
        s.create("/seq/id-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
            .await,
    );
    assert_eq!(actual, "/seq/id-0000000004");
    ok(
        "delete plain child",
        s.delete("/seq/plain", ExpectedVersion::Any).await,
    );
    let parent = ok("exists", s.exists("/seq").await).expect("/seq");
    // 5 creations, 1 deletion: reported cversion 6, next suffix 5.
    assert_eq!((parent.cversion, parent.num_children), (6, 4));
    assert_eq!(parent.next_sequential_suffix(), 5);
    let (actual, st) = ok(
        "create ephemeral sequential",
        s.create("/seq/id-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await,
    );
    assert_eq!(actual, "/seq/id-0000000005");
    assert!(st.ephemeral);
    // BookKeeper's id generator: create and delete at once.
    for expected in 6..9 {
        let (id, _) = ok(
            "create idgen node",
            s.create("/seq/id-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
                .await,
        );
        assert_eq!(id, format!("/seq/id-{expected:010}"));
        ok(
            "delete idgen node",
            s.delete(&id, ExpectedVersion::Any).await,
        );
    }
    let parent = ok("exists", s.exists("/seq").await).expect("/seq");
    assert_eq!((parent.cversion, parent.num_children), (13, 5));
    assert_eq!(parent.next_sequential_suffix(), 9);
    let (actual, _) = ok(
        "create sequential in a new parent",
        s.create("/fresh/x/n-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
            .await,
    );
    assert_eq!(actual, "/fresh/x/n-0000000000");
    let (actual, _) = ok(
        "create sequential without a name prefix",
        s.create(
            "/fresh/x/n-0000000001-",
            b"",
            CreateMode::PERSISTENT_SEQUENTIAL,
        )
        .await,
    );
    assert_eq!(actual, "/fresh/x/n-0000000001-0000000001");
    let children = ok("children", s.children("/seq").await);
    let mut sorted = children.clone();
    sorted.sort();
    assert_eq!(children, sorted);
    close(&[&s]).await;
}

/// `cversion` counts creations and deletions of direct children only.
pub async fn cversion_counts_child_creations_and_deletions(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    let stat = |st: Option<crate::Stat>| st.expect("/cv exists");
    ok("put", s.put("/cv", b"", ExpectedVersion::Any).await);
    assert_eq!(stat(ok("exists", s.exists("/cv").await)).cversion, 0);
    ok(
        "put child",
        s.put("/cv/a", b"1", ExpectedVersion::Any).await,
    );
    assert_eq!(stat(ok("exists", s.exists("/cv").await)).cversion, 1);
    ok(
        "write child",
        s.put("/cv/a", b"2", ExpectedVersion::Any).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!(
        (st.cversion, st.version),
        (1, 0),
        "writing a child is not a children change"
    );
    ok(
        "write parent",
        s.put("/cv", b"data", ExpectedVersion::Any).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!((st.cversion, st.version), (1, 1));
    ok(
        "delete child",
        s.delete("/cv/a", ExpectedVersion::Any).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!((st.cversion, st.num_children), (2, 0));
    ok(
        "put grandchild",
        s.put("/cv/b/c", b"", ExpectedVersion::Any).await,
    );
    assert_eq!(stat(ok("exists", s.exists("/cv").await)).cversion, 3);
    assert_eq!(stat(ok("exists", s.exists("/cv/b").await)).cversion, 1);
    ok(
        "create ephemeral child",
        s.create("/cv/e", b"", CreateMode::EPHEMERAL).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!((st.cversion, st.num_children), (4, 2));
    close(&[&s]).await;
}

/// Ephemeral nodes belong to their session, cannot have children, and vanish
/// when the session is closed; a closed session fails with Closed.
pub async fn ephemeral_nodes_end_with_their_session(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let (p, st) = ok(
        "create ephemeral",
        b.create("/e/x", b"v", CreateMode::EPHEMERAL).await,
    );
    assert_eq!(p, "/e/x");
    assert!(st.ephemeral);
    assert!(
        ok("exists", a.exists("/e/x").await)
            .expect("visible to others")
            .ephemeral
    );
    assert!(!ok("exists", a.exists("/e").await).expect("/e").ephemeral);
    expect_kind(
        "create under ephemeral",
        b.create("/e/x/child", b"", CreateMode::PERSISTENT).await,
        ErrorKind::InvalidArgument,
    );
    expect_kind(
        "put under ephemeral",
        a.put("/e/x/child", b"", ExpectedVersion::Any).await,
        ErrorKind::InvalidArgument,
    );
    let (p2, _) = ok(
        "create ephemeral sequential",
        b.create("/e/s-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await,
    );
    // Writing an ephemeral node keeps it ephemeral.
    let st = ok(
        "write ephemeral",
        a.put("/e/x", b"w", ExpectedVersion::Exactly(0)).await,
    );
    assert!(st.ephemeral && st.version == 1);
    ok("close b", b.close().await);
    assert!(
        ok("exists", a.exists("/e/x").await).is_none(),
        "ephemeral survived close"
    );
    assert!(
        ok("exists", a.exists(&p2).await).is_none(),
        "ephemeral survived close"
    );
    assert!(
        ok("exists", a.exists("/e").await).is_some(),
        "persistent parent kept"
    );
    expect_kind("get after close", b.get("/e").await, ErrorKind::Closed);
    expect_kind(
        "create after close",
        b.create("/e/y", b"", CreateMode::EPHEMERAL).await,
        ErrorKind::Closed,
    );
    ok("second close", b.close().await);
    close(&[&a]).await;
}

/// Every operation rejects invalid paths with InvalidPath naming the path, and
/// none of them changes anything.
pub async fn invalid_paths_change_nothing(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    ok("put", s.put("/keep/a", b"1", ExpectedVersion::Any).await);
    let before = dump(&s).await;
    let bad = [
        "",
        "keep",
        "/keep/",
        "//keep",
        "/keep//a",
        "/keep/./a",
        "/keep/..",
        "/a\0b",
        "/a\nb",
        "/a\u{7f}",
        "/a\u{E000}",
    ];
    for p in bad {
        let what = |op: &str| format!("{op} {p:?}");
        for (op, r) in [
            ("get", s.get(p).await.map(|_| ())),
            ("exists", s.exists(p).await.map(|_| ())),
            ("children", s.children(p).await.map(|_| ())),
            ("watch", s.watch(p).await.map(|_| ())),
            (
                "put",
                s.put(p, b"x", ExpectedVersion::Any).await.map(|_| ()),
            ),
            (
                "put NotExists",
                s.put(p, b"x", ExpectedVersion::NotExists).await.map(|_| ()),
            ),
            (
                "create",
                s.create(p, b"x", CreateMode::PERSISTENT).await.map(|_| ()),
            ),
            (
                "create seq",
                s.create(p, b"x", CreateMode::EPHEMERAL_SEQUENTIAL)
                    .await
                    .map(|_| ()),
            ),
            ("delete", s.delete(p, ExpectedVersion::Any).await),
        ] {
            let e = expect_kind(&what(op), r, ErrorKind::InvalidPath);
            assert_eq!(e.path(), p, "{}", what(op));
        }
    }
    for p in ["/zookeeper", "/zookeeper/x"] {
        expect_kind(
            "put reserved",
            s.put(p, b"", ExpectedVersion::Any).await,
            ErrorKind::InvalidPath,
        );
        expect_kind(
            "create reserved",
            s.create(p, b"", CreateMode::PERSISTENT).await,
            ErrorKind::InvalidPath,
        );
        expect_kind(
            "delete reserved",
            s.delete(p, ExpectedVersion::Any).await,
            ErrorKind::InvalidPath,
        );
    }
    expect_kind(
        "sequential prefix /",
        s.create("/", b"", CreateMode::PERSISTENT_SEQUENTIAL).await,
        ErrorKind::InvalidPath,
    );
    assert_eq!(dump(&s).await, before, "an invalid call changed the store");
    close(&[&s]).await;
}

/// Values up to [`MAX_VALUE_LEN`] are stored; longer ones are rejected alike by
/// every backend.
pub async fn oversized_values_are_rejected(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    let big = vec![7u8; MAX_VALUE_LEN];
    ok("put max", s.put("/big", &big, ExpectedVersion::Any).await);
    assert_eq!(
        value(&s, "/big").await.map(|v| v.len()),
        Some(MAX_VALUE_LEN)
    );
    let too_big = vec![7u8; MAX_VALUE_LEN + 1];
    let e = expect_kind(
        "put too big",
        s.put("/big", &too_big, ExpectedVersion::Any).await,
        ErrorKind::InvalidArgument,
    );
    assert!(e.to_string().contains("limit"), "{e}");
    expect_kind(
        "create too big",
        s.create("/big2", &too_big, CreateMode::PERSISTENT).await,
        ErrorKind::InvalidArgument,
    );
    assert!(ok("exists", s.exists("/big2").await).is_none());
    assert_eq!(
        ok("exists", s.exists("/big").await).expect("/big").version,
        0
    );
    close(&[&s]).await;
}

/// A watch reports creation, writes and deletion of its node, by this session
/// or another one.
pub async fn notify_created_modified_deleted(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w = ok("watch", a.watch("/n").await);
    assert_eq!(w.path(), "/n");
    ok("put", b.put("/n", b"1", ExpectedVersion::Any).await);
    expect_next(&mut w, created("/n")).await;
    ok("put", b.put("/n", b"2", ExpectedVersion::Exactly(0)).await);
    expect_next(&mut w, modified("/n")).await;
    ok("delete", b.delete("/n", ExpectedVersion::Any).await);
    expect_next(&mut w, deleted("/n")).await;
    ok("own put", a.put("/n", b"3", ExpectedVersion::Any).await);
    expect_next(&mut w, created("/n")).await;
    ok("own put", a.put("/n", b"4", ExpectedVersion::Any).await);
    expect_next(&mut w, modified("/n")).await;
    ok("own delete", a.delete("/n", ExpectedVersion::Any).await);
    expect_next(&mut w, deleted("/n")).await;
    // An ephemeral node ends with its session: a deletion too.
    ok(
        "ephemeral",
        b.create("/n", b"", CreateMode::EPHEMERAL).await,
    );
    expect_next(&mut w, created("/n")).await;
    ok("close b", b.close().await);
    expect_next(&mut w, deleted("/n")).await;
    close(&[&a]).await;
}

/// A watch reports creations and deletions of direct children only.
pub async fn notify_children_changed(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    ok("put parent", b.put("/par", b"", ExpectedVersion::Any).await);
    let mut w = ok("watch", a.watch("/par").await);
    ok(
        "put child",
        b.put("/par/c1", b"", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, children_changed("/par")).await;
    // Not children changes of /par: a child's value, a grandchild.
    ok(
        "write child",
        b.put("/par/c1", b"x", ExpectedVersion::Any).await,
    );
    ok(
        "put grandchild",
        b.put("/par/c1/g", b"", ExpectedVersion::Any).await,
    );
    ok(
        "write parent",
        b.put("/par", b"p", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, modified("/par")).await;
    ok(
        "delete grandchild",
        b.delete("/par/c1/g", ExpectedVersion::Any).await,
    );
    ok(
        "delete child",
        b.delete("/par/c1", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, children_changed("/par")).await;
    ok(
        "sequential child",
        b.create("/par/s-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await,
    );
    expect_next(&mut w, children_changed("/par")).await;
    ok("close b", b.close().await);
    expect_next(&mut w, children_changed("/par")).await;
    ok(
        "delete parent",
        a.delete("/par", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, deleted("/par")).await;
    close(&[&a]).await;
}

/// Rapid writes may coalesce, but a consumer that re-reads on every
/// notification always ends up seeing the last value, and the watch is still
/// armed afterwards.
pub async fn notify_latest_value_is_never_lost(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w = ok("watch", a.watch("/fast").await);
    let reader = a.clone();
    let consumer = tokio::spawn(async move {
        let mut events = 0usize;
        loop {
            next_node_event(&mut w, "the last value").await;
            events += 1;
            if value(&reader, "/fast").await.as_deref() == Some(b"99") {
                return (w, events);
            }
        }
    });
    for i in 0..100 {
        ok(
            "put",
            b.put("/fast", i.to_string().as_bytes(), ExpectedVersion::Any)
                .await,
        );
    }
    let (mut w, events) = consumer.await.expect("consumer panicked");
    assert!(
        (1..=100).contains(&events),
        "{events} notifications for 100 writes"
    );
    ok(
        "put after burst",
        b.put("/fast", b"100", ExpectedVersion::Any).await,
    );
    loop {
        next_node_event(&mut w, "the write after the burst").await;
        if value(&a, "/fast").await.as_deref() == Some(b"100") {
            break;
        }
    }
    close(&[&a, &b]).await;
}

/// Several streams on one path each get every change; dropping one does not
/// disturb the others.
pub async fn watch_streams_are_independent(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w1 = ok("watch", a.watch("/i").await);
    let mut w2 = ok("watch", a.watch("/i").await);
    let mut w3 = ok("watch", b.watch("/i").await);
    ok("put", b.put("/i", b"1", ExpectedVersion::Any).await);
    for w in [&mut w1, &mut w2, &mut w3] {
        expect_next(w, created("/i")).await;
    }
    drop(w1);
    ok("put", a.put("/i", b"2", ExpectedVersion::Any).await);
    for w in [&mut w2, &mut w3] {
        expect_next(w, modified("/i")).await;
    }
    close(&[&a, &b]).await;
}

/// Closing a store ends its watch streams; every later call fails with Closed.
pub async fn closed_store_fails_and_ends_streams(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w = ok("watch", a.watch("/z").await);
    let mut wb = ok("watch", b.watch("/z").await);
    ok("close", a.close().await);
    loop {
        match tokio::time::timeout(EVENT_TIMEOUT, w.next()).await {
            Ok(None) => break,
            Ok(Some(Notification::Session(_))) => continue,
            Ok(Some(n)) => panic!("unexpected notification after close: {n:?}"),
            Err(_) => panic!("watch stream did not end within {EVENT_TIMEOUT:?} of close"),
        }
    }
    expect_kind("get", a.get("/z").await, ErrorKind::Closed);
    expect_kind("exists", a.exists("/z").await, ErrorKind::Closed);
    expect_kind("children", a.children("/z").await, ErrorKind::Closed);
    expect_kind(
        "put",
        a.put("/z", b"", ExpectedVersion::Any).await,
        ErrorKind::Closed,
    );
    expect_kind(
        "delete",
        a.delete("/z", ExpectedVersion::Any).await,
        ErrorKind::Closed,
    );
    expect_kind("watch", a.watch("/z").await, ErrorKind::Closed);
    let e = expect_kind(
        "create",
        a.create("/z", b"", CreateMode::PERSISTENT).await,
        ErrorKind::Closed,
    );
    assert!(!e.is_retryable());
    ok("close again", a.close().await);
    // Other sessions are not affected.
    ok("put by b", b.put("/z", b"1", ExpectedVersion::Any).await);
    expect_next(&mut wb, created("/z")).await;
    close(&[&b]).await;
}

/// `delete_recursive`, `put_if_absent` and `update` (compare-and-set loop, also
/// under contention).
pub async fn extension_helpers(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    assert!(ok("put_if_absent", a.put_if_absent("/h/x", b"1").await).is_some());
    assert!(ok("put_if_absent again", a.put_if_absent("/h/x", b"2").await).is_none());
    assert_eq!(value(&a, "/h/x").await.as_deref(), Some(&b"1"[..]));

    let increment = |cur: Option<&crate::GetResult>| {
        let n: u64 = cur
            .map(|r| String::from_utf8_lossy(&r.value).parse().expect("a number"))
            .unwrap_or(0);
        Update::Write((n + 1).to_string().into_bytes())
    };
    let st = ok(
        "update missing",
        a.update("/h/counter", 10, increment).await,
    )
    .expect("written");
    assert_eq!(st.version, 0);
    assert!(ok(
        "update keep",
        a.update("/h/counter", 10, |_| Update::Keep).await
    )
    .is_none());
    tokio::join!(
        async {
            for _ in 0..10 {
                ok("update a", a.update("/h/counter", 100, increment).await);
            }
        },
        async {
            for _ in 0..10 {
                ok("update b", b.update("/h/counter", 100, increment).await);
            }
        },
    );
    let r = ok("get", a.get("/h/counter").await).expect("counter");
    assert_eq!(r.value, b"21");
    assert_eq!(r.stat.version, 20);

    for p in ["/h/t/a/1", "/h/t/a/2", "/h/t/b", "/h/t/c/d/e"] {
        ok("put", a.put(p, b"", ExpectedVersion::Any).await);
    }
    ok(
        "ephemeral in tree",
        b.create("/h/t/c/eph", b"", CreateMode::EPHEMERAL).await,
    );
    ok("delete_recursive", a.delete_recursive("/h/t").await);
    assert!(ok("exists", a.exists("/h/t").await).is_none());
    assert!(
        ok("exists", a.exists("/h/x").await).is_some(),
        "sibling kept"
    );
    ok(
        "delete_recursive missing",
        a.delete_recursive("/h/none").await,
    );
    ok("delete_recursive root", a.delete_recursive("/").await);
    assert!(ok("children /", a.children("/").await).is_empty());
    assert!(ok("root kept", a.exists("/").await).is_some());
    close(&[&a, &b]).await;
}

/// `/` always exists, lists the top-level nodes and cannot be deleted or
/// created.
pub async fn root_node(factory: &dyn StoreFactory) {
    let ns = namespace(factory).await;
    let s = session(&*ns).await;
    assert!(ok("get /", s.get("/").await).is_some());
    assert!(ok("exists /", s.exists("/").await).is_some());
    assert!(ok("children /", s.children("/").await).is_empty());
    let mut w = ok("watch /", s.watch("/").await);
    ok("put", s.put("/top", b"", ExpectedVersion::Any).await);
    expect_next(&mut w, children_changed("/")).await;
    assert_eq!(ok("children /", s.children("/").await), ["top"]);
    expect_kind(
        "create /",
        s.create("/", b"", CreateMode::PERSISTENT).await,
        ErrorKind::AlreadyExists,
    );
    expect_kind(
        "delete /",
        s.delete("/", ExpectedVersion::Any).await,
        ErrorKind::InvalidPath,
    );
    close(&[&s]).await;
}
