//! The etcd backend, on the `etcd-client` crate (etcd v3 API, gRPC).
//!
//! Layout (see `docs/FORMATS.md`, "Metadata on etcd"): every node is the etcd
//! key of its path (under the URL's prefix), its value the node's bytes, as
//! Pulsar's `EtcdMetadataStore` stores them; the node's version is etcd's key
//! version − 1 (plus an imported offset, see
//! [`MetadataStore::import_version`](crate::MetadataStore::import_version)).
//! What etcd does not keep for a key lives in *side keys* outside the `/` key
//! space (`~bkswitch` + path + NUL + kind), so that Pulsar's prefix listings and
//! watches never see them:
//!
//! | kind | value | meaning |
//! |---|---|---|
//! | `t` | creation time, ms, decimal | written once, with the node |
//! | `m` | last write time, ms, decimal | written with every write of the value |
//! | `c` | empty | its etcd version counts the node's child creations |
//! | `co` | decimal | added to `c`'s count: an imported sequential counter |
//! | `k` + name | empty | one per direct child (on the child's lease): counts children, reports their changes |
//! | `o` | decimal | version offset of an imported node |
//!
//! Every write is one etcd transaction (node key, side keys and the parent's
//! counter and index together), so the side keys never disagree with the node.
//! Ephemeral nodes, their side keys and their parent-index entry are put on the
//! store's lease: when the lease ends, etcd deletes all of them at one revision.
//!
//! Watches watch the side-key range of the watched node from a known revision
//! and resume from the last revision seen after a lost connection, so no change
//! is lost or reordered; when etcd compacted that revision away the watch
//! re-reads the node and reports what differs.
//!
//! Files: `keys.rs` (node and side keys), `request.rs` (timeouts, resends,
//! errors), `reads.rs` (the stat read plan, children), `create.rs`,
//! `writes.rs` (value writes, deletes), `batch.rs` (batching of concurrent
//! requests), `ops.rs` (the [`MetadataStore`](crate::MetadataStore)
//! operations), `session.rs` (the lease), `watch.rs`, `endpoints.rs`
//! (members that refuse connections) and `url.rs`.

mod batch;
mod create;
mod endpoints;
mod keys;
mod ops;
mod reads;
mod request;
mod session;
mod url;
mod watch;
mod writes;

pub use batch::{ReadBatches, WriteBatches};
pub use keys::etcd_key_prefixes;
pub use url::check_etcd_url;

use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use etcd_client::{Client, ConnectOptions, KvClient};
use tokio::sync::broadcast;
use tracing::info;

use crate::error::{MetadataError, Operation, Result};
use crate::secret::Secret;
use crate::types::SessionEvent;

/// Settings of an [`EtcdStore`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdStoreOptions {
    /// TTL of the store's lease (its session): ephemeral nodes go when the store
    /// stops renewing it for this long. Whole seconds, at least 2 s. Default
    /// 30 s (Pulsar's `metadataStoreSessionTimeoutMillis`).
    pub session_timeout: Duration,
    /// Bound of every operation. Default 10 s.
    pub operation_timeout: Duration,
    /// Bound of [`EtcdStore::connect`]. Default 30 s.
    pub connect_timeout: Duration,
    /// Keys read per request when listing children (a parent with 100,000
    /// children is listed in pages, never one huge reply). Default 1,000.
    pub children_page_size: i64,
    /// User and password (etcd's authentication): the store authenticates
    /// on connect and whenever its token expires. Least privilege: a role
    /// with `readwrite` on the store's prefix only (`etcdctl role
    /// grant-permission --prefix=true <role> readwrite <prefix>`) is enough
    /// for every operation. Default none.
    pub user: Option<EtcdUser>,
    /// TLS to the members (`https://`): the CA that signed their
    /// certificates, and a client certificate when they require one
    /// (`--client-cert-auth`). Default none (plain `http://`).
    pub tls: Option<EtcdTls>,
}

/// etcd credentials of an [`EtcdStore`]. `Debug` prints the password as `***`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdUser {
    /// The etcd user name.
    pub name: String,
    /// Its password, e.g. from [`Secret::from_file`].
    pub password: Secret,
}

/// TLS settings of an [`EtcdStore`] (rustls, ring), all PEM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdTls {
    /// The CA certificate(s) the members' certificates must chain to.
    pub ca_pem: String,
    /// The client certificate (chain) and its private key, for members that
    /// verify clients (`--client-cert-auth`). The key is a [`Secret`].
    pub client: Option<(String, Secret)>,
    /// The name the members' certificates must carry, when it is not the
    /// host of the URL (e.g. `etcd.example` for `etcd://10.0.0.1:2379`).
    pub domain: Option<String>,
}

impl EtcdTls {
    /// Reads the CA, and the client certificate and key when given, from PEM
    /// files.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// naming the file that cannot be read (never its content).
    pub fn from_files(
        ca: impl AsRef<std::path::Path>,
        client: Option<(&std::path::Path, &std::path::Path)>,
    ) -> Result<EtcdTls> {
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path).map_err(|e| MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: path.display().to_string(),
                reason: format!("cannot read the TLS file: {e}"),
            })
        };
        let ca_pem = read(ca.as_ref())?;
        let client = match client {
            Some((cert, key)) => Some((read(cert)?, Secret::from_file(key)?)),
            None => None,
        };
        Ok(EtcdTls {
            ca_pem,
            client,
            domain: None,
        })
    }

    fn options(&self) -> etcd_client::TlsOptions {
        let mut tls = etcd_client::TlsOptions::new()
            .ca_certificate(etcd_client::Certificate::from_pem(&self.ca_pem));
        if let Some((cert, key)) = &self.client {
            tls = tls.identity(etcd_client::Identity::from_pem(cert, key.expose()));
        }
        if let Some(domain) = &self.domain {
            tls = tls.domain_name(domain.clone());
        }
        tls
    }
}

impl Default for EtcdStoreOptions {
    fn default() -> Self {
        EtcdStoreOptions {
            session_timeout: Duration::from_secs(30),
            operation_timeout: Duration::from_secs(10),
            connect_timeout: Duration::from_secs(30),
            children_page_size: 1_000,
            user: None,
            tls: None,
        }
    }
}

impl EtcdStoreOptions {
    fn validate(&self, url: &str) -> Result<()> {
        let fail = |reason: String| MetadataError::InvalidArgument {
            op: Operation::Connect,
            path: url.to_owned(),
            reason,
        };
        if self.session_timeout < Duration::from_secs(2) {
            return Err(fail(format!(
                "session_timeout {:?} is below the 2 s minimum of an etcd lease",
                self.session_timeout
            )));
        }
        if self.operation_timeout.is_zero() || self.connect_timeout.is_zero() {
            return Err(fail(
                "operation_timeout and connect_timeout must be more than zero".to_owned(),
            ));
        }
        if self.children_page_size < 2 {
            return Err(fail("children_page_size must be at least 2".to_owned()));
        }
        Ok(())
    }
}

/// A failed connect as the caller sees it: refused credentials or roles are
/// [`MetadataError::PermissionDenied`] naming the user (never the password),
/// anything else [`MetadataError::Unavailable`].
fn connect_error(
    url: &str,
    hosts: &str,
    options: &EtcdStoreOptions,
    e: &etcd_client::Error,
) -> MetadataError {
    let text = e.to_string();
    let user = options
        .user
        .as_ref()
        .map_or_else(|| "no user".to_owned(), |u| format!("user `{}`", u.name));
    if let etcd_client::Error::GRpcStatus(status) = e {
        let code = format!("{:?}", status.code());
        if matches!(code.as_str(), "Unauthenticated" | "PermissionDenied")
            || text.contains("authentication failed")
            || text.contains("user name is empty")
        {
            return MetadataError::PermissionDenied {
                op: Operation::Connect,
                path: url.to_owned(),
                reason: format!("etcd `{hosts}` refused {user}: {}", status.message()),
            };
        }
    }
    let tls = if options.tls.is_some() {
        " over TLS"
    } else {
        ""
    };
    MetadataError::Unavailable {
        op: Operation::Connect,
        path: url.to_owned(),
        reason: format!("cannot connect to etcd `{hosts}`{tls}: {text}"),
    }
}

/// What watch tasks are told.
#[derive(Debug, Clone, Copy)]
enum Signal {
    Session(SessionEvent),
    Closed,
}

struct Inner {
    url: String,
    hosts: String,
    prefix: String,
    options: EtcdStoreOptions,
    client: Client,
    lease: AtomicI64,
    generation: AtomicU64,
    connected: AtomicBool,
    closed: AtomicBool,
    signals: broadcast::Sender<Signal>,
    /// Keeps the client off members that refuse connections (several
    /// endpoints only).
    doctor: Option<Arc<endpoints::Doctor>>,
    /// Coalesces concurrent writes of node values (see `batch.rs`).
    batcher: batch::Batcher,
    read_batcher: batch::Batcher,
}

/// A [`MetadataStore`](crate::MetadataStore) on an etcd cluster (etcd 3.4 or later).
///
/// Paths are etcd keys and values are stored as they are, as Pulsar's
/// `EtcdMetadataStore` stores them; versions, children versions, sequential
/// names, times and ephemeral nodes follow ZooKeeper's semantics (the module
/// documentation and `docs/FORMATS.md` tell how). The session is an etcd
/// lease that the store keeps alive; when etcd ends it (the store could not
/// renew it in time), watch streams report
/// [`SessionEvent::SessionExpired`], the ephemeral nodes are gone, and the
/// store takes a new lease ([`SessionEvent::SessionReestablished`]).
///
/// Clones share the session. Dropping the last clone without
/// [`close`](crate::MetadataStore::close) revokes the lease in the background.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

impl fmt::Debug for EtcdStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EtcdStore")
            .field("url", &self.inner.url)
            .field("lease", &self.inner.lease.load(Ordering::Relaxed))
            .field("generation", &self.inner.generation.load(Ordering::Relaxed))
            .finish()
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or_default()
}

impl EtcdStore {
    /// Connects to `etcd://host:port[,host:port…][/prefix]` and takes a lease.
    ///
    /// Must be called within a Tokio runtime; the store's background tasks run
    /// on it.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for a
    /// malformed URL or bad options;
    /// [`ErrorKind::Unavailable`](crate::ErrorKind::Unavailable) when etcd does
    /// not answer within [`EtcdStoreOptions::connect_timeout`].
    pub async fn connect(url: &str, options: EtcdStoreOptions) -> Result<EtcdStore> {
        let parsed = url::parse(url)?;
        options.validate(url)?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: url.to_owned(),
                reason: "EtcdStore::connect must run within a Tokio runtime".to_owned(),
            });
        }
        let unavailable = |reason: String| MetadataError::Unavailable {
            op: Operation::Connect,
            path: url.to_owned(),
            reason,
        };
        let mut connect_options = ConnectOptions::new()
            .with_connect_timeout(options.connect_timeout)
            .with_timeout(options.operation_timeout)
            .with_keep_alive(Duration::from_secs(2), Duration::from_secs(2))
            .with_keep_alive_while_idle(true);
        let mut endpoints = parsed.endpoints.clone();
        if let Some(tls) = &options.tls {
            connect_options = connect_options.with_tls(tls.options());
            for e in &mut endpoints {
                *e = e.replacen("http://", "https://", 1);
            }
        }
        if let Some(user) = &options.user {
            connect_options =
                connect_options.with_user(user.name.clone(), user.password.expose().to_owned());
        }
        let connect = async {
            let client = Client::connect(&endpoints, Some(connect_options))
                .await
                .map_err(|e| connect_error(url, &parsed.hosts, &options, &e))?;
            let lease = client
                .lease_client()
                .grant(options.session_timeout.as_secs() as i64, None)
                .await
                .map_err(|e| match connect_error(url, &parsed.hosts, &options, &e) {
                    MetadataError::Unavailable { .. } => {
                        unavailable(format!("etcd `{}` granted no lease: {e}", parsed.hosts))
                    }
                    denied => denied,
                })?
                .id();
            Ok::<_, MetadataError>((client, lease))
        };
        let (client, lease) = tokio::time::timeout(options.connect_timeout, connect)
            .await
            .map_err(|_| {
                unavailable(format!(
                    "no answer from etcd `{}` within the {:?} connect timeout",
                    parsed.hosts, options.connect_timeout
                ))
            })??;
        let (signals, _) = broadcast::channel(256);
        let doctor = endpoints::doctor_for(&endpoints);
        let inner = Arc::new(Inner {
            url: url.to_owned(),
            hosts: parsed.hosts,
            prefix: parsed.prefix,
            options,
            client,
            lease: AtomicI64::new(lease),
            generation: AtomicU64::new(1),
            connected: AtomicBool::new(true),
            closed: AtomicBool::new(false),
            signals,
            doctor: doctor.clone(),
            batcher: batch::Batcher::default(),
            read_batcher: batch::Batcher::default(),
        });
        if let Some(doctor) = doctor {
            let weak = Arc::downgrade(&inner);
            tokio::spawn(endpoints::run(
                Arc::downgrade(&doctor),
                endpoints.clone(),
                move || {
                    weak.upgrade()
                        .filter(|i| !i.is_closed())
                        .map(|i| i.client.clone())
                },
            ));
        }
        tokio::spawn(session::keep_alive(Arc::downgrade(&inner), lease));
        info!(url, lease, "connected to etcd");
        Ok(EtcdStore { inner })
    }

    /// The URL the store was opened with.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// How many writes left together with others in one etcd request so far.
    ///
    /// Writes of node values (`put` of an existing node) that arrive while
    /// the store already has requests in flight are sent together as soon as
    /// one completes, each as a nested transaction with its own compares and
    /// outcome; a write is never held back waiting for company.
    pub fn write_batches(&self) -> WriteBatches {
        self.inner.batcher.stats()
    }

    /// How many reads (`get`, `exists` and the reads behind watches) left
    /// together with others in one etcd request so far.
    ///
    /// Reads that arrive while the store already has two reads in flight are
    /// sent together as soon as one completes: their range reads side by side
    /// in one read-only transaction (at most 16 reads), which etcd serves
    /// with one linearizable read. A read is never held back waiting for
    /// company.
    pub fn read_batches(&self) -> ReadBatches {
        self.inner.read_batcher.read_stats()
    }

    /// The id of the store's current lease (its session).
    pub fn lease_id(&self) -> i64 {
        self.inner.lease.load(Ordering::Acquire)
    }

    /// How many leases the store has taken: 1, plus one per lost lease.
    pub fn session_generation(&self) -> u64 {
        self.inner.generation.load(Ordering::Acquire)
    }
}

impl Inner {
    fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    fn signal(&self, signal: Signal) {
        let _ = self.signals.send(signal);
    }

    fn kv(&self) -> KvClient {
        self.client
            .kv_client()
            .max_decoding_message_size(batch::MAX_ANSWER_BYTES)
    }
}
