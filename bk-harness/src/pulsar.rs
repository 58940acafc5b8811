//! Apache Pulsar's own metadata classes as the judge of bkswitch's bytes
//! (`java/PulsarFormats.java` against `org.apache.pulsar:managed-ledger` and
//! `pulsar-broker`).

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::install::{classpath, installation, java_cache_dir};
use crate::java_compile::{compiled, JavaSource};
use crate::{StartError, JAVA_17_FLAGS};

/// The Pulsar release whose classes judge the bytes (the newest on Maven
/// Central that runs on Java 17 and has `LedgerInfo.properties`). Keep in step
/// with `bk-harness/java/pulsar/pom.xml`.
pub const PULSAR_VERSION: &str = "4.2.4";

const SOURCE: &str = include_str!("../java/PulsarFormats.java");

/// The folder of the Pulsar jars `scripts/fetch-java-deps.sh` fetches.
pub fn pulsar_lib_dir() -> PathBuf {
    java_cache_dir()
        .join(format!("pulsar-{PULSAR_VERSION}"))
        .join("lib")
}

/// Which Pulsar message a value is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum PulsarKind {
    /// `ManagedLedgerInfo`, the value of `/managed-ledgers/<topic>`.
    ManagedLedger,
    /// `ManagedCursorInfo`, the value of `/managed-ledgers/<topic>/<cursor>`.
    Cursor,
    /// `PositionInfo`, an entry of a cursor ledger.
    Position,
    /// `SchemaLocator`, the value of `/schemas/<id>`.
    SchemaLocator,
    /// `SchemaEntry`, the entry of a schema ledger.
    SchemaEntry,
}

impl PulsarKind {
    fn name(self) -> &'static str {
        match self {
            PulsarKind::ManagedLedger => "managed-ledger",
            PulsarKind::Cursor => "cursor",
            PulsarKind::Position => "position",
            PulsarKind::SchemaLocator => "schema-locator",
            PulsarKind::SchemaEntry => "schema-entry",
        }
    }
}

/// What Pulsar's classes made of a value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Judged {
    /// The value as Pulsar's class re-serializes it.
    pub reencoded: Vec<u8>,
    /// Whether that is byte for byte the value given.
    pub identical: bool,
    /// The values of `_pulsar.bookieClusterName` Pulsar's accessors find
    /// (`LedgerInfo.getPropertiesList()` of each ledger, or
    /// `ManagedCursorInfo.getCursorPropertiesList()`).
    pub stamps: Vec<String>,
    /// For a schema locator: every index entry as Pulsar reads it, the latest
    /// first, as `(version, ledger id, entry id, hash)`.
    pub schema_entries: Vec<(i64, i64, i64, Vec<u8>)>,
}

/// A batch of requests to Pulsar's classes, run in one JVM.
#[derive(Debug, Default)]
pub struct PulsarJudge {
    requests: Vec<Value>,
}

impl PulsarJudge {
    /// An empty batch.
    pub fn new() -> PulsarJudge {
        PulsarJudge::default()
    }

    /// Asks Pulsar's class for `kind` to decode and re-encode `bytes`.
    pub fn decode(&mut self, kind: PulsarKind, bytes: &[u8]) -> &mut Self {
        self.requests
            .push(json!({ "cmd": "decode", "kind": kind.name(), "data": B64.encode(bytes) }));
        self
    }

    /// Asks Pulsar's classes for a sample `kind` (managed ledger, cursor or
    /// position), stamped with `stamp` where the kind has a place for it.
    pub fn encode(&mut self, kind: PulsarKind, stamp: Option<&str>) -> &mut Self {
        self.requests
            .push(json!({ "cmd": "encode", "kind": kind.name(), "stamp": stamp }));
        self
    }

    /// Runs the batch; one answer per request, in order: `Ok` with the JSON
    /// answer, or `Err` with Pulsar's error for that value.
    ///
    /// # Errors
    /// [`StartError`] when Java, the jars or the helper are missing, or the JVM
    /// does not answer every request.
    pub fn run(&self) -> Result<Vec<Result<Value, String>>, StartError> {
        let installation = installation()?;
        let pulsar = pulsar_lib_dir();
        if !pulsar
            .join(format!("managed-ledger-{PULSAR_VERSION}.jar"))
            .is_file()
        {
            return Err(StartError::new(format!(
                "Pulsar's jars are missing in {}; run scripts/fetch-java-deps.sh",
                pulsar.display()
            )));
        }
        let cp = format!("{}:{}", classpath(&installation.lib), classpath(&pulsar));
        static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let classes = compiled(
            &COMPILED,
            &installation.javac,
            &JavaSource {
                file: "PulsarFormats.java",
                text: SOURCE,
                prefix: "pulsar-formats",
                extra: &[],
            },
            &cp,
            pulsar.parent().unwrap_or(Path::new(".")),
        )?;
        let mut child = Command::new(&installation.java)
            .arg("-Xmx256m")
            .args(JAVA_17_FLAGS)
            .arg("-cp")
            .arg(format!("{}:{cp}", classes.display()))
            .arg("PulsarFormats")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StartError::new(format!("cannot start {}: {e}", installation.java)))?;
        {
            let mut stdin = child.stdin.take().expect("piped");
            for r in &self.requests {
                writeln!(stdin, "{r}")
                    .map_err(|e| StartError::new(format!("cannot write to the judge: {e}")))?;
            }
        }
        let stdout = child.stdout.take().expect("piped");
        let mut answers = Vec::new();
        for line in BufReader::new(stdout).lines() {
            let line = line.map_err(|e| StartError::new(format!("cannot read the judge: {e}")))?;
            let v: Value = serde_json::from_str(&line)
                .map_err(|e| StartError::new(format!("bad answer `{line}`: {e}")))?;
            answers.push(if v["ok"] == json!(true) {
                Ok(v)
            } else {
                Err(v["error"].as_str().unwrap_or("unknown error").to_owned())
            });
        }
        let output = child
            .wait_with_output()
            .map_err(|e| StartError::new(format!("the judge did not end: {e}")))?;
        if answers.len() != self.requests.len() {
            return Err(StartError::new(format!(
                "the judge answered {} of {} requests: {}",
                answers.len(),
                self.requests.len(),
                String::from_utf8_lossy(&output.stderr)
            )));
        }
        Ok(answers)
    }
}

/// Reads a decode answer.
///
/// # Errors
/// The answer's own error, or a missing field.
pub fn judged(answer: &Result<Value, String>) -> Result<Judged, String> {
    let v = answer.as_ref().map_err(Clone::clone)?;
    let bytes = |field: &str| {
        v[field]
            .as_str()
            .and_then(|s| B64.decode(s).ok())
            .ok_or_else(|| format!("no `{field}` in {v}"))
    };
    Ok(Judged {
        reencoded: bytes("reencoded")?,
        identical: v["identical"] == json!(true),
        stamps: v["stamps"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default(),
        schema_entries: v["fields"]["entries"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|e| {
                        (
                            e["version"].as_i64().unwrap_or(-1),
                            e["ledgerId"].as_i64().unwrap_or(-1),
                            e["entryId"].as_i64().unwrap_or(-1),
                            e["hash"]
                                .as_str()
                                .and_then(|h| B64.decode(h).ok())
                                .unwrap_or_default(),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// Reads an encode answer: the bytes Pulsar's classes wrote.
///
/// # Errors
/// The answer's own error, or a missing field.
pub fn encoded(answer: &Result<Value, String>) -> Result<Vec<u8>, String> {
    let v = answer.as_ref().map_err(Clone::clone)?;
    v["data"]
        .as_str()
        .and_then(|s| B64.decode(s).ok())
        .ok_or_else(|| format!("no `data` in {v}"))
}
