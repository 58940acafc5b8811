//! Options of a cluster before it starts.

use std::sync::Mutex;
use std::time::Duration;

use super::setup::{
    init_layout, log4j_config, parse_conf_line, parse_conf_lines, parse_hosts, parse_root,
};
use super::{BkCluster, Settings, START_TIMEOUT};
use crate::install::installation;
use crate::zk::Zk;
use crate::StartError;

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
