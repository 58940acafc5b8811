#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod binary;
mod error;
mod http;
mod metrics;
mod route;
mod upstream;
mod view;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::MetadataStore;
use bkswitch_topic_routes::TopicRoutes;
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

pub use binary::SERVER_VERSION;
pub use error::{ProxyError, Result};
pub use metrics::{Listener, LookupResult, ProxyMetrics};
pub use route::{namespace_clusters, topic_cluster, Home, Refusal};
pub use upstream::{UpstreamError, Upstreams, PROTOCOL_VERSION};
pub use view::{RouteView, Serving, Snapshot};

/// A TLS listener of the binary protocol (`pulsar+ssl://`).
#[derive(Debug, Clone)]
pub struct TlsListener {
    /// Where to listen, `host:port`.
    pub addr: String,
    /// The server certificate chain, PEM.
    pub cert_file: PathBuf,
    /// The server's private key, PEM.
    pub key_file: PathBuf,
}

/// How a proxy runs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The proxy's id: the name of its acknowledgement (unique among the
    /// proxies sharing a routing table).
    pub proxy_id: String,
    /// The binary protocol listener (`pulsar://`), `host:port`; port 0 picks
    /// a free one. `None`: none.
    pub binary_addr: Option<String>,
    /// The binary protocol over TLS.
    pub tls: Option<TlsListener>,
    /// The HTTP lookup listener, `host:port`. `None`: none.
    pub http_addr: Option<String>,
    /// Where system namespaces go.
    pub home: Home,
    /// The root of the routing metadata
    /// ([`DEFAULT_ROOT`](bkswitch_topic_routes::DEFAULT_ROOT) when `None`).
    pub routes_root: Option<String>,
    /// How long a forwarded request waits for a cluster's answer.
    pub upstream_timeout: Duration,
}

impl ProxyConfig {
    /// A proxy `proxy_id` with a binary and an HTTP listener on free
    /// loopback ports, no TLS and no home cluster.
    pub fn new(proxy_id: &str) -> ProxyConfig {
        ProxyConfig {
            proxy_id: proxy_id.to_owned(),
            binary_addr: Some("127.0.0.1:0".to_owned()),
            tls: None,
            http_addr: Some("127.0.0.1:0".to_owned()),
            home: Home::new(None),
            routes_root: None,
            upstream_timeout: Duration::from_secs(10),
        }
    }
}

/// What every connection of a proxy shares.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) proxy_id: String,
    pub(crate) view: RouteView,
    pub(crate) home: Home,
    pub(crate) upstreams: Upstreams,
    pub(crate) metrics: ProxyMetrics,
}

/// A running lookup proxy. [`stop`](Self::stop) ends it; dropping it
/// without stopping leaves its tasks running until the runtime ends.
#[derive(Debug)]
pub struct LookupProxy {
    shared: Arc<Shared>,
    routes: TopicRoutes,
    stop: watch::Sender<bool>,
    binary_addr: Option<SocketAddr>,
    tls_addr: Option<SocketAddr>,
    http_addr: Option<SocketAddr>,
    tasks: Vec<JoinHandle<()>>,
}

async fn bind(what: &'static str, addr: &str) -> Result<TcpListener> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| ProxyError::Bind {
            what,
            addr: addr.to_owned(),
            source,
        })
}

fn tls_acceptor(tls: &TlsListener) -> Result<tokio_rustls::TlsAcceptor> {
    let certs = CertificateDer::pem_file_iter(&tls.cert_file)
        .and_then(|i| i.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| {
            ProxyError::Tls(format!(
                "cannot read the certificate chain {}: {e}",
                tls.cert_file.display()
            ))
        })?;
    let key = PrivateKeyDer::from_pem_file(&tls.key_file).map_err(|e| {
        ProxyError::Tls(format!(
            "cannot read the private key {}: {e}",
            tls.key_file.display()
        ))
    })?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ProxyError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| ProxyError::Tls(format!("the certificate and key do not fit: {e}")))?;
    Ok(tokio_rustls::TlsAcceptor::from(Arc::new(config)))
}

impl LookupProxy {
    /// Reads the routing table from `store`, acknowledges it, binds the
    /// listeners and serves.
    ///
    /// # Errors
    /// [`ProxyError::Routes`] (the table cannot be read, a bad proxy id),
    /// [`ProxyError::Bind`], [`ProxyError::Tls`], [`ProxyError::Config`]
    /// (no listener at all).
    pub async fn start(config: ProxyConfig, store: Arc<dyn MetadataStore>) -> Result<LookupProxy> {
        if config.binary_addr.is_none() && config.tls.is_none() && config.http_addr.is_none() {
            return Err(ProxyError::Config(
                "no listener: give a binary, TLS or HTTP address".to_owned(),
            ));
        }
        let acceptor = config.tls.as_ref().map(tls_acceptor).transpose()?;
        let binary = match &config.binary_addr {
            Some(a) => Some(bind("the binary protocol", a).await?),
            None => None,
        };
        let tls = match &config.tls {
            Some(t) => Some(bind("the binary protocol over TLS", &t.addr).await?),
            None => None,
        };
        let http = match &config.http_addr {
            Some(a) => Some(bind("HTTP lookups", a).await?),
            None => None,
        };
        let routes = match &config.routes_root {
            Some(root) => TopicRoutes::with_root(Arc::clone(&store), root)?,
            None => TopicRoutes::new(Arc::clone(&store)),
        };
        let metrics = ProxyMetrics::new();
        let (stop, stop_rx) = watch::channel(false);
        let view = RouteView::start(
            store,
            routes.clone(),
            &config.proxy_id,
            metrics.clone(),
            stop_rx.clone(),
        )
        .await?;
        let shared = Arc::new(Shared {
            proxy_id: config.proxy_id.clone(),
            view,
            home: config.home.clone(),
            upstreams: Upstreams::new(config.upstream_timeout, SERVER_VERSION),
            metrics,
        });
        let local = |l: &Option<TcpListener>| l.as_ref().and_then(|l| l.local_addr().ok());
        let (binary_addr, tls_addr, http_addr) = (local(&binary), local(&tls), local(&http));
        let mut tasks = Vec::new();
        if let Some(listener) = binary {
            tasks.push(tokio::spawn(accept(
                listener,
                Arc::clone(&shared),
                None,
                stop_rx.clone(),
            )));
        }
        if let (Some(listener), Some(acceptor)) = (tls, acceptor) {
            tasks.push(tokio::spawn(accept(
                listener,
                Arc::clone(&shared),
                Some(acceptor),
                stop_rx.clone(),
            )));
        }
        if let Some(listener) = http {
            let app = http::router(Arc::clone(&shared));
            let mut stop_http = stop_rx.clone();
            tasks.push(tokio::spawn(async move {
                let _ = axum::serve(listener, app)
                    .with_graceful_shutdown(async move {
                        stopped(&mut stop_http).await;
                    })
                    .await;
            }));
        }
        tracing::info!(proxy = %config.proxy_id, ?binary_addr, ?tls_addr, ?http_addr, "lookup proxy serving");
        Ok(LookupProxy {
            shared,
            routes,
            stop,
            binary_addr,
            tls_addr,
            http_addr,
            tasks,
        })
    }

    /// The address of the binary listener.
    pub fn binary_addr(&self) -> Option<SocketAddr> {
        self.binary_addr
    }

    /// The address of the TLS listener.
    pub fn tls_addr(&self) -> Option<SocketAddr> {
        self.tls_addr
    }

    /// The address of the HTTP listener.
    pub fn http_addr(&self) -> Option<SocketAddr> {
        self.http_addr
    }

    /// The proxy's view of the routing table.
    pub fn view(&self) -> &RouteView {
        &self.shared.view
    }

    /// The proxy's metrics.
    pub fn metrics(&self) -> &ProxyMetrics {
        &self.shared.metrics
    }

    /// Stops serving: the listeners close, client connections end, the
    /// table is no longer followed and the acknowledgement is withdrawn (a
    /// stopped proxy holds no barrier up).
    pub async fn stop(self) {
        self.stop.send_replace(true);
        for t in self.tasks {
            let _ = t.await;
        }
        if let Err(e) = self.routes.withdraw(&self.shared.proxy_id).await {
            tracing::warn!(proxy = %self.shared.proxy_id, error = %e, "cannot withdraw the acknowledgement; it ends with the session");
        }
    }
}

/// Resolves once `stop` is set (or its sender is gone).
pub(crate) async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

async fn accept(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let (stream, _) = tokio::select! {
            () = stopped(&mut stop) => return,
            r = listener.accept() => match r {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
        };
        let _ = stream.set_nodelay(true);
        let shared = Arc::clone(&shared);
        let stop = stop.clone();
        match &tls {
            None => {
                tokio::spawn(binary::serve(stream, shared, false, stop));
            }
            Some(acceptor) => {
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream))
                        .await
                    {
                        Ok(Ok(tls)) => binary::serve(tls, shared, true, stop).await,
                        Ok(Err(e)) => tracing::debug!(error = %e, "TLS handshake failed"),
                        Err(_) => tracing::debug!("TLS handshake timed out"),
                    }
                });
            }
        }
    }
}
