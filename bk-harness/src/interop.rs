//! A session of the Java BookKeeper client (`java/BkInterop.java`), driven with
//! JSON lines.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bkswitch_zk_harness::{GuardedIo, GuardedProcess};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::cluster::{log_excerpt, tail};
use crate::install::{classpath, installation, Installation};
use crate::{StartError, JAVA_17_FLAGS};

/// The helper's source, compiled once per content (see [`JavaClient`]).
const SOURCE: &str = include_str!("../java/BkInterop.java");

/// The helper's main class.
const MAIN_CLASS: &str = "BkInterop";

/// How long [`JavaClient::try_start`] waits for the session to be ready.
pub const SESSION_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a command may take by default (see
/// [`JavaClientBuilder::call_timeout`]).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// BookKeeper's client error codes (`BKException.Code`) that tests check most.
pub mod codes {
    /// `ReadException`.
    pub const READ: i32 = -1;
    /// `NotEnoughBookiesException`.
    pub const NOT_ENOUGH_BOOKIES: i32 = -6;
    /// `NoSuchLedgerExistsException`.
    pub const NO_SUCH_LEDGER_EXISTS: i32 = -7;
    /// `LedgerClosedException`.
    pub const LEDGER_CLOSED: i32 = -11;
    /// `NoSuchEntryException`.
    pub const NO_SUCH_ENTRY: i32 = -13;
    /// `MetadataVersionException`.
    pub const METADATA_VERSION: i32 = -17;
    /// `LedgerExistException`.
    pub const LEDGER_EXIST: i32 = -20;
    /// `DuplicateEntryIdException`.
    pub const DUPLICATE_ENTRY_ID: i32 = -22;
    /// `TimeoutException`.
    pub const TIMEOUT: i32 = -23;
    /// `NoSuchLedgerExistsOnMetadataServerException`.
    pub const NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER: i32 = -25;
    /// `LedgerFencedException`.
    pub const LEDGER_FENCED: i32 = -101;
    /// `UnauthorizedAccessException` (wrong password).
    pub const UNAUTHORIZED_ACCESS: i32 = -102;
    /// `DigestMatchException`.
    pub const DIGEST_MATCH: i32 = -5;
    /// `WriteOnReadOnlyBookieException`.
    pub const WRITE_ON_READ_ONLY_BOOKIE: i32 = -104;
}

/// A failed command: BookKeeper's error code (`BKException.getCode()`, see
/// [`codes`]) and message, or one of the harness's own codes
/// ([`JavaError::HELPER`], [`JavaError::SESSION`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Java BookKeeper client error {code}: {message}")]
pub struct JavaError {
    /// The `BKException` code, or [`JavaError::HELPER`] / [`JavaError::SESSION`].
    pub code: i32,
    /// The exception's class and message.
    pub message: String,
}

impl JavaError {
    /// The helper refused the command (bad or missing field, a ledger that is not
    /// open in the session) or hit a Java exception that is not a
    /// `BKException`.
    pub const HELPER: i32 = -10001;
    /// The session failed: it died, did not answer within the call timeout, or
    /// answered something that is not the expected JSON.
    pub const SESSION: i32 = -10000;

    fn session(message: impl Into<String>) -> JavaError {
        JavaError {
            code: JavaError::SESSION,
            message: message.into(),
        }
    }
}

/// A digest type, named as Java names it (`BookKeeper.DigestType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
pub enum DigestType {
    /// `CRC32`.
    #[serde(rename = "CRC32")]
    Crc32,
    /// `CRC32C` (BookKeeper's and Pulsar's default).
    #[default]
    #[serde(rename = "CRC32C")]
    Crc32c,
    /// `MAC` (HMAC-SHA1 keyed by the password).
    #[serde(rename = "MAC")]
    Mac,
    /// `DUMMY` (no checksum).
    #[serde(rename = "DUMMY")]
    Dummy,
}

impl DigestType {
    /// The Java name (`CRC32`, `CRC32C`, `MAC`, `DUMMY`).
    pub fn java_name(self) -> &'static str {
        match self {
            DigestType::Crc32 => "CRC32",
            DigestType::Crc32c => "CRC32C",
            DigestType::Mac => "MAC",
            DigestType::Dummy => "DUMMY",
        }
    }
}

/// What [`JavaClient::create`] creates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreateOptions {
    /// Ensemble size (E).
    pub ensemble: u32,
    /// Write quorum (WQ).
    pub write_quorum: u32,
    /// Ack quorum (AQ).
    pub ack_quorum: u32,
    /// Digest type.
    pub digest: DigestType,
    /// Password (may be empty).
    pub password: Vec<u8>,
    /// Custom metadata.
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// `Some(id)`: `createLedgerAdv` with that id (entries are then added with
    /// explicit ids, [`JavaClient::add_at`]).
    pub ledger_id: Option<i64>,
}

impl Default for CreateOptions {
    /// E3/WQ2/AQ2, CRC32C, no password, no custom metadata.
    fn default() -> Self {
        CreateOptions::new(3, 2, 2)
    }
}

impl CreateOptions {
    /// E/WQ/AQ with CRC32C, no password, no custom metadata.
    pub fn new(ensemble: u32, write_quorum: u32, ack_quorum: u32) -> CreateOptions {
        CreateOptions {
            ensemble,
            write_quorum,
            ack_quorum,
            digest: DigestType::Crc32c,
            password: Vec::new(),
            custom_metadata: BTreeMap::new(),
            ledger_id: None,
        }
    }

    /// Sets the digest type.
    pub fn digest(mut self, digest: DigestType) -> Self {
        self.digest = digest;
        self
    }

    /// Sets the password.
    pub fn password(mut self, password: impl Into<Vec<u8>>) -> Self {
        self.password = password.into();
        self
    }

    /// Adds a custom metadata entry.
    pub fn custom(mut self, key: impl Into<String>, value: impl Into<Vec<u8>>) -> Self {
        self.custom_metadata.insert(key.into(), value.into());
        self
    }

    /// Creates with `createLedgerAdv` at this id.
    pub fn ledger_id(mut self, id: i64) -> Self {
        self.ledger_id = Some(id);
        self
    }

    fn to_json(&self) -> Value {
        let custom: serde_json::Map<String, Value> = self
            .custom_metadata
            .iter()
            .map(|(k, v)| (k.clone(), Value::String(B64.encode(v))))
            .collect();
        let mut cmd = json!({
            "cmd": "create",
            "ensemble": self.ensemble,
            "writeQuorum": self.write_quorum,
            "ackQuorum": self.ack_quorum,
            "digest": self.digest.java_name(),
            "password": B64.encode(&self.password),
            "customMetadata": custom,
        });
        if let Some(id) = self.ledger_id {
            cmd["ledgerId"] = json!(id);
        }
        cmd
    }
}

/// What [`JavaClient::open`] reports of the opened handle.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OpenedLedger {
    /// The handle's last add confirmed.
    pub lac: i64,
    /// Whether the ledger's metadata says CLOSED.
    pub closed: bool,
    /// The handle's length in bytes.
    pub length: i64,
    /// The metadata's last entry id (-1 unless closed).
    pub last_entry_id: i64,
}

/// One entry read by [`JavaClient::read`].
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Entry {
    /// The entry id.
    pub entry_id: i64,
    /// The payload.
    #[serde(with = "base64_bytes")]
    pub data: Vec<u8>,
}

/// One ensemble of a ledger: the bookies that hold entries from
/// `first_entry_id` on.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Segment {
    /// The first entry written to this ensemble.
    pub first_entry_id: i64,
    /// Bookie ids, in bookie-index order.
    pub bookies: Vec<String>,
}

/// A ledger's metadata as the Java client reads it from the metadata store
/// (`BookKeeper.getLedgerMetadata`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JavaLedgerMetadata {
    /// The ledger id.
    pub ledger_id: i64,
    /// Ensemble size.
    pub ensemble_size: u32,
    /// Write quorum size.
    pub write_quorum_size: u32,
    /// Ack quorum size.
    pub ack_quorum_size: u32,
    /// The digest type (`api.DigestType` name: `CRC32`, `CRC32C`, `MAC`,
    /// `DUMMY`).
    pub digest_type: DigestType,
    /// Whether the metadata carries a password.
    pub has_password: bool,
    /// The password (empty when none).
    #[serde(with = "base64_bytes")]
    pub password: Vec<u8>,
    /// Custom metadata.
    #[serde(with = "base64_map")]
    pub custom_metadata: BTreeMap<String, Vec<u8>>,
    /// `OPEN`, `IN_RECOVERY` or `CLOSED`.
    pub state: String,
    /// Whether the state is `CLOSED`.
    pub closed: bool,
    /// The last entry id (-1 unless closed).
    pub last_entry_id: i64,
    /// The length in bytes (0 unless closed).
    pub length: i64,
    /// Creation time in ms (the znode's ctime unless the creator stored one).
    pub ctime: i64,
    /// The creation token.
    pub c_token: i64,
    /// The metadata format version (3 for ledgers written by 4.9 and later).
    pub metadata_format_version: i32,
    /// The ensembles, by first entry id.
    pub ensembles: Vec<Segment>,
}

/// What [`JavaClient::bench_add`] measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchAddOptions {
    /// How many entries to add.
    pub entries: u32,
    /// Payload size in bytes.
    pub size: u32,
    /// At most this many adds in flight.
    pub inflight: u32,
    /// Ensemble size.
    pub ensemble: u32,
    /// Write quorum.
    pub write_quorum: u32,
    /// Ack quorum.
    pub ack_quorum: u32,
}

/// The result of [`JavaClient::bench_add`].
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchAddResult {
    /// The ledger written (closed at the end; read it with
    /// [`JavaClient::bench_read`]).
    pub ledger_id: i64,
    /// Entries added.
    pub entries: u64,
    /// Wall time of the adds.
    pub seconds: f64,
    /// Entries per second.
    pub entries_per_sec: f64,
    /// Payload MiB per second.
    pub mib_per_sec: f64,
    /// Median add latency, µs.
    pub p50_micros: f64,
    /// 99th percentile add latency, µs.
    pub p99_micros: f64,
}

/// The result of [`JavaClient::bench_read`].
#[derive(Debug, Clone, Copy, PartialEq, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReadResult {
    /// Entries read.
    pub entries: u64,
    /// Wall time of the reads.
    pub seconds: f64,
    /// Entries per second.
    pub entries_per_sec: f64,
    /// Payload MiB per second.
    pub mib_per_sec: f64,
}

/// The payload the helper writes for the `n`-th entry of
/// [`JavaClient::add_many`] (counting from 0 in that call): the UTF-8 text
/// `entry-<n>` without a size, else `size` bytes where byte `k` is
/// `(n * 31 + k) mod 256`.
pub fn deterministic_payload(n: u64, size: Option<usize>) -> Vec<u8> {
    match size {
        None => format!("entry-{n}").into_bytes(),
        Some(size) => (0..size)
            .map(|k| (n.wrapping_mul(31).wrapping_add(k as u64) & 0xff) as u8)
            .collect(),
    }
}

/// Options of a [`JavaClient`]; start it with [`start`](Self::start).
#[derive(Debug, Clone)]
pub struct JavaClientBuilder {
    uri: String,
    v3: bool,
    conf: Vec<(String, String)>,
    max_heap_mb: u32,
    call_timeout: Duration,
    log_level: String,
}

impl JavaClientBuilder {
    /// Use the v3 (protobuf) wire protocol instead of v2.
    pub fn v3(mut self, v3: bool) -> Self {
        self.v3 = v3;
        self
    }

    /// Sets a `ClientConfiguration` property (for example
    /// `enableDigestTypeAutodetection`, `addEntryTimeout`,
    /// `storeSystemTimeAsLedgerCreationTime`).
    pub fn conf(mut self, key: impl Into<String>, value: impl Into<String>) -> Self {
        self.conf.push((key.into(), value.into()));
        self
    }

    /// The JVM's maximum heap, in MiB. Default 512.
    pub fn max_heap_mb(mut self, mb: u32) -> Self {
        self.max_heap_mb = mb;
        self
    }

    /// How long one command may take before the call fails with
    /// [`JavaError::SESSION`]. Default [`CALL_TIMEOUT`].
    pub fn call_timeout(mut self, timeout: Duration) -> Self {
        self.call_timeout = timeout;
        self
    }

    /// The client's log4j2 level on the session log (`WARN` by default).
    pub fn log_level(mut self, level: impl Into<String>) -> Self {
        self.log_level = level.into();
        self
    }

    /// Starts the session.
    ///
    /// # Panics
    ///
    /// When it cannot start; see [`try_start`](Self::try_start).
    pub fn start(self) -> JavaClient {
        match self.try_start() {
            Ok(client) => client,
            Err(e) => panic!("{e}"),
        }
    }

    /// Starts the session: compiles the helper if needed, starts its JVM and
    /// waits until its BookKeeper client is connected.
    ///
    /// # Errors
    ///
    /// [`StartError`] when java, javac or the jars are missing, the helper does
    /// not compile, or the client cannot connect (the message has the tail of
    /// the session's log).
    pub fn try_start(self) -> Result<JavaClient, StartError> {
        let installation = installation()?;
        let classes = compiled_helper(&installation)?;
        let dir = tempfile::Builder::new()
            .prefix("bkswitch-bk-java-")
            .tempdir()
            .map_err(|e| StartError::new(format!("cannot create a temporary folder: {e}")))?;
        let log = dir.path().join("session.log");
        let mut command = Command::new(&installation.java);
        command
            .arg("-Xms32m")
            .arg(format!("-Xmx{}m", self.max_heap_mb.max(32)))
            .arg("-XX:MaxDirectMemorySize=256m")
            .arg("-XX:-UsePerfData")
            .args(JAVA_17_FLAGS)
            .arg(format!("-Dbkinterop.logLevel={}", self.log_level))
            .arg("-cp")
            .arg(format!(
                "{}:{}",
                classes.display(),
                classpath(&installation.lib)
            ))
            .arg(MAIN_CLASS)
            .arg(&self.uri);
        if self.v3 {
            command.arg("--v3");
        }
        for (key, value) in &self.conf {
            command.arg("--conf").arg(format!("{key}={value}"));
        }
        command.current_dir(dir.path());
        let mut process = GuardedProcess::spawn(&command, dir.path(), &log, GuardedIo::Piped, true)
            .map_err(|e| StartError::new(format!("cannot run sh to start the Java client: {e}")))?;
        let stdout = process
            .take_stdout()
            .ok_or_else(|| StartError::new("the Java client session has no stdout pipe"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("bk-java-session".to_owned())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    match line {
                        Ok(line) => {
                            if tx.send(line).is_err() {
                                return;
                            }
                        }
                        Err(_) => return,
                    }
                }
            })
            .map_err(|e| StartError::new(format!("cannot start a reader thread: {e}")))?;
        let client = JavaClient {
            uri: self.uri.clone(),
            v3: self.v3,
            call_timeout: self.call_timeout,
            log,
            session: Mutex::new(Session {
                process: Some(process),
                answers: rx,
            }),
            next_id: AtomicU64::new(1),
            dir,
        };
        client.wait_ready()?;
        Ok(client)
    }
}

/// A session of the Java BookKeeper client (`org.apache.bookkeeper.client.BookKeeper`,
/// 4.17) on one metadata service URI, for interop checks.
///
/// The session is the helper `bk-harness/java/BkInterop.java`, compiled with
/// `javac` on first use into a cache folder next to the jars
/// (`<lib>/../interop-<hash of the source>/`, so an edited helper is compiled
/// again), and run in its own JVM under the [`GuardedProcess`] wrapper: it never
/// outlives the test process. Commands are JSON lines on its standard input,
/// answers JSON lines on its standard output; the JVM's log is in
/// [`log_path`](Self::log_path). Ledger handles live in the session, by ledger
/// id: `create` and `open` keep the handle that `add`, `read`, `lac` and `close`
/// use.
///
/// Methods take `&self` (commands are serialized), so one session can be shared.
///
/// ```no_run
/// use bkswitch_bk_harness::{shared, CreateOptions, DigestType};
///
/// let cluster = shared();
/// let java = cluster.java_client();
/// let id = java
///     .create(&CreateOptions::new(3, 2, 2).digest(DigestType::Crc32c).password("pw"))
///     .unwrap();
/// java.add(id, b"hello").unwrap();
/// java.close(id).unwrap();
/// let opened = java.open(id, true, DigestType::Crc32c, b"pw").unwrap();
/// assert_eq!(opened.lac, 0);
/// assert_eq!(java.read(id, 0, 0).unwrap()[0].data, b"hello");
/// ```
pub struct JavaClient {
    uri: String,
    v3: bool,
    call_timeout: Duration,
    log: PathBuf,
    session: Mutex<Session>,
    next_id: AtomicU64,
    // Dropped last: the session's folder (log, FIFO).
    dir: TempDir,
}

struct Session {
    process: Option<GuardedProcess>,
    answers: mpsc::Receiver<String>,
}

impl fmt::Debug for JavaClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("JavaClient")
            .field("uri", &self.uri)
            .field("v3", &self.v3)
            .field("dir", &self.dir.path())
            .finish()
    }
}

impl JavaClient {
    /// Starts a session on `metadata_service_uri` (such as
    /// [`BkCluster::metadata_service_uri`](crate::BkCluster::metadata_service_uri))
    /// with the v2 wire protocol, as Pulsar brokers use.
    ///
    /// # Panics
    ///
    /// When the session cannot start; see [`JavaClientBuilder::try_start`].
    pub fn start(metadata_service_uri: &str) -> JavaClient {
        JavaClient::builder(metadata_service_uri).start()
    }

    /// Starts a session like [`start`](Self::start), returning the failure.
    ///
    /// # Errors
    ///
    /// See [`JavaClientBuilder::try_start`].
    pub fn try_start(metadata_service_uri: &str) -> Result<JavaClient, StartError> {
        JavaClient::builder(metadata_service_uri).try_start()
    }

    /// A builder for a session with options (v3 protocol, client properties,
    /// heap, call timeout).
    pub fn builder(metadata_service_uri: &str) -> JavaClientBuilder {
        JavaClientBuilder {
            uri: metadata_service_uri.to_owned(),
            v3: false,
            conf: Vec::new(),
            max_heap_mb: 512,
            call_timeout: CALL_TIMEOUT,
            log_level: "WARN".to_owned(),
        }
    }

    /// The metadata service URI of the session.
    pub fn metadata_service_uri(&self) -> &str {
        &self.uri
    }

    /// Whether the session uses the v3 wire protocol.
    pub fn is_v3(&self) -> bool {
        self.v3
    }

    /// The session's log (the JVM's standard error).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    /// The last `lines` lines of the session's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log, lines)
    }

    /// Whether the session's JVM is alive.
    pub fn is_running(&self) -> bool {
        self.lock()
            .process
            .as_mut()
            .is_some_and(GuardedProcess::is_running)
    }

    /// Sends one command (a JSON object with a `cmd` field; see the helper's
    /// header for the commands) and returns the whole answer.
    ///
    /// # Errors
    ///
    /// The answer's `code` and `error` when it is `{"ok":false,…}`;
    /// [`JavaError::SESSION`] when the session died, did not answer within the
    /// call timeout, or answered garbage.
    pub fn call(&self, command: Value) -> Result<Value, JavaError> {
        let Value::Object(mut command) = command else {
            return Err(JavaError {
                code: JavaError::HELPER,
                message: "a command is a JSON object".to_owned(),
            });
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        command.insert("id".to_owned(), json!(id));
        let line = Value::Object(command).to_string();
        let mut session = self.lock();
        let answer = {
            let process = session
                .process
                .as_mut()
                .ok_or_else(|| JavaError::session("the session has ended"))?;
            let stdin = process
                .stdin()
                .ok_or_else(|| JavaError::session("the session has no input"))?;
            stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.write_all(b"\n"))
                .and_then(|()| stdin.flush())
                .map_err(|e| self.died(&format!("cannot send the command: {e}")))?;
            self.receive(&session.answers, Some(id))?
        };
        drop(session);
        if answer.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(answer);
        }
        let code = answer
            .get("code")
            .and_then(Value::as_i64)
            .and_then(|c| i32::try_from(c).ok())
            .unwrap_or(JavaError::SESSION);
        let message = answer
            .get("error")
            .and_then(Value::as_str)
            .unwrap_or("no message")
            .to_owned();
        Err(JavaError { code, message })
    }

    /// Creates a ledger (`createLedger`, or `createLedgerAdv` with
    /// [`CreateOptions::ledger_id`]) and keeps its handle; returns its id.
    ///
    /// # Errors
    ///
    /// The client's error (for example [`codes::LEDGER_EXIST`] for an adv id
    /// in use, [`codes::NOT_ENOUGH_BOOKIES`]).
    pub fn create(&self, options: &CreateOptions) -> Result<i64, JavaError> {
        let answer = self.call(options.to_json())?;
        field(&answer, "ledgerId")
    }

    /// Adds one entry to a ledger created (or opened) in this session; returns
    /// its entry id.
    ///
    /// # Errors
    ///
    /// The client's error (for example [`codes::LEDGER_FENCED`]).
    pub fn add(&self, ledger_id: i64, data: &[u8]) -> Result<i64, JavaError> {
        let answer = self.call(json!({
            "cmd": "add", "ledgerId": ledger_id, "data": B64.encode(data),
        }))?;
        field(&answer, "entryId")
    }

    /// Adds one entry at `entry_id` to a ledger created with
    /// [`CreateOptions::ledger_id`] (an adv handle).
    ///
    /// # Errors
    ///
    /// The client's error.
    pub fn add_at(&self, ledger_id: i64, entry_id: i64, data: &[u8]) -> Result<i64, JavaError> {
        let answer = self.call(json!({
            "cmd": "add", "ledgerId": ledger_id, "entryId": entry_id, "data": B64.encode(data),
        }))?;
        field(&answer, "entryId")
    }

    /// Adds `count` entries with pipelined asynchronous adds; payload `n` is
    /// [`deterministic_payload(n, size)`](deterministic_payload). Returns the
    /// last entry id.
    ///
    /// # Errors
    ///
    /// The first add error.
    pub fn add_many(
        &self,
        ledger_id: i64,
        count: u64,
        size: Option<usize>,
    ) -> Result<i64, JavaError> {
        let mut cmd = json!({ "cmd": "addMany", "ledgerId": ledger_id, "count": count });
        if let Some(size) = size {
            cmd["size"] = json!(size);
        }
        let answer = self.call(cmd)?;
        field(&answer, "lastEntryId")
    }

    /// Adds the given payloads with pipelined asynchronous adds; returns the last
    /// entry id.
    ///
    /// # Errors
    ///
    /// The first add error.
    pub fn add_payloads(&self, ledger_id: i64, payloads: &[Vec<u8>]) -> Result<i64, JavaError> {
        let payloads: Vec<String> = payloads.iter().map(|p| B64.encode(p)).collect();
        let answer = self.call(json!({
            "cmd": "addMany", "ledgerId": ledger_id, "payloads": payloads,
        }))?;
        field(&answer, "lastEntryId")
    }

    /// Closes the session's handle of a ledger (a writer's close seals the
    /// ledger's metadata).
    ///
    /// # Errors
    ///
    /// The client's error; [`JavaError::HELPER`] when the ledger is not open in
    /// the session.
    pub fn close(&self, ledger_id: i64) -> Result<(), JavaError> {
        self.call(json!({ "cmd": "close", "ledgerId": ledger_id }))
            .map(drop)
    }

    /// Opens a ledger, with recovery (fences the writer, then seals it) or
    /// without, and keeps the handle (replacing any handle of the session for
    /// that ledger, which is left as it is).
    ///
    /// # Errors
    ///
    /// The client's error (for example
    /// [`codes::NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER`],
    /// [`codes::UNAUTHORIZED_ACCESS`]).
    pub fn open(
        &self,
        ledger_id: i64,
        recovery: bool,
        digest: DigestType,
        password: &[u8],
    ) -> Result<OpenedLedger, JavaError> {
        let answer = self.call(json!({
            "cmd": "open", "ledgerId": ledger_id, "recovery": recovery,
            "digest": digest.java_name(), "password": B64.encode(password),
        }))?;
        parse(answer)
    }

    /// Reads entries `first..=last` through the session's handle (up to its
    /// last add confirmed).
    ///
    /// # Errors
    ///
    /// The client's error.
    pub fn read(&self, ledger_id: i64, first: i64, last: i64) -> Result<Vec<Entry>, JavaError> {
        self.read_entries(ledger_id, first, last, false)
    }

    /// Reads entries `first..=last` without checking the last add confirmed
    /// (`readUnconfirmedEntries`).
    ///
    /// # Errors
    ///
    /// The client's error.
    pub fn read_unconfirmed(
        &self,
        ledger_id: i64,
        first: i64,
        last: i64,
    ) -> Result<Vec<Entry>, JavaError> {
        self.read_entries(ledger_id, first, last, true)
    }

    fn read_entries(
        &self,
        ledger_id: i64,
        first: i64,
        last: i64,
        unconfirmed: bool,
    ) -> Result<Vec<Entry>, JavaError> {
        let answer = self.call(json!({
            "cmd": "read", "ledgerId": ledger_id, "first": first, "last": last,
            "unconfirmed": unconfirmed,
        }))?;
        field(&answer, "entries")
    }

    /// Reads the last add confirmed from the bookies (`readLastConfirmed` on the
    /// session's handle).
    ///
    /// # Errors
    ///
    /// The client's error.
    pub fn lac(&self, ledger_id: i64) -> Result<i64, JavaError> {
        let answer = self.call(json!({ "cmd": "lac", "ledgerId": ledger_id }))?;
        field(&answer, "lac")
    }

    /// Deletes a ledger (and forgets the session's handle of it).
    ///
    /// # Errors
    ///
    /// The client's error.
    pub fn delete(&self, ledger_id: i64) -> Result<(), JavaError> {
        self.call(json!({ "cmd": "delete", "ledgerId": ledger_id }))
            .map(drop)
    }

    /// Reads a ledger's metadata from the metadata store (no handle needed).
    ///
    /// # Errors
    ///
    /// The client's error
    /// ([`codes::NO_SUCH_LEDGER_EXISTS_ON_METADATA_SERVER`] for an unknown id).
    pub fn metadata(&self, ledger_id: i64) -> Result<JavaLedgerMetadata, JavaError> {
        let answer = self.call(json!({ "cmd": "metadata", "ledgerId": ledger_id }))?;
        parse(answer)
    }

    /// Measures adds: creates a ledger (CRC32C, no password), adds
    /// `options.entries` entries of `options.size` random bytes with at most
    /// `options.inflight` in flight, closes it.
    ///
    /// # Errors
    ///
    /// The first client error.
    pub fn bench_add(&self, options: &BenchAddOptions) -> Result<BenchAddResult, JavaError> {
        let mut cmd = serde_json::to_value(options)
            .map_err(|e| JavaError::session(format!("cannot encode the options: {e}")))?;
        cmd["cmd"] = json!("benchAdd");
        parse(self.call(cmd)?)
    }

    /// Measures reads: opens a ledger without recovery (CRC32C, no password, as
    /// [`bench_add`](Self::bench_add) writes them) and reads it all in batches
    /// of `batch` entries.
    ///
    /// # Errors
    ///
    /// The first client error.
    pub fn bench_read(&self, ledger_id: i64, batch: u32) -> Result<BenchReadResult, JavaError> {
        parse(self.call(json!({ "cmd": "benchRead", "ledgerId": ledger_id, "batch": batch }))?)
    }

    /// Ends the session: asks the helper to quit, then closes it (its JVM is
    /// killed if it did not exit).
    pub fn quit(self) {
        let _ = self.call(json!({ "cmd": "quit" }));
        let process = self.lock().process.take();
        if let Some(mut process) = process {
            process.wait_timeout(Duration::from_secs(5));
            process.close();
        }
    }

    fn lock(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn died(&self, what: &str) -> JavaError {
        JavaError::session(format!(
            "{what}; the Java client session on {} has failed. Log {}:\n{}",
            self.uri,
            self.log.display(),
            log_excerpt(&self.log, 40)
        ))
    }

    /// Waits for the answer with this id (older answers, left by calls that
    /// timed out, are skipped), or the first line when `id` is `None`.
    fn receive(
        &self,
        answers: &mpsc::Receiver<String>,
        id: Option<u64>,
    ) -> Result<Value, JavaError> {
        let deadline = Instant::now() + self.call_timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match answers.recv_timeout(left) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(self.died(&format!("no answer within {:?}", self.call_timeout)))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(self.died("the session's output ended"))
                }
            };
            let value: Value = serde_json::from_str(&line)
                .map_err(|e| self.died(&format!("unreadable answer `{line}`: {e}")))?;
            match id {
                None => return Ok(value),
                Some(id) if value.get("id").and_then(Value::as_u64) == Some(id) => {
                    return Ok(value)
                }
                Some(_) => continue,
            }
        }
    }

    fn wait_ready(&self) -> Result<(), StartError> {
        let session = self.lock();
        let deadline = Instant::now() + SESSION_START_TIMEOUT;
        let answer = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match session.answers.recv_timeout(left) {
                Ok(line) => match serde_json::from_str::<Value>(&line) {
                    Ok(value) => break Ok(value),
                    Err(_) => continue,
                },
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    break Err(format!("no ready line within {SESSION_START_TIMEOUT:?}"))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    break Err("the session exited".to_owned())
                }
            }
        };
        drop(session);
        let failure = match answer {
            Ok(value) if value.get("ready").and_then(Value::as_bool) == Some(true) => return Ok(()),
            Ok(value) => format!("the session refused to start: {value}"),
            Err(reason) => reason,
        };
        Err(StartError::new(format!(
            "the Java BookKeeper client did not start on {}: {failure}. Log {}:\n{}",
            self.uri,
            self.log.display(),
            log_excerpt(&self.log, 40)
        )))
    }
}

impl Drop for JavaClient {
    fn drop(&mut self) {
        let process = self.lock().process.take();
        if let Some(process) = process {
            process.close();
        }
    }
}

fn field<T: serde::de::DeserializeOwned>(answer: &Value, name: &str) -> Result<T, JavaError> {
    let value = answer
        .get(name)
        .ok_or_else(|| JavaError::session(format!("the answer {answer} has no `{name}`")))?;
    T::deserialize(value)
        .map_err(|e| JavaError::session(format!("bad `{name}` in the answer {answer}: {e}")))
}

fn parse<T: serde::de::DeserializeOwned>(answer: Value) -> Result<T, JavaError> {
    serde_json::from_value(answer.clone())
        .map_err(|e| JavaError::session(format!("unexpected answer {answer}: {e}")))
}

/// FNV-1a, 64 bits: a stable content hash for the compile cache.
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        hash ^= u64::from(*b);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

/// The folder of the compiled helper, compiling it on first use.
fn compiled_helper(installation: &Installation) -> Result<PathBuf, StartError> {
    static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| compile(installation))
        .clone()
        .map_err(StartError::new)
}

fn compile(installation: &Installation) -> Result<PathBuf, String> {
    let name = format!("interop-{:016x}", fnv1a(SOURCE.as_bytes()));
    let preferred = installation
        .lib
        .parent()
        .map(|p| p.join(&name))
        .unwrap_or_else(|| std::env::temp_dir().join(&name));
    let fallback = std::env::temp_dir().join(format!("bkswitch-{name}"));
    let mut errors = Vec::new();
    for target in [preferred, fallback] {
        match compile_into(installation, &target) {
            Ok(classes) => return Ok(classes),
            Err(e) => errors.push(e),
        }
    }
    Err(errors.join("; "))
}

/// Compiles into `<target>/classes` through a temporary sibling folder renamed
/// into place, so that concurrent test binaries never see a half-compiled
/// helper.
fn compile_into(installation: &Installation, target: &Path) -> Result<PathBuf, String> {
    let classes = target.join("classes");
    if target.join(".complete").is_file() {
        return Ok(classes);
    }
    let parent = target
        .parent()
        .ok_or_else(|| format!("{} has no parent folder", target.display()))?;
    fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".interop-partial-")
        .tempdir_in(parent)
        .map_err(|e| format!("cannot create a folder in {}: {e}", parent.display()))?;
    let source = staging.path().join("BkInterop.java");
    fs::write(&source, SOURCE).map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    let output = Command::new(&installation.javac)
        .args(["-nowarn", "-encoding", "UTF-8", "-d"])
        .arg(staging.path().join("classes"))
        .arg("-cp")
        .arg(classpath(&installation.lib))
        .arg(&source)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", installation.javac))?;
    if !output.status.success() {
        return Err(format!(
            "javac failed on the interop helper ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    fs::write(staging.path().join(".complete"), "compiled\n")
        .map_err(|e| format!("cannot write the marker: {e}"))?;
    let staged = staging.keep();
    match fs::rename(&staged, target) {
        Ok(()) => Ok(classes),
        Err(e) => {
            let _ = fs::remove_dir_all(&staged);
            if target.join(".complete").is_file() {
                // Another process compiled it meanwhile.
                Ok(classes)
            } else {
                Err(format!(
                    "cannot move the compiled helper to {}: {e}",
                    target.display()
                ))
            }
        }
    }
}

/// Base64 (standard, padded) byte strings in JSON.
mod base64_bytes {
    use super::*;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = String::deserialize(d)?;
        B64.decode(text).map_err(serde::de::Error::custom)
    }
}

/// A JSON object of base64 values.
mod base64_map {
    use super::*;

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(
        d: D,
    ) -> Result<BTreeMap<String, Vec<u8>>, D::Error> {
        let map = BTreeMap::<String, String>::deserialize(d)?;
        map.into_iter()
            .map(|(k, v)| {
                B64.decode(v)
                    .map(|v| (k, v))
                    .map_err(serde::de::Error::custom)
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_match_the_helper() {
        assert_eq!(deterministic_payload(7, None), b"entry-7");
        let p = deterministic_payload(3, Some(300));
        assert_eq!(p.len(), 300);
        assert_eq!(p[0], 93);
        assert_eq!(p[1], 94);
        assert_eq!(p[200], ((93 + 200) % 256) as u8);
    }

    #[test]
    fn create_options_encode_as_the_helper_expects() {
        let json = CreateOptions::new(3, 2, 2)
            .digest(DigestType::Mac)
            .password("pw")
            .custom("k", b"v".to_vec())
            .ledger_id(42)
            .to_json();
        assert_eq!(json["cmd"], "create");
        assert_eq!(json["digest"], "MAC");
        assert_eq!(json["password"], B64.encode("pw"));
        assert_eq!(json["customMetadata"]["k"], B64.encode("v"));
        assert_eq!(json["ledgerId"], 42);
    }

    #[test]
    fn metadata_answers_decode() {
        let answer = json!({
            "ok": true, "id": 3, "ledgerId": 5, "ensembleSize": 3, "writeQuorumSize": 2,
            "ackQuorumSize": 2, "digestType": "CRC32C", "hasPassword": true,
            "password": B64.encode("pw"), "customMetadata": {"k": B64.encode("v")},
            "state": "CLOSED", "closed": true, "lastEntryId": 9, "length": 90, "ctime": 1,
            "cToken": 77, "metadataFormatVersion": 3,
            "ensembles": [{"firstEntryId": 0, "bookies": ["127.0.0.1:1", "127.0.0.1:2"]}],
        });
        let md: JavaLedgerMetadata = parse(answer).unwrap();
        assert_eq!(md.digest_type, DigestType::Crc32c);
        assert_eq!(md.password, b"pw");
        assert_eq!(md.custom_metadata["k"], b"v");
        assert_eq!(md.c_token, 77);
        assert_eq!(md.ensembles[0].bookies.len(), 2);
    }

    #[test]
    fn the_hash_is_stable() {
        assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    }
}
