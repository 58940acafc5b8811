//! The typed HTTP client of the bookie-clusters REST API: [`AdminClient`] and
//! its [`ClientError`]. The bodies it sends and reads are the [`wire`](crate::wire)
//! types, the same the server uses.
//!
//! [`AdminClient`] speaks plain HTTP/1.1 to a broker's admin port (loopback or
//! a trusted network; no TLS) and appends the base path
//! [`BASE_PATH`] to the URL it is given. Every request carries
//! `Authorization: Bearer <token>` and is bounded by a timeout.

use std::error::Error as StdError;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::header::{HeaderValue, ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use hyper::{Method, StatusCode, Uri};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use serde::de::DeserializeOwned;
use serde::Serialize;
use serde_json::Value;

use crate::wire::{
    CleanupReportDoc, CleanupRequest, CleanupTargets, ClusterRecord, ClusterStatus, ErrorBody,
    MigrationPlanDoc, MigrationStartRequest, MigrationStatusDoc, NodeStatus, PrecheckResult,
    PromoteCursorRequest, PromoteCursorResponse, ReadMode, ReadModeRequest, ReadModeResponse,
    RegisterRequest, RollbackRequest, SwitchRequest, SwitchStatusDoc, WipeTarget, BASE_PATH,
    MIGRATION_PATH,
};

type BoxError = Box<dyn StdError + Send + Sync + 'static>;

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
        /// What the transport reported (the whole chain of `source`).
        reason: String,
        /// The transport's error.
        source: BoxError,
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
        /// The decoding error, when the body did not decode.
        source: Option<BoxError>,
    },
    /// The base URL given to [`AdminClient::new`] cannot be used.
    #[error("invalid admin API URL '{url}': {reason}")]
    InvalidUrl {
        /// The URL as given.
        url: String,
        /// Why it was refused.
        reason: String,
        /// The parser's error, when the URL (or the token) did not parse.
        source: Option<BoxError>,
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
    http: Client<HttpsConnector<HttpConnector>, Full<Bytes>>,
    /// `http://host:port` + [`BASE_PATH`], no trailing slash.
    base: String,
    /// `http://host:port` (+ the given path prefix), no trailing slash.
    root: String,
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
    /// How long a request (connect, send, whole answer) may take by default.
    pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

    /// A client of the API at `base_url` (`http://host:port`, optionally with a
    /// path prefix) sending `token` as bearer token (an empty token sends no
    /// `Authorization` header), with [`DEFAULT_TIMEOUT`](Self::DEFAULT_TIMEOUT).
    ///
    /// # Errors
    ///
    /// [`ClientError::InvalidUrl`] when `base_url` is not an `http://` or
    /// `https://` URL with a host, or carries a query; for `https://`, when
    /// the system has no trust roots (see [`with_tls`](Self::with_tls)).
    pub fn new(base_url: &str, token: &str) -> Result<AdminClient, ClientError> {
        AdminClient::with_tls(base_url, token, None)
    }

    /// [`new`](Self::new) with the TLS client settings of `https://` URLs
    /// (from [`tls::client_config`](crate::tls::client_config): the CA to
    /// trust, a client certificate); `None`: the system's roots. The server's
    /// certificate must match the URL's host.
    ///
    /// # Errors
    ///
    /// As [`new`](Self::new).
    pub fn with_tls(
        base_url: &str,
        token: &str,
        tls: Option<Arc<rustls::ClientConfig>>,
    ) -> Result<AdminClient, ClientError> {
        let invalid = |reason: &str| ClientError::InvalidUrl {
            url: base_url.to_owned(),
            reason: reason.to_owned(),
            source: None,
        };
        let uri: Uri = base_url
            .parse()
            .map_err(|e: hyper::http::uri::InvalidUri| ClientError::InvalidUrl {
                url: base_url.to_owned(),
                reason: e.to_string(),
                source: Some(Box::new(e)),
            })?;
        let scheme = match uri.scheme_str() {
            Some(s @ ("http" | "https")) => s.to_owned(),
            Some(other) => {
                return Err(invalid(&format!(
                    "scheme '{other}' is not supported; use http://host:port or https://host:port"
                )))
            }
            None => return Err(invalid("it has no scheme; use http://host:port")),
        };
        let tls = match (tls, scheme.as_str()) {
            (Some(tls), _) => tls,
            (None, "https") => {
                crate::tls::client_config(None, None).map_err(|e| invalid(&e.to_string()))?
            }
            // Never used on an http:// URL.
            (None, _) => Arc::new(
                rustls::ClientConfig::builder_with_provider(Arc::new(
                    rustls::crypto::ring::default_provider(),
                ))
                .with_safe_default_protocol_versions()
                .map_err(|e| invalid(&e.to_string()))?
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth(),
            ),
        };
        let Some(authority) = uri.authority() else {
            return Err(invalid("it has no host; use http://host:port"));
        };
        if uri.query().is_some() {
            return Err(invalid("it must not have a query"));
        }
        let prefix = uri.path().trim_end_matches('/');
        let root = format!("{scheme}://{authority}{prefix}");
        let base = format!("{root}{BASE_PATH}");
        let mut connector = HttpConnector::new();
        connector.set_connect_timeout(Some(Self::DEFAULT_TIMEOUT));
        connector.enforce_http(false);
        let connector = hyper_rustls::HttpsConnectorBuilder::new()
            .with_tls_config((*tls).clone())
            .https_or_http()
            .enable_http1()
            .wrap_connector(connector);
        let http = Client::builder(TokioExecutor::new()).build(connector);
        Ok(AdminClient {
            http,
            base,
            root,
            token: token.to_owned(),
            timeout: Self::DEFAULT_TIMEOUT,
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
    pub async fn switch(&self, target: &str) -> Result<SwitchStatusDoc, ClientError> {
        let body = SwitchRequest {
            target: target.to_owned(),
        };
        self.call(Method::POST, "/switch", Some(to_body(&body)))
            .await
    }

    /// `POST /overrides`: starts the canary of `prefix` on `cluster`.
    ///
    /// # Errors
    ///
    /// As [`switch`](Self::switch), scoped to the prefix.
    pub async fn set_override(
        &self,
        prefix: &str,
        cluster: &str,
    ) -> Result<SwitchStatusDoc, ClientError> {
        let body = crate::wire::OverrideRequest {
            prefix: prefix.to_owned(),
            cluster: cluster.to_owned(),
        };
        self.call(Method::POST, "/overrides", Some(to_body(&body)))
            .await
    }

    /// `POST /overrides/remove`: ends (rolls back) the canary of `prefix`.
    ///
    /// # Errors
    ///
    /// As [`rollback`](Self::rollback).
    pub async fn remove_override(&self, prefix: &str) -> Result<SwitchStatusDoc, ClientError> {
        let body = crate::wire::RemoveOverrideRequest {
            prefix: prefix.to_owned(),
        };
        self.call(Method::POST, "/overrides/remove", Some(to_body(&body)))
            .await
    }

    /// `GET /overrides`: every override with its canary's status (raw JSON).
    ///
    /// # Errors
    ///
    /// [`ClientError`]s.
    pub async fn list_overrides(&self) -> Result<serde_json::Value, ClientError> {
        self.call(Method::GET, "/overrides", None).await
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
    pub async fn cleanup(&self, request: &CleanupRequest) -> Result<CleanupReportDoc, ClientError> {
        self.call(Method::POST, "/cleanup", Some(to_body(request)))
            .await
    }

    /// `POST /close-client/{name}`: closes this node's client of an old
    /// cluster ([I5](bkswitch_docs::invariants::I5)).
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
    pub async fn rollback(&self) -> Result<SwitchStatusDoc, ClientError> {
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

    /// `GET /admin/v2/metadata/migration`: the current metadata migration
    /// (after the flip, the last one the node saw).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 404 when none is recorded; the other
    /// [`ClientError`]s.
    pub async fn migration_status(&self) -> Result<MigrationStatusDoc, ClientError> {
        let url = format!("{}{MIGRATION_PATH}", self.root);
        self.call_url(Method::GET, url, None).await
    }

    /// `POST /admin/v2/metadata/migration`: starts moving the metadata store
    /// to `target_url` (the leader of the coordinator election runs it);
    /// `wipe_target` confirms the wipe of a non-empty target by naming its
    /// root (see [`plan_migration`](Self::plan_migration)).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 400 for a target that cannot be used (a bad
    /// URL, one overlapping the source or a bookie cluster's metadata, a
    /// non-empty target whose wipe is not confirmed), 409 while a migration,
    /// a bookie-cluster switch or a canary is unfinished, 503 when the
    /// target cannot be reached; the other [`ClientError`]s.
    pub async fn start_migration(
        &self,
        target_url: &str,
        wipe_target: Option<&str>,
    ) -> Result<MigrationStatusDoc, ClientError> {
        let url = format!("{}{MIGRATION_PATH}", self.root);
        let body = MigrationStartRequest {
            target_url: target_url.to_owned(),
            wipe_target: wipe_target.map(|r| WipeTarget::Root(r.to_owned())),
            dry_run: false,
        };
        self.call_url(Method::POST, url, Some(to_body(&body))).await
    }

    /// `POST /admin/v2/metadata/migration` with `dryRun`: every check of a
    /// start, and what the target holds (what a wipe confirmed by naming
    /// [`MigrationPlanDoc::root`] deletes). Writes nothing.
    ///
    /// # Errors
    ///
    /// As [`start_migration`](Self::start_migration).
    pub async fn plan_migration(&self, target_url: &str) -> Result<MigrationPlanDoc, ClientError> {
        let url = format!("{}{MIGRATION_PATH}", self.root);
        let body = MigrationStartRequest {
            target_url: target_url.to_owned(),
            wipe_target: None,
            dry_run: true,
        };
        self.call_url(Method::POST, url, Some(to_body(&body))).await
    }

    /// `POST /admin/v2/metadata/migration/abort`: aborts the current metadata
    /// migration (writes resume on the source).
    ///
    /// # Errors
    ///
    /// [`ClientError::Api`] with 404 when none is recorded, 409 when it has
    /// already ended; the other [`ClientError`]s.
    pub async fn abort_migration(&self) -> Result<MigrationStatusDoc, ClientError> {
        let url = format!("{}{MIGRATION_PATH}/abort", self.root);
        self.call_url(Method::POST, url, None).await
    }

    async fn call<T: DeserializeOwned>(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<T, ClientError> {
        let (url, is_base) = self.url_of(path);
        self.decode(self.send_to(method, url, is_base, body).await?)
    }

    async fn call_url<T: DeserializeOwned>(
        &self,
        method: Method,
        url: String,
        body: Option<Bytes>,
    ) -> Result<T, ClientError> {
        self.decode(self.send_to(method, url, false, body).await?)
    }

    fn decode<T: DeserializeOwned>(
        &self,
        (url, status, bytes): (String, StatusCode, Bytes),
    ) -> Result<T, ClientError> {
        if status == StatusCode::NO_CONTENT {
            return Err(ClientError::InvalidResponse {
                url,
                reason: "204 No Content where a JSON body was expected".to_owned(),
                source: None,
            });
        }
        serde_json::from_slice(&bytes).map_err(|e| ClientError::InvalidResponse {
            url,
            reason: format!("{e} in {}", quote_body(&bytes)),
            source: Some(Box::new(e)),
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

    /// The URL of `path` under the base path, and whether it is the base.
    fn url_of(&self, path: &str) -> (String, bool) {
        if path == "/" {
            (self.base.clone(), true)
        } else {
            (format!("{}{path}", self.base), false)
        }
    }

    /// Sends one request under the base path.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Bytes>,
    ) -> Result<(String, StatusCode, Bytes), ClientError> {
        let (url, is_base) = self.url_of(path);
        self.send_to(method, url, is_base, body).await
    }

    /// Sends one request to `url`; `Ok` only for a 2xx answer, whose body is
    /// returned.
    async fn send_to(
        &self,
        method: Method,
        url: String,
        is_base: bool,
        body: Option<Bytes>,
    ) -> Result<(String, StatusCode, Bytes), ClientError> {
        let invalid_url = |reason: String, source: BoxError| ClientError::InvalidUrl {
            url: url.clone(),
            reason,
            source: Some(source),
        };
        let mut builder = hyper::Request::builder()
            .method(method)
            .uri(&url)
            .header(ACCEPT, HeaderValue::from_static("application/json"));
        if !self.token.is_empty() {
            let value = HeaderValue::from_str(&format!("Bearer {}", self.token)).map_err(|e| {
                invalid_url(
                    "the token contains characters not allowed in an HTTP header".to_owned(),
                    Box::new(e),
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
        .map_err(|e| invalid_url(e.to_string(), Box::new(e)))?;

        let exchange = async {
            let response = self
                .http
                .request(request)
                .await
                .map_err(|e| ClientError::Connect {
                    url: url.clone(),
                    reason: describe_transport_error(&e),
                    source: Box::new(e),
                })?;
            let status = response.status();
            let bytes = response
                .into_body()
                .collect()
                .await
                .map_err(|e| ClientError::Connect {
                    url: url.clone(),
                    reason: format!("reading the answer failed: {e}"),
                    source: Box::new(e),
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
        let parsed: Option<ErrorBody> = serde_json::from_slice(&bytes).ok();
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
