//! Apache Pulsar's own metadata store (`org.apache.pulsar:pulsar-metadata`,
//! `java/PulsarMetadata.java`) in a JVM session: the judge of the layout
//! bkswitch's `EtcdStore` keeps on etcd, and the Java side of the
//! metadata-store bench.

use std::fmt;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use bkswitch_zk_harness::{GuardedIo, GuardedProcess};
use serde_json::{json, Value};
use tempfile::TempDir;

use crate::install::{classpath, java_binary, java_cache_dir, javac_binary, REQUIRE_ENV};
use crate::java_compile::{compiled, JavaSource};
use crate::logs::log_excerpt;
use crate::pulsar::PULSAR_VERSION;
use crate::{StartError, JAVA_17_FLAGS};

const SOURCE: &str = include_str!("../java/PulsarMetadata.java");

/// How long [`PulsarMetadataStore::start`] waits for the store to open.
pub const PULSAR_STORE_START_TIMEOUT: Duration = Duration::from_secs(60);

/// How long one command may take (a bench run is given its own bound).
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

/// The folder of the `pulsar-metadata` classpath that
/// `scripts/fetch-java-deps.sh` fetches (its own folder: its Netty, gRPC and
/// ZooKeeper versions are not BookKeeper's).
pub fn pulsar_metadata_lib_dir() -> PathBuf {
    java_cache_dir()
        .join(format!("pulsar-metadata-{PULSAR_VERSION}"))
        .join("lib")
}

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Java, javac and the `pulsar-metadata` jars, checked once per process.
fn checked() -> Result<(String, String, PathBuf), StartError> {
    static CHECKED: OnceLock<Result<(String, String, PathBuf), String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let (java, javac, lib) = (java_binary(), javac_binary(), pulsar_metadata_lib_dir());
            let mut missing = Vec::new();
            if !runs(&java) {
                missing.push(format!(
                    "cannot run `{java} -version`: install a Java 17 runtime or set JAVA"
                ));
            }
            if !runs(&javac) {
                missing.push(format!(
                    "cannot run `{javac} -version`: install a JDK (`apt-get install -y default-jdk-headless`)"
                ));
            }
            let jar = lib.join(format!("pulsar-metadata-{PULSAR_VERSION}.jar"));
            if !(lib.join(".complete").is_file() && jar.is_file()) {
                missing.push(format!(
                    "Pulsar's metadata store jars ({}) are not in {}: run scripts/fetch-java-deps.sh",
                    jar.file_name().unwrap_or_default().to_string_lossy(),
                    lib.display()
                ));
            }
            if missing.is_empty() {
                Ok((java, javac, lib))
            } else {
                Err(missing.join("; "))
            }
        })
        .clone()
        .map_err(StartError::new)
}

/// Whether Pulsar's metadata store can run here (java, javac and the
/// `pulsar-metadata` jars are present).
///
/// When it cannot: with `BKSWITCH_REQUIRE_BK=1` (the project's test script
/// sets it) this panics, saying what is missing and how to get it; otherwise it
/// prints a loud `SKIPPED: …` line on stderr and returns `false`.
///
/// # Panics
///
/// When something is missing and `BKSWITCH_REQUIRE_BK=1`.
pub fn pulsar_metadata_available() -> bool {
    match checked() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
                panic!("{REQUIRE_ENV} is set but Pulsar's metadata store cannot run here: {e}");
            }
            let thread = std::thread::current();
            let _ = writeln!(
                std::io::stderr(),
                "\nSKIPPED: {}: Pulsar's metadata store is unavailable: {e}. \
                 Set {REQUIRE_ENV}=1 to make this a failure.\n",
                thread.name().unwrap_or("this test")
            );
            false
        }
    }
}

/// A failure of Pulsar's store, or of the session.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}: {message}")]
pub struct PulsarStoreError {
    /// The simple class name of Pulsar's exception (`BadVersionException`,
    /// `NotFoundException`, `AlreadyExistsException`, …), or
    /// [`PulsarStoreError::SESSION`].
    pub kind: String,
    /// The exception's message, or what happened to the session.
    pub message: String,
}

impl PulsarStoreError {
    /// The kind of a failed session (it died, did not answer, or answered
    /// garbage).
    pub const SESSION: &'static str = "Session";

    fn session(message: impl Into<String>) -> PulsarStoreError {
        PulsarStoreError {
            kind: Self::SESSION.to_owned(),
            message: message.into(),
        }
    }
}

/// A node as Pulsar's store reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PulsarNode {
    /// The value.
    pub value: Vec<u8>,
    /// Pulsar's `Stat.getVersion()`.
    pub version: i64,
    /// Pulsar's `Stat.isEphemeral()`.
    pub ephemeral: bool,
    /// Pulsar's `Stat.isCreatedBySelf()`: on this session.
    pub created_by_self: bool,
}

/// Which operation [`PulsarMetadataStore::bench`] repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PulsarBenchOp {
    /// `get(key)`.
    Get,
    /// `put(key, value, Optional.of(version))`, with the version of the
    /// lane's previous write.
    Put,
}

/// A session of Apache Pulsar's own metadata store
/// (`MetadataStoreExtended.create(url, config)`, pulsar-metadata 4.2.4) in its
/// own JVM: `etcd:http://host:port` opens `EtcdMetadataStore` as a broker
/// does. Commands are serialized; the JVM never outlives the test process
/// ([`GuardedProcess`]).
///
/// ```no_run
/// use bkswitch_bk_harness::PulsarMetadataStore;
///
/// let pulsar = PulsarMetadataStore::start("etcd:http://127.0.0.1:2379", false).unwrap();
/// pulsar.put("/a", b"v", Some(-1)).unwrap();
/// assert_eq!(pulsar.get("/a").unwrap().unwrap().version, 0);
/// ```
pub struct PulsarMetadataStore {
    url: String,
    log: PathBuf,
    session: Mutex<Session>,
    next_id: AtomicU64,
    // Dropped last: the session's folder (log).
    _dir: TempDir,
}

struct Session {
    process: Option<GuardedProcess>,
    answers: mpsc::Receiver<String>,
}

impl fmt::Debug for PulsarMetadataStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PulsarMetadataStore")
            .field("url", &self.url)
            .field("log", &self.log)
            .finish()
    }
}

/// Hex of `bytes` (the helper's value encoding).
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(text.get(i..i + 2)?, 16).ok())
        .collect()
}

impl PulsarMetadataStore {
    /// Opens Pulsar's store on `url` (`etcd:http://127.0.0.1:2379`,
    /// `zk:127.0.0.1:2181`, …) in a new JVM; `batching` keeps Pulsar's default
    /// operation batching (a broker's `metadataStoreBatchingEnabled`: every
    /// operation waits up to 5 ms to be sent with others), else each operation
    /// is sent at once.
    ///
    /// # Errors
    ///
    /// [`StartError`] when java, javac or the jars are missing, the helper does
    /// not compile, or the store does not open (with the tail of the JVM's log).
    pub fn start(url: &str, batching: bool) -> Result<PulsarMetadataStore, StartError> {
        let (java, javac, lib) = checked()?;
        static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let classes = compiled(
            &COMPILED,
            &javac,
            &JavaSource {
                file: "PulsarMetadata.java",
                text: SOURCE,
                prefix: "pulsar-metadata-judge",
                extra: &[],
            },
            &classpath(&lib),
            lib.parent().unwrap_or(Path::new(".")),
        )?;
        let dir = tempfile::Builder::new()
            .prefix("bkswitch-pulsar-metadata-")
            .tempdir()
            .map_err(|e| StartError::new(format!("cannot create a temporary folder: {e}")))?;
        let log = dir.path().join("session.log");
        let mut command = Command::new(&java);
        command
            .arg("-Xms64m")
            .arg("-Xmx256m")
            .arg("-XX:-UsePerfData")
            .args(JAVA_17_FLAGS)
            .arg("-cp")
            .arg(format!("{}:{}", classes.display(), classpath(&lib)))
            .arg("PulsarMetadata")
            .arg(url);
        if batching {
            command.arg("--batching");
        }
        command.current_dir(dir.path());
        let mut process = GuardedProcess::spawn(&command, dir.path(), &log, GuardedIo::Piped, true)
            .map_err(|e| StartError::new(format!("cannot run sh to start Pulsar's store: {e}")))?;
        let stdout = process
            .take_stdout()
            .ok_or_else(|| StartError::new("Pulsar's store session has no stdout pipe"))?;
        let (tx, rx) = mpsc::channel();
        std::thread::Builder::new()
            .name("pulsar-metadata-session".to_owned())
            .spawn(move || {
                for line in BufReader::new(stdout).lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            })
            .map_err(|e| StartError::new(format!("cannot start a reader thread: {e}")))?;
        let store = PulsarMetadataStore {
            url: url.to_owned(),
            log,
            session: Mutex::new(Session {
                process: Some(process),
                answers: rx,
            }),
            next_id: AtomicU64::new(1),
            _dir: dir,
        };
        let ready = store.receive(None, PULSAR_STORE_START_TIMEOUT);
        match ready {
            Ok(v) if v.get("ready").and_then(Value::as_bool) == Some(true) => Ok(store),
            Ok(v) => Err(StartError::new(format!(
                "Pulsar's store did not open on {url}: {v}. Log {}:\n{}",
                store.log.display(),
                log_excerpt(&store.log, 30)
            ))),
            Err(e) => Err(StartError::new(format!(
                "Pulsar's store did not open on {url}: {e}"
            ))),
        }
    }

    /// The URL the store was opened on.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The JVM's log (standard error).
    pub fn log_path(&self) -> &Path {
        &self.log
    }

    fn lock(&self) -> MutexGuard<'_, Session> {
        self.session.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn died(&self, what: &str) -> PulsarStoreError {
        PulsarStoreError::session(format!(
            "{what}; Pulsar's store session on {} has failed. Log {}:\n{}",
            self.url,
            self.log.display(),
            log_excerpt(&self.log, 30)
        ))
    }

    /// The answer with this id (lines that are not JSON, and older answers,
    /// are skipped), or the first JSON line when `id` is `None`.
    fn receive(&self, id: Option<u64>, timeout: Duration) -> Result<Value, PulsarStoreError> {
        let session = self.lock();
        let deadline = Instant::now() + timeout;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            let line = match session.answers.recv_timeout(left) {
                Ok(line) => line,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    return Err(self.died(&format!("no answer within {timeout:?}")))
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    return Err(self.died("the session's output ended"))
                }
            };
            let Ok(value) = serde_json::from_str::<Value>(&line) else {
                continue;
            };
            match id {
                None => return Ok(value),
                Some(id) if value.get("id").and_then(Value::as_u64) == Some(id) => {
                    return Ok(value)
                }
                Some(_) => continue,
            }
        }
    }

    /// Sends one command (see the helper's header) and returns the answer.
    ///
    /// # Errors
    ///
    /// Pulsar's exception for `{"ok":false,…}`; a [`PulsarStoreError::SESSION`]
    /// error when the session failed.
    pub fn call(&self, command: Value, timeout: Duration) -> Result<Value, PulsarStoreError> {
        let Value::Object(mut command) = command else {
            return Err(PulsarStoreError::session("a command is a JSON object"));
        };
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        command.insert("id".to_owned(), json!(id));
        let line = Value::Object(command).to_string();
        {
            let mut session = self.lock();
            let process = session
                .process
                .as_mut()
                .ok_or_else(|| PulsarStoreError::session("the session has ended"))?;
            let stdin = process
                .stdin()
                .ok_or_else(|| PulsarStoreError::session("the session has no input"))?;
            stdin
                .write_all(line.as_bytes())
                .and_then(|()| stdin.write_all(b"\n"))
                .and_then(|()| stdin.flush())
                .map_err(|e| self.died(&format!("cannot send the command: {e}")))?;
        }
        let answer = self.receive(Some(id), timeout)?;
        if answer.get("ok").and_then(Value::as_bool) == Some(true) {
            return Ok(answer);
        }
        Err(PulsarStoreError {
            kind: answer
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("Unknown")
                .to_owned(),
            message: answer
                .get("error")
                .and_then(Value::as_str)
                .unwrap_or("no message")
                .to_owned(),
        })
    }

    /// `get(path)`.
    ///
    /// # Errors
    ///
    /// Pulsar's exception, or a failed session.
    pub fn get(&self, path: &str) -> Result<Option<PulsarNode>, PulsarStoreError> {
        let a = self.call(json!({ "cmd": "get", "path": path }), CALL_TIMEOUT)?;
        if a.get("found").and_then(Value::as_bool) != Some(true) {
            return Ok(None);
        }
        let bad = || PulsarStoreError::session(format!("unexpected answer {a}"));
        Ok(Some(PulsarNode {
            value: a
                .get("value")
                .and_then(Value::as_str)
                .and_then(unhex)
                .ok_or_else(bad)?,
            version: a.get("version").and_then(Value::as_i64).ok_or_else(bad)?,
            ephemeral: a.get("ephemeral").and_then(Value::as_bool) == Some(true),
            created_by_self: a.get("createdBySelf").and_then(Value::as_bool) == Some(true),
        }))
    }

    /// `put(path, value, expectedVersion)` (`Some(-1)`: must not exist);
    /// returns the path written and Pulsar's `Stat.getVersion()`.
    ///
    /// # Errors
    ///
    /// Pulsar's exception (`BadVersionException`, …), or a failed session.
    pub fn put(
        &self,
        path: &str,
        value: &[u8],
        expected_version: Option<i64>,
    ) -> Result<(String, i64), PulsarStoreError> {
        self.put_with(path, value, expected_version, false, false)
    }

    /// `put` with Pulsar's create options `Ephemeral` and `Sequential`.
    ///
    /// # Errors
    ///
    /// As [`put`](Self::put).
    pub fn put_with(
        &self,
        path: &str,
        value: &[u8],
        expected_version: Option<i64>,
        ephemeral: bool,
        sequential: bool,
    ) -> Result<(String, i64), PulsarStoreError> {
        let a = self.call(
            json!({
                "cmd": "put", "path": path, "value": hex(value),
                "expectedVersion": expected_version,
                "ephemeral": ephemeral, "sequential": sequential,
            }),
            CALL_TIMEOUT,
        )?;
        match (
            a.get("path").and_then(Value::as_str),
            a.get("version").and_then(Value::as_i64),
        ) {
            (Some(p), Some(v)) => Ok((p.to_owned(), v)),
            _ => Err(PulsarStoreError::session(format!("unexpected answer {a}"))),
        }
    }

    /// `delete(path, expectedVersion)`.
    ///
    /// # Errors
    ///
    /// Pulsar's exception, or a failed session.
    pub fn delete(
        &self,
        path: &str,
        expected_version: Option<i64>,
    ) -> Result<(), PulsarStoreError> {
        self.call(
            json!({ "cmd": "delete", "path": path, "expectedVersion": expected_version }),
            CALL_TIMEOUT,
        )
        .map(|_| ())
    }

    /// `exists(path)`.
    ///
    /// # Errors
    ///
    /// Pulsar's exception, or a failed session.
    pub fn exists(&self, path: &str) -> Result<bool, PulsarStoreError> {
        let a = self.call(json!({ "cmd": "exists", "path": path }), CALL_TIMEOUT)?;
        Ok(a.get("exists").and_then(Value::as_bool) == Some(true))
    }

    /// `getChildrenFromStore(path)`: read from the store, not Pulsar's cache.
    ///
    /// # Errors
    ///
    /// Pulsar's exception, or a failed session.
    pub fn children(&self, path: &str) -> Result<Vec<String>, PulsarStoreError> {
        let a = self.call(json!({ "cmd": "children", "path": path }), CALL_TIMEOUT)?;
        a.get("children")
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .ok_or_else(|| PulsarStoreError::session(format!("unexpected answer {a}")))
    }

    /// Runs `iters` operations `op` inside the JVM, in one lane per key (one
    /// operation in flight per lane, so `keys.len()` in flight in all), a put
    /// writing `size` bytes with the version its lane's previous write
    /// returned; returns the time the JVM measured from the first operation
    /// to the last answer. The keys must exist.
    ///
    /// # Errors
    ///
    /// Pulsar's exception (a lost compare-and-set: another writer on a key),
    /// or a failed session.
    pub fn bench(
        &self,
        op: PulsarBenchOp,
        keys: &[String],
        iters: u64,
        size: usize,
    ) -> Result<Duration, PulsarStoreError> {
        let op = match op {
            PulsarBenchOp::Get => "get",
            PulsarBenchOp::Put => "put",
        };
        let a = self.call(
            json!({ "cmd": "bench", "op": op, "keys": keys, "iters": iters, "size": size }),
            Duration::from_secs(600),
        )?;
        a.get("nanos")
            .and_then(Value::as_u64)
            .map(Duration::from_nanos)
            .ok_or_else(|| PulsarStoreError::session(format!("unexpected answer {a}")))
    }

    /// Closes Pulsar's store (its etcd lease is revoked: its ephemeral nodes
    /// go); the session stays up, every later command fails.
    ///
    /// # Errors
    ///
    /// Pulsar's exception, or a failed session.
    pub fn close_store(&self) -> Result<(), PulsarStoreError> {
        self.call(json!({ "cmd": "close" }), CALL_TIMEOUT)
            .map(|_| ())
    }

    /// Ends the session: the helper closes the store and exits (its JVM is
    /// killed if it did not).
    pub fn quit(self) {
        let _ = self.call(json!({ "cmd": "quit" }), Duration::from_secs(5));
        let process = self.lock().process.take();
        if let Some(mut process) = process {
            process.wait_timeout(Duration::from_secs(10));
            process.close();
        }
    }
}

impl Drop for PulsarMetadataStore {
    fn drop(&mut self) {
        let process = self.lock().process.take();
        if let Some(process) = process {
            process.close();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hex_round_trips() {
        let bytes: Vec<u8> = (0..=255).collect();
        assert_eq!(unhex(&hex(&bytes)).as_deref(), Some(&bytes[..]));
        assert_eq!(unhex("0"), None);
        assert_eq!(unhex("zz"), None);
    }

    #[test]
    fn the_pom_pins_pulsars_version() {
        let pom = include_str!("../java/pulsar-metadata/pom.xml");
        assert!(pom.contains(&format!(
            "<pulsar.version>{PULSAR_VERSION}</pulsar.version>"
        )));
    }
}
