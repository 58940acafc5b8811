//! Keeps the client off members that refuse connections.
//!
//! The etcd client balances requests over every endpoint of the URL and keeps
//! sending a share of them to a member that is down, each failing with a
//! connect error (etcd-client issue #39): with one member of three killed, a
//! third of the operations would fail for as long as it stays down. The
//! endpoint doctor probes each endpoint's port, takes the ones that refuse
//! out of the balancer and puts them back once they accept connections again;
//! an operation whose request could not even be sent (a connect error, so
//! nothing reached etcd) wakes it and is sent again.

use std::sync::{Arc, Weak};
use std::time::Duration;

use etcd_client::Client;
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

/// How often every endpoint is probed.
const PROBE_PERIOD: Duration = Duration::from_millis(500);
/// Bound of one probe's TCP connect.
const PROBE_TIMEOUT: Duration = Duration::from_millis(300);
/// Pause before an operation is sent again after a connect error.
pub(super) const RESEND_DELAY: Duration = Duration::from_millis(50);

/// Whether `e` says the request never left the client: the connection to the
/// chosen member could not be opened. Sending it again cannot apply it twice.
pub(super) fn is_connect_error(e: &etcd_client::Error) -> bool {
    let text = e.to_string();
    text.contains("tcp connect error") || text.contains("Connection refused")
}

/// Wakes the doctor early (after a connect error).
#[derive(Debug, Default)]
pub(super) struct Doctor {
    wake: Notify,
}

impl Doctor {
    /// Asks for a probe now.
    pub(super) fn wake(&self) {
        self.wake.notify_one();
    }
}

/// Probes `endpoints` (`http://host:port` each, as given to the client) until
/// `client_of` returns `None` (the store is gone or closed).
pub(super) async fn run(
    doctor: Weak<Doctor>,
    endpoints: Vec<String>,
    client_of: impl Fn() -> Option<Client>,
) {
    let mut out = vec![false; endpoints.len()];
    loop {
        let Some(d) = doctor.upgrade() else { return };
        let _ = tokio::time::timeout(PROBE_PERIOD, d.wake.notified()).await;
        drop(d);
        let Some(client) = client_of() else { return };
        for (i, endpoint) in endpoints.iter().enumerate() {
            let addr = endpoint
                .trim_start_matches("http://")
                .trim_start_matches("https://");
            let accepts = matches!(
                tokio::time::timeout(PROBE_TIMEOUT, TcpStream::connect(addr)).await,
                Ok(Ok(_))
            );
            if accepts && out[i] {
                match client.add_endpoint(endpoint).await {
                    Ok(()) => {
                        out[i] = false;
                        info!(
                            endpoint,
                            "etcd member accepts connections again: back in use"
                        );
                    }
                    Err(e) => debug!(endpoint, error = %e, "cannot put an etcd endpoint back"),
                }
            } else if !accepts && !out[i] {
                // Never take the last endpoint out: requests would wait for
                // one instead of failing with a clear error.
                if out.iter().filter(|o| !**o).count() <= 1 {
                    continue;
                }
                match client.remove_endpoint(endpoint).await {
                    Ok(()) => {
                        out[i] = true;
                        warn!(endpoint, "etcd member refuses connections: out of use");
                    }
                    Err(e) => debug!(endpoint, error = %e, "cannot take an etcd endpoint out"),
                }
            }
        }
    }
}

/// A doctor for a client of `endpoints`; `None` for a single endpoint
/// (nothing to fail over to).
pub(super) fn doctor_for(endpoints: &[String]) -> Option<Arc<Doctor>> {
    (endpoints.len() > 1).then(|| Arc::new(Doctor::default()))
}
