//! TLS to the bookies, as BookKeeper's Java client starts it: on a new
//! connection the client sends a protocol-version-3 `START_TLS` request (a
//! protobuf `Request` in a length-prefixed frame), the bookie answers `EOK`
//! and both sides run a TLS handshake on the same connection; the version-2
//! requests then go through TLS (`PerChannelBookieClient.initTLSHandshake`,
//! `BookieProtoEncoding`'s decoders, which take the first message of a
//! connection as version 3 and fall back to version 2).
//!
//! The bookies' certificates are checked against the trust store (a PEM file
//! of CA certificates, Java's `tlsTrustStore` with `tlsTrustStoreType=PEM`);
//! the bookie's host name or address is checked only when asked
//! (`tlsHostnameVerificationEnabled`, off by default in Java as here).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::WebPkiServerVerifier;
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};
use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName, UnixTime};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_rustls::TlsConnector;

/// The `START_TLS` request: `Request { header { version: VERSION_THREE,
/// operation: START_TLS, txnId: 0 }, startTLSRequest {} }`, length-prefixed.
const START_TLS_FRAME: [u8; 15] = [
    0, 0, 0, 11, // length
    0x0a, 6, 0x08, 3, 0x10, 9, 0x18, 0, // header (field 1): version 3, op 9, txn 0
    0xd2, 0x06, 0, // startTLSRequest (field 106), empty
];

/// The largest answer to `START_TLS` read (it has a header and a status).
const MAX_ANSWER: usize = 1024;

/// The TLS side of a client's connections.
#[derive(Clone)]
pub(crate) struct Tls {
    connector: TlsConnector,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tls")
    }
}

impl Tls {
    /// Trusts the CA certificates in the PEM file `trust_store`.
    pub(crate) fn new(trust_store: &Path, verify_hostname: bool) -> Result<Tls, String> {
        let mut roots = RootCertStore::empty();
        let certs = CertificateDer::pem_file_iter(trust_store).map_err(|e| {
            format!(
                "cannot read the TLS trust store `{}`: {e}",
                trust_store.display()
            )
        })?;
        for cert in certs {
            let cert = cert.map_err(|e| {
                format!(
                    "bad certificate in the TLS trust store `{}`: {e}",
                    trust_store.display()
                )
            })?;
            roots.add(cert).map_err(|e| {
                format!(
                    "bad certificate in the TLS trust store `{}`: {e}",
                    trust_store.display()
                )
            })?;
        }
        if roots.is_empty() {
            return Err(format!(
                "the TLS trust store `{}` holds no certificate; give a PEM file of the CA \
                 that signed the bookies' certificates",
                trust_store.display()
            ));
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let webpki = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone())
            .build()
            .map_err(|e| format!("TLS trust store `{}`: {e}", trust_store.display()))?;
        let config = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS: {e}"))?
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(Verifier {
                webpki,
                verify_hostname,
            }))
            .with_no_client_auth();
        Ok(Tls {
            connector: TlsConnector::from(Arc::new(config)),
        })
    }

    /// Asks the bookie to start TLS on `stream` and runs the handshake.
    pub(crate) async fn start(
        &self,
        mut stream: TcpStream,
        addr: SocketAddr,
    ) -> Result<TlsStream<TcpStream>, String> {
        stream
            .write_all(&START_TLS_FRAME)
            .await
            .map_err(|e| format!("sending START_TLS to {addr}: {e}"))?;
        let len = stream
            .read_u32()
            .await
            .map_err(|e| format!("reading the answer to START_TLS from {addr}: {e}"))?
            as usize;
        if len > MAX_ANSWER {
            return Err(format!(
                "the bookie at {addr} answered START_TLS with a {len}-byte frame; \
                 is it a BookKeeper bookie with TLS configured?"
            ));
        }
        let mut body = vec![0; len];
        stream
            .read_exact(&mut body)
            .await
            .map_err(|e| format!("reading the answer to START_TLS from {addr}: {e}"))?;
        match start_tls_status(&body) {
            Some(0) => {}
            Some(status) => {
                return Err(format!(
                    "the bookie at {addr} refused START_TLS with status {status}; \
                     configure TLS on the bookie (tlsProviderFactoryClass, tlsKeyStore, \
                     tlsCertificatePath) or connect without TLS"
                ))
            }
            None => {
                return Err(format!(
                    "the bookie at {addr} did not answer START_TLS with a version-3 response"
                ))
            }
        }
        let name = ServerName::IpAddress(addr.ip().into());
        self.connector
            .connect(name, stream)
            .await
            .map_err(|e| format!("TLS handshake with the bookie at {addr}: {e}"))
    }
}

/// The status of a version-3 `Response` to `START_TLS` (field 2), when the
/// answer is one (its header's operation, field 1.2, is `START_TLS`).
fn start_tls_status(body: &[u8]) -> Option<u64> {
    let mut at = 0;
    let mut status = None;
    let mut operation = None;
    while at < body.len() {
        let (key, next) = varint(body, at)?;
        at = next;
        match (key >> 3, key & 7) {
            (1, 2) => {
                let (len, next) = varint(body, at)?;
                let end = next.checked_add(usize::try_from(len).ok()?)?;
                let header = body.get(next..end)?;
                let mut h = 0;
                while h < header.len() {
                    let (k, n) = varint(header, h)?;
                    let (v, n) = varint(header, n)?;
                    if k == (2 << 3) {
                        operation = Some(v);
                    }
                    h = n;
                }
                at = end;
            }
            (2, 0) => {
                let (v, next) = varint(body, at)?;
                status = Some(v);
                at = next;
            }
            (_, 0) => at = varint(body, at)?.1,
            (_, 2) => {
                let (len, next) = varint(body, at)?;
                at = next.checked_add(usize::try_from(len).ok()?)?;
            }
            _ => return None,
        }
    }
    (operation == Some(9)).then_some(status).flatten()
}

fn varint(buf: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut value = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *buf.get(at)?;
        at += 1;
        value |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((value, at));
        }
    }
    None
}

/// Checks the chain against the trust store; the name only when asked.
#[derive(Debug)]
struct Verifier {
    webpki: Arc<WebPkiServerVerifier>,
    verify_hostname: bool,
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match self.webpki.verify_server_cert(
            end_entity,
            intermediates,
            server_name,
            ocsp_response,
            now,
        ) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) if !self.verify_hostname => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.webpki.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_start_tls_answer_is_read_from_a_version_3_response() {
        // Response { header { version 3, op START_TLS, txn 0 }, status EOK,
        // startTLSResponse {} }
        let ok = [0x0a, 6, 0x08, 3, 0x10, 9, 0x18, 0, 0x10, 0, 0xd2, 0x06, 0];
        assert_eq!(start_tls_status(&ok), Some(0));
        // Status EBADREQ (404, a two-byte varint).
        let refused = [0x0a, 6, 0x08, 3, 0x10, 9, 0x18, 0, 0x10, 0x94, 0x03];
        assert_eq!(start_tls_status(&refused), Some(404));
        // Another operation, or a version-2 answer: not an answer to START_TLS.
        let other = [0x0a, 6, 0x08, 3, 0x10, 1, 0x18, 0, 0x10, 0];
        assert_eq!(start_tls_status(&other), None);
        assert_eq!(start_tls_status(&[0x02, 0x02, 0, 0]), None);
        // The request frame's length matches its body.
        assert_eq!(START_TLS_FRAME[3] as usize, START_TLS_FRAME.len() - 4);
    }
}
