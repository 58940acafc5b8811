//! TLS to ZooKeeper's secure client port (`secureClientPort`).
//!
//! The `zookeeper-async` client speaks plain TCP only. A [`ZkStore`] given
//! [`ZkTls`] therefore hands the client loopback addresses of its own: one
//! listener per server of the connect string, in this process, that wraps
//! every connection the client opens in TLS (rustls, the `ring` provider)
//! to that server, verifying the server's certificate against the given CA
//! and presenting the client certificate when there is one (ZooKeeper's
//! `ssl.clientAuth`). Nothing but the client of this store can use these
//! listeners in practice: they are on `127.0.0.1`, on ports the system
//! picks, and carry only what the client sends through them.
//!
//! Before the first session a handshake with each server checks the TLS
//! settings, so a wrong CA, a wrong host name or a refused client
//! certificate is reported at once, naming the server and the reason,
//! rather than as a connection timeout.
//!
//! [`ZkStore`]: super::ZkStore

use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio_rustls::TlsConnector;
use tracing::debug;

use crate::error::{MetadataError, Operation, Result};
use crate::secret::Secret;

/// TLS settings of a [`ZkStore`](super::ZkStore), all PEM: what ZooKeeper's
/// Java client takes as `zookeeper.ssl.trustStore.*` and
/// `zookeeper.ssl.keyStore.*` with `zookeeper.client.secure=true`. `Debug`
/// prints the key as `***`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZkTls {
    /// The CA certificate(s) the servers' certificates must chain to.
    pub ca_pem: String,
    /// The client certificate (chain) and its private key, for servers that
    /// require one (`ssl.clientAuth=need`).
    pub client: Option<(String, Secret)>,
    /// The name the servers' certificates must carry, when it is not the
    /// host of the connect string.
    pub domain: Option<String>,
}

fn bad(what: &str, reason: impl std::fmt::Display) -> MetadataError {
    MetadataError::InvalidArgument {
        op: Operation::Connect,
        path: what.to_owned(),
        reason: reason.to_string(),
    }
}

impl ZkTls {
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
    ) -> Result<ZkTls> {
        let read = |path: &std::path::Path| {
            std::fs::read_to_string(path).map_err(|e| {
                bad(
                    &path.display().to_string(),
                    format!("cannot read the TLS file: {e}"),
                )
            })
        };
        let ca_pem = read(ca.as_ref())?;
        let client = match client {
            Some((cert, key)) => Some((read(cert)?, Secret::from_file(key)?)),
            None => None,
        };
        Ok(ZkTls {
            ca_pem,
            client,
            domain: None,
        })
    }

    /// The rustls client configuration.
    fn connector(&self) -> Result<TlsConnector> {
        let mut roots = rustls::RootCertStore::empty();
        let mut any = false;
        for cert in CertificateDer::pem_slice_iter(self.ca_pem.as_bytes()) {
            let cert = cert.map_err(|e| bad("ZooKeeper TLS CA", format!("not PEM: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| bad("ZooKeeper TLS CA", format!("not a CA certificate: {e}")))?;
            any = true;
        }
        if !any {
            return Err(bad("ZooKeeper TLS CA", "no certificate in the PEM"));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| bad("ZooKeeper TLS", e))?
            .with_root_certificates(roots);
        let config = match &self.client {
            None => builder.with_no_client_auth(),
            Some((cert, key)) => {
                let chain = CertificateDer::pem_slice_iter(cert.as_bytes())
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| {
                        bad("ZooKeeper TLS client certificate", format!("not PEM: {e}"))
                    })?;
                let key = PrivateKeyDer::from_pem_slice(key.expose().as_bytes()).map_err(|_| {
                    bad(
                        "ZooKeeper TLS client key",
                        "not a PEM private key (PKCS#8, PKCS#1 or SEC1)",
                    )
                })?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| bad("ZooKeeper TLS client certificate", e))?
            }
        };
        Ok(TlsConnector::from(Arc::new(config)))
    }
}

/// The loopback listeners of one store, one per server; dropping them stops
/// them (connections already open go on until either side closes).
pub(crate) struct Tunnels {
    /// The connect string to give the client: the listeners' addresses.
    pub(crate) hosts: String,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Tunnels {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl std::fmt::Debug for Tunnels {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tunnels")
            .field("hosts", &self.hosts)
            .finish()
    }
}

fn server_name(tls: &ZkTls, server: &str) -> Result<ServerName<'static>> {
    let host = match &tls.domain {
        Some(d) => d.as_str(),
        None => server
            .rsplit_once(':')
            .map_or(server, |(h, _)| h)
            .trim_start_matches('[')
            .trim_end_matches(']'),
    };
    ServerName::try_from(host.to_owned())
        .map_err(|e| bad(server, format!("not a TLS server name `{host}`: {e}")))
}

/// One TLS connection to `server`.
async fn dial(
    connector: &TlsConnector,
    name: ServerName<'static>,
    server: &str,
) -> std::result::Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
    let tcp = TcpStream::connect(server)
        .await
        .map_err(|e| format!("cannot connect: {e}"))?;
    let _ = tcp.set_nodelay(true);
    connector
        .connect(name, tcp)
        .await
        .map_err(|e| format!("TLS handshake failed: {e}"))
}

/// One handshake with `server`, then a short wait for what a server sends
/// at once when it refuses the client's certificate: with TLS 1.3 the
/// client completes its handshake before the server has checked the
/// certificate, and learns of a refusal only from the alert that follows.
async fn probe(
    connector: &TlsConnector,
    name: ServerName<'static>,
    server: &str,
) -> std::result::Result<(), String> {
    use tokio::io::AsyncReadExt;
    let mut stream = dial(connector, name, server).await?;
    let mut byte = [0u8; 1];
    match tokio::time::timeout(Duration::from_millis(300), stream.read(&mut byte)).await {
        // Silence: the server waits for the client's first request.
        Err(_) | Ok(Ok(1..)) => Ok(()),
        Ok(Ok(0)) => Err(
            "the server closed the connection after the TLS handshake (does it \
                          require a client certificate this store does not present?)"
                .to_owned(),
        ),
        Ok(Err(e)) => Err(format!(
            "the server refused the connection after the TLS handshake: {e}"
        )),
    }
}

/// Checks the TLS settings against every server of `hosts` (one handshake
/// each) and opens a loopback listener per server.
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) for
/// settings that do not parse; [`ErrorKind::PermissionDenied`](crate::ErrorKind::PermissionDenied)
/// naming every server and its reason when no server completes a
/// handshake (a server that is down is only logged while another answers).
pub(crate) async fn open(url: &str, hosts: &str, tls: &ZkTls) -> Result<Tunnels> {
    let connector = tls.connector()?;
    let servers: Vec<&str> = hosts.split(',').map(str::trim).collect();
    let mut failures = Vec::new();
    for server in &servers {
        let name = server_name(tls, server)?;
        if let Err(e) = probe(&connector, name, server).await {
            failures.push(format!("{server}: {e}"));
        }
    }
    if failures.len() == servers.len() {
        return Err(MetadataError::PermissionDenied {
            op: Operation::Connect,
            path: url.to_owned(),
            reason: format!(
                "no ZooKeeper server completed a TLS handshake ({}); check the CA, the \
                 client certificate and that the port is ZooKeeper's secureClientPort",
                failures.join("; ")
            ),
        });
    }
    for f in &failures {
        debug!(url, failure = %f, "a ZooKeeper server did not complete a TLS handshake");
    }
    let mut local = Vec::new();
    let mut tasks = Vec::new();
    for server in servers {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .map_err(|e| bad(url, format!("cannot open a loopback listener for TLS: {e}")))?;
        let addr = listener
            .local_addr()
            .map_err(|e| bad(url, format!("cannot read the listener's address: {e}")))?;
        local.push(addr.to_string());
        let connector = connector.clone();
        let name = server_name(tls, server)?;
        let server = server.to_owned();
        tasks.push(tokio::spawn(async move {
            loop {
                let Ok((mut plain, _)) = listener.accept().await else {
                    // Out of file descriptors, say: do not spin.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                };
                let _ = plain.set_nodelay(true);
                let (connector, name, server) = (connector.clone(), name.clone(), server.clone());
                tokio::spawn(async move {
                    match dial(&connector, name, &server).await {
                        Ok(mut secure) => {
                            let _ = tokio::io::copy_bidirectional(&mut plain, &mut secure).await;
                        }
                        Err(e) => debug!(%server, error = %e, "ZooKeeper TLS connection failed"),
                    }
                });
            }
        }));
    }
    Ok(Tunnels {
        hosts: local.join(","),
        tasks,
    })
}
