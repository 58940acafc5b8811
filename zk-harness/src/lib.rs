#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod ensemble;
mod guard;
mod netcut;
mod proxy;

use std::fmt;
use std::fs;
use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use tempfile::TempDir;

pub use ensemble::ZkEnsemble;
pub use guard::{helper_test_command, GuardedIo, GuardedProcess};
pub use netcut::NetCut;
pub use proxy::{FaultProxy, LinkMode};

/// Classpath used when `ZOOKEEPER_CLASSPATH` is not set: Debian's `zookeeper`
/// package layout. `slf4j-simple` comes first so that the server logs through it
/// (warnings and errors only) instead of a random binding of the shared folder.
pub const DEFAULT_CLASSPATH: &str =
    "/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/*";

/// The server's main class.
const MAIN_CLASS: &str = "org.apache.zookeeper.server.quorum.QuorumPeerMain";

/// How long [`ZkServer::start`] waits for the server to answer `imok`.
pub const START_TIMEOUT: Duration = Duration::from_secs(60);

/// ZooKeeper tick of the test servers. Session expiry is checked once per tick, so
/// a short tick makes expiry tests quick.
pub const TICK_TIME_MS: u64 = 200;

/// Smallest session timeout the test servers grant.
pub const MIN_SESSION_TIMEOUT_MS: u64 = 1_000;

/// Largest session timeout the test servers grant.
pub const MAX_SESSION_TIMEOUT_MS: u64 = 60_000;

const INSTALL_HINT: &str = "install Debian's ZooKeeper package and a Java runtime \
     (`apt-get install -y zookeeper`), or point ZOOKEEPER_CLASSPATH at a ZooKeeper \
     3.8 classpath and JAVA at a java binary";

/// Why a ZooKeeper server could not be started.
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

/// A real ZooKeeper server (standalone, `127.0.0.1` only) in a temporary folder.
///
/// The server is stopped (killed, then waited for) when the value is dropped, and
/// also when the test process exits without running destructors: see the crate
/// documentation.
pub struct ZkServer {
    port: u16,
    root: TempDir,
    running: Mutex<Option<GuardedProcess>>,
    /// The `secureClientPort` and its TLS files, when started with TLS.
    secure: Option<(u16, ZkServerTls)>,
}

/// TLS of a [`ZkServer`]'s `secureClientPort` (Netty, PEM files), beside
/// its plain `clientPort`.
#[derive(Debug, Clone)]
pub struct ZkServerTls {
    /// The server's private key followed by its certificate chain, PEM
    /// (`ssl.keyStore.location`, `ssl.keyStore.type=PEM`); the
    /// certificate must name `127.0.0.1`.
    pub key_store: PathBuf,
    /// The CA certificates clients' certificates must chain to, PEM
    /// (`ssl.trustStore.location`).
    pub trust_store: PathBuf,
    /// Whether clients must present a certificate (`ssl.clientAuth=need`;
    /// otherwise `none`).
    pub client_auth: bool,
}

impl fmt::Debug for ZkServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ZkServer")
            .field("port", &self.port)
            .field("root", &self.root.path())
            .field("running", &self.is_running())
            .finish()
    }
}

impl ZkServer {
    /// Starts a fresh server on a free loopback port with an empty data folder and
    /// waits until it answers `imok` to `ruok` and `srvr` shows it serving.
    ///
    /// # Panics
    ///
    /// Panics with the reason, the tail of the server log and how to install
    /// ZooKeeper when the server cannot be started. Tests that need ZooKeeper must
    /// fail, never skip, on a machine without it.
    pub fn start() -> ZkServer {
        match Self::try_start() {
            Ok(server) => server,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts a fresh server like [`ZkServer::start`], returning the failure instead
    /// of panicking.
    ///
    /// # Errors
    ///
    /// [`StartError`] when java or the ZooKeeper classpath is missing, the temporary
    /// folder cannot be prepared, or the server does not answer within
    /// [`START_TIMEOUT`] (the message carries the tail of the server log).
    pub fn try_start() -> Result<ZkServer, StartError> {
        Self::try_start_with(None)
    }

    /// Starts a fresh server like [`ZkServer::start`] that also serves TLS
    /// on a `secureClientPort` ([`secure_connect_string`](Self::secure_connect_string)).
    ///
    /// # Panics
    ///
    /// As [`ZkServer::start`].
    pub fn start_tls(tls: ZkServerTls) -> ZkServer {
        match Self::try_start_with(Some(tls)) {
            Ok(server) => server,
            Err(e) => panic!("{e}"),
        }
    }

    /// The TLS connect string, `127.0.0.1:SECURE_PORT`, of a server started
    /// with [`start_tls`](Self::start_tls).
    pub fn secure_connect_string(&self) -> Option<String> {
        self.secure.as_ref().map(|(p, _)| format!("127.0.0.1:{p}"))
    }

    fn try_start_with(tls: Option<ZkServerTls>) -> Result<ZkServer, StartError> {
        check_installation()?;
        let mut last_error = None;
        // A freshly probed port can be taken by another process before the JVM
        // binds it: try a few ports.
        for _ in 0..3 {
            let port = free_port()?;
            let root = tempfile::Builder::new()
                .prefix("bkswitch-zk-")
                .tempdir()
                .map_err(|e| StartError::new(format!("cannot create a temporary folder: {e}")))?;
            let secure = match &tls {
                Some(t) => Some((free_port()?, t.clone())),
                None => None,
            };
            let server = ZkServer {
                port,
                root,
                running: Mutex::new(None),
                secure,
            };
            fs::create_dir_all(server.data_dir()).map_err(|e| {
                StartError::new(format!(
                    "cannot create {}: {e}",
                    server.data_dir().display()
                ))
            })?;
            server.write_config()?;
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let port_taken = server.log_tail(200).contains("Address already in use");
                    last_error = Some(e);
                    if !port_taken {
                        break;
                    }
                }
            }
        }
        Err(last_error.unwrap_or_else(|| StartError::new("ZooKeeper did not start")))
    }

    /// The client connect string, `127.0.0.1:PORT`.
    pub fn connect_string(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// The loopback port the server listens on (kept across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's temporary folder (`zoo.cfg`, `data/`, `zookeeper.log`). It is
    /// removed when the server is dropped or the test process exits.
    pub fn dir(&self) -> &Path {
        self.root.path()
    }

    /// Whether the server process is alive.
    pub fn is_running(&self) -> bool {
        let mut running = self.lock();
        running.as_mut().is_some_and(GuardedProcess::is_running)
    }

    /// Stops the server (the process is killed: clients see their connections
    /// drop) and keeps its data. Does nothing if it is not running.
    pub fn stop(&self) {
        let running = self.lock().take();
        if let Some(running) = running {
            running.kill();
        }
    }

    /// Starts a stopped server again on the same port with the same data: sessions
    /// survive if their clients reconnect within the session timeout.
    ///
    /// # Panics
    ///
    /// Panics if the server is already running or does not come back (for
    /// instance because another process took its port meanwhile).
    pub fn start_again(&self) {
        assert!(
            !self.is_running(),
            "ZooKeeper on port {} is already running; call stop() first",
            self.port
        );
        if let Err(e) = self.launch() {
            panic!("{e}");
        }
    }

    /// Stops the server, wipes its data and starts it again on the same port.
    ///
    /// The new server knows no session, so every client that reconnects is told
    /// that its session expired: a deterministic way to test session expiry.
    ///
    /// The wiped server first refuses clients that have seen a newer transaction
    /// id than its own (ZooKeeper protects them from going back in time); the Rust
    /// client forgets its last transaction id after one session timeout without
    /// contact, so expiry is reported about one session timeout after the
    /// restart. Use short sessions in such tests.
    ///
    /// # Panics
    ///
    /// Panics if the data cannot be wiped or the server does not come back.
    pub fn restart_fresh(&self) {
        self.stop();
        let data = self.data_dir();
        if let Err(e) = fs::remove_dir_all(&data).and_then(|()| fs::create_dir_all(&data)) {
            panic!("cannot wipe ZooKeeper data in {}: {e}", data.display());
        }
        if let Err(e) = self.launch() {
            panic!("{e}");
        }
    }

    /// The last `lines` lines of the server log (warnings and errors).
    pub fn log_tail(&self, lines: usize) -> String {
        let text = fs::read_to_string(self.log_path()).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        all[all.len().saturating_sub(lines)..].join("\n")
    }

    fn lock(&self) -> MutexGuard<'_, Option<GuardedProcess>> {
        self.running.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn data_dir(&self) -> PathBuf {
        self.root.path().join("data")
    }

    fn log_path(&self) -> PathBuf {
        self.root.path().join("zookeeper.log")
    }

    fn config_path(&self) -> PathBuf {
        self.root.path().join("zoo.cfg")
    }

    fn write_config(&self) -> Result<(), StartError> {
        let config = format!(
            "dataDir={data}\n\
             clientPort={port}\n\
             clientPortAddress=127.0.0.1\n\
             admin.enableServer=false\n\
             4lw.commands.whitelist=ruok,srvr\n\
             tickTime={TICK_TIME_MS}\n\
             minSessionTimeout={MIN_SESSION_TIMEOUT_MS}\n\
             maxSessionTimeout={MAX_SESSION_TIMEOUT_MS}\n\
             maxClientCnxns=0\n\
             forceSync=no\n\
             preAllocSize=1024\n",
            data = self.data_dir().display(),
            port = self.port,
        );
        let config = match &self.secure {
            None => config,
            Some((secure_port, tls)) => format!(
                "{config}\
                 serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory\n\
                 secureClientPort={secure_port}\n\
                 secureClientPortAddress=127.0.0.1\n\
                 ssl.keyStore.location={}\n\
                 ssl.keyStore.type=PEM\n\
                 ssl.trustStore.location={}\n\
                 ssl.trustStore.type=PEM\n\
                 ssl.clientAuth={}\n",
                tls.key_store.display(),
                tls.trust_store.display(),
                if tls.client_auth { "need" } else { "none" },
            ),
        };
        fs::write(self.config_path(), config).map_err(|e| {
            StartError::new(format!(
                "cannot write {}: {e}",
                self.config_path().display()
            ))
        })
    }

    /// Spawns the wrapper and the JVM, then waits for `imok`.
    fn launch(&self) -> Result<(), StartError> {
        let mut running = self.lock();
        if running.is_some() {
            return Err(StartError::new(format!(
                "ZooKeeper on port {} is already running",
                self.port
            )));
        }
        let command = jvm_command(&self.config_path(), self.root.path());
        let mut started = GuardedProcess::spawn(
            &command,
            self.root.path(),
            &self.log_path(),
            GuardedIo::Log,
            true,
        )
        .map_err(|e| StartError::new(format!("cannot run sh to start ZooKeeper: {e}")))?;

        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if ready(self.port) {
                *running = Some(started);
                return Ok(());
            }
            let exited = !started.is_running();
            if exited || Instant::now() >= deadline {
                let reason = if exited {
                    "the server process exited".to_owned()
                } else {
                    format!("no `imok` answer within {START_TIMEOUT:?}")
                };
                started.kill();
                return Err(StartError::new(format!(
                    "ZooKeeper failed to start on 127.0.0.1:{port}: {reason}.\n\
                     Hint: {INSTALL_HINT}.\n\
                     Server log (last lines):\n{log}",
                    port = self.port,
                    log = self.log_tail(30),
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for ZkServer {
    fn drop(&mut self) {
        let running = self.lock().take();
        if let Some(running) = running {
            running.close();
        }
    }
}

/// The JVM command line of one ZooKeeper server reading `config`, run in `dir`.
fn jvm_command(config: &Path, dir: &Path) -> Command {
    let mut command = Command::new(java_binary());
    command
        .args([
            "-XX:+UseSerialGC",
            "-XX:-UsePerfData",
            "-Xms32m",
            "-Xmx256m",
            "-Djava.net.preferIPv4Stack=true",
            "-Dzookeeper.jmx.log4j.disable=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
        ])
        .arg(classpath())
        .arg(MAIN_CLASS)
        .arg(config)
        .current_dir(dir);
    command
}

fn java_binary() -> String {
    std::env::var("JAVA").unwrap_or_else(|_| "java".to_owned())
}

fn classpath() -> String {
    std::env::var("ZOOKEEPER_CLASSPATH").unwrap_or_else(|_| DEFAULT_CLASSPATH.to_owned())
}

/// Checks that java runs and that the ZooKeeper jar of the classpath exists.
fn check_installation() -> Result<(), StartError> {
    let java = java_binary();
    let java_ok = Command::new(&java)
        .arg("-version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !java_ok {
        return Err(StartError::new(format!(
            "cannot run `{java} -version`: ZooKeeper tests need a Java runtime; {INSTALL_HINT}"
        )));
    }
    let cp = classpath();
    let jar_ok = cp
        .split(':')
        .filter(|entry| entry.ends_with(".jar") && entry.contains("zookeeper"))
        .any(|entry| Path::new(entry).is_file());
    if !jar_ok {
        return Err(StartError::new(format!(
            "no ZooKeeper jar found on the classpath `{cp}`; {INSTALL_HINT}"
        )));
    }
    Ok(())
}

fn free_port() -> Result<u16, StartError> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| StartError::new(format!("cannot bind a loopback port: {e}")))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| StartError::new(format!("cannot read the probed port: {e}")))
}

/// True when the server answers `imok` to `ruok` and `srvr` shows it serving
/// (`ruok` alone answers while the server is still loading its data).
fn ready(port: u16) -> bool {
    four_letter_word(port, b"ruok").is_some_and(|a| a.trim() == "imok")
        && four_letter_word(port, b"srvr").is_some_and(|a| a.contains("Mode:"))
}

/// Sends a four-letter command and returns the answer.
fn four_letter_word(port: u16, word: &[u8]) -> Option<String> {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_millis(500)).ok()?;
    stream.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    stream
        .set_write_timeout(Some(Duration::from_secs(2)))
        .ok()?;
    stream.write_all(word).ok()?;
    let mut answer = String::new();
    stream.read_to_string(&mut answer).ok()?;
    Some(answer)
}

/// One server per test binary, started on first use and shared by every test of
/// the binary (isolate tests with [`unique_chroot`]).
///
/// The server is never dropped; its JVM is killed and its folder removed when the
/// test process exits. Tests that stop or restart a server must start their own
/// with [`ZkServer::start`].
///
/// # Panics
///
/// Panics (in every caller) when the server cannot be started; see
/// [`ZkServer::start`].
pub fn shared() -> &'static ZkServer {
    static SHARED: OnceLock<Result<ZkServer, String>> = OnceLock::new();
    match SHARED.get_or_init(|| ZkServer::try_start().map_err(|e| e.to_string())) {
        Ok(server) => server,
        Err(message) => panic!("the shared ZooKeeper server is unavailable: {message}"),
    }
}

/// Fails loudly, with installation instructions, when ZooKeeper cannot run here.
///
/// Every start already does this check; call it at the top of a test to fail
/// before any other setup.
///
/// # Panics
///
/// Panics when java or the ZooKeeper jar is missing.
pub fn require_zk() {
    if let Err(e) = check_installation() {
        panic!("{e}");
    }
}

/// A fresh chroot path `/t-<n>-<random>`, unique in this process and very likely
/// across processes sharing a server.
pub fn unique_chroot() -> String {
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
