//! The store's session: keeping its etcd lease alive, reporting lost and
//! regained connections, taking a new lease when etcd ended the old one, and
//! revoking the lease when the last clone is dropped unclosed.

use std::sync::atomic::Ordering;
use std::sync::Weak;
use std::time::Duration;

use tracing::{debug, info, warn};

use super::{Inner, Signal};
use crate::types::SessionEvent;

impl Drop for Inner {
    fn drop(&mut self) {
        if self.is_closed() {
            return;
        }
        let lease = self.lease.load(Ordering::Acquire);
        let mut leases = self.client.lease_client();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                let _ = leases.revoke(lease).await;
            });
        }
    }
}

/// Keeps the lease alive; reports lost and regained connections, and a lost
/// lease as an expired session followed by a new one.
pub(super) async fn keep_alive(inner: Weak<Inner>, first_lease: i64) {
    let mut lease = first_lease;
    let (ttl, mut leases) = match inner.upgrade() {
        Some(i) => (i.options.session_timeout, i.client.lease_client()),
        None => return,
    };
    let period = ttl / 3;
    let mut stream: Option<(etcd_client::LeaseKeeper, etcd_client::LeaseKeepAliveStream)> = None;
    loop {
        tokio::time::sleep(period).await;
        let Some(store) = inner.upgrade() else { return };
        if store.is_closed() {
            return;
        }
        let answer: std::result::Result<i64, String> = async {
            if stream.is_none() {
                stream = Some(leases.keep_alive(lease).await.map_err(|e| e.to_string())?);
            }
            let (keeper, replies) = stream.as_mut().expect("opened above");
            keeper.keep_alive().await.map_err(|e| e.to_string())?;
            match tokio::time::timeout(period, replies.message()).await {
                Ok(Ok(Some(reply))) => Ok(reply.ttl()),
                Ok(Ok(None)) => Err("the keep-alive stream ended".to_owned()),
                Ok(Err(e)) => Err(e.to_string()),
                Err(_) => Err("no keep-alive answer in time".to_owned()),
            }
        }
        .await;
        let answer = match answer {
            Err(e) if e.contains("lease not found") => Ok(0),
            other => other,
        };
        match answer {
            Ok(ttl_left) if ttl_left > 0 => {
                if !store.connected.swap(true, Ordering::AcqRel) {
                    info!(url = %store.url, "etcd connection back, lease alive");
                    store.signal(Signal::Session(SessionEvent::Reconnected));
                }
            }
            Ok(_) => {
                warn!(url = %store.url, lease, "etcd lease expired: session lost");
                stream = None;
                store.connected.store(true, Ordering::Release);
                store.signal(Signal::Session(SessionEvent::SessionExpired));
                loop {
                    if store.is_closed() {
                        return;
                    }
                    match leases.grant(ttl.as_secs() as i64, None).await {
                        Ok(granted) => {
                            lease = granted.id();
                            store.lease.store(lease, Ordering::Release);
                            store.generation.fetch_add(1, Ordering::AcqRel);
                            info!(url = %store.url, lease, "new etcd lease");
                            store.signal(Signal::Session(SessionEvent::SessionReestablished));
                            break;
                        }
                        Err(e) => {
                            debug!(error = %e, "etcd lease grant failed; retrying");
                            tokio::time::sleep(Duration::from_millis(200)).await;
                        }
                    }
                }
            }
            Err(reason) => {
                stream = None;
                if store.connected.swap(false, Ordering::AcqRel) {
                    warn!(url = %store.url, %reason, "etcd connection lost");
                    store.signal(Signal::Session(SessionEvent::ConnectionLost));
                }
            }
        }
    }
}
