//! The REST server over TLS: TCP accepted here, the rustls handshake done per
//! connection (a slow handshake holds up no other client), then hyper's
//! HTTP/1.1 serves the axum router on the encrypted stream.
//!
//! A plaintext HTTP request on the TLS port is answered in plaintext with a
//! 400 that says to use `https://`, and the connection is closed; anything
//! else that is not TLS is closed by the failed handshake.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::TokioIo;
use hyper_util::service::TowerToHyperService;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// How long a client has for its TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// The body of the answer to plaintext HTTP on the TLS port.
pub(crate) const PLAINTEXT_REFUSAL: &str =
    "this port serves HTTPS only: use https:// and trust the server's CA\n";

/// Serves `app` over TLS on `listener` until `stop` turns `true`.
pub(super) async fn serve_tls(
    listener: TcpListener,
    app: Router,
    config: Arc<rustls::ServerConfig>,
    mut stop: watch::Receiver<bool>,
) {
    let acceptor = TlsAcceptor::from(config);
    loop {
        let accepted = tokio::select! {
            () = stopped(&mut stop) => return,
            accepted = listener.accept() => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                tracing::warn!(error = %e, "admin REST server: accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let acceptor = acceptor.clone();
        let app = app.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            if let Err(reason) = connection(tcp, acceptor, app, stop).await {
                tracing::info!(peer = %peer, reason = %reason, "admin REST connection refused");
            }
        });
    }
}

async fn connection(
    mut tcp: TcpStream,
    acceptor: TlsAcceptor,
    app: Router,
    mut stop: watch::Receiver<bool>,
) -> Result<(), String> {
    let mut first = [0u8; 1];
    let peeked = tokio::time::timeout(HANDSHAKE_TIMEOUT, tcp.peek(&mut first)).await;
    match peeked {
        Ok(Ok(1..)) if first[0].is_ascii_uppercase() => {
            // A plaintext HTTP request: say what is wrong, in plaintext.
            let answer = format!(
                "HTTP/1.1 400 Bad Request\r\nContent-Type: text/plain\r\n\
                 Connection: close\r\nContent-Length: {}\r\n\r\n{PLAINTEXT_REFUSAL}",
                PLAINTEXT_REFUSAL.len()
            );
            let _ = tcp.write_all(answer.as_bytes()).await;
            let _ = tcp.shutdown().await;
            return Err("plaintext HTTP on the TLS port".into());
        }
        Ok(Ok(_)) => {}
        Ok(Err(e)) => return Err(e.to_string()),
        Err(_) => return Err("no TLS handshake in time".into()),
    }
    let tls = tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(tcp))
        .await
        .map_err(|_| "TLS handshake timed out".to_string())?
        .map_err(|e| format!("TLS handshake failed: {e}"))?;
    let service = TowerToHyperService::new(app);
    let conn = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(HANDSHAKE_TIMEOUT)
        .serve_connection(TokioIo::new(tls), service)
        .with_upgrades();
    tokio::pin!(conn);
    tokio::select! {
        r = conn.as_mut() => r.map_err(|e| e.to_string()),
        () = stopped(&mut stop) => {
            conn.as_mut().graceful_shutdown();
            conn.await.map_err(|e| e.to_string())
        }
    }
}

/// Returns once `stop` turns `true` (or its sender is gone), holding no guard.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}
