//! A session of the Java BookKeeper client (`java/BkInterop.java`), driven with
//! JSON lines.

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use bkswitch_zk_harness::{GuardedIo, GuardedProcess};
use serde_json::{json, Value};
use tempfile::TempDir;

mod types;

pub use types::{
    codes, deterministic_payload, BenchAddOptions, BenchAddResult, BenchReadResult, CreateOptions,
    DigestType, Entry, JavaCopyResult, JavaError, JavaLedgerMetadata, OpenedLedger, Segment,
};

use crate::install::{classpath, installation};
use crate::java_compile::{compiled, JavaSource};
use crate::logs::{log_excerpt, tail};
use crate::{StartError, JAVA_17_FLAGS};

/// The helper's source, compiled once per content (see [`JavaClient`]).
const SOURCE: &str = include_str!("../../java/BkInterop.java");
/// The pipelined copier the helper runs for `copyPipelined`.
const COPIER_SOURCE: &str = include_str!("../../java/PipelinedCopier.java");
/// The simple copier the helper runs for `copyFrom`.
const SIMPLE_COPIER_SOURCE: &str = include_str!("../../java/SimpleCopier.java");

/// The helper's main class.
const MAIN_CLASS: &str = "BkInterop";

/// How long [`JavaClient::try_start`] waits for the session to be ready.
pub const SESSION_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a command may take by default (see
/// [`JavaClientBuilder::call_timeout`]).
pub const CALL_TIMEOUT: Duration = Duration::from_secs(120);

/// Options of a [`JavaClient`]; start it with [`start`](Self::start).
#[derive(Debug, Clone)]
pub struct JavaClientBuilder {
    uri: String,
    v3: bool,
    conf: Vec<(String, String)>,
    jvm_args: Vec<String>,
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

    /// Adds an argument to the JVM's command line, after the harness's own
    /// (so `-Xms…` or `-XX:…` given here win over the defaults): GC and
    /// heap settings, `-D` system properties such as Netty's.
    pub fn jvm_arg(mut self, arg: impl Into<String>) -> Self {
        self.jvm_args.push(arg.into());
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
        static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let classes = compiled(
            &COMPILED,
            &installation.javac,
            &JavaSource {
                file: "BkInterop.java",
                text: SOURCE,
                prefix: "interop",
                extra: &[
                    ("PipelinedCopier.java", COPIER_SOURCE),
                    ("SimpleCopier.java", SIMPLE_COPIER_SOURCE),
                ],
            },
            &classpath(&installation.lib),
            installation
                .lib
                .parent()
                .unwrap_or(installation.lib.as_path()),
        )?;
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
            .args(&self.jvm_args)
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
            jvm_args: Vec::new(),
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

    /// Measures random reads: `count` single entries at random ids of the
    /// ledger (opened as [`bench_read`](Self::bench_read) does), `inflight` at a
    /// time.
    ///
    /// # Errors
    ///
    /// As [`bench_read`](Self::bench_read).
    pub fn bench_random_read(
        &self,
        ledger_id: i64,
        count: u32,
        inflight: u32,
    ) -> Result<BenchReadResult, JavaError> {
        parse(self.call(json!({
            "cmd": "benchRandomRead",
            "ledgerId": ledger_id,
            "count": count,
            "inflight": inflight,
        }))?)
    }

    /// Copies ledgers with the simple Java copier (one blocking thread per
    /// copy, one read in flight per copy; see [`JavaClient::copy_pipelined`]
    /// for the strong one): from the cluster at `source_uri` into this
    /// session's cluster, `copies` ledgers at a time; each opened without
    /// recovery, read in blocking batches of `window` entries, created with `createLedgerAdv` under the
    /// same id, quorums and custom metadata, its entries added with their ids
    /// with at most `window` adds in flight, then closed. CRC32C, no password.
    ///
    /// # Errors
    ///
    /// The Java client's error (a source ledger missing, a target id taken…).
    pub fn copy_from(
        &self,
        source_uri: &str,
        ledger_ids: &[i64],
        copies: u32,
        window: u32,
    ) -> Result<JavaCopyResult, JavaError> {
        parse(self.call(json!({
            "cmd": "copyFrom",
            "sourceUri": source_uri,
            "ledgerIds": ledger_ids,
            "copies": copies,
            "window": window,
        }))?)
    }

    /// Copies ledgers with the strongest Java copier the harness has
    /// (`java/PipelinedCopier.java`): from the cluster at `source_uri` into this
    /// session's cluster, `copies` ledgers at a time, fully asynchronous; each
    /// opened without recovery, created with `makeAdv` under the same id,
    /// quorums and custom metadata, read `read_batch` entries a read with
    /// several reads in flight and each entry handed to `writeAsync` as its
    /// read completes, at most `window` entries in flight per ledger (read
    /// requested, not yet acknowledged), then closed. CRC32C, no password. The
    /// session's `conf` settings apply to both clusters' clients.
    ///
    /// # Errors
    ///
    /// The Java client's error (a source ledger missing, a target id taken…).
    pub fn copy_pipelined(
        &self,
        source_uri: &str,
        ledger_ids: &[i64],
        copies: u32,
        window: u32,
        read_batch: u32,
    ) -> Result<JavaCopyResult, JavaError> {
        parse(self.call(json!({
            "cmd": "copyPipelined",
            "sourceUri": source_uri,
            "ledgerIds": ledger_ids,
            "copies": copies,
            "window": window,
            "readBatch": read_batch,
        }))?)
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

pub(super) fn parse<T: serde::de::DeserializeOwned>(answer: Value) -> Result<T, JavaError> {
    serde_json::from_value(answer.clone())
        .map_err(|e| JavaError::session(format!("unexpected answer {answer}: {e}")))
}
