//! Node-id registration: every live node holds one ephemeral node
//! `<nodes root>/<node id>` naming its REST URL, taken at start before
//! anything else, so that a second node started with the same id (the
//! default `node-1` left on two brokers) is refused instead of both owning
//! the same topics (topic ownership trusts the node id: a claim by the same
//! id replaces the previous one, which is how a restarted node takes its
//! topics back).
//!
//! A registration left by a node that is gone — a crash, then a restart
//! before its metadata session expired — is taken over: the registered REST
//! address no longer accepts connections, or it is this node's own address
//! (bound by it now). A registration whose address answers is a live node:
//! refused with [`NodeError::DuplicateNodeId`].
//!
//! While the node runs, [`keep`] takes the registration again when it
//! disappears (a session expiry deletes it with the session's ephemeral
//! nodes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataStore, Notification, SessionEvent,
};
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::NodeError;

/// Default root of the node-id registrations.
pub const DEFAULT_NODES_ROOT: &str = "/bkswitch/nodes";

/// How long the liveness probe of a registered address waits.
const PROBE: Duration = Duration::from_secs(2);

/// How many create / read / delete rounds [`register`] makes.
const ATTEMPTS: usize = 8;

/// The value of a node-id registration.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Registration {
    /// The node id.
    pub(super) node_id: String,
    /// Its REST base URL.
    pub(super) url: String,
    /// This start of the node (process id, start time, counter).
    pub(super) instance: String,
}

impl Registration {
    /// The registration of a node starting now.
    pub(crate) fn new(node_id: &str, url: &str) -> Registration {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default();
        Registration {
            node_id: node_id.to_owned(),
            url: url.to_owned(),
            instance: format!(
                "{}-{ms}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            ),
        }
    }
}

fn path(root: &str, node_id: &str) -> String {
    format!("{root}/{node_id}")
}

/// Takes the registration of `reg.node_id` under `root` (an ephemeral node in
/// this session), replacing one left by a node that is gone.
///
/// # Errors
///
/// [`NodeError::DuplicateNodeId`] when a live node holds the id (nothing
/// written); [`NodeError::Metadata`].
pub(crate) async fn register(
    store: &dyn MetadataStore,
    root: &str,
    reg: &Registration,
) -> Result<(), NodeError> {
    let path = path(root, &reg.node_id);
    let value = serde_json::to_vec(reg).unwrap_or_default();
    for _ in 0..ATTEMPTS {
        match store.create(&path, &value, CreateMode::EPHEMERAL).await {
            Ok(_) => return Ok(()),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e.into()),
        }
        let Some(current) = store.get(&path).await? else {
            continue; // gone meanwhile: create again
        };
        if let Ok(holder) = serde_json::from_slice::<Registration>(&current.value) {
            if holder.url != reg.url && answers(&holder.url).await {
                return Err(NodeError::DuplicateNodeId {
                    node_id: reg.node_id.clone(),
                    url: holder.url,
                    path,
                });
            }
        }
        tracing::info!(
            node = %reg.node_id,
            path,
            "taking over the node-id registration of a node that is gone"
        );
        match store
            .delete(&path, ExpectedVersion::Exactly(current.stat.version))
            .await
        {
            Ok(()) => {}
            Err(e) if e.is_conflict() || e.kind() == ErrorKind::NotFound => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(NodeError::InvalidSettings(format!(
        "node id `{}`: its registration at `{path}` kept changing while this node started; \
         another node is starting with the same id. Give every node a unique id",
        reg.node_id
    )))
}

/// Gives the registration up if it is still `reg`'s (best effort).
pub(crate) async fn deregister(store: &dyn MetadataStore, root: &str, reg: &Registration) {
    let path = path(root, &reg.node_id);
    if let Ok(Some(r)) = store.get(&path).await {
        if serde_json::from_slice::<Registration>(&r.value)
            .is_ok_and(|h| h.instance == reg.instance)
        {
            let _ = store
                .delete(&path, ExpectedVersion::Exactly(r.stat.version))
                .await;
        }
    }
}

/// Keeps `reg` registered under `root` until `stop`: when the registration
/// disappears (a session expiry, a deletion), it is taken again as at start
/// ([`register`]); a live node that took the id meanwhile is logged as an
/// error (two nodes now run with one id) and left alone.
pub(crate) async fn keep(
    store: Arc<dyn MetadataStore>,
    root: String,
    reg: Registration,
    mut stop: watch::Receiver<bool>,
) {
    let path = path(&root, &reg.node_id);
    let mut events = loop {
        match store.watch(&path).await {
            Ok(w) => break w,
            Err(e) => {
                tracing::warn!(node = %reg.node_id, path, error = %e, "watching the node-id registration");
                tokio::select! {
                    _ = stop.changed() => return,
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
            }
        }
    };
    // A change made while the watch was armed is reported by it; one made
    // before is caught by this first check.
    let mut check = true;
    loop {
        if check {
            ensure(store.as_ref(), &root, &reg).await;
        }
        tokio::select! {
            _ = stop.changed() => return,
            event = events.next() => match event {
                None => return, // the store is closed
                Some(Notification::Deleted { .. })
                | Some(Notification::Session(SessionEvent::SessionReestablished)) => check = true,
                Some(_) => check = false,
            },
        }
    }
}

/// Registers `reg` again unless the registration is already its own.
async fn ensure(store: &dyn MetadataStore, root: &str, reg: &Registration) {
    let current = store.get(&path(root, &reg.node_id)).await;
    if let Ok(Some(r)) = &current {
        if serde_json::from_slice::<Registration>(&r.value)
            .is_ok_and(|h| h.instance == reg.instance)
        {
            return;
        }
    }
    match register(store, root, reg).await {
        Ok(()) => tracing::info!(node = %reg.node_id, "node id registered again"),
        Err(e @ NodeError::DuplicateNodeId { .. }) => {
            tracing::error!(error = %e, "another node took this node's id while its session was lost")
        }
        Err(e) => tracing::warn!(node = %reg.node_id, error = %e, "registering the node id again"),
    }
}

/// Whether something accepts connections at `url` (`http://host:port`).
async fn answers(url: &str) -> bool {
    let Some(addr) = url.strip_prefix("http://") else {
        return false;
    };
    let addr = addr.trim_end_matches('/');
    matches!(
        tokio::time::timeout(PROBE, tokio::net::TcpStream::connect(addr)).await,
        Ok(Ok(_))
    )
}
