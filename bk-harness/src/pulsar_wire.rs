//! Apache Pulsar's own `Commands` (pulsar-common) as the judge of bkswitch's
//! wire frames (`java/PulsarWire.java`).
//!
//! Pulsar writes frames for bkswitch to read ([`PulsarWireJudge::encode`])
//! and reads bkswitch's frames as its decoder does
//! ([`PulsarWireJudge::decode`]): the command parsed by Pulsar's generated
//! class, the payload checksum verified, everything serialized again with
//! Pulsar's classes so that the bytes can be compared.
//!
//! The classpath is the `pulsar-metadata` one `scripts/fetch-java-deps.sh`
//! fetches ([`pulsar_metadata_lib_dir`]): it
//! holds `pulsar-common`, `pulsar-client-api`, Netty and the CRC32C
//! implementation `Commands` needs.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use serde_json::{json, Value};

use crate::install::{classpath, java_binary, javac_binary, REQUIRE_ENV};
use crate::java_compile::{compiled, JavaSource};
use crate::pulsar::PULSAR_VERSION;
use crate::pulsar_metadata::pulsar_metadata_lib_dir;
use crate::StartError;

const SOURCE: &str = include_str!("../java/PulsarWire.java");

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Java, javac and the `pulsar-common` jar, checked once per process.
fn checked() -> Result<(String, String, PathBuf), StartError> {
    static CHECKED: OnceLock<Result<(String, String, PathBuf), String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let (java, javac, lib) = (java_binary(), javac_binary(), pulsar_metadata_lib_dir());
            let mut missing = Vec::new();
            if !runs(&java) {
                missing.push(format!("cannot run `{java} -version`: install a Java 17 runtime or set JAVA"));
            }
            if !runs(&javac) {
                missing.push(format!(
                    "cannot run `{javac} -version`: install a JDK (`apt-get install -y default-jdk-headless`)"
                ));
            }
            let jar = lib.join(format!("pulsar-common-{PULSAR_VERSION}.jar"));
            if !(lib.join(".complete").is_file() && jar.is_file()) {
                missing.push(format!(
                    "pulsar-common-{PULSAR_VERSION}.jar is not in {}: run scripts/fetch-java-deps.sh",
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

/// Whether Pulsar's `Commands` can judge here (java, javac and the
/// `pulsar-common` jar are present).
///
/// When it cannot: with `BKSWITCH_REQUIRE_BK=1` (the project's test script
/// sets it) this panics, saying what is missing; otherwise it prints a loud
/// `SKIPPED: …` line on stderr and returns `false`.
///
/// # Panics
///
/// When something is missing and `BKSWITCH_REQUIRE_BK=1`.
pub fn pulsar_wire_available() -> bool {
    match checked() {
        Ok(_) => true,
        Err(e) => {
            if std::env::var(REQUIRE_ENV).is_ok_and(|v| !v.is_empty() && v != "0") {
                panic!("{REQUIRE_ENV} is set but Pulsar's Commands cannot run here: {e}");
            }
            let thread = std::thread::current();
            let _ = writeln!(
                std::io::stderr(),
                "\nSKIPPED: {}: Pulsar's Commands is unavailable: {e}. \
                 Set {REQUIRE_ENV}=1 to make this a failure.\n",
                thread.name().unwrap_or("this test")
            );
            false
        }
    }
}

/// What Pulsar's decoder made of a frame.
#[derive(Debug, Clone, PartialEq)]
pub struct WireJudged {
    /// The command type as Pulsar names it (`LOOKUP_RESPONSE`, …).
    pub kind: String,
    /// Fields read through Pulsar's accessors (see `PulsarWire.java`).
    pub fields: Value,
    /// The frame serialized again by Pulsar's classes.
    pub reencoded: Vec<u8>,
    /// Whether that is byte for byte the frame given.
    pub identical: bool,
    /// For a payload frame: `checksummed`, `checksumValid`, the `metadata`
    /// fields, the `brokerEntryMetadata` and the `data` (base64).
    pub payload: Option<Value>,
}

/// A batch of requests to Pulsar's `Commands`, run in one JVM.
#[derive(Debug, Default)]
pub struct PulsarWireJudge {
    requests: Vec<Value>,
}

impl PulsarWireJudge {
    /// An empty batch.
    pub fn new() -> PulsarWireJudge {
        PulsarWireJudge::default()
    }

    /// Asks `Commands` for the frame of `kind` (`connect`, `lookup-response`,
    /// `send`, …; see `PulsarWire.java`) built from `params` (a JSON object).
    pub fn encode(&mut self, kind: &str, params: Value) -> &mut Self {
        let mut request = json!({ "cmd": "encode", "kind": kind });
        if let (Some(r), Value::Object(p)) = (request.as_object_mut(), params) {
            r.extend(p);
        }
        self.requests.push(request);
        self
    }

    /// Asks Pulsar's decoder to read `frame` (one whole frame).
    pub fn decode(&mut self, frame: &[u8]) -> &mut Self {
        self.requests
            .push(json!({ "cmd": "decode", "data": B64.encode(frame) }));
        self
    }

    /// Runs the batch; one answer per request, in order: `Ok` with the JSON
    /// answer, or `Err` with Pulsar's error for that request.
    ///
    /// # Errors
    /// [`StartError`] when Java, the jars or the helper are missing, or the
    /// JVM does not answer every request.
    pub fn run(&self) -> Result<Vec<Result<Value, String>>, StartError> {
        let (java, javac, lib) = checked()?;
        let cp = classpath(&lib);
        static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
        let classes = compiled(
            &COMPILED,
            &javac,
            &JavaSource {
                file: "PulsarWire.java",
                text: SOURCE,
                prefix: "pulsar-wire",
                extra: &[],
            },
            &cp,
            lib.parent().unwrap_or(Path::new(".")),
        )?;
        let mut child = Command::new(&java)
            .arg("-Xmx256m")
            .arg("-cp")
            .arg(format!("{}:{cp}", classes.display()))
            .arg("PulsarWire")
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| StartError::new(format!("cannot start {java}: {e}")))?;
        let mut stdin = child.stdin.take().expect("piped");
        let requests = self.requests.clone();
        // Written from a thread: a large batch must not fill both pipes.
        let writer = std::thread::spawn(move || -> std::io::Result<()> {
            for r in &requests {
                writeln!(stdin, "{r}")?;
            }
            Ok(())
        });
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
        let written = writer
            .join()
            .map_err(|_| StartError::new("the judge writer panicked"))?;
        let output = child
            .wait_with_output()
            .map_err(|e| StartError::new(format!("the judge did not end: {e}")))?;
        if let Err(e) = written {
            return Err(StartError::new(format!(
                "cannot write to the judge: {e}: {}",
                String::from_utf8_lossy(&output.stderr)
            )));
        }
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

/// Reads an encode answer: the frame Pulsar wrote.
///
/// # Errors
/// The answer's own error, or a missing field.
pub fn wire_encoded(answer: &Result<Value, String>) -> Result<Vec<u8>, String> {
    let v = answer.as_ref().map_err(Clone::clone)?;
    v["data"]
        .as_str()
        .and_then(|s| B64.decode(s).ok())
        .ok_or_else(|| format!("no `data` in {v}"))
}

/// Reads a decode answer.
///
/// # Errors
/// The answer's own error, or a missing field.
pub fn wire_judged(answer: &Result<Value, String>) -> Result<WireJudged, String> {
    let v = answer.as_ref().map_err(Clone::clone)?;
    Ok(WireJudged {
        kind: v["type"]
            .as_str()
            .ok_or_else(|| format!("no `type` in {v}"))?
            .to_owned(),
        fields: v["fields"].clone(),
        reencoded: v["reencoded"]
            .as_str()
            .and_then(|s| B64.decode(s).ok())
            .ok_or_else(|| format!("no `reencoded` in {v}"))?,
        identical: v["identical"] == json!(true),
        payload: v.get("payload").cloned(),
    })
}
