//! Node-id registration: every live node holds one ephemeral node
//! `<nodes root>/<node id>` naming its REST URL, taken at start before
//! anything else, so that a second node started with the same id (the
//! default `node-1` left on two brokers) is refused instead of both owning
//! the same topics (topic ownership trusts the node id: a claim by the same
//! id replaces the previous one, which is how a restarted node takes its
//! topics back).
//!
//! A registration left by a node that is gone — a crash, then a restart
//! before its metadata session expired — is taken over: it was made on this
//! machine (same host name and boot) with this node's own address (bound by
//! this process now, so the old one is gone), or its address no longer
//! accepts connections. A registration whose address answers is a live node,
//! and one made on another machine with an address that only that machine
//! reaches (loopback, unspecified: `127.0.0.1:8080` left on two hosts) cannot
//! be probed from here: both are refused with [`NodeError::DuplicateNodeId`]
//! (the id frees itself when the other node's session ends). Taking the
//! second over without a probe made two such hosts take the id from each
//! other forever.
//!
//! While the node runs, [`keep`] takes the registration again when it
//! disappears (a session expiry deletes it with the session's ephemeral
//! nodes).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{CreateMode, ErrorKind, ExpectedVersion, MetadataStore};
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
    /// The machine it runs on (host name and boot id); empty in a
    /// registration written by an older version.
    #[serde(default)]
    pub(super) host: String,
}

/// This machine: its host name and the kernel's boot id (Linux), so that a
/// machine restarted with the same name counts as another one.
fn this_host() -> String {
    let read = |p: &str| {
        std::fs::read_to_string(p)
            .map(|s| s.trim().to_owned())
            .unwrap_or_default()
    };
    let name = read("/proc/sys/kernel/hostname");
    let name = if name.is_empty() {
        std::env::var("HOSTNAME").unwrap_or_default()
    } else {
        name
    };
    format!("{name}/{}", read("/proc/sys/kernel/random/boot_id"))
}

/// Whether `url`'s host is reachable only from the machine it runs on.
fn local_only(url: &str) -> bool {
    let host = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .unwrap_or(url)
        .trim_end_matches('/');
    let host = host.rsplit_once(':').map_or(host, |(h, _)| h);
    let host = host.trim_start_matches('[').trim_end_matches(']');
    host.eq_ignore_ascii_case("localhost")
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback() || ip.is_unspecified())
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
            host: this_host(),
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
            if holder.instance == reg.instance {
                return Ok(()); // ours already (a create answered late)
            }
            if !holder_gone(&holder, reg).await {
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

/// What [`keep`] calls, with the reason, when a live node took the id.
pub(crate) type OnTaken = Box<dyn Fn(String) + Send + Sync>;

/// Keeps `reg` registered under `root` until `stop`: when the registration
/// disappears (a session expiry, a deletion), it is taken again as at start
/// ([`register`]); when a live node took the id meanwhile, `on_taken` is
/// called (the node fail-stops: see `fail_stop.rs`) and the registration is
/// left to that node.
pub(crate) async fn keep(
    store: Arc<dyn MetadataStore>,
    root: String,
    reg: Registration,
    mut stop: watch::Receiver<bool>,
    on_taken: OnTaken,
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
        // A registration that failed for now (the store unavailable, or
        // refusing writes until the session's participant registered again)
        // is tried again shortly, not only at the next event (found by the
        // nemesis: a node frozen past its session came back unregistered, and
        // a second node took its id).
        if check {
            match ensure(store.as_ref(), &root, &reg).await {
                Ensured::Held => check = false,
                Ensured::Retry => {}
                Ensured::Taken(reason) => {
                    on_taken(reason);
                    return;
                }
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(Duration::from_millis(500)), if check => {}
            // Every event on the registration is checked: a deletion, a new
            // session, but also a creation or a change — another node that
            // took the id while this one's session was lost (found by the
            // nemesis, N20: a creation used to end the retries, and the node
            // ran on beside the one holding its id).
            event = events.next() => match event {
                None => return, // the store is closed
                Some(_) => check = true,
            },
        }
    }
}

/// What [`ensure`] found.
enum Ensured {
    /// The registration is this node's.
    Held,
    /// The store failed for now: try again shortly.
    Retry,
    /// A live node holds the id (the reason, for the operator).
    Taken(String),
}

/// Registers `reg` again unless the registration is already its own.
async fn ensure(store: &dyn MetadataStore, root: &str, reg: &Registration) -> Ensured {
    let current = store.get(&path(root, &reg.node_id)).await;
    if let Ok(Some(r)) = &current {
        if serde_json::from_slice::<Registration>(&r.value)
            .is_ok_and(|h| h.instance == reg.instance)
        {
            return Ensured::Held;
        }
    }
    match register(store, root, reg).await {
        Ok(()) => {
            tracing::info!(node = %reg.node_id, "node id registered again");
            Ensured::Held
        }
        Err(e @ NodeError::DuplicateNodeId { .. }) => {
            tracing::error!(error = %e, "another node took this node's id while its session was lost");
            Ensured::Taken(e.to_string())
        }
        Err(e) => {
            tracing::warn!(node = %reg.node_id, error = %e,
                "registering the node id again; retrying shortly");
            Ensured::Retry
        }
    }
}

/// Whether the node that wrote `holder` is gone, as seen by `reg`'s node.
async fn holder_gone(holder: &Registration, reg: &Registration) -> bool {
    let same_machine = !holder.host.is_empty() && holder.host == reg.host;
    if same_machine && holder.url == reg.url {
        // This process bound that address: the one that registered it is gone.
        return true;
    }
    if !same_machine && !holder.host.is_empty() && local_only(&holder.url) {
        // Another machine's loopback address: a probe would reach this one.
        return false;
    }
    if holder.host.is_empty() && holder.url == reg.url {
        // An older registration with this node's address: as before.
        return true;
    }
    !answers(&holder.url).await
}

/// Whether something accepts connections at `url` (`http://host:port`).
///
/// The connect runs on the blocking pool with its own timeout: the probe
/// then also answers truthfully under a paused clock (tokio does not jump
/// time forward while a blocking task runs), which the nemesis's
/// deterministic histories rely on — an asynchronous connect could be timed
/// out by a clock that jumped before the connection was reported.
async fn answers(url: &str) -> bool {
    let Some(addr) = url.strip_prefix("http://") else {
        return false;
    };
    let addr = addr.trim_end_matches('/').to_owned();
    tokio::task::spawn_blocking(move || {
        use std::net::ToSocketAddrs;
        addr.to_socket_addrs().is_ok_and(|mut addrs| {
            addrs.any(|a| std::net::TcpStream::connect_timeout(&a, PROBE).is_ok())
        })
    })
    .await
    .unwrap_or(false)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bkswitch_metadata_store::MemoryStore;

    const ROOT: &str = "/bkswitch/nodes";

    async fn held_by(store: &MemoryStore, holder: &Registration) {
        store
            .create(
                &path(ROOT, &holder.node_id),
                &serde_json::to_vec(holder).unwrap(),
                CreateMode::EPHEMERAL,
            )
            .await
            .unwrap();
    }

    fn holder(url: &str, host: &str) -> Registration {
        Registration {
            host: host.to_owned(),
            ..Registration::new("node-1", url)
        }
    }

    #[tokio::test]
    async fn the_same_loopback_address_on_another_machine_is_not_taken_over() {
        let store = MemoryStore::new();
        let other = holder("http://127.0.0.1:8080", "other-host/boot-1");
        held_by(&store, &other).await;
        let me = Registration::new("node-1", "http://127.0.0.1:8080");
        let e = register(&store, ROOT, &me).await.unwrap_err();
        assert!(matches!(e, NodeError::DuplicateNodeId { .. }), "{e}");
        // And the other one's registration is left as it was.
        let r = store.get(&path(ROOT, "node-1")).await.unwrap().unwrap();
        let kept: Registration = serde_json::from_slice(&r.value).unwrap();
        assert_eq!(kept, other);
        // Another loopback port of another machine: not probed either.
        let me = Registration::new("node-1", "http://127.0.0.1:9");
        assert!(register(&store, ROOT, &me).await.is_err());
    }

    #[tokio::test]
    async fn a_previous_process_of_this_machine_and_address_is_taken_over() {
        let store = MemoryStore::new();
        let old = holder("http://127.0.0.1:8080", &this_host());
        held_by(&store, &old).await;
        let me = Registration::new("node-1", "http://127.0.0.1:8080");
        register(&store, ROOT, &me).await.unwrap();
        let r = store.get(&path(ROOT, "node-1")).await.unwrap().unwrap();
        let now: Registration = serde_json::from_slice(&r.value).unwrap();
        assert_eq!(now.instance, me.instance);
    }

    #[tokio::test]
    async fn a_routable_address_that_does_not_answer_is_taken_over() {
        let store = MemoryStore::new();
        // Port 9 (discard) on this machine: nothing listens there.
        let gone = holder("http://127.0.0.1:9", &this_host());
        held_by(&store, &gone).await;
        let me = Registration::new("node-1", "http://127.0.0.1:8080");
        register(&store, ROOT, &me).await.unwrap();
        // One that answers is refused.
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let live = holder(
            &format!("http://{}", listener.local_addr().unwrap()),
            &this_host(),
        );
        let store = MemoryStore::new();
        held_by(&store, &live).await;
        let e = register(&store, ROOT, &me).await.unwrap_err();
        assert!(matches!(e, NodeError::DuplicateNodeId { .. }), "{e}");
    }
}
