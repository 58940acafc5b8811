#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

use std::fmt;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bkswitch_zk_harness::{GuardedIo, GuardedProcess};
use tempfile::TempDir;

/// The etcd binary used when `ETCD_BIN` is not set: Debian's `etcd-server`.
pub const DEFAULT_ETCD: &str = "/usr/bin/etcd";

/// How long a start waits for every member to report itself healthy.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

const INSTALL_HINT: &str = "install Debian's etcd server (`apt-get install -y etcd-server`), \
     or point ETCD_BIN at an etcd 3.4+ binary";

/// Why an etcd cluster could not be started.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct StartError {
    message: String,
}

impl StartError {
    fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

/// The etcd binary: `ETCD_BIN` or [`DEFAULT_ETCD`].
pub fn etcd_binary() -> PathBuf {
    std::env::var_os("ETCD_BIN").map_or_else(|| PathBuf::from(DEFAULT_ETCD), PathBuf::from)
}

/// Fails loudly, with installation instructions, when etcd cannot run here.
///
/// # Panics
///
/// Panics when the etcd binary is missing.
pub fn require_etcd() {
    if let Err(e) = check_installation() {
        panic!("{e}");
    }
}

fn check_installation() -> Result<(), StartError> {
    let bin = etcd_binary();
    if !bin.is_file() {
        return Err(StartError::new(format!(
            "etcd binary {} not found; {INSTALL_HINT}",
            bin.display()
        )));
    }
    Ok(())
}

struct Member {
    name: String,
    client_port: u16,
    /// Plain-HTTP `/health` and `/metrics`, also when the client port is TLS.
    metrics_port: u16,
    peer_port: u16,
    running: Option<GuardedProcess>,
}

/// TLS of the members' client port (PEM files; peers stay plain on
/// loopback).
#[derive(Debug, Clone)]
pub struct EtcdServerTls {
    /// The server certificate (`--cert-file`); it must name `127.0.0.1`.
    pub cert: PathBuf,
    /// Its private key (`--key-file`).
    pub key: PathBuf,
    /// The CA that signs client certificates (`--trusted-ca-file`).
    pub ca: PathBuf,
    /// Whether clients must present a certificate signed by `ca`
    /// (`--client-cert-auth`).
    pub client_cert_auth: bool,
}

/// A real etcd cluster of one or more members, each on its own loopback client
/// and peer ports with a data folder in a temporary directory.
///
/// The members are killed and the folder removed when the value is dropped, and
/// also when the test process exits without running destructors.
pub struct EtcdCluster {
    tls: Option<EtcdServerTls>,
    root: TempDir,
    members: Mutex<Vec<Member>>,
    initial_cluster: String,
    token: String,
    /// Whether the members' wrappers remove the folder when the test process
    /// ends: the shared cluster lives in a `static`, which is never dropped,
    /// so its `TempDir` would never remove it.
    remove_at_exit: bool,
}

impl fmt::Debug for EtcdCluster {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdCluster")
            .field("root", &self.root.path())
            .field("endpoints", &self.endpoints())
            .finish()
    }
}

impl EtcdCluster {
    /// Starts a fresh cluster of `members` members (1 or more; 3 survive the loss
    /// of one) and waits until every member reports itself healthy.
    ///
    /// # Panics
    ///
    /// Panics with the reason, the tail of the logs and how to install etcd when
    /// the cluster cannot be started: tests that need etcd fail, never skip.
    pub fn start(members: usize) -> EtcdCluster {
        match Self::try_start(members) {
            Ok(cluster) => cluster,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a cluster like [`EtcdCluster::start`], returning the failure.
    ///
    /// # Errors
    ///
    /// [`StartError`] when etcd is missing, `members` is 0, the folder cannot
    /// be prepared, or the members are not healthy within [`START_TIMEOUT`].
    pub fn try_start(members: usize) -> Result<EtcdCluster, StartError> {
        Self::try_start_with(members, None)
    }

    /// Starts a cluster whose client port speaks only TLS (`https://`), like
    /// [`EtcdCluster::start`].
    ///
    /// # Panics
    ///
    /// Panics like [`EtcdCluster::start`].
    pub fn start_tls(members: usize, tls: EtcdServerTls) -> EtcdCluster {
        match Self::try_start_with(members, Some(tls)) {
            Ok(cluster) => cluster,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a cluster, with TLS on the client port when `tls` is given.
    ///
    /// # Errors
    ///
    /// Like [`EtcdCluster::try_start`].
    pub fn try_start_with(
        members: usize,
        tls: Option<EtcdServerTls>,
    ) -> Result<EtcdCluster, StartError> {
        Self::try_start_inner(members, tls, false)
    }

    fn try_start_inner(
        members: usize,
        tls: Option<EtcdServerTls>,
        remove_at_exit: bool,
    ) -> Result<EtcdCluster, StartError> {
        check_installation()?;
        if members == 0 {
            return Err(StartError::new("an etcd cluster needs at least one member"));
        }
        let mut last_error = None;
        // A probed port can be taken by another process before etcd binds it.
        for _ in 0..3 {
            let root = tempfile::Builder::new()
                .prefix("bkswitch-etcd-")
                .tempdir()
                .map_err(|e| StartError::new(format!("cannot create a temporary folder: {e}")))?;
            let mut list = Vec::with_capacity(members);
            for i in 0..members {
                list.push(Member {
                    name: format!("m{i}"),
                    client_port: free_port()?,
                    metrics_port: free_port()?,
                    peer_port: free_port()?,
                    running: None,
                });
            }
            let initial_cluster = list
                .iter()
                .map(|m| format!("{}=http://127.0.0.1:{}", m.name, m.peer_port))
                .collect::<Vec<_>>()
                .join(",");
            let cluster = EtcdCluster {
                tls: tls.clone(),
                root,
                members: Mutex::new(list),
                initial_cluster,
                token: format!("bkswitch-{:08x}", random_u32()),
                remove_at_exit,
            };
            let launched = (0..members).try_for_each(|i| cluster.launch(i));
            match launched.and_then(|()| cluster.wait_healthy(START_TIMEOUT)) {
                Ok(()) => return Ok(cluster),
                Err(e) => last_error = Some(e),
            }
        }
        Err(last_error.unwrap_or_else(|| StartError::new("etcd did not start")))
    }

    /// The client endpoints, `127.0.0.1:PORT` each, comma-separated (the host
    /// list of an `etcd://` URL).
    pub fn endpoints(&self) -> String {
        self.lock()
            .iter()
            .map(|m| format!("127.0.0.1:{}", m.client_port))
            .collect::<Vec<_>>()
            .join(",")
    }

    /// The client endpoint of member `i`.
    pub fn endpoint(&self, i: usize) -> String {
        format!("127.0.0.1:{}", self.lock()[i].client_port)
    }

    /// The `etcd://` URL of the whole cluster, with `prefix` appended (a path
    /// such as `/t-1`, or empty).
    pub fn url(&self, prefix: &str) -> String {
        format!("etcd://{}{prefix}", self.endpoints())
    }

    /// Number of members.
    pub fn size(&self) -> usize {
        self.lock().len()
    }

    /// The cluster's temporary folder (a `mN/` data folder and `mN.log` per
    /// member).
    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    /// Whether member `i` runs.
    pub fn is_running(&self, i: usize) -> bool {
        self.lock()[i]
            .running
            .as_mut()
            .is_some_and(GuardedProcess::is_running)
    }

    /// The member that leads, by asking each running member's metrics.
    pub fn leader(&self) -> Option<usize> {
        let ports: Vec<u16> = self.lock().iter().map(|m| m.metrics_port).collect();
        ports.iter().position(|&port| {
            http_get(port, "/metrics").is_some_and(|m| m.contains("\netcd_server_is_leader 1"))
        })
    }

    /// Kills member `i` (SIGKILL; its data is kept). Does nothing if it is not
    /// running.
    pub fn kill(&self, i: usize) {
        let running = self.lock()[i].running.take();
        if let Some(process) = running {
            process.kill();
        }
    }

    /// Kills the leader and returns its index.
    ///
    /// # Panics
    ///
    /// Panics when no member leads.
    pub fn kill_leader(&self) -> usize {
        let leader = self.leader().expect("no etcd member leads");
        self.kill(leader);
        leader
    }

    /// Starts a killed member again with the same data and ports and waits until
    /// it is healthy.
    ///
    /// # Panics
    ///
    /// Panics if it runs already or does not come back.
    pub fn start_again(&self, i: usize) {
        assert!(!self.is_running(i), "etcd member {i} is already running");
        if let Err(e) = self
            .launch(i)
            .and_then(|()| self.wait_healthy(START_TIMEOUT))
        {
            panic!("{e}");
        }
    }

    /// Freezes member `i` (SIGSTOP): it keeps its connections but answers
    /// nothing, so its clients' leases run out.
    ///
    /// # Panics
    ///
    /// Panics if the member does not run.
    pub fn pause(&self, i: usize) {
        self.signal(i, "-STOP");
    }

    /// Resumes a member frozen by [`pause`](Self::pause) (SIGCONT).
    ///
    /// # Panics
    ///
    /// Panics if the member does not run.
    pub fn resume(&self, i: usize) {
        self.signal(i, "-CONT");
    }

    /// Waits until every running member reports itself healthy.
    ///
    /// # Errors
    ///
    /// [`StartError`] with the logs' tails when they are not within `timeout`.
    pub fn wait_healthy(&self, timeout: Duration) -> Result<(), StartError> {
        let deadline = Instant::now() + timeout;
        loop {
            let ports: Vec<(u16, bool)> = {
                let mut members = self.lock();
                members
                    .iter_mut()
                    .map(|m| {
                        let alive = m.running.as_mut().is_some_and(GuardedProcess::is_running);
                        (m.metrics_port, alive || m.running.is_none())
                    })
                    .collect()
            };
            if ports.iter().any(|&(_, ok)| !ok) {
                return Err(StartError::new(format!(
                    "an etcd member exited during start\n{}",
                    self.log_tails(20)
                )));
            }
            let running: Vec<u16> = {
                let members = self.lock();
                members
                    .iter()
                    .filter(|m| m.running.is_some())
                    .map(|m| m.metrics_port)
                    .collect()
            };
            if running.iter().all(|&port| {
                http_get(port, "/health").is_some_and(|b| b.contains("\"health\":\"true\""))
            }) {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(StartError::new(format!(
                    "etcd not healthy within {timeout:?}\n{}",
                    self.log_tails(20)
                )));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// The last `lines` lines of every member's log.
    pub fn log_tails(&self, lines: usize) -> String {
        let names: Vec<String> = self.lock().iter().map(|m| m.name.clone()).collect();
        names
            .iter()
            .map(|name| {
                let text = fs::read_to_string(self.root.path().join(format!("{name}.log")))
                    .unwrap_or_default();
                let all: Vec<&str> = text.lines().collect();
                format!(
                    "--- {name}.log ---\n{}",
                    all[all.len().saturating_sub(lines)..].join("\n")
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    fn lock(&self) -> MutexGuard<'_, Vec<Member>> {
        self.members.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn signal(&self, i: usize, signal: &str) {
        let wrapper = {
            let members = self.lock();
            members[i]
                .running
                .as_ref()
                .map(GuardedProcess::wrapper_id)
                .unwrap_or_else(|| panic!("etcd member {i} does not run"))
        };
        let children = fs::read_to_string(format!("/proc/{wrapper}/task/{wrapper}/children"))
            .unwrap_or_default();
        let mut sent = false;
        for pid in children.split_whitespace() {
            let is_etcd =
                fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "etcd");
            if is_etcd {
                let status = Command::new("kill").arg(signal).arg(pid).status();
                sent = status.is_ok_and(|s| s.success());
            }
        }
        assert!(sent, "cannot signal etcd member {i} ({signal})");
    }

    fn launch(&self, i: usize) -> Result<(), StartError> {
        let mut members = self.lock();
        let member = &mut members[i];
        let data = self.root.path().join(&member.name);
        let log = self.root.path().join(format!("{}.log", member.name));
        let scheme = if self.tls.is_some() { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{}", member.client_port);
        let metrics = format!("http://127.0.0.1:{}", member.metrics_port);
        let peer = format!("http://127.0.0.1:{}", member.peer_port);
        let mut command = Command::new(etcd_binary());
        command
            .arg("--name")
            .arg(&member.name)
            .arg("--data-dir")
            .arg(&data)
            .arg("--listen-client-urls")
            .arg(&client)
            .arg("--advertise-client-urls")
            .arg(&client)
            .arg("--listen-metrics-urls")
            .arg(&metrics)
            .arg("--listen-peer-urls")
            .arg(&peer)
            .arg("--initial-advertise-peer-urls")
            .arg(&peer)
            .arg("--initial-cluster")
            .arg(&self.initial_cluster)
            .arg("--initial-cluster-state")
            .arg("new")
            .arg("--initial-cluster-token")
            .arg(&self.token)
            // Short heartbeats and elections keep leader-loss tests quick.
            .args(["--heartbeat-interval", "50", "--election-timeout", "500"])
            .args([
                "--logger",
                "zap",
                "--log-outputs",
                "stderr",
                "--log-level",
                "warn",
            ]);
        if let Some(tls) = &self.tls {
            command
                .arg("--cert-file")
                .arg(&tls.cert)
                .arg("--key-file")
                .arg(&tls.key)
                .arg("--trusted-ca-file")
                .arg(&tls.ca);
            if tls.client_cert_auth {
                command.arg("--client-cert-auth");
            }
        }
        let process = GuardedProcess::spawn(
            &command,
            self.root.path(),
            &log,
            GuardedIo::Log,
            self.remove_at_exit,
        )
        .map_err(|e| StartError::new(format!("cannot start etcd: {e}")))?;
        member.running = Some(process);
        Ok(())
    }
}

fn free_port() -> Result<u16, StartError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| StartError::new(format!("cannot bind a loopback port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| StartError::new(format!("cannot read the probed port: {e}")))
}

/// A plain HTTP/1.0 GET on a loopback port; the body, or `None`.
fn http_get(port: u16, path: &str) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n").as_bytes())
        .ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    let (head, body) = answer.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.").then(|| body.to_owned())
}

/// One single-member cluster per test binary, started on first use and shared
/// by every test of the binary (isolate tests with [`unique_prefix`]). Tests
/// that kill or pause members must start their own with
/// [`EtcdCluster::start`].
///
/// The cluster is never dropped; its process is killed and its folder
/// removed when the test process exits.
///
/// # Panics
///
/// Panics (in every caller) when etcd cannot be started.
pub fn shared() -> &'static EtcdCluster {
    static SHARED: OnceLock<Result<EtcdCluster, String>> = OnceLock::new();
    match SHARED
        .get_or_init(|| EtcdCluster::try_start_inner(1, None, true).map_err(|e| e.to_string()))
    {
        Ok(cluster) => cluster,
        Err(message) => panic!("the shared etcd server is unavailable: {message}"),
    }
}

/// A fresh key prefix `/t-<n>-<random>`, unique in this process and very likely
/// across processes sharing a server.
pub fn unique_prefix() -> String {
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("/t-{n}-{:08x}", random_u32())
}

fn random_u32() -> u32 {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = RandomState::new().build_hasher();
    hasher.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default(),
    );
    hasher.write_u32(std::process::id());
    hasher.finish() as u32
}
