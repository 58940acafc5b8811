//! Real bookie clusters: layout in ZooKeeper, one JVM per bookie, faults.

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bkswitch_zk_harness::{GuardedIo, GuardedProcess};

use crate::install::{classpath, installation, Installation};
use crate::interop::JavaClient;
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

/// Options of a [`BkCluster`]; start it with [`start`](Self::start) or
/// [`try_start`](Self::try_start).
///
/// ```no_run
/// use bkswitch_bk_harness::BkCluster;
///
/// let zk = bkswitch_zk_harness::shared();
/// let cluster = BkCluster::builder(&zk.connect_string(), "/ledgers-ro")
///     .bookies(4)
///     .bookie_conf(3, "forceReadOnlyBookie=true") // bookie 3 registers read-only
///     .max_heap_mb(192)
///     .start();
/// assert_eq!(cluster.bookie_count(), 4);
/// ```
#[derive(Debug, Clone)]
pub struct BkClusterBuilder {
    zk_connect: String,
    ledgers_root: String,
    bookies: usize,
    conf: Vec<String>,
    bookie_conf: Vec<(usize, String)>,
    jvm_args: Vec<String>,
    max_heap_mb: u32,
    max_direct_memory_mb: u32,
    start_timeout: Duration,
    log_level: String,
}

impl BkClusterBuilder {
    /// A builder for a cluster on ZooKeeper `zk_connect` (`host:port`, several
    /// separated by commas, no chroot) under `ledgers_root` (such as `/ledgers`),
    /// with 3 bookies by default.
    pub fn new(zk_connect: &str, ledgers_root: &str) -> BkClusterBuilder {
        BkClusterBuilder {
            zk_connect: zk_connect.to_owned(),
            ledgers_root: ledgers_root.to_owned(),
            bookies: 3,
            conf: Vec::new(),
            bookie_conf: Vec::new(),
            jvm_args: Vec::new(),
            max_heap_mb: 256,
            max_direct_memory_mb: 256,
            start_timeout: START_TIMEOUT,
            log_level: "INFO".to_owned(),
        }
    }

    /// How many bookies to start (may be 0: [`BkCluster::add_bookie`] adds them
    /// later).
    pub fn bookies(mut self, bookies: usize) -> Self {
        self.bookies = bookies;
        self
    }

    /// A `key=value` line for every bookie's configuration, replacing the
    /// harness's value of that key (`zkTimeout=6000`, `ledgerStorageClass=…`).
    pub fn conf(mut self, line: impl Into<String>) -> Self {
        self.conf.push(line.into());
        self
    }

    /// A `key=value` line for bookie `index` only (applied after
    /// [`conf`](Self::conf)). `forceReadOnlyBookie=true` makes it register as
    /// read-only; `bookieId=bk-1` gives it a custom id (then
    /// [`BkCluster::bookie_id`] returns that id).
    pub fn bookie_conf(mut self, index: usize, line: impl Into<String>) -> Self {
        self.bookie_conf.push((index, line.into()));
        self
    }

    /// An extra JVM argument for every bookie (after the harness's own).
    pub fn jvm_arg(mut self, arg: impl Into<String>) -> Self {
        self.jvm_args.push(arg.into());
        self
    }

    /// Each bookie's maximum heap (`-Xmx`), in MiB. Default 256.
    pub fn max_heap_mb(mut self, mb: u32) -> Self {
        self.max_heap_mb = mb;
        self
    }

    /// Each bookie's direct memory limit (`-XX:MaxDirectMemorySize`), in MiB.
    /// Default 256.
    pub fn max_direct_memory_mb(mut self, mb: u32) -> Self {
        self.max_direct_memory_mb = mb;
        self
    }

    /// How long starts wait for registrations. Default [`START_TIMEOUT`].
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// The bookies' log4j2 root level (`INFO` by default; the ZooKeeper client
    /// logs at `WARN`).
    pub fn log_level(mut self, level: impl Into<String>) -> Self {
        self.log_level = level.into();
        self
    }

    /// Starts the cluster; see [`BkCluster::start`].
    ///
    /// # Panics
    ///
    /// When the cluster cannot be started (the message has the reason and the
    /// tail of the failing bookies' logs).
    pub fn start(self) -> BkCluster {
        match self.try_start() {
            Ok(cluster) => cluster,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts the cluster, returning the failure instead of panicking.
    ///
    /// # Errors
    ///
    /// [`StartError`] when java, javac or the jars are missing, an argument is
    /// invalid, ZooKeeper cannot be reached, or a bookie does not register in
    /// time.
    pub fn try_start(self) -> Result<BkCluster, StartError> {
        let installation = installation()?;
        let hosts = parse_hosts(&self.zk_connect)?;
        let root = parse_root(&self.ledgers_root)?;
        let conf = parse_conf_lines(&self.conf)?;
        let mut bookie_conf = vec![Vec::new(); self.bookies];
        for (index, line) in &self.bookie_conf {
            let slot = bookie_conf.get_mut(*index).ok_or_else(|| {
                StartError::new(format!(
                    "bookie_conf({index}, ..): the cluster has {} bookies",
                    self.bookies
                ))
            })?;
            slot.push(parse_conf_line(line)?);
        }
        let zk = Zk::connect(&hosts)?;
        init_layout(&zk, &root)?;

        let cluster = BkCluster {
            zk_connect: hosts,
            ledgers_root: root,
            zk,
            settings: Settings {
                installation,
                log4j: log4j_config(&self.log_level),
                conf,
                jvm_args: self.jvm_args,
                max_heap_mb: self.max_heap_mb.max(16),
                max_direct_memory_mb: self.max_direct_memory_mb.max(16),
                start_timeout: self.start_timeout,
            },
            bookies: Mutex::new(Vec::new()),
        };
        let mut indices = Vec::new();
        for extra in bookie_conf {
            indices.push(cluster.launch_new(extra)?);
        }
        cluster.wait_started(&indices)?;
        Ok(cluster)
    }
}

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

    fn registered(&self, id: &str) -> Result<bool, StartError> {
        let root = &self.ledgers_root;
        let check = |path: String| {
            self.zk
                .exists(&path)
                .map_err(|e| StartError::new(format!("cannot read {path}: {e}")))
        };
        Ok(check(format!("{root}/available/{id}"))?
            || check(format!("{root}/available/readonly/{id}"))?)
    }

    fn wait_registration(&self, i: usize, registered: bool, timeout: Duration) -> bool {
        let id = self.bookie_id(i);
        let deadline = Instant::now() + timeout;
        loop {
            if matches!(self.registered(&id), Ok(r) if r == registered) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(POLL);
        }
    }

    /// Prepares folder and port of a new bookie and launches it; returns its
    /// index.
    fn launch_new(&self, extra: Vec<(String, String)>) -> Result<usize, StartError> {
        let dir = tempfile::Builder::new()
            .prefix("bkswitch-bookie-")
            .tempdir()
            .map_err(|e| StartError::new(format!("cannot create a temporary folder: {e}")))?
            .keep();
        let mut bookies = self.lock();
        let index = bookies.len();
        let mut bookie = Bookie {
            port: 0,
            id: String::new(),
            dir,
            extra,
            process: None,
            attempts: 0,
        };
        let launched = self
            .assign_port(&mut bookie)
            .and_then(|()| self.spawn(&mut bookie));
        bookies.push(bookie);
        launched.map(|()| index)
    }

    /// Picks a port (unless configured) and the id, and (re)creates empty
    /// folders.
    fn assign_port(&self, bookie: &mut Bookie) -> Result<(), StartError> {
        let configured = |key: &str| {
            bookie
                .extra
                .iter()
                .chain(self.settings.conf.iter())
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.clone())
        };
        bookie.port = match configured("bookiePort") {
            Some(port) => port
                .parse()
                .map_err(|_| StartError::new(format!("bookiePort={port} is not a port")))?,
            None => free_port()?,
        };
        bookie.id = configured("bookieId").unwrap_or_else(|| format!("127.0.0.1:{}", bookie.port));
        for sub in ["journal", "ledgers"] {
            let path = bookie.dir.join(sub);
            if path.exists() {
                fs::remove_dir_all(&path).map_err(|e| {
                    StartError::new(format!("cannot clear {}: {e}", path.display()))
                })?;
            }
        }
        let _ = fs::remove_file(bookie.log_path());
        let log4j = bookie.dir.join("log4j2.properties");
        fs::write(&log4j, &self.settings.log4j)
            .map_err(|e| StartError::new(format!("cannot write {}: {e}", log4j.display())))?;
        for sub in ["journal", "ledgers"] {
            let path = bookie.dir.join(sub);
            fs::create_dir_all(&path)
                .map_err(|e| StartError::new(format!("cannot create {}: {e}", path.display())))?;
        }
        Ok(())
    }

    /// Writes the bookie's configuration and starts its JVM.
    fn spawn(&self, bookie: &mut Bookie) -> Result<(), StartError> {
        let mut conf: Vec<(String, String)> = vec![
            ("metadataServiceUri".into(), self.metadata_service_uri()),
            ("bookiePort".into(), bookie.port.to_string()),
            ("advertisedAddress".into(), "127.0.0.1".into()),
            ("allowLoopback".into(), "true".into()),
            // Listen on the loopback interface only, never on every interface.
            ("listeningInterface".into(), "lo".into()),
            (
                "journalDirectories".into(),
                bookie.dir.join("journal").display().to_string(),
            ),
            (
                "ledgerDirectories".into(),
                bookie.dir.join("ledgers").display().to_string(),
            ),
            ("httpServerEnabled".into(), "false".into()),
            ("zkTimeout".into(), ZK_TIMEOUT_MS.to_string()),
            ("journalSyncData".into(), "false".into()),
            ("gcWaitTime".into(), "5000".into()),
            ("diskUsageThreshold".into(), "0.99".into()),
            ("diskUsageWarnThreshold".into(), "0.98".into()),
        ];
        for (key, value) in self.settings.conf.iter().chain(bookie.extra.iter()) {
            match conf.iter_mut().find(|(k, _)| k == key) {
                Some(entry) => entry.1 = value.clone(),
                None => conf.push((key.clone(), value.clone())),
            }
        }
        let text: String = conf
            .iter()
            .map(|(k, v)| format!("{k}={v}\n"))
            .collect::<String>();
        fs::write(bookie.conf_path(), text).map_err(|e| {
            StartError::new(format!(
                "cannot write {}: {e}",
                bookie.conf_path().display()
            ))
        })?;

        let s = &self.settings;
        let mut command = Command::new(&s.installation.java);
        command
            .arg(format!("-Xms{}m", s.max_heap_mb.min(64)))
            .arg(format!("-Xmx{}m", s.max_heap_mb))
            .arg(format!(
                "-XX:MaxDirectMemorySize={}m",
                s.max_direct_memory_mb
            ))
            .args(["-XX:+UseSerialGC", "-XX:-UsePerfData"])
            .args(JAVA_17_FLAGS)
            .arg(format!(
                "-Dlog4j2.configurationFile={}",
                bookie.dir.join("log4j2.properties").display()
            ))
            .args(&s.jvm_args)
            .arg("-cp")
            .arg(classpath(&s.installation.lib))
            .arg(BOOKIE_MAIN)
            .arg("-c")
            .arg(bookie.conf_path())
            .current_dir(&bookie.dir);
        let process = GuardedProcess::spawn(
            &command,
            &bookie.dir,
            &bookie.log_path(),
            GuardedIo::Log,
            true,
        )
        .map_err(|e| StartError::new(format!("cannot run sh to start a bookie: {e}")))?;
        bookie.process = Some(process);
        Ok(())
    }

    /// Waits until the given bookies have registered, moving a bookie whose
    /// port was taken meanwhile to another port (first starts only).
    fn wait_started(&self, indices: &[usize]) -> Result<(), StartError> {
        let deadline = Instant::now() + self.settings.start_timeout;
        let mut pending: Vec<usize> = indices.to_vec();
        loop {
            let mut still = Vec::new();
            for &i in &pending {
                let id = self.bookie_id(i);
                if !self.registered(&id)? {
                    still.push(i);
                }
            }
            pending = still;
            if pending.is_empty() {
                return Ok(());
            }
            for &i in &pending {
                self.check_alive(i)?;
            }
            if Instant::now() >= deadline {
                let logs: Vec<String> = pending
                    .iter()
                    .map(|&i| {
                        format!(
                            "bookie {i} ({}), log {}:\n{}",
                            self.bookie_id(i),
                            self.log_path(i).display(),
                            log_excerpt(&self.log_path(i), 40)
                        )
                    })
                    .collect();
                return Err(StartError::new(format!(
                    "{} bookie(s) did not register under {}/available within {:?} \
                     (metadata service {}).\n{}",
                    pending.len(),
                    self.ledgers_root,
                    self.settings.start_timeout,
                    self.metadata_service_uri(),
                    logs.join("\n")
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Fails when bookie `i`'s JVM exited, unless it only lost its port race:
    /// then it gets a new port and folders and is launched again.
    fn check_alive(&self, i: usize) -> Result<(), StartError> {
        self.with(i, |b| {
            let alive = b.process.as_mut().is_some_and(|p| p.is_running());
            if alive {
                return Ok(());
            }
            let status = b.process.as_mut().and_then(|p| p.try_exit_status());
            let log = log_excerpt(&b.log_path(), 40);
            b.attempts += 1;
            if log.contains("Address already in use") && b.attempts < PORT_ATTEMPTS {
                b.process = None;
                self.assign_port(b)?;
                return self.spawn(b);
            }
            Err(StartError::new(format!(
                "bookie {i} ({}) exited during start ({}) under {} (metadata service {}); \
                 log {}:\n{log}",
                b.id,
                status.map_or_else(|| "no status".to_owned(), |s| s.to_string()),
                self.ledgers_root,
                self.metadata_service_uri(),
                b.log_path().display(),
            )))
        })
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

/// The `key=value` lines of a bookie configuration, in order.
fn parse_conf_lines(lines: &[String]) -> Result<Vec<(String, String)>, StartError> {
    lines.iter().map(|l| parse_conf_line(l)).collect()
}

fn parse_conf_line(line: &str) -> Result<(String, String), StartError> {
    match line.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() && !line.contains('\n') => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(StartError::new(format!(
            "bookie configuration line `{line}` is not `key=value`"
        ))),
    }
}

/// `host:port[,host:port…]` from a connect string (a `zk://` prefix is accepted).
fn parse_hosts(zk_connect: &str) -> Result<String, StartError> {
    let hosts = zk_connect.strip_prefix("zk://").unwrap_or(zk_connect);
    if hosts.is_empty() || hosts.contains('/') || hosts.contains(char::is_whitespace) {
        return Err(StartError::new(format!(
            "ZooKeeper connect string `{zk_connect}` must be host:port[,host:port...] \
             without a chroot (put the path in the ledgers root)"
        )));
    }
    Ok(hosts.to_owned())
}

fn parse_root(root: &str) -> Result<String, StartError> {
    let valid = root.starts_with('/')
        && root.len() > 1
        && !root.ends_with('/')
        && root
            .split('/')
            .skip(1)
            .all(|s| !s.is_empty() && s != "." && s != ".." && s != "zookeeper")
        && !root.contains(char::is_whitespace);
    if valid {
        Ok(root.to_owned())
    } else {
        Err(StartError::new(format!(
            "ledgers root `{root}` must be an absolute ZooKeeper path such as /ledgers"
        )))
    }
}

/// Lays a new cluster out as `initnewcluster` does, unless the root exists.
fn init_layout(zk: &Zk, root: &str) -> Result<(), StartError> {
    let fail = |path: &str, e: &dyn fmt::Display| {
        StartError::new(format!("cannot lay out the cluster at {path}: {e}"))
    };
    if zk.exists(root).map_err(|e| fail(root, &e))? {
        return Ok(());
    }
    if !zk.create(root, b"").map_err(|e| fail(root, &e))? {
        // Created meanwhile by someone else: theirs.
        return Ok(());
    }
    for (path, value) in [
        (format!("{root}/available"), Vec::new()),
        (format!("{root}/available/readonly"), Vec::new()),
        (format!("{root}/INSTANCEID"), random_uuid().into_bytes()),
        (format!("{root}/LAYOUT"), LAYOUT.to_vec()),
    ] {
        zk.create(&path, &value).map_err(|e| fail(&path, &e))?;
    }
    Ok(())
}

/// A random (version 4) UUID in Java's `UUID.toString()` form.
fn random_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// A port free on the loopback interface (where the bookies listen), never
/// handed out twice in this process.
fn free_port() -> Result<u16, StartError> {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| StartError::new(format!("cannot bind a port: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| StartError::new(format!("cannot read the probed port: {e}")))?
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return Ok(port);
        }
    }
    Err(StartError::new("no free port found"))
}

/// The log4j2 configuration of the bookies: everything to standard output (the
/// bookie's log file), the ZooKeeper client at WARN.
fn log4j_config(level: &str) -> String {
    format!(
        "status = error\n\
         name = bk-harness\n\
         appender.out.type = Console\n\
         appender.out.name = out\n\
         appender.out.target = SYSTEM_OUT\n\
         appender.out.layout.type = PatternLayout\n\
         appender.out.layout.pattern = %d{{HH:mm:ss.SSS}} %-5level [%t] %c{{1}} - %msg%n\n\
         logger.zookeeper.name = org.apache.zookeeper\n\
         logger.zookeeper.level = WARN\n\
         rootLogger.level = {level}\n\
         rootLogger.appenderRef.out.ref = out\n"
    )
}

/// The end of a log without Java stack frames (`at …`, `... n more`), which
/// would push the messages out of a short excerpt: the last `lines` other lines
/// among the last 300.
pub(crate) fn log_excerpt(path: &Path, lines: usize) -> String {
    let text = tail(path, 300);
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("at ") || (t.starts_with("... ") && t.ends_with(" more")))
        })
        .collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}

/// The last `lines` lines of a file (empty when it cannot be read).
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuids_look_like_java_ones() {
        let a = random_uuid();
        let b = random_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        let groups: Vec<&str> = a.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('4'));
        assert!(matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert_eq!(a, a.to_lowercase());
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(parse_hosts("127.0.0.1:2181").unwrap(), "127.0.0.1:2181");
        assert_eq!(parse_hosts("zk://a:1,b:2").unwrap(), "a:1,b:2");
        assert!(parse_hosts("127.0.0.1:2181/chroot").is_err());
        assert!(parse_root("/ledgers").is_ok());
        assert!(parse_root("/a/ledgers").is_ok());
        for bad in ["", "/", "ledgers", "/ledgers/", "/a//b", "/zookeeper/x"] {
            assert!(parse_root(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_conf_line(" zkTimeout = 6000 ").unwrap(),
            ("zkTimeout".to_owned(), "6000".to_owned())
        );
        assert!(parse_conf_line("novalue").is_err());
        assert!(parse_conf_line("=1").is_err());
    }

    #[test]
    fn roots_are_unique() {
        let a = unique_ledgers_root();
        let b = unique_ledgers_root();
        assert_ne!(a, b);
        assert!(parse_root(&a).is_ok());
    }
}
