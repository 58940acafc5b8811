//! Real bookie clusters: layout in ZooKeeper, one JVM per bookie, faults.

use std::fmt;
use std::fs;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bkswitch_zk_harness::{GuardedIo, GuardedProcess};

mod builder;
mod setup;
mod spawn;
mod usage;

pub use builder::BkClusterBuilder;
use setup::parse_conf_line;
use spawn::child_of;
pub use usage::ProcessUsage;

use crate::install::{classpath, Installation};
use crate::interop::JavaClient;
use crate::logs::{log_excerpt, tail};
use crate::zk::Zk;
use crate::{StartError, JAVA_17_FLAGS};

/// How long a start, restart or [`BkCluster::add_bookie`] waits for the bookies to
/// register (see [`BkClusterBuilder::start_timeout`]).
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// The bookies' ZooKeeper session timeout (`zkTimeout`), in milliseconds: a
/// killed bookie's registration disappears about this long after the kill.
pub const ZK_TIMEOUT_MS: u64 = 4_000;

/// The `<root>/LAYOUT` value the harness writes (what `initnewcluster` writes:
/// layout format 2, the hierarchical ledger manager, version 1; no trailing
/// newline).
pub const LAYOUT: &[u8] = b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1";

/// The bookie's main class.
const BOOKIE_MAIN: &str = "org.apache.bookkeeper.server.Main";

/// How often registrations are polled.
const POLL: Duration = Duration::from_millis(100);

/// How many ports a bookie tries when the one picked is taken meanwhile.
const PORT_ATTEMPTS: u32 = 3;

/// A cluster of real Apache BookKeeper bookies, one JVM each, on loopback ports,
/// registered in ZooKeeper under one ledgers root.
///
/// Every bookie runs under the [`GuardedProcess`] wrapper, in its own temporary
/// folder: dropping the cluster kills them and removes their folders, and so
/// does the end of the test process, however it ends (the folder of a bookie
/// that is killed at that moment is left behind). Bookie `i` keeps its port, folders and cookie for
/// the whole life of the cluster, across [`kill`](Self::kill),
/// [`stop`](Self::stop) and [`restart`](Self::restart).
///
/// All methods take `&self`, so a cluster can be shared between tests (see
/// [`shared`]); tests that kill or stop bookies should start their own.
pub struct BkCluster {
    zk_connect: String,
    ledgers_root: String,
    zk: Zk,
    settings: Settings,
    bookies: Mutex<Vec<Bookie>>,
}

struct Settings {
    installation: Installation,
    log4j: String,
    conf: Vec<(String, String)>,
    jvm_args: Vec<String>,
    max_heap_mb: u32,
    max_direct_memory_mb: u32,
    start_timeout: Duration,
}

struct Bookie {
    port: u16,
    id: String,
    dir: PathBuf,
    extra: Vec<(String, String)>,
    process: Option<GuardedProcess>,
    attempts: u32,
}

impl Bookie {
    fn log_path(&self) -> PathBuf {
        self.dir.join("bookie.log")
    }

    fn conf_path(&self) -> PathBuf {
        self.dir.join("bookie.conf")
    }
}

impl fmt::Debug for BkCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BkCluster")
            .field("metadata_service_uri", &self.metadata_service_uri())
            .field("bookies", &self.bookie_ids())
            .finish()
    }
}

impl BkCluster {
    /// Starts `bookies` bookies on ZooKeeper `zk_connect` (`host:port`) under
    /// `ledgers_root` (such as `/ledgers`), with the default options of
    /// [`BkClusterBuilder`].
    ///
    /// Unless `ledgers_root` already exists, it first lays the cluster out in
    /// ZooKeeper exactly as `bookkeeper shell initnewcluster` does: the root,
    /// `available`, `available/readonly`, `INSTANCEID` (a random UUID) and
    /// `LAYOUT` ([`LAYOUT`]). An existing root is joined as it is, so several
    /// clusters can share a ZooKeeper under different roots, and a second
    /// `BkCluster` on the same root adds bookies to the same BookKeeper cluster.
    /// The bookies start in parallel; this returns once each has registered
    /// (`<root>/available/<id>`, or `available/readonly/<id>` for a read-only
    /// bookie), within [`START_TIMEOUT`].
    ///
    /// # Panics
    ///
    /// When the cluster cannot be started; the message has the reason and the
    /// tail of the failing bookies' logs. See [`try_start`](Self::try_start).
    pub fn start(zk_connect: &str, ledgers_root: &str, bookies: usize) -> BkCluster {
        BkClusterBuilder::new(zk_connect, ledgers_root)
            .bookies(bookies)
            .start()
    }

    /// Starts a cluster like [`start`](Self::start), returning the failure
    /// instead of panicking.
    ///
    /// # Errors
    ///
    /// See [`BkClusterBuilder::try_start`].
    pub fn try_start(
        zk_connect: &str,
        ledgers_root: &str,
        bookies: usize,
    ) -> Result<BkCluster, StartError> {
        BkClusterBuilder::new(zk_connect, ledgers_root)
            .bookies(bookies)
            .try_start()
    }

    /// A builder for a cluster with options (bookie configuration lines, JVM
    /// memory, timeouts).
    pub fn builder(zk_connect: &str, ledgers_root: &str) -> BkClusterBuilder {
        BkClusterBuilder::new(zk_connect, ledgers_root)
    }

    /// Starts `bookies` bookies on the test binary's shared ZooKeeper
    /// ([`bkswitch_zk_harness::shared`]) under a fresh root
    /// ([`unique_ledgers_root`]).
    ///
    /// # Panics
    ///
    /// See [`start`](Self::start).
    pub fn on_shared_zk(bookies: usize) -> BkCluster {
        BkCluster::start(
            &bkswitch_zk_harness::shared().connect_string(),
            &unique_ledgers_root(),
            bookies,
        )
    }

    /// The BookKeeper metadata service URI of the cluster,
    /// `zk+hierarchical://127.0.0.1:<zkport><root>` (several ZooKeeper hosts are
    /// separated by `;`, as BookKeeper wants them).
    pub fn metadata_service_uri(&self) -> String {
        format!(
            "zk+hierarchical://{}{}",
            self.zk_connect.replace(',', ";"),
            self.ledgers_root
        )
    }

    /// The ZooKeeper connect string, `host:port[,host:port…]`.
    pub fn zk_connect(&self) -> &str {
        &self.zk_connect
    }

    /// The ledgers root, such as `/ledgers`.
    pub fn ledgers_root(&self) -> &str {
        &self.ledgers_root
    }

    /// Bookie `i`'s temporary folder: `bookie.conf`, `bookie.log`,
    /// `log4j2.properties`, `journal/` and `ledgers/`. It is removed with the
    /// cluster.
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn bookie_dir(&self, i: usize) -> PathBuf {
        self.with(i, |b| b.dir.clone())
    }

    /// How many bookies the cluster has had (running or not).
    pub fn bookie_count(&self) -> usize {
        self.lock().len()
    }

    /// Every bookie's id, in index order: `127.0.0.1:<port>` unless a custom
    /// `bookieId` was configured.
    pub fn bookie_ids(&self) -> Vec<String> {
        self.lock().iter().map(|b| b.id.clone()).collect()
    }

    /// Bookie `i`'s id.
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn bookie_id(&self, i: usize) -> String {
        self.with(i, |b| b.id.clone())
    }

    /// The process id of bookie `i`'s JVM (`None` when it is not running).
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn bookie_pid(&self, i: usize) -> Option<u32> {
        let wrapper = self.with(i, |b| b.process.as_ref().map(|p| p.wrapper_id()))?;
        child_of(wrapper)
    }

    /// What the running bookies' JVMs have used so far, summed: CPU time and
    /// read / write system calls (from `/proc/<pid>/stat` and `/proc/<pid>/io`).
    /// The difference of two samples gives the bookies' cost of what ran
    /// between them.
    pub fn bookie_usage(&self) -> ProcessUsage {
        let mut total = ProcessUsage::default();
        for i in 0..self.bookie_count() {
            if let Some(pid) = self.bookie_pid(i) {
                total = total + ProcessUsage::of(pid);
            }
        }
        total
    }

    /// Stops bookie `i`'s JVM for a moment (`SIGSTOP`, as a long pause would):
    /// it keeps its connections and its registration but answers nothing until
    /// [`resume`](Self::resume).
    ///
    /// # Panics
    ///
    /// When there is no bookie `i` or it is not running.
    pub fn pause(&self, i: usize) {
        self.signal(i, "STOP");
    }

    /// Lets bookie `i` run again after [`pause`](Self::pause) (`SIGCONT`).
    ///
    /// # Panics
    ///
    /// When there is no bookie `i` or it is not running.
    pub fn resume(&self, i: usize) {
        self.signal(i, "CONT");
    }

    fn signal(&self, i: usize, signal: &str) {
        let pid = self
            .bookie_pid(i)
            .unwrap_or_else(|| panic!("bookie {i} is not running"));
        let status = std::process::Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(pid.to_string())
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill: {e}"));
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Bookie `i`'s port on `127.0.0.1`.
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn bookie_port(&self, i: usize) -> u16 {
        self.with(i, |b| b.port)
    }

    /// Whether bookie `i`'s JVM is alive.
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn is_running(&self, i: usize) -> bool {
        self.with(i, |b| b.process.as_mut().is_some_and(|p| p.is_running()))
    }

    /// Whether bookie `i` is registered now (writable or read-only).
    ///
    /// # Panics
    ///
    /// When there is no bookie `i` or ZooKeeper cannot be read.
    pub fn is_registered(&self, i: usize) -> bool {
        let id = self.bookie_id(i);
        match self.registered(&id) {
            Ok(registered) => registered,
            Err(e) => panic!("cannot read bookie {i}'s registration: {e}"),
        }
    }

    /// The ids registered as writable bookies (children of `<root>/available`
    /// except `readonly`), sorted.
    ///
    /// # Panics
    ///
    /// When ZooKeeper cannot be read.
    pub fn writable_bookies(&self) -> Vec<String> {
        let path = format!("{}/available", self.ledgers_root);
        match self.zk.children(&path) {
            Ok(mut ids) => {
                ids.retain(|id| id != "readonly");
                ids
            }
            Err(e) => panic!("cannot list {path}: {e}"),
        }
    }

    /// The ids registered as read-only bookies (children of
    /// `<root>/available/readonly`), sorted.
    ///
    /// # Panics
    ///
    /// When ZooKeeper cannot be read.
    pub fn readonly_bookies(&self) -> Vec<String> {
        let path = format!("{}/available/readonly", self.ledgers_root);
        match self.zk.children(&path) {
            Ok(ids) => ids,
            Err(e) => panic!("cannot list {path}: {e}"),
        }
    }

    /// Reads a node of the cluster's ZooKeeper (`None` when it does not exist),
    /// for checks of the layout or of registrations.
    ///
    /// # Panics
    ///
    /// When ZooKeeper cannot be read.
    pub fn zk_get(&self, path: &str) -> Option<Vec<u8>> {
        match self.zk.get(path) {
            Ok(value) => value,
            Err(e) => panic!("cannot read {path}: {e}"),
        }
    }

    /// Kills bookie `i` with `SIGKILL` and waits for its JVM to exit. Its
    /// registration stays until its ZooKeeper session expires (about
    /// [`ZK_TIMEOUT_MS`]; see [`wait_unregistered`](Self::wait_unregistered)).
    /// Does nothing if it is not running.
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn kill(&self, i: usize) {
        if let Some(process) = self.with(i, |b| b.process.take()) {
            process.kill();
        }
    }

    /// Stops bookie `i` cleanly (`SIGTERM`, which unregisters it at once) and
    /// waits for its JVM to exit; kills it if it has not exited after 30 s. Does
    /// nothing if it is not running.
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn stop(&self, i: usize) {
        if let Some(mut process) = self.with(i, |b| b.process.take()) {
            if process.terminate() && process.wait_timeout(Duration::from_secs(30)).is_some() {
                return;
            }
            process.kill();
        }
    }

    /// Waits until bookie `i`'s registration (writable or read-only) is gone.
    ///
    /// # Panics
    ///
    /// When it is still registered after `timeout`, or there is no bookie `i`.
    pub fn wait_unregistered(&self, i: usize, timeout: Duration) {
        if !self.wait_registration(i, false, timeout) {
            panic!(
                "bookie {i} ({}) is still registered under {}/available after {timeout:?}",
                self.bookie_id(i),
                self.ledgers_root
            );
        }
    }

    /// Waits until bookie `i` is registered (writable or read-only).
    ///
    /// # Panics
    ///
    /// When it is not registered after `timeout` (the message has the tail of its
    /// log), or there is no bookie `i`.
    pub fn wait_registered(&self, i: usize, timeout: Duration) {
        if !self.wait_registration(i, true, timeout) {
            panic!(
                "bookie {i} ({}) did not register under {}/available within {timeout:?}; \
                 log:\n{}",
                self.bookie_id(i),
                self.ledgers_root,
                log_excerpt(&self.log_path(i), 40)
            );
        }
    }

    /// Starts bookie `i` again after [`kill`](Self::kill) or
    /// [`stop`](Self::stop): same port, same folders, so the same cookie. Waits
    /// for the previous registration to expire, then for the new one.
    ///
    /// # Panics
    ///
    /// When the bookie is running, or does not come back (the message has the
    /// tail of its log).
    pub fn restart(&self, i: usize) {
        assert!(
            !self.is_running(i),
            "bookie {i} is running; kill(i) or stop(i) first"
        );
        self.with(i, |b| b.process = None);
        // A killed bookie's ephemeral registration lives until its session
        // expires; the new JVM would wait for that anyway.
        let expiry = Duration::from_millis(ZK_TIMEOUT_MS) + Duration::from_secs(20);
        self.wait_unregistered(i, expiry);
        let launched = self.with(i, |b| {
            b.attempts = PORT_ATTEMPTS; // same port: never move it
            self.spawn(b)
        });
        if let Err(e) = launched.and_then(|()| self.wait_started(&[i])) {
            panic!("bookie {i} did not restart: {e}");
        }
    }

    /// Starts one more bookie with the cluster's configuration (for example a
    /// spare for ensemble changes) and returns its index once it has
    /// registered.
    ///
    /// # Panics
    ///
    /// When it does not start (the message has the tail of its log).
    pub fn add_bookie(&self) -> usize {
        self.add_bookie_with(&[])
    }

    /// Like [`add_bookie`](Self::add_bookie), with extra `key=value`
    /// configuration lines for the new bookie (see
    /// [`BkClusterBuilder::bookie_conf`]).
    ///
    /// # Panics
    ///
    /// When a line is not `key=value` or the bookie does not start.
    pub fn add_bookie_with(&self, conf: &[&str]) -> usize {
        let extra = conf
            .iter()
            .map(|line| parse_conf_line(line))
            .collect::<Result<Vec<_>, _>>()
            .unwrap_or_else(|e| panic!("{e}"));
        let index = match self.launch_new(extra) {
            Ok(index) => index,
            Err(e) => panic!("cannot add a bookie: {e}"),
        };
        if let Err(e) = self.wait_started(&[index]) {
            self.kill(index);
            panic!("cannot add a bookie: {e}");
        }
        index
    }

    /// The last `lines` lines of bookie `i`'s log (its standard output and
    /// error, log4j2 at the builder's level).
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn log_tail(&self, i: usize, lines: usize) -> String {
        let path = self.with(i, |b| b.log_path());
        tail(&path, lines)
    }

    /// Bookie `i`'s log file.
    ///
    /// # Panics
    ///
    /// When there is no bookie `i`.
    pub fn log_path(&self, i: usize) -> PathBuf {
        self.with(i, |b| b.log_path())
    }

    /// Starts a Java client session ([`JavaClient`]) on this cluster (v2 wire
    /// protocol).
    ///
    /// # Panics
    ///
    /// See [`JavaClient::start`].
    pub fn java_client(&self) -> JavaClient {
        JavaClient::start(&self.metadata_service_uri())
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Bookie>> {
        self.bookies.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<T>(&self, i: usize, f: impl FnOnce(&mut Bookie) -> T) -> T {
        let mut bookies = self.lock();
        let count = bookies.len();
        match bookies.get_mut(i) {
            Some(bookie) => f(bookie),
            None => panic!("no bookie {i}: the cluster has {count}"),
        }
    }
}

impl Drop for BkCluster {
    fn drop(&mut self) {
        let mut bookies = std::mem::take(&mut *self.lock());
        for bookie in &mut bookies {
            if let Some(process) = bookie.process.take() {
                process.close();
            }
        }
        for bookie in &bookies {
            let _ = fs::remove_dir_all(&bookie.dir);
        }
        self.zk.close();
    }
}

/// A fresh ledgers root `/ledgers-<pid>-<n>`, unique in this process and across
/// processes sharing a ZooKeeper.
pub fn unique_ledgers_root() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    format!(
        "/ledgers-{}-{}",
        std::process::id(),
        COUNTER.fetch_add(1, Ordering::Relaxed)
    )
}

/// One 3-bookie cluster per test binary, on the shared ZooKeeper
/// ([`bkswitch_zk_harness::shared`]) under a unique root, started on first use
/// and shared by every test of the binary.
///
/// It is never dropped; its JVMs are killed and their folders removed when the
/// test process exits. Do not kill or stop its bookies: tests that inject
/// faults start their own cluster ([`BkCluster::on_shared_zk`]).
///
/// # Panics
///
/// In every caller, when the cluster cannot be started (see
/// [`BkCluster::start`]). Check [`bk_available`](crate::bk_available) first to
/// skip on machines without Java.
pub fn shared() -> &'static BkCluster {
    static SHARED: OnceLock<Result<BkCluster, String>> = OnceLock::new();
    let cluster = SHARED.get_or_init(|| {
        BkCluster::try_start(
            &bkswitch_zk_harness::shared().connect_string(),
            &unique_ledgers_root(),
            3,
        )
        .map_err(|e| e.to_string())
    });
    match cluster {
        Ok(cluster) => cluster,
        Err(message) => panic!("the shared BookKeeper cluster is unavailable: {message}"),
    }
}
