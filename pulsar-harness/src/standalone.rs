//! One real Apache Pulsar standalone broker (`PulsarStandaloneStarter`: the
//! broker, an embedded bookie and a RocksDB metadata store, in one JVM).

use std::collections::BTreeSet;
use std::fmt;
use std::fs;
use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

use bkswitch_zk_harness::{GuardedIo, GuardedProcess};

use crate::admin::Admin;
use crate::install::java_install;
use crate::logs::{keep_dirs, log_excerpt, tail};
use crate::sockets::{listening_sockets, ListeningSocket};
use crate::{HarnessError, PULSAR_JAVA_FLAGS};

/// How long [`PulsarStandalone::start`] waits for `messaging service is ready`
/// by default (a start takes 6 to 9 s alone, about twice that when two start
/// together on two cores).
pub const START_TIMEOUT: Duration = Duration::from_secs(120);

/// The line the broker logs once it serves (Pulsar's `PulsarService`).
const READY_LINE: &str = "messaging service is ready";

const MAIN_CLASS: &str = "org.apache.pulsar.PulsarStandaloneStarter";

/// How many times a start moves to other ports when one was taken meanwhile.
const PORT_ATTEMPTS: u32 = 3;

/// The options of a [`PulsarStandalone`]: its cluster name, extra
/// `standalone.conf` lines, JVM memory, the start timeout.
#[derive(Debug, Clone)]
pub struct StandaloneOptions {
    cluster: String,
    conf: Vec<(String, String)>,
    max_heap_mb: u32,
    max_direct_memory_mb: u32,
    start_timeout: Duration,
    jvm_args: Vec<String>,
}

impl StandaloneOptions {
    /// A broker of cluster `cluster` (its `clusterName`) with the harness's
    /// configuration (see [`PulsarStandalone::start`]), 768 MB of heap and
    /// 512 MB of direct memory.
    pub fn new(cluster: &str) -> Self {
        Self {
            cluster: cluster.to_owned(),
            conf: Vec::new(),
            max_heap_mb: 768,
            max_direct_memory_mb: 512,
            start_timeout: START_TIMEOUT,
            jvm_args: Vec::new(),
        }
    }

    /// Sets a `standalone.conf` key (broker or bookie), over the harness's own
    /// value if it has one: such as `clusterMigrationCheckDurationSeconds=1`
    /// for PIP-188 migrations. The ports, `clusterName` and the addresses are
    /// the harness's and are better left alone.
    pub fn conf(mut self, key: &str, value: impl ToString) -> Self {
        set_conf(&mut self.conf, key, value.to_string());
        self
    }

    /// The JVM's maximum heap (`-Xmx`), in MB.
    pub fn max_heap_mb(mut self, mb: u32) -> Self {
        self.max_heap_mb = mb;
        self
    }

    /// The JVM's direct memory limit (`-XX:MaxDirectMemorySize`), in MB.
    pub fn max_direct_memory_mb(mut self, mb: u32) -> Self {
        self.max_direct_memory_mb = mb;
        self
    }

    /// How long a start waits for the broker to be ready ([`START_TIMEOUT`] by
    /// default).
    pub fn start_timeout(mut self, timeout: Duration) -> Self {
        self.start_timeout = timeout;
        self
    }

    /// An extra JVM argument (before the main class).
    pub fn jvm_arg(mut self, arg: &str) -> Self {
        self.jvm_args.push(arg.to_owned());
        self
    }

    /// The cluster name.
    pub fn cluster(&self) -> &str {
        &self.cluster
    }
}

/// A running Apache Pulsar standalone broker on `127.0.0.1`: broker, embedded
/// bookie and metadata store in one JVM, in a temporary folder of its own.
///
/// Every socket it listens on is bound to `127.0.0.1` (see the crate's
/// README: the embedded bookie reads the same `standalone.conf` and binds to
/// the loopback interface through `listeningInterface=lo`). The JVM runs under
/// [`GuardedProcess`]: dropping the broker kills it and removes its folder, and
/// so does the end of the test process, however it ends. All methods take
/// `&self`, so a broker can be shared between tests.
pub struct PulsarStandalone {
    cluster: String,
    broker_port: u16,
    web_port: u16,
    bookie_port: u16,
    dir: PathBuf,
    pid: Option<u32>,
    process: Mutex<Option<GuardedProcess>>,
}

impl fmt::Debug for PulsarStandalone {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PulsarStandalone")
            .field("cluster", &self.cluster)
            .field("broker_url", &self.broker_url())
            .field("http_url", &self.http_url())
            .field("bookie_port", &self.bookie_port)
            .field("dir", &self.dir)
            .finish()
    }
}

impl PulsarStandalone {
    /// Starts a broker and returns once it logs `messaging service is ready`.
    ///
    /// Its `standalone.conf`: `clusterName`, `bindAddress` and
    /// `advertisedAddress` `127.0.0.1`, free `brokerServicePort` and
    /// `webServicePort`; for the embedded bookie `listeningInterface=lo`,
    /// `allowLoopback=true` and `allowEphemeralPorts=true` (which makes it
    /// take the `--bookkeeper-port` given instead of a port of its own
    /// choosing); quorums of 1, `brokerDeleteInactiveTopicsEnabled=false`,
    /// `allowAutoTopicCreationType=non-partitioned`,
    /// `transactionCoordinatorEnabled=false`, replicated subscriptions on with
    /// a snapshot every 200 ms, load shedding and bundle splits off; then the
    /// options' own lines. No functions worker, no stream storage.
    ///
    /// # Errors
    ///
    /// When java or the jars are missing, or the broker exits or is not ready
    /// within the timeout (the error has the end of its log).
    pub async fn start(options: StandaloneOptions) -> Result<PulsarStandalone, HarnessError> {
        let install = java_install()?;
        let dir = tempfile::Builder::new()
            .prefix(&format!("bkswitch-pulsar-{}-", options.cluster))
            .tempdir()
            .map_err(|e| HarnessError::new(format!("cannot create a temporary folder: {e}")))?
            .keep();
        let mut last = None;
        for _ in 0..PORT_ATTEMPTS {
            let ports = [free_port()?, free_port()?, free_port()?];
            match launch(&install, &options, &dir, ports).await {
                Ok(broker) => return Ok(broker),
                Err(Launch::PortTaken(e)) => last = Some(e),
                Err(Launch::Failed(e)) => {
                    if !keep_dirs() {
                        let _ = fs::remove_dir_all(&dir);
                    }
                    return Err(e);
                }
            }
        }
        if !keep_dirs() {
            let _ = fs::remove_dir_all(&dir);
        }
        Err(last.unwrap_or_else(|| HarnessError::new("no port attempt made")))
    }

    /// The cluster name (`clusterName`).
    pub fn name(&self) -> &str {
        &self.cluster
    }

    /// The broker's service URL, `pulsar://127.0.0.1:<port>`.
    pub fn broker_url(&self) -> String {
        format!("pulsar://127.0.0.1:{}", self.broker_port)
    }

    /// The broker's web service URL (admin REST API, HTTP lookups),
    /// `http://127.0.0.1:<port>`.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.web_port)
    }

    /// The broker's binary protocol port.
    pub fn broker_port(&self) -> u16 {
        self.broker_port
    }

    /// The broker's web service port.
    pub fn web_port(&self) -> u16 {
        self.web_port
    }

    /// The embedded bookie's port.
    pub fn bookie_port(&self) -> u16 {
        self.bookie_port
    }

    /// An admin REST client of this broker.
    pub fn admin(&self) -> Admin {
        Admin::new(&self.http_url())
    }

    /// The broker's folder: `standalone.conf`, `broker.log`,
    /// `log4j2.properties`, `metadata/` and `bookkeeper/`. Removed with the
    /// broker unless `BKSWITCH_KEEP_PULSAR_DIRS=1`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The broker's log (its standard output and error).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("broker.log")
    }

    /// The last `lines` lines of the broker's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path(), lines)
    }

    /// The process id of the broker's JVM (`None` once it was stopped or
    /// killed).
    pub fn pid(&self) -> Option<u32> {
        self.lock().as_ref().and(self.pid)
    }

    /// Whether the broker's JVM is alive.
    pub fn is_running(&self) -> bool {
        self.lock().as_mut().is_some_and(GuardedProcess::is_running)
    }

    /// Every socket the broker's JVM listens on (TCP `LISTEN` and unbound UDP,
    /// as `ss -ltnup` shows them), read from `/proc`. Empty once it is gone.
    pub fn listening_sockets(&self) -> Vec<ListeningSocket> {
        self.pid().map(listening_sockets).unwrap_or_default()
    }

    /// Stops the broker cleanly (`SIGTERM`: it closes its topics, so clients
    /// are disconnected and look the topics up again) and waits for the JVM
    /// to exit; kills it if it has not after 30 s. Does nothing when it is not
    /// running. The folder stays until the broker is dropped.
    pub fn stop(&self) {
        if let Some(mut process) = self.lock().take() {
            if process.terminate() && process.wait_timeout(Duration::from_secs(30)).is_some() {
                return;
            }
            process.kill();
        }
    }

    /// Kills the broker with `SIGKILL` and waits for the JVM to exit. Does
    /// nothing when it is not running. The folder stays until the broker is
    /// dropped.
    pub fn kill(&self) {
        if let Some(process) = self.lock().take() {
            process.kill();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Option<GuardedProcess>> {
        self.process.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for PulsarStandalone {
    fn drop(&mut self) {
        if let Some(process) = self.lock().take() {
            process.kill();
        }
        if keep_dirs() {
            eprintln!("pulsar-harness: kept {}", self.dir.display());
        } else {
            let _ = fs::remove_dir_all(&self.dir);
        }
    }
}

enum Launch {
    PortTaken(HarnessError),
    Failed(HarnessError),
}

/// The `standalone.conf` of a broker: the harness's lines, then the options'.
fn conf_text(options: &StandaloneOptions, [broker, web, _]: [u16; 3]) -> String {
    let mut conf: Vec<(String, String)> = [
        ("clusterName", options.cluster.as_str()),
        ("bindAddress", "127.0.0.1"),
        ("advertisedAddress", "127.0.0.1"),
        ("brokerServicePort", &broker.to_string()),
        ("webServicePort", &web.to_string()),
        // The embedded bookie reads this file too: bind to the loopback
        // interface only, and take --bookkeeper-port (without
        // allowEphemeralPorts it picks a free port of its own).
        ("listeningInterface", "lo"),
        ("allowLoopback", "true"),
        ("allowEphemeralPorts", "true"),
        ("httpServerEnabled", "false"),
        ("managedLedgerDefaultEnsembleSize", "1"),
        ("managedLedgerDefaultWriteQuorum", "1"),
        ("managedLedgerDefaultAckQuorum", "1"),
        ("brokerDeleteInactiveTopicsEnabled", "false"),
        ("allowAutoTopicCreationType", "non-partitioned"),
        ("transactionCoordinatorEnabled", "false"),
        ("enableReplicatedSubscriptions", "true"),
        ("replicatedSubscriptionsSnapshotFrequencyMillis", "200"),
        ("loadBalancerSheddingEnabled", "false"),
        ("loadBalancerAutoBundleSplitEnabled", "false"),
        ("brokerShutdownTimeoutMs", "10000"),
        // One bookie: the client's health check would quarantine it after a
        // burst of slow answers (a loaded machine) and every ledger creation
        // would fail with "not enough non-faulty bookies" for half an hour.
        ("bookkeeperClientHealthCheckEnabled", "false"),
    ]
    .iter()
    .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
    .collect();
    for (key, value) in &options.conf {
        match conf.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value.clone(),
            None => conf.push((key.clone(), value.clone())),
        }
    }
    conf.iter().map(|(k, v)| format!("{k}={v}\n")).collect()
}

/// The log4j2 configuration: everything to standard output (the broker's
/// log), BookKeeper, RocksDB and Jetty at WARN except the bookie's bind line.
const LOG4J: &str = "status = error
name = pulsar-harness
appender.out.type = Console
appender.out.name = out
appender.out.target = SYSTEM_OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = %d{HH:mm:ss.SSS} %-5level [%t] %c{1} - %msg%n
logger.bk.name = org.apache.bookkeeper
logger.bk.level = WARN
logger.bind.name = org.apache.bookkeeper.proto.BookieNettyServer
logger.bind.level = INFO
logger.jetty.name = org.eclipse.jetty
logger.jetty.level = WARN
logger.rocksdb.name = org.apache.pulsar.metadata.impl.RocksdbMetadataStore
logger.rocksdb.level = WARN
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
";

async fn launch(
    install: &crate::install::JavaInstall,
    options: &StandaloneOptions,
    dir: &Path,
    ports: [u16; 3],
) -> Result<PulsarStandalone, Launch> {
    let failed = |e: String| Launch::Failed(HarnessError::new(e));
    // `tmp`: the JVM's temporary folder (RocksDB extracts its 13 MB native
    // library there at every start, and a killed JVM never deletes it).
    for sub in ["metadata", "bookkeeper", "tmp"] {
        let path = dir.join(sub);
        if path.exists() {
            fs::remove_dir_all(&path)
                .map_err(|e| failed(format!("cannot clear {}: {e}", path.display())))?;
        }
    }
    let tmp = dir.join("tmp");
    fs::create_dir_all(&tmp)
        .map_err(|e| failed(format!("cannot create {}: {e}", tmp.display())))?;
    let write = |name: &str, text: &str| {
        fs::write(dir.join(name), text)
            .map_err(|e| failed(format!("cannot write {}: {e}", dir.join(name).display())))
    };
    write("standalone.conf", &conf_text(options, ports))?;
    write("log4j2.properties", LOG4J)?;
    let log = dir.join("broker.log");
    let _ = fs::remove_file(&log);
    let pid_file = dir.join("broker.pid");
    let _ = fs::remove_file(&pid_file);

    // `sh` writes its own pid and becomes the JVM (`exec`): the pid file
    // names the JVM, under the guard's wrapper.
    let mut command = Command::new("sh");
    command
        .args(["-c", "echo $$ >\"$0\"; exec \"$@\""])
        .arg(&pid_file)
        .arg(&install.java)
        .arg(format!("-Xms{}m", options.max_heap_mb.min(256)))
        .arg(format!("-Xmx{}m", options.max_heap_mb))
        .arg(format!(
            "-XX:MaxDirectMemorySize={}m",
            options.max_direct_memory_mb
        ))
        .args(["-XX:+UseSerialGC", "-XX:-UsePerfData"])
        .args(PULSAR_JAVA_FLAGS)
        .arg(format!("-Djava.io.tmpdir={}", dir.join("tmp").display()))
        .arg(format!(
            "-Dlog4j2.configurationFile={}",
            dir.join("log4j2.properties").display()
        ))
        .args(&options.jvm_args)
        .arg("-cp")
        .arg(format!("{}/*", install.lib.display()))
        .arg(MAIN_CLASS)
        .arg("--config")
        .arg(dir.join("standalone.conf"))
        .args(["-nfw", "-nss", "--bookkeeper-port"])
        .arg(ports[2].to_string())
        .arg("--metadata-dir")
        .arg(dir.join("metadata"))
        .arg("--bookkeeper-dir")
        .arg(dir.join("bookkeeper"))
        .current_dir(dir);
    let mut process = GuardedProcess::spawn(&command, dir, &log, GuardedIo::Log, !keep_dirs())
        .map_err(|e| failed(format!("cannot run sh to start a broker: {e}")))?;

    let deadline = Instant::now() + options.start_timeout;
    loop {
        let text = fs::read(&log).unwrap_or_default();
        if contains(&text, READY_LINE.as_bytes()) {
            break;
        }
        if !process.is_running() {
            let status = process.try_exit_status();
            let excerpt = log_excerpt(&log, 40);
            let message = format!(
                "the {} broker exited during its start ({}); log {}:\n{excerpt}",
                options.cluster,
                status.map_or_else(|| "no status".to_owned(), |s| s.to_string()),
                log.display()
            );
            return Err(if excerpt.contains("Address already in use") {
                Launch::PortTaken(HarnessError::new(message))
            } else {
                Launch::Failed(HarnessError::new(message))
            });
        }
        if Instant::now() >= deadline {
            process.kill();
            return Err(failed(format!(
                "the {} broker was not ready within {:?}; log {}:\n{}",
                options.cluster,
                options.start_timeout,
                log.display(),
                log_excerpt(&log, 40)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The ready line comes before the standalone starter has created its own
    // cluster, the `public` tenant and the `pulsar/system` namespace (the
    // last): wait for that namespace, or a tenant for both clusters is
    // refused.
    let admin = Admin::new(&format!("http://127.0.0.1:{}", ports[1]));
    loop {
        let namespaces = admin.get("/admin/v2/namespaces/pulsar").await;
        if namespaces.is_ok_and(|v| {
            v.as_array()
                .is_some_and(|a| a.iter().any(|n| n == "pulsar/system"))
        }) {
            break;
        }
        if Instant::now() >= deadline || !process.is_running() {
            process.kill();
            return Err(failed(format!(
                "the {} broker did not create its namespaces within {:?}; log {}:\n{}",
                options.cluster,
                options.start_timeout,
                log.display(),
                log_excerpt(&log, 40)
            )));
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let pid = fs::read_to_string(&pid_file)
        .ok()
        .and_then(|p| p.trim().parse().ok());
    Ok(PulsarStandalone {
        cluster: options.cluster.clone(),
        broker_port: ports[0],
        web_port: ports[1],
        bookie_port: ports[2],
        dir: dir.to_path_buf(),
        pid,
        process: Mutex::new(Some(process)),
    })
}

pub(crate) fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// A port free on `127.0.0.1`, never handed out twice in this process.
pub(crate) fn free_port() -> Result<u16, HarnessError> {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| HarnessError::new(format!("cannot bind a port: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| HarnessError::new(format!("cannot read the probed port: {e}")))?
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return Ok(port);
        }
    }
    Err(HarnessError::new("no free port found"))
}

/// Sets `key` to `value` in a list of configuration lines, over an earlier
/// value of the same key (the options' `conf` setters).
pub(crate) fn set_conf(conf: &mut Vec<(String, String)>, key: &str, value: String) {
    match conf.iter_mut().find(|(k, _)| k == key) {
        Some(entry) => entry.1 = value,
        None => conf.push((key.to_owned(), value)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn options_override_the_harness_lines() {
        let options = StandaloneOptions::new("cluster-x")
            .conf("clusterMigrationCheckDurationSeconds", 1)
            .conf("brokerShutdownTimeoutMs", 3000)
            .conf("clusterMigrationCheckDurationSeconds", 2);
        let text = conf_text(&options, [1, 2, 3]);
        assert!(text.contains("clusterName=cluster-x\n"));
        assert!(text.contains("brokerServicePort=1\nwebServicePort=2\n"));
        assert!(text.contains("listeningInterface=lo\n"));
        assert!(text.contains("brokerShutdownTimeoutMs=3000\n"));
        assert!(!text.contains("brokerShutdownTimeoutMs=10000"));
        assert_eq!(
            text.matches("clusterMigrationCheckDurationSeconds=")
                .count(),
            1
        );
        assert!(text.ends_with("clusterMigrationCheckDurationSeconds=2\n"));
    }
}
