//! TLS of the REST API (rustls, ring): the server side of a node
//! ([`TlsServerSettings`], [`server_config`]) with a certificate that is
//! re-read when its files change, and the client side
//! ([`client_config`]) that [`AdminClient`](crate::AdminClient), the CLI and
//! node-to-node calls share.
//!
//! The certificate and key are PEM files. When a client CA is configured, a
//! client certificate signed by it is required on every connection.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use parking_lot::Mutex;
use rustls::crypto::ring::default_provider;
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{ClientConfig, RootCertStore, ServerConfig};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, PrivateKeyDer};

/// How often, at most, the server looks at the certificate files' mtimes.
pub const DEFAULT_RELOAD_CHECK: Duration = Duration::from_secs(2);

/// Why TLS could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    /// A certificate, key or CA file could not be read or parsed.
    #[error("TLS file '{path}': {reason}")]
    File {
        /// The file.
        path: PathBuf,
        /// What was wrong with it (never its contents).
        reason: String,
    },
    /// rustls refused the configuration.
    #[error("TLS configuration refused: {0}")]
    Config(String),
}

/// The HTTPS settings of a node's REST server.
#[derive(Clone, PartialEq, Eq)]
pub struct TlsServerSettings {
    /// The server certificate chain (PEM, leaf first).
    pub cert: PathBuf,
    /// The server's private key (PEM: PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// When set: client certificates are required and must chain to one of
    /// these CA certificates (PEM).
    pub client_ca: Option<PathBuf>,
    /// How often, at most, the certificate and key files are checked for a
    /// change ([`DEFAULT_RELOAD_CHECK`]).
    pub reload_check: Duration,
}

impl TlsServerSettings {
    /// Settings from a certificate and key file, no client certificates.
    pub fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> TlsServerSettings {
        TlsServerSettings {
            cert: cert.into(),
            key: key.into(),
            client_ca: None,
            reload_check: DEFAULT_RELOAD_CHECK,
        }
    }
}

impl fmt::Debug for TlsServerSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Paths only: the key file's contents are never held here.
        f.debug_struct("TlsServerSettings")
            .field("cert", &self.cert)
            .field("key", &self.key)
            .field("client_ca", &self.client_ca)
            .finish_non_exhaustive()
    }
}

fn file_error(path: &Path, reason: impl fmt::Display) -> TlsError {
    TlsError::File {
        path: path.to_owned(),
        reason: reason.to_string(),
    }
}

/// The certificates of a PEM file (at least one).
pub fn load_certs(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| file_error(path, e))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| file_error(path, e))?;
    if certs.is_empty() {
        return Err(file_error(path, "no PEM certificate in it"));
    }
    Ok(certs)
}

fn load_key(path: &Path) -> Result<PrivateKeyDer<'static>, TlsError> {
    // The parser's error never quotes the key.
    PrivateKeyDer::from_pem_file(path).map_err(|e| file_error(path, e))
}

fn roots(path: &Path) -> Result<RootCertStore, TlsError> {
    let mut roots = RootCertStore::empty();
    for cert in load_certs(path)? {
        roots.add(cert).map_err(|e| file_error(path, e))?;
    }
    Ok(roots)
}

fn certified_key(cert: &Path, key: &Path) -> Result<Arc<CertifiedKey>, TlsError> {
    let chain = load_certs(cert)?;
    let key_der = load_key(key)?;
    let signer = default_provider()
        .key_provider
        .load_private_key(key_der)
        .map_err(|e| file_error(key, e))?;
    let certified = CertifiedKey::new(chain, signer);
    certified
        .keys_match()
        .map_err(|e| file_error(key, format!("does not match the certificate: {e}")))?;
    Ok(Arc::new(certified))
}

fn mtimes(s: &TlsServerSettings) -> (Option<SystemTime>, Option<SystemTime>) {
    let m = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    (m(&s.cert), m(&s.key))
}

/// The server certificate, re-read from its files when their mtimes change
/// (looked at no more often than every [`TlsServerSettings::reload_check`]).
/// A reload that fails keeps the certificate in use and is logged.
struct ReloadingCert {
    settings: TlsServerSettings,
    state: Mutex<CertState>,
}

struct CertState {
    key: Arc<CertifiedKey>,
    mtimes: (Option<SystemTime>, Option<SystemTime>),
    checked: Instant,
}

impl fmt::Debug for ReloadingCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingCert")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl ReloadingCert {
    fn new(settings: TlsServerSettings) -> Result<ReloadingCert, TlsError> {
        let key = certified_key(&settings.cert, &settings.key)?;
        let state = CertState {
            key,
            mtimes: mtimes(&settings),
            checked: Instant::now(),
        };
        Ok(ReloadingCert {
            settings,
            state: Mutex::new(state),
        })
    }

    fn current(&self) -> Arc<CertifiedKey> {
        let mut state = self.state.lock();
        if state.checked.elapsed() >= self.settings.reload_check {
            state.checked = Instant::now();
            let now = mtimes(&self.settings);
            if now != state.mtimes {
                match certified_key(&self.settings.cert, &self.settings.key) {
                    Ok(key) => {
                        state.key = key;
                        state.mtimes = now;
                        tracing::info!(cert = %self.settings.cert.display(), "TLS certificate reloaded");
                    }
                    // A half-written pair: tried again at the next check.
                    Err(e) => {
                        tracing::warn!(error = %e, "TLS certificate not reloaded; keeping the one in use")
                    }
                }
            }
        }
        state.key.clone()
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.current())
    }
}

/// The rustls server configuration of `settings` (HTTP/1.1).
///
/// # Errors
///
/// [`TlsError`] when a file cannot be read or parsed, or the key does not
/// match the certificate.
pub fn server_config(settings: &TlsServerSettings) -> Result<Arc<ServerConfig>, TlsError> {
    let provider = Arc::new(default_provider());
    let builder = ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?;
    let builder = match &settings.client_ca {
        Some(ca) => {
            let verifier =
                WebPkiClientVerifier::builder_with_provider(Arc::new(roots(ca)?), provider)
                    .build()
                    .map_err(|e| TlsError::Config(e.to_string()))?;
            builder.with_client_cert_verifier(verifier)
        }
        None => builder.with_no_client_auth(),
    };
    let mut config = builder.with_cert_resolver(Arc::new(ReloadingCert::new(settings.clone())?));
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// The rustls client configuration of the REST API's clients: the server is
/// verified against the CA certificates of `trust` (PEM), or the system's
/// roots without it; the host name of the URL must match the certificate.
/// `identity` (certificate, key PEM files) is sent to servers that require a
/// client certificate.
///
/// # Errors
///
/// [`TlsError`] when a file cannot be read, or (without `trust`) no system
/// root could be loaded.
pub fn client_config(
    trust: Option<&Path>,
    identity: Option<(&Path, &Path)>,
) -> Result<Arc<ClientConfig>, TlsError> {
    let roots = match trust {
        Some(path) => roots(path)?,
        None => {
            let found = rustls_native_certs::load_native_certs();
            let mut roots = RootCertStore::empty();
            let (added, _) = roots.add_parsable_certificates(found.certs);
            if added == 0 {
                return Err(TlsError::Config(
                    "no system trust roots found; give a trust file (--tls-trust)".into(),
                ));
            }
            roots
        }
    };
    let builder = ClientConfig::builder_with_provider(Arc::new(default_provider()))
        .with_safe_default_protocol_versions()
        .map_err(|e| TlsError::Config(e.to_string()))?
        .with_root_certificates(roots);
    let config = match identity {
        Some((cert, key)) => builder
            .with_client_auth_cert(load_certs(cert)?, load_key(key)?)
            .map_err(|e| file_error(key, e))?,
        None => builder.with_no_client_auth(),
    };
    Ok(Arc::new(config))
}
