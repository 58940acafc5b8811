//! Real Pulsar clients (the Java client, `java/Traffic.java`, and the Python
//! client, `python/traffic.py`) producing and consuming on one topic and
//! reporting what they saw.

use std::fs;
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;
use std::time::Duration;

use bkswitch_zk_harness::{GuardedIo, GuardedProcess};
use serde::{Deserialize, Serialize};
use serde_json::Value;
use tokio::sync::watch;

use crate::install::{java_install, python_install};
use crate::logs::{keep_dirs, log_excerpt, tail};
use crate::HarnessError;

const JAVA_SOURCE: &str = include_str!("../java/Traffic.java");
const PYTHON_SOURCE: &str = include_str!("../python/traffic.py");

/// How long [`Traffic::start`] waits for the client to have its consumer and
/// producer.
pub const READY_TIMEOUT: Duration = Duration::from_secs(60);

/// Which client library drives the traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClientKind {
    /// Apache Pulsar's Java client (`pulsar-client-original`, the broker's
    /// version), `java/Traffic.java`.
    Java,
    /// Apache Pulsar's Python client (`pulsar-client` from PyPI, on the C++
    /// client), `python/traffic.py`.
    Python,
}

/// The subscription type of the traffic's consumer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscriptionKind {
    /// `Failover` (the default).
    Failover,
    /// `Exclusive`.
    Exclusive,
}

/// What a [`Traffic`] does: where, on which topic and subscription, how fast,
/// for how long.
#[derive(Debug, Clone)]
pub struct TrafficOptions {
    service_url: String,
    topic: String,
    subscription: String,
    rate: f64,
    partitioned: bool,
    duration: Option<Duration>,
    drain: Duration,
    send_timeout: Duration,
    run_id: Option<String>,
    subscription_kind: SubscriptionKind,
}

impl TrafficOptions {
    /// Traffic on `topic` (`persistent://tenant/ns/topic`) through
    /// `service_url` (`pulsar://…` or `http://…`, a broker or a proxy), the
    /// consumer on `subscription`: 20 messages a second until stopped, 10 s
    /// of drain, a 30 s send timeout, a Failover subscription.
    pub fn new(service_url: &str, topic: &str, subscription: &str) -> Self {
        Self {
            service_url: service_url.to_owned(),
            topic: topic.to_owned(),
            subscription: subscription.to_owned(),
            rate: 20.0,
            partitioned: false,
            duration: None,
            drain: Duration::from_secs(10),
            send_timeout: Duration::from_secs(30),
            run_id: None,
            subscription_kind: SubscriptionKind::Failover,
        }
    }

    /// Messages a second.
    pub fn rate(mut self, per_second: f64) -> Self {
        self.rate = per_second;
        self
    }

    /// Says the topic is partitioned (the harness creates nothing: see
    /// [`Admin::create_partitioned_topic`](crate::Admin::create_partitioned_topic)).
    /// Order is checked per partition either way.
    pub fn partitioned(mut self, partitioned: bool) -> Self {
        self.partitioned = partitioned;
        self
    }

    /// Stops producing by itself after `duration` (see [`Traffic::finish`]).
    pub fn duration(mut self, duration: Duration) -> Self {
        self.duration = Some(duration);
        self
    }

    /// How long the consumer may take, once producing stopped, to receive
    /// every acknowledged message.
    pub fn drain(mut self, drain: Duration) -> Self {
        self.drain = drain;
        self
    }

    /// The producer's send timeout (a send not acknowledged by then is a send
    /// error).
    pub fn send_timeout(mut self, timeout: Duration) -> Self {
        self.send_timeout = timeout;
        self
    }

    /// The payload prefix (`<run-id>-<seq>`); a random one by default.
    pub fn run_id(mut self, run_id: &str) -> Self {
        self.run_id = Some(run_id.to_owned());
        self
    }

    /// The consumer's subscription type.
    pub fn subscription_kind(mut self, kind: SubscriptionKind) -> Self {
        self.subscription_kind = kind;
        self
    }

    fn args(&self, run_id: &str) -> Vec<String> {
        let mut args = vec![
            self.service_url.clone(),
            self.topic.clone(),
            self.subscription.clone(),
            self.rate.to_string(),
            "--run-id".into(),
            run_id.to_owned(),
            "--drain-ms".into(),
            self.drain.as_millis().to_string(),
            "--send-timeout-ms".into(),
            self.send_timeout.as_millis().to_string(),
            "--subscription-type".into(),
            match self.subscription_kind {
                SubscriptionKind::Failover => "Failover".into(),
                SubscriptionKind::Exclusive => "Exclusive".into(),
            },
        ];
        if self.partitioned {
            args.push("--partitioned".into());
        }
        if let Some(duration) = self.duration {
            args.push("--duration-ms".into());
            args.push(duration.as_millis().to_string());
        }
        args
    }
}

/// The counters a running [`Traffic`] prints every 200 ms.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Progress {
    /// Sends attempted.
    pub sent: u64,
    /// Sends acknowledged by the broker.
    pub acked: u64,
    /// Sends failed (timed out or refused).
    pub send_errors: u64,
    /// Deliveries of this run's messages, duplicates included.
    pub received: u64,
    /// Distinct messages of this run received.
    pub unique_received: u64,
    /// Times the producer was seen disconnected (sampled every 10 ms).
    pub producer_disconnects: u64,
    /// Times the consumer was seen disconnected (sampled every 10 ms).
    pub consumer_disconnects: u64,
}

/// What a [`Traffic`] saw, once stopped and drained (the JSON report both
/// clients print; the Java client's header documents each field).
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
pub struct TrafficReport {
    /// `java` or `python`.
    pub client: String,
    /// The payload prefix.
    pub run_id: String,
    /// Sends attempted.
    pub sent: u64,
    /// Sends acknowledged by the broker.
    pub acked: u64,
    /// The highest acknowledged sequence number (-1 for none).
    pub max_acked_seq: i64,
    /// Sends failed.
    pub send_errors: u64,
    /// The first send failure.
    #[serde(default)]
    pub first_send_error: Option<String>,
    /// The longest time from a send to its acknowledgement or failure: how
    /// long a blocking `send` would have blocked.
    pub worst_blocked_send_ms: f64,
    /// Deliveries of this run's messages, duplicates included.
    pub received: u64,
    /// Distinct messages of this run received.
    pub unique_received: u64,
    /// Deliveries of a message already received.
    pub duplicates: u64,
    /// Messages acknowledged to the producer but never received.
    pub missing: u64,
    /// The first 100 of those sequence numbers.
    pub missing_seqs: Vec<u64>,
    /// Deliveries whose sequence number is below the previous one of the
    /// same partition.
    pub reordered: u64,
    /// Deliveries of other runs' messages (such as replicated ones).
    pub foreign: u64,
    /// Times the producer was seen disconnected.
    pub producer_disconnects: u64,
    /// Times the consumer was seen disconnected.
    pub consumer_disconnects: u64,
    /// Where the producer's connection ended at the end (`host:port`; Java
    /// only).
    #[serde(default)]
    pub connected_to: Option<String>,
    /// The cluster URL a PIP-188 migration redirected the producer to (Java
    /// only).
    #[serde(default)]
    pub redirected_to: Option<String>,
}

#[derive(Debug, Default, Clone)]
struct State {
    ready: Option<Value>,
    progress: Progress,
    end: Option<Result<TrafficReport, String>>,
}

/// A running traffic client: one producer and one consumer on a topic, in a
/// process of their own (a JVM, or Python), under [`GuardedProcess`] so that
/// it never outlives the test. [`stop`](Self::stop) ends it and returns its
/// [`TrafficReport`]; dropping it kills it.
#[derive(Debug)]
pub struct Traffic {
    kind: ClientKind,
    process: Option<GuardedProcess>,
    dir: PathBuf,
    state: watch::Receiver<State>,
    producer: String,
    run_id: String,
    end_timeout: Duration,
}

fn java_classes() -> Result<PathBuf, HarnessError> {
    static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| {
            let install = java_install().map_err(|e| e.to_string())?;
            let parent = install.lib.parent().unwrap_or(&install.lib).to_path_buf();
            bkswitch_bk_harness::compile_java_helper(
                "Traffic.java",
                JAVA_SOURCE,
                "traffic",
                &format!("{}/*", install.lib.display()),
                &parent,
            )
            .map_err(|e| e.to_string())
        })
        .clone()
        .map_err(HarnessError::new)
}

const CLIENT_LOG4J: &str = "status = error
name = pulsar-traffic
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = %d{HH:mm:ss.SSS} %-5level [%t] %c{1} - %msg%n
rootLogger.level = INFO
rootLogger.appenderRef.err.ref = err
";

impl Traffic {
    /// Starts a `kind` client with `options` and returns once its consumer is
    /// subscribed and its producer created (the subscription starts at the
    /// earliest message and replicates its state). The Java client is
    /// compiled on first use.
    ///
    /// # Errors
    ///
    /// When the client is not installed (see
    /// [`pulsar_available`](crate::pulsar_available) and
    /// [`python_client_available`](crate::python_client_available)), exits,
    /// or is not ready within [`READY_TIMEOUT`].
    pub async fn start(
        kind: ClientKind,
        options: &TrafficOptions,
    ) -> Result<Traffic, HarnessError> {
        let dir = tempfile::Builder::new()
            .prefix("bkswitch-traffic-")
            .tempdir()
            .map_err(|e| HarnessError::new(format!("cannot create a temporary folder: {e}")))?
            .keep();
        let result = Self::launch(kind, options, &dir).await;
        if result.is_err() && !keep_dirs() {
            let _ = fs::remove_dir_all(&dir);
        }
        result
    }

    async fn launch(
        kind: ClientKind,
        options: &TrafficOptions,
        dir: &Path,
    ) -> Result<Traffic, HarnessError> {
        let run_id = options
            .run_id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().simple().to_string()[..12].to_owned());
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            fs::write(&path, text)
                .map(|()| path.clone())
                .map_err(|e| HarnessError::new(format!("cannot write {}: {e}", path.display())))
        };
        let mut command = match kind {
            ClientKind::Java => {
                let install = java_install()?;
                let classes = tokio::task::spawn_blocking(java_classes)
                    .await
                    .map_err(|e| HarnessError::new(format!("the compile task failed: {e}")))??;
                let log4j = write("log4j2.properties", CLIENT_LOG4J)?;
                let mut command = Command::new(&install.java);
                command
                    .args(["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
                    .args(crate::PULSAR_JAVA_FLAGS)
                    .arg(format!("-Dlog4j2.configurationFile={}", log4j.display()))
                    .arg("-cp")
                    .arg(format!("{}:{}/*", classes.display(), install.lib.display()))
                    .arg("Traffic");
                command
            }
            ClientKind::Python => {
                let python = python_install()?;
                let script = write("traffic.py", PYTHON_SOURCE)?;
                let mut command = Command::new(python);
                command.arg("-u").arg(script);
                command
            }
        };
        command.args(options.args(&run_id)).current_dir(dir);
        let log = dir.join("traffic.log");
        let mut process =
            GuardedProcess::spawn(&command, dir, &log, GuardedIo::Piped, !keep_dirs())
                .map_err(|e| HarnessError::new(format!("cannot run sh to start a client: {e}")))?;
        let stdout = process
            .take_stdout()
            .ok_or_else(|| HarnessError::new("the client's standard output is not a pipe"))?;
        let (sender, state) = watch::channel(State::default());
        std::thread::Builder::new()
            .name("traffic-stdout".into())
            .spawn(move || read_lines(BufReader::new(stdout), &sender))
            .map_err(|e| HarnessError::new(format!("cannot start a reader thread: {e}")))?;

        let mut waiting = state.clone();
        let ready = tokio::time::timeout(
            READY_TIMEOUT,
            waiting.wait_for(|s| s.ready.is_some() || s.end.is_some()),
        )
        .await;
        let failure = |why: String| {
            HarnessError::new(format!(
                "the {kind:?} traffic client on {} {why}; log {}:\n{}",
                options.topic,
                log.display(),
                log_excerpt(&log, 30)
            ))
        };
        let ready = match ready {
            Err(_) => return Err(failure(format!("was not ready within {READY_TIMEOUT:?}"))),
            Ok(Err(_)) => return Err(failure("closed its output".into())),
            Ok(Ok(s)) => s.clone(),
        };
        if let Some(end) = ready.end {
            return Err(failure(format!(
                "ended before it was ready: {}",
                end.err().unwrap_or_default()
            )));
        }
        let producer = ready
            .ready
            .as_ref()
            .and_then(|r| r["producer"].as_str())
            .unwrap_or_default()
            .to_owned();
        Ok(Traffic {
            kind,
            process: Some(process),
            dir: dir.to_path_buf(),
            state,
            producer,
            run_id,
            end_timeout: options.duration.unwrap_or_default()
                + options.send_timeout
                + options.drain
                + Duration::from_secs(30),
        })
    }

    /// Which client it is.
    pub fn kind(&self) -> ClientKind {
        self.kind
    }

    /// The producer's name (as the topic's stats list it).
    pub fn producer_name(&self) -> &str {
        &self.producer
    }

    /// The payload prefix of this run.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }

    /// The client's log (its standard error: the client library's log).
    pub fn log_path(&self) -> PathBuf {
        self.dir.join("traffic.log")
    }

    /// The last `lines` lines of the client's log.
    pub fn log_tail(&self, lines: usize) -> String {
        tail(&self.log_path(), lines)
    }

    /// The latest counters (at most 200 ms old).
    pub fn progress(&self) -> Progress {
        self.state.borrow().progress
    }

    /// Waits until the counters satisfy `done`, such as
    /// `|p| p.received >= 50`.
    ///
    /// # Errors
    ///
    /// When they do not within `timeout`, or the client ended.
    pub async fn wait_for(
        &self,
        timeout: Duration,
        done: impl Fn(&Progress) -> bool,
    ) -> Result<Progress, HarnessError> {
        let mut state = self.state.clone();
        let waited = tokio::time::timeout(
            timeout,
            state.wait_for(|s| done(&s.progress) || s.end.is_some()),
        )
        .await;
        match waited {
            Ok(Ok(s)) if s.end.is_none() => Ok(s.progress),
            Ok(_) => Err(self.error("ended while waiting for its counters")),
            Err(_) => Err(self.error(&format!(
                "did not get there within {timeout:?} (last {:?})",
                self.progress()
            ))),
        }
    }

    /// Stops producing (says `stop` on its standard input), lets it drain and
    /// returns its report.
    ///
    /// # Errors
    ///
    /// When the client failed or does not report within its send timeout,
    /// drain time and 30 s.
    pub async fn stop(mut self) -> Result<TrafficReport, HarnessError> {
        if let Some(stdin) = self.process.as_mut().and_then(GuardedProcess::stdin) {
            // A client that already ended has closed its side: fine.
            let _ = stdin.write_all(b"stop\n").and_then(|()| stdin.flush());
        }
        self.finish().await
    }

    /// Waits for the report of a client that stops by itself
    /// ([`TrafficOptions::duration`]).
    ///
    /// # Errors
    ///
    /// As [`stop`](Self::stop); the wait is the duration plus that.
    pub async fn finish(mut self) -> Result<TrafficReport, HarnessError> {
        let mut state = self.state.clone();
        let waited =
            tokio::time::timeout(self.end_timeout, state.wait_for(|s| s.end.is_some())).await;
        let end = match waited {
            Ok(Ok(s)) => s.end.clone(),
            _ => None,
        };
        let result = match end {
            Some(Ok(report)) => Ok(report),
            Some(Err(e)) => Err(self.error(&format!("failed: {e}"))),
            None => Err(self.error(&format!("did not report within {:?}", self.end_timeout))),
        };
        if let Some(process) = self.process.take() {
            process.close();
        }
        result
    }

    fn error(&self, what: &str) -> HarnessError {
        HarnessError::new(format!(
            "the {:?} traffic client (run {}) {what}; log {}:\n{}",
            self.kind,
            self.run_id,
            self.log_path().display(),
            log_excerpt(&self.log_path(), 30)
        ))
    }
}

impl Drop for Traffic {
    fn drop(&mut self) {
        if let Some(process) = self.process.take() {
            process.close();
        }
        if keep_dirs() {
            eprintln!("pulsar-harness: kept {}", self.dir.display());
        }
    }
}

/// Reads the client's JSON lines into the shared state until its output
/// closes.
fn read_lines(reader: impl BufRead, sender: &watch::Sender<State>) {
    for line in reader.lines() {
        let Ok(line) = line else { break };
        let Ok(value) = serde_json::from_str::<Value>(&line) else {
            continue;
        };
        match value["type"].as_str() {
            Some("ready") => sender.send_modify(|s| s.ready = Some(value)),
            Some("progress") => {
                if let Ok(progress) = serde_json::from_value(value) {
                    sender.send_modify(|s| s.progress = progress);
                }
            }
            Some("report") => {
                let report = serde_json::from_value::<TrafficReport>(value)
                    .map_err(|e| format!("unreadable report: {e}"));
                sender.send_modify(|s| s.end = Some(report));
            }
            Some("error") => sender.send_modify(|s| {
                s.end = Some(Err(value["message"].as_str().unwrap_or("").to_owned()));
            }),
            _ => {}
        }
    }
    sender.send_modify(|s| {
        if s.end.is_none() {
            s.end = Some(Err("it exited without a report".into()));
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_a_report() {
        let (sender, receiver) = watch::channel(State::default());
        let lines = concat!(
            "{\"type\":\"ready\",\"producer\":\"p-1\"}\n",
            "noise\n",
            "{\"type\":\"progress\",\"sent\":3,\"acked\":2,\"send_errors\":0,\"received\":1,",
            "\"unique_received\":1,\"producer_disconnects\":0,\"consumer_disconnects\":0}\n",
            "{\"type\":\"report\",\"client\":\"python\",\"run_id\":\"r\",\"sent\":3,\"acked\":3,",
            "\"max_acked_seq\":2,\"send_errors\":0,\"worst_blocked_send_ms\":1.5,\"received\":3,",
            "\"unique_received\":3,\"duplicates\":0,\"missing\":0,\"missing_seqs\":[],",
            "\"reordered\":0,\"foreign\":0,\"producer_disconnects\":1,\"consumer_disconnects\":1}\n",
        );
        read_lines(lines.as_bytes(), &sender);
        let state = receiver.borrow().clone();
        assert_eq!(state.ready.unwrap()["producer"], "p-1");
        assert_eq!(state.progress.acked, 2);
        let report = state.end.unwrap().unwrap();
        assert_eq!(report.max_acked_seq, 2);
        assert_eq!(report.connected_to, None);
        assert_eq!(report.producer_disconnects, 1);
    }

    #[test]
    fn an_exit_without_report_is_an_error() {
        let (sender, receiver) = watch::channel(State::default());
        read_lines("{\"type\":\"ready\"}\n".as_bytes(), &sender);
        assert!(receiver.borrow().end.as_ref().unwrap().is_err());
    }

    #[test]
    fn options_become_arguments() {
        let args = TrafficOptions::new("pulsar://127.0.0.1:1", "persistent://a/b/c", "s")
            .rate(5.0)
            .partitioned(true)
            .duration(Duration::from_secs(2))
            .args("r1");
        assert_eq!(
            &args[..4],
            ["pulsar://127.0.0.1:1", "persistent://a/b/c", "s", "5"]
        );
        assert!(args.windows(2).any(|w| w == ["--run-id", "r1"]));
        assert!(args.windows(2).any(|w| w == ["--duration-ms", "2000"]));
        assert!(args.contains(&"--partitioned".to_owned()));
    }
}
