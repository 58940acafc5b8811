//! A typed HTTP client of the bookie-clusters REST API (see `API.md` next to
//! this crate's manifest).
//!
//! [`AdminClient`] speaks plain HTTP/1.1 to a broker's admin port (loopback or
//! a trusted network; no TLS) and appends the base path
//! [`BASE_PATH`] to the URL it is given. Every request carries
//! `Authorization: Bearer <token>` and is bounded by a timeout.
//!
//! The request and answer bodies are public so the server deserializes exactly
//! what the client serializes: request structs reject unknown fields, as the
//! API requires. Answers whose shape is fixed are typed ([`ClusterRecord`],
//! [`PrecheckResult`], [`CleanupTargets`], …); the orchestrator's progress
//! records ([`SwitchStatus`], [`NodeStatus`], [`CleanupReport`]) wrap the JSON
//! and read it through accessors that tolerate missing fields.

use std::fmt;
use std::time::Duration;

use bkswitch_bk_router::ReadMode;
use bkswitch_registry::{ClusterRecord, ClusterStatus, PrecheckResult};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, StatusCode, Uri};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The path every endpoint lives under.
pub const BASE_PATH: &str = "/admin/v2/bookie-clusters";

/// How long a request (connect, send, whole answer) may take by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// The most characters of an unexpected answer quoted in an error message.
const MAX_QUOTED_BODY: usize = 200;

/// Why a call of the admin API failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// The server answered with its error body (`400`, `404`, `409`, `503`, …).
    #[error("{message} ({code}, HTTP {status})")]
    Api {
        /// The HTTP status.
        status: u16,
        /// The API's error code (`INVALID_ARGUMENT`, `NOT_FOUND`, `CONFLICT`,
        /// `UNAVAILABLE`, …), or `HTTP_<status>` when the answer had no error
        /// body.
        code: String,
        /// The server's message: it names the object and what to do.
        message: String,
        /// The request field at fault, for `INVALID_ARGUMENT`.
        field: Option<String>,
        /// Structured details (the precheck result of a refused switch, the
        /// ledger ids still read by a client that cannot be closed, …).
        details: Option<Value>,
    },
    /// The broker answers but has no bookie-clusters API (404 on the base path).
    #[error(
        "the bookie-clusters feature is not installed on this broker ({url} answered 404); \
         enable the bookie-clusters plugin on the broker or use the URL of a broker that has it"
    )]
    NotInstalled {
        /// The URL that answered 404.
        url: String,
    },
    /// The token is missing or wrong (401).
    #[error(
        "the admin API at {url} rejected the token: {message}; pass the admin token \
         (CLI: --token or BOOKIE_CLUSTERS_TOKEN)"
    )]
    Unauthorized {
        /// The URL that answered 401.
        url: String,
        /// The server's message.
        message: String,
    },
    /// The broker could not be reached, or the connection broke mid-request.
    #[error("cannot reach the admin API at {url}: {reason}; check the URL and that the broker is running")]
    Connect {
        /// The URL of the request.
        url: String,
        /// What the transport reported.
        reason: String,
    },
    /// No complete answer within the timeout.
    #[error("the admin API at {url} did not answer within {after:?}; the broker may be overloaded, retry later")]
    Timeout {
        /// The URL of the request.
        url: String,
        /// The timeout that expired.
        after: Duration,
    },
    /// The answer is not what the API specifies (not JSON, wrong shape).
    #[error("the admin API at {url} sent an unexpected answer: {reason}; check that client and broker versions match")]
    InvalidResponse {
        /// The URL of the request.
        url: String,
        /// What was wrong with it.
        reason: String,
    },
    /// The base URL given to [`AdminClient::new`] cannot be used.
    #[error("invalid admin API URL '{url}': {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
    },
}

impl ClientError {
    /// The HTTP status the server answered with, if it answered.
    pub fn status(&self) -> Option<u16> {
        match self {
            ClientError::Api { status, .. } => Some(*status),
            ClientError::NotInstalled { .. } => Some(404),
            ClientError::Unauthorized { .. } => Some(401),
            _ => None,
        }
    }

    /// Whether repeating the same call later may succeed (`503`, timeouts,
    /// connection failures).
    pub fn is_retryable(&self) -> bool {
        match self {
            ClientError::Api { status, .. } => *status == 503,
            ClientError::Connect { .. } | ClientError::Timeout { .. } => true,
            _ => false,
        }
    }
}

/// The error body every failed request answers with (the server's
/// [`ErrorBody`](crate::error::ErrorBody)).
pub use crate::error::ErrorBody as ApiErrorBody;

/// Body of `POST /{name}`: register a cluster.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct RegisterRequest {
    /// The cluster's BookKeeper metadata-service URI.
    pub metadata_service_uri: String,
    /// The status to register with; `None` → `STANDBY`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<ClusterStatus>,
}

/// Body of `POST /switch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SwitchRequest {
    /// The cluster to switch to.
    pub target: String,
}

/// Body of `POST /read-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ReadModeRequest {
    /// `DUAL_READ`, `NEW_CLUSTER_ONLY` or `OLD_CLUSTER_ONLY`.
    #[serde(with = "read_mode_serde")]
    pub mode: ReadMode,
}

/// Answer of `POST /read-mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ReadModeResponse {
    /// The read mode now in force.
    #[serde(with = "read_mode_serde")]
    pub read_mode: ReadMode,
}

/// Body of `POST /cleanup`; every field is optional on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct CleanupRequest {
    /// Only report what would be deleted (default `true`).
    pub dry_run: bool,
    /// Only delete ledgers on this cluster (`None`: every old cluster).
    pub src_cluster_filter: Option<String>,
    /// Delete at most this many ledgers; `0` = no limit.
    pub max_deletions: u64,
    /// Delete even inside the rollback window (which ends the window).
    pub force: bool,
}

impl Default for CleanupRequest {
    /// A dry run over every old cluster, no limit, no force.
    fn default() -> Self {
        CleanupRequest {
            dry_run: true,
            src_cluster_filter: None,
            max_deletions: 0,
            force: false,
        }
    }
}

/// Body of `POST /rollback` (`{}`; the body itself is optional).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RollbackRequest {}

/// Body of `POST /internal/promote-cursor`: the coordinator asks the topic's
/// owner to promote a copied cursor ledger (invariants I9, I13).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PromoteCursorRequest {
    /// The topic (managed ledger name) owning the cursor.
    pub topic: String,
    /// The cursor's name.
    pub cursor_name: String,
    /// The cluster the cursor ledger was copied to.
    pub target_cluster_name: String,
    /// The cursor ledger the coordinator copied.
    pub expected_cursors_ledger_id: i64,
    /// The last entry id of the copy.
    pub copied_last_entry_id: i64,
}

/// What the owner did with a cursor PROMOTE.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PromoteOutcome {
    /// The stamp now names the target; the ledger id is unchanged.
    Promoted,
    /// The stamp already named the target; nothing was written.
    AlreadyOnTarget,
    /// The cursor was ahead of the copy and rolled over onto a new ledger on
    /// the target (`newLedgerId`); the copy is unreferenced.
    RolledOver,
}

/// Answer of `POST /internal/promote-cursor`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromoteCursorResponse {
    /// What the owner did.
    pub outcome: PromoteOutcome,
    /// The new cursor ledger, for [`PromoteOutcome::RolledOver`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub new_ledger_id: Option<i64>,
}

/// A ledger on an old cluster that cleanup may delete.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupTarget {
    /// The cluster holding the old copy.
    pub cluster: String,
    /// The ledger id (the same on both clusters).
    pub ledger_id: i64,
    /// `schema` or `cursor`.
    pub kind: String,
    /// The metadata path referencing the ledger.
    #[serde(default)]
    pub path: String,
}

/// Answer of `GET /cleanup-targets`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CleanupTargets {
    /// The switch the targets were left behind by.
    pub switch_id: String,
    /// The ledgers eligible for deletion.
    pub targets: Vec<CleanupTarget>,
}

/// The per-phase counters of a switch; a missing counter reads as 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SwitchCounts {
    /// Ledgers to copy.
    pub to_build: u64,
    /// Ledgers copied.
    pub built: u64,
    /// Ledgers that failed.
    pub failed: u64,
    /// Copies whose stamp was flipped.
    pub promoted: u64,
    /// Cursors that rolled over instead of being promoted.
    pub rollover_fallback: u64,
    /// Old copies deleted by cleanup.
    pub deleted: u64,
}

/// One failure recorded by a switch.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SwitchFailure {
    /// What failed (`schema`, `cursor`, …).
    pub kind: Option<String>,
    /// The ledger concerned.
    pub ledger_id: Option<i64>,
    /// The metadata path concerned.
    pub path: Option<String>,
    /// Why.
    pub reason: Option<String>,
}

/// The phase of a switch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum SwitchPhase {
    /// Copying ledgers to the target.
    Build,
    /// Flipping stamps to the target.
    Promote,
    /// New ledgers go to the target; rollback is possible within the window.
    Switched,
    /// Deleting the old copies.
    Cleanup,
    /// Finished.
    Done,
    /// Finished, some ledgers failed (see the failures).
    DoneWithFailures,
    /// Flipping stamps back to the source.
    RollingBack,
    /// Back on the source.
    RolledBack,
}

impl SwitchPhase {
    /// The wire name (`BUILD`, `DONE_WITH_FAILURES`, …).
    pub fn as_str(self) -> &'static str {
        match self {
            SwitchPhase::Build => "BUILD",
            SwitchPhase::Promote => "PROMOTE",
            SwitchPhase::Switched => "SWITCHED",
            SwitchPhase::Cleanup => "CLEANUP",
            SwitchPhase::Done => "DONE",
            SwitchPhase::DoneWithFailures => "DONE_WITH_FAILURES",
            SwitchPhase::RollingBack => "ROLLING_BACK",
            SwitchPhase::RolledBack => "ROLLED_BACK",
        }
    }

    /// Parses a wire name; `None` for an unknown phase.
    pub fn parse(s: &str) -> Option<SwitchPhase> {
        [
            SwitchPhase::Build,
            SwitchPhase::Promote,
            SwitchPhase::Switched,
            SwitchPhase::Cleanup,
            SwitchPhase::Done,
            SwitchPhase::DoneWithFailures,
            SwitchPhase::RollingBack,
            SwitchPhase::RolledBack,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }

    /// Whether a switch in this phase needs no more watching: traffic has
    /// moved (`SWITCHED`) or the switch has ended.
    pub fn is_settled(self) -> bool {
        matches!(
            self,
            SwitchPhase::Switched
                | SwitchPhase::Done
                | SwitchPhase::DoneWithFailures
                | SwitchPhase::RolledBack
        )
    }
}

impl fmt::Display for SwitchPhase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

fn str_field<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str)
}

fn i64_field(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

fn u64_field(v: &Value, key: &str) -> u64 {
    v.get(key).and_then(Value::as_u64).unwrap_or(0)
}

/// A switch's progress record (`SwitchStatus` of the API), read tolerantly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SwitchStatus(pub Value);

impl SwitchStatus {
    /// The JSON as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// The switch id.
    pub fn switch_id(&self) -> Option<&str> {
        str_field(&self.0, "switchId")
    }

    /// The directive epoch the switch runs under.
    pub fn epoch(&self) -> Option<i64> {
        i64_field(&self.0, "epoch")
    }

    /// The cluster ledgers are copied from.
    pub fn source(&self) -> Option<&str> {
        str_field(&self.0, "source")
    }

    /// The cluster ledgers are copied to.
    pub fn target(&self) -> Option<&str> {
        str_field(&self.0, "target")
    }

    /// The phase name as sent (also for phases this client does not know).
    pub fn phase_name(&self) -> Option<&str> {
        str_field(&self.0, "phase")
    }

    /// The phase, if it is one this client knows.
    pub fn phase(&self) -> Option<SwitchPhase> {
        self.phase_name().and_then(SwitchPhase::parse)
    }

    /// The counters; missing ones read as 0.
    pub fn counts(&self) -> SwitchCounts {
        let c = self.0.get("counts").unwrap_or(&Value::Null);
        SwitchCounts {
            to_build: u64_field(c, "toBuild"),
            built: u64_field(c, "built"),
            failed: u64_field(c, "failed"),
            promoted: u64_field(c, "promoted"),
            rollover_fallback: u64_field(c, "rolloverFallback"),
            deleted: u64_field(c, "deleted"),
        }
    }

    /// When the switch was created (as sent: milliseconds since the Unix epoch).
    pub fn created_at(&self) -> Option<&Value> {
        self.0.get("createdAt").filter(|v| !v.is_null())
    }

    /// When the record last changed.
    pub fn updated_at(&self) -> Option<&Value> {
        self.0.get("updatedAt").filter(|v| !v.is_null())
    }

    /// Until when a rollback is possible.
    pub fn rollback_deadline(&self) -> Option<&Value> {
        self.0.get("rollbackDeadline").filter(|v| !v.is_null())
    }

    /// The recorded failures.
    pub fn failures(&self) -> Vec<SwitchFailure> {
        self.0
            .get("failures")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|f| SwitchFailure {
                        kind: str_field(f, "kind").map(str::to_owned),
                        ledger_id: i64_field(f, "ledgerId"),
                        path: str_field(f, "path").map(str::to_owned),
                        reason: str_field(f, "reason").map(str::to_owned),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }
}

/// One node's view (`NodeStatus` of the API), read tolerantly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct NodeStatus(pub Value);

impl NodeStatus {
    /// The JSON as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// The node answering.
    pub fn node_id(&self) -> Option<&str> {
        str_field(&self.0, "nodeId")
    }

    /// The cluster new ledgers are created on.
    pub fn active_cluster(&self) -> Option<&str> {
        str_field(&self.0, "activeCluster")
    }

    /// The legacy fallback cluster (I17).
    pub fn bootstrap_cluster(&self) -> Option<&str> {
        str_field(&self.0, "bootstrapCluster")
    }

    /// The read mode in force, as sent.
    pub fn read_mode(&self) -> Option<&str> {
        str_field(&self.0, "readMode")
    }

    /// The epoch of the directive this node applied.
    pub fn epoch(&self) -> Option<i64> {
        i64_field(&self.0, "epoch")
    }

    /// The switch directive (`{"target","origin","epoch","ts"}`), if any.
    pub fn directive(&self) -> Option<&Value> {
        self.0.get("directive").filter(|v| v.is_object())
    }

    /// The switch this node knows of, if any.
    pub fn switch(&self) -> Option<SwitchStatus> {
        self.0
            .get("switch")
            .filter(|v| v.is_object())
            .cloned()
            .map(SwitchStatus)
    }
}

/// One ledger cleanup failed to delete.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CleanupFailure {
    /// The ledger.
    pub ledger_id: Option<i64>,
    /// Why.
    pub reason: Option<String>,
}

/// The answer of `POST /cleanup` (`CleanupReport` of the API), read tolerantly.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct CleanupReport(pub Value);

impl CleanupReport {
    /// The JSON as the server sent it.
    pub fn raw(&self) -> &Value {
        &self.0
    }

    /// Whether nothing was deleted on purpose.
    pub fn dry_run(&self) -> Option<bool> {
        self.0.get("dryRun").and_then(Value::as_bool)
    }

    /// The switch cleaned up after.
    pub fn switch_id(&self) -> Option<&str> {
        str_field(&self.0, "switchId")
    }

    /// The ledgers considered; entries of an unexpected shape are skipped.
    pub fn targets(&self) -> Vec<CleanupTarget> {
        self.0
            .get("targets")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|t| serde_json::from_value(t.clone()).ok())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// How many ledgers were deleted.
    pub fn deleted(&self) -> u64 {
        u64_field(&self.0, "deleted")
    }

    /// The deletions that failed.
    pub fn failed(&self) -> Vec<CleanupFailure> {
        self.0
            .get("failed")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .map(|f| CleanupFailure {
                        ledger_id: i64_field(f, "ledgerId"),
                        reason: str_field(f, "reason").map(str::to_owned),
                    })
                    .collect()
            })
            .unwrap_or_default()
    }

    /// `DRY_RUN`, `IN_PROGRESS`, `DONE` or `DONE_WITH_FAILURES`.
    pub fn outcome(&self) -> Option<&str> {
        str_field(&self.0, "outcome")
    }
}

/// Serde of [`ReadMode`] by its operator-facing name.
mod read_mode_serde {
    use bkswitch_bk_router::ReadMode;
    use serde::{Deserialize, Deserializer, Serializer};

    pub(super) fn serialize<S: Serializer>(mode: &ReadMode, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(mode.as_str())
    }

    pub(super) fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<ReadMode, D::Error> {
        let s = String::deserialize(d)?;
        s.parse().map_err(|_| {
            serde::de::Error::custom(format!(
                "unknown read mode '{s}'; expected DUAL_READ, NEW_CLUSTER_ONLY or OLD_CLUSTER_ONLY"
            ))
        })
    }
}

/// Percent-encodes one path segment (everything but RFC 3986 unreserved).
fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fn quote_body(body: &[u8]) -> String {
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        return "(empty body)".to_owned();
    }
    let mut quoted: String = text.chars().take(MAX_QUOTED_BODY).collect();
    if text.chars().count() > MAX_QUOTED_BODY {
        quoted.push('…');
    }
    quoted
}

/// A client of one broker's bookie-clusters API.
///
/// Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct AdminClient {
    http: Client<HttpConnector, Full<Bytes>>,
    /// `http://host:port` + [`BASE_PATH`], no trailing slash.
    base: String,
    token: String,
    timeout: Duration,
}

impl fmt::Debug for AdminClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AdminClient")
            .field("base", &self.base)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl AdminClient {
    /// A client of the API at `base_url` (`http://host:port`, optionally with a
    /// path prefix) sending `token` as bearer token (an empty token sends no
    /// `Authorization` header), with [`DEFAULT_TIMEOUT`].
    ///
    /// # Errors
    ///
    /// [`ClientError::InvalidUrl`] when `base_url` is not an `http://` URL with
    /// a host, or carries a query.
    pub fn new(base_url: &str, token: &str) -> Result<AdminClient, ClientError> {
        let invalid = |reason: &str| ClientError::InvalidUrl {
            url: base_url.to_owned(),
            reason: reason.to_owned(),
        };
        let uri: Uri = base_url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| invalid(&e.to_string()))?;
        match uri.scheme_str() {
            Some("http") => {}
            Some(other) => {
                return Err(invalid(&format!(
                    "scheme '{other}' is not supported; use http://host:port"
                )))
            }
            None => return Err(invalid("it has no scheme; use http://host:port")),
        }
        let Some(authority) = uri.authority() else {
            return Err(invalid("it has no host; use http://host:port"));
        };
        if uri.query().is_some() {
            return Err(invalid("it must not have a query"));
        }
        let prefix = uri.path().trim_end_matches('/');
        let base = format!("http://{authority}{prefix}{BASE_PATH}");
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(DEFAULT_TIMEOUT));
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(AdminClient {
            http,
            base,
            token: token.to_owned(),
            timeout: DEFAULT_TIMEOUT,
        })
    }

    /// The same client with another request timeout.
    pub fn with_timeout(mut self, timeout: Duration) -> AdminClient {
        self.timeout = timeout;
        self
    }

    /// A client of the same broker (sharing the connection pool) sending
    /// another token: the node-to-node token for
    /// [`promote_cursor`](AdminClient::promote_cursor).
    pub fn with_token(&self, token: &str) -> AdminClient {
        AdminClient {
            token: token.to_owned(),
            ..self.clone()
        }
    }

    /// The URL of the base path, e.g. `http://127.0.0.1:8080/admin/v2/bookie-clusters`.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// The request timeout.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// `GET /`: every registered cluster.
    ///
    /// # Errors
    ///
    /// [`ClientError::NotInstalled`] on 404, the other [`ClientError`]s.
    pub async fn list(&self) -> Result<Vec<ClusterRecord>, ClientError> {
        self.call(Method::GET, "/", None).await
    }

    /// `GET /{name}`: one cluster.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 404 for an unknown cluster, the other
    /// [`ClientError`]s.
    pub async fn get(&self, name: &str) -> Result<ClusterRecord, ClientError> {
        self.call(Method::GET, &format!("/{}", encode_segment(name)), None)
            .await
    }

    /// `POST /{name}`: registers a cluster (`status` `None` → `STANDBY`).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 400 for an invalid name or URI or a URI
    /// collision, the other [`ClientError`]s.
    pub async fn register(
        &self,
        name: &str,
        metadata_service_uri: &str,
        status: Option<ClusterStatus>,
    ) -> Result<ClusterRecord, ClientError> {
        let body = RegisterRequest {
            metadata_service_uri: metadata_service_uri.to_owned(),
            status,
        };
        self.call(
            Method::POST,
            &format!("/{}", encode_segment(name)),
            Some(to_body(&body)),
        )
        .await
    }

    /// `DELETE /{name}`: unregisters a cluster.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 404 for an unknown cluster, 409 for the ACTIVE
    /// one; the other [`ClientError`]s.
    pub async fn unregister(&self, name: &str) -> Result<(), ClientError> {
        self.call_empty(Method::DELETE, &format!("/{}", encode_segment(name)), None)
            .await
    }

    /// `GET /precheck/{name}`: the idgen precheck of a switch to `name`
    /// (`ready` may be false).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 404 for an unknown cluster, the other
    /// [`ClientError`]s.
    pub async fn precheck(&self, name: &str) -> Result<PrecheckResult, ClientError> {
        self.call(
            Method::GET,
            &format!("/precheck/{}", encode_segment(name)),
            None,
        )
        .await
    }

    /// `POST /switch`: starts (or repeats, idempotently) a switch to `target`.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 409 when the precheck fails (`details` = the
    /// precheck result) or the switch is refused; the other [`ClientError`]s.
    pub async fn switch(&self, target: &str) -> Result<SwitchStatus, ClientError> {
        let body = SwitchRequest {
            target: target.to_owned(),
        };
        self.call(Method::POST, "/switch", Some(to_body(&body)))
            .await
    }

    /// `GET /status`: the answering node's view and the switch it knows of.
    ///
    /// # Errors
    ///
    /// The [`ClientError`]s.
    pub async fn status(&self) -> Result<NodeStatus, ClientError> {
        self.call(Method::GET, "/status", None).await
    }

    /// `POST /read-mode`: overrides routing of reads and deletes.
    ///
    /// # Errors
    ///
    /// The [`ClientError`]s.
    pub async fn set_read_mode(&self, mode: ReadMode) -> Result<ReadModeResponse, ClientError> {
        let body = ReadModeRequest { mode };
        self.call(Method::POST, "/read-mode", Some(to_body(&body)))
            .await
    }

    /// `GET /cleanup-targets`: the old-cluster ledgers cleanup may delete.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 404 when no switch is recorded; the other
    /// [`ClientError`]s.
    pub async fn cleanup_targets(&self) -> Result<CleanupTargets, ClientError> {
        self.call(Method::GET, "/cleanup-targets", None).await
    }

    /// `POST /cleanup`: deletes (or with `dryRun` lists) old copies.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 409 inside the rollback window without
    /// `force`; the other [`ClientError`]s.
    pub async fn cleanup(&self, request: &CleanupRequest) -> Result<CleanupReport, ClientError> {
        self.call(Method::POST, "/cleanup", Some(to_body(request)))
            .await
    }

    /// `POST /close-client/{name}`: closes this node's client of an old
    /// cluster (I5).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 409 while reads are open (`details.ledgerIds`);
    /// the other [`ClientError`]s.
    pub async fn close_client(&self, name: &str) -> Result<(), ClientError> {
        self.call_empty(
            Method::POST,
            &format!("/close-client/{}", encode_segment(name)),
            None,
        )
        .await
    }

    /// `POST /rollback`: rolls the current switch back.
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 409 outside the rollback window or after
    /// cleanup; the other [`ClientError`]s.
    pub async fn rollback(&self) -> Result<SwitchStatus, ClientError> {
        self.call(
            Method::POST,
            "/rollback",
            Some(to_body(&RollbackRequest {})),
        )
        .await
    }

    /// `POST /internal/promote-cursor`, sent with this client's token (build
    /// the client with the node-to-node token, see
    /// [`with_token`](AdminClient::with_token)).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 404 when the topic is not owned by that node,
    /// 409 when the cursor rolled over since the copy; the other
    /// [`ClientError`]s.
    pub async fn promote_cursor(
        &self,
        request: &PromoteCursorRequest,
    ) -> Result<PromoteCursorResponse, ClientError> {
        self.call(
            Method::POST,
            "/internal/promote-cursor",
            Some(to_body(request)),
        )
        .await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<T, ClientError> {
        let (url, status, bytes) = self.send(method, path, body).await?;
        if status == StatusCode::NO_CONTENT {
            return Err(ClientError::InvalidResponse {
                url,
                reason: "204 No Content where a JSON body was expected".to_owned(),
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::InvalidResponse {
            url,
            reason: format!("{e} in {}", quote_body(&bytes)),
        })
    }

    async fn call_empty(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(), ClientError> {
        self.send(method, path, body).await.map(|_| ())
    }

    /// Sends one request; `Ok` only for a 2xx answer, whose body is returned.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(String, StatusCode, Bytes), ClientError> {
        let url = if path == "/" {
            self.base.clone()
        } else {
            format!("{}{path}", self.base)
        };
        let is_base = path == "/";
        let invalid_url = |reason: String| ClientError::InvalidUrl {
            url: url.clone(),
            reason,
        };
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(&url)
            .header(ACCEPT, HeaderValue::from_static("application/json"));
        if !self.token.is_empty() {
            let value = HeaderValue::from_str(&format!("Bearer {}", self.token)).map_err(|_| {
                invalid_url(
                    "the token contains characters not allowed in an HTTP header".to_owned(),
                )
            })?;
            builder = builder.header(AUTHORIZATION, value);
        }
        let request = match body {
            Some(b) => builder
                .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
                .body(Full::new(b)),
            None => builder.body(Full::new(Bytes::new())),
        }
        .map_err(|e| invalid_url(e.to_string()))?;

        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| ClientError::Connect {
                    url: url.clone(),
                    reason: describe_transport_error(&e),
                })?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| ClientError::Connect {
                    url: url.clone(),
                    reason: format!("reading the answer failed: {e}"),
                })?
                .to_bytes();
            Ok::<_, ClientError>((status, bytes))
        };
        let (status, bytes) = tokio::time::timeout(self.timeout, exchange)
            .await
            .map_err(|_| ClientError::Timeout {
                url: url.clone(),
                after: self.timeout,
            })??;

        if status.is_success() {
            return Ok((url, status, bytes));
        }
        let parsed: Option<ApiErrorBody> = serde_json::from_slice(&bytes).ok();
        if status == StatusCode::NOT_FOUND && (is_base || parsed.is_none()) {
            // The API answers 404 only with its error body, and never on the
            // base path: a bare 404 means the routes are not there.
            return Err(ClientError::NotInstalled { url });
        }
        if status == StatusCode::UNAUTHORIZED {
            let message = parsed
                .map(|p| p.error)
                .unwrap_or_else(|| quote_body(&bytes));
            return Err(ClientError::Unauthorized { url, message });
        }
        Err(match parsed {
            Some(p) => ClientError::Api {
                status: status.as_u16(),
                code: p.code,
                message: p.error,
                field: p.field,
                details: p.details,
            },
            None => ClientError::Api {
                status: status.as_u16(),
                code: format!("HTTP_{}", status.as_u16()),
                message: format!(
                    "{url} answered {status} without an error body: {}",
                    quote_body(&bytes)
                ),
                field: None,
                details: None,
            },
        })
    }
}

fn to_body<T: Serialize>(value: &T) -> Bytes {
    // Serializing these plain structs cannot fail.
    Bytes::from(serde_json::to_vec(value).unwrap_or_default())
}

fn describe_transport_error(e: &hyper_util::client::legacy::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}
