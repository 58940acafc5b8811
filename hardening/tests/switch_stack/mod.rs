//! The stack the metadata-store fault tests share (`zk_faults` on ZooKeeper,
//! `etcd_stack` on etcd): nodes, each with its own session of a real metadata
//! store and its own REST API, on shared in-memory bookie clusters `old` and
//! `new`; topics with live traffic; and the checks every scenario ends with
//! (the switch converged, every topic writing to `new`, no acknowledged entry
//! and no metadata lost, topic ownership and registrations back).
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::{AdminClient, Node, Ownership, DEFAULT_NODES_ROOT, DEFAULT_OWNERS_ROOT};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_cli::{TopicHandle, Traffic, TrafficReport};
use bkswitch_hardening::{clusters, start_node, tree, wait_for, wait_switched, ADMIN};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::Stamped;
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::SwitchStatus;

/// A node on its own session of the store, plus the topics it owns.
pub struct Member<S> {
    pub node: Node,
    pub store: Arc<S>,
    pub topics: Vec<String>,
}

/// The nodes of a scenario on the metadata service `meta` (the servers, kept
/// alive and broken on purpose by the scenario).
pub struct Stack<S, M> {
    pub meta: M,
    pub clusters: MemoryClusters,
    pub members: Vec<Member<S>>,
}

impl<S: MetadataStore + 'static, M> Stack<S, M> {
    /// Starts one node per session in `stores`, in order (the first one
    /// leads the election), `node-1` … `node-N`, each with `topics_per_node`
    /// topics (cursor `sub`, one schema each) when `with_topics[i]`; registers
    /// `new` STANDBY through node-1's REST API.
    pub async fn start(
        meta: M,
        stores: Vec<Arc<S>>,
        topics_per_node: usize,
        with_topics: &[bool],
    ) -> Self {
        let clusters = clusters();
        // Copies on `new` take a little time, so the switch is still running
        // when the fault hits.
        clusters
            .get("new")
            .expect("new")
            .set_latency_all(Duration::from_millis(2));
        let mut members = Vec::new();
        for (i, store) in stores.into_iter().enumerate() {
            let id = format!("node-{}", i + 1);
            let node = start_node(&id, store.clone(), &clusters).await;
            let topics = if with_topics[i] {
                (0..topics_per_node)
                    .map(|t| format!("tenant/ns/persistent/n{}-t{t}", i + 1))
                    .collect()
            } else {
                Vec::new()
            };
            members.push(Member {
                node,
                store,
                topics,
            });
        }
        let admin = AdminClient::new(members[0].node.url(), ADMIN).expect("client");
        admin
            .register("new", "memory://new", Some(ClusterStatus::Standby))
            .await
            .expect("register new");
        Stack {
            meta,
            clusters,
            members,
        }
    }

    /// Opens every member's topics and starts traffic on each member.
    pub async fn traffic(&self) -> Vec<Traffic> {
        let mut out = Vec::new();
        for m in &self.members {
            let mut handles = Vec::new();
            for name in &m.topics {
                let ledger = m.node.open_topic(name).await.expect("open topic");
                let cursor = ledger
                    .open_cursor_at("sub", InitialPosition::Earliest)
                    .await
                    .expect("cursor");
                m.node
                    .schemas()
                    .put(&schema_id(name), b"v1", b"h1")
                    .await
                    .expect("schema");
                handles.push(TopicHandle { ledger, cursor });
            }
            out.push(Traffic::start(&handles, 50, 64));
        }
        out
    }

    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.members.iter().map(|m| &m.node)
    }

    /// The store of node-1's session.
    pub fn store(&self) -> &dyn MetadataStore {
        self.members[0].store.as_ref()
    }

    pub async fn shutdown(self) {
        for m in &self.members {
            m.node.stop().await;
            let _ = m.store.close().await;
        }
    }
}

pub fn schema_id(topic: &str) -> String {
    format!("schema-{topic}").replace('/', "-")
}

/// Waits until `node` applied `epoch`; returns when (measured from `since`).
pub async fn applied(node: &Node, epoch: i64, since: Instant, timeout: Duration) -> Duration {
    let mut w = node.sync().applied_epoch_watch();
    tokio::time::timeout(timeout, w.wait_for(|e| *e >= epoch))
        .await
        .unwrap_or_else(|_| panic!("{} did not apply epoch {epoch}", node.node_id()))
        .expect("sync running");
    since.elapsed()
}

/// Waits for the switch to converge on `node`'s view: SWITCHED, no failure,
/// every built ledger promoted (or rolled over).
pub async fn converged(node: &Node) -> SwitchStatus {
    let st = wait_switched(&node.orchestrator(), Duration::from_secs(40)).await;
    assert_eq!(st.phase.as_str(), "SWITCHED", "{st:?}");
    assert_eq!(st.counts.failed, 0, "{st:?}");
    assert_eq!(
        st.counts.promoted + st.counts.rollover_fallback,
        st.counts.built,
        "{st:?}"
    );
    st
}

/// Every owned topic's last ledger is on `new` (forced rollover).
pub async fn rolled<S, M>(stack: &Stack<S, M>) {
    wait_for("forced rollovers", Duration::from_secs(20), || {
        stack.members.iter().map(|m| &m.node).all(|n| {
            n.topics().list().iter().all(|t| {
                n.topics().get(t).is_some_and(|ml| {
                    ml.metadata()
                        .0
                        .ledger_info
                        .last()
                        .and_then(|l| l.cluster_stamp().ok().flatten())
                        == Some("new")
                })
            })
        })
    })
    .await;
}

/// Stops every member's traffic; acknowledged entries are never lost (no
/// consumer gap, every acknowledged publish consumed).
pub async fn stop_traffic(traffic: Vec<Traffic>) -> Vec<TrafficReport> {
    let mut out = Vec::new();
    for t in traffic {
        let r = t.stop(Duration::from_secs(10)).await;
        assert_eq!(r.consumer_gaps, 0, "{r:?}");
        assert!(r.consumed >= r.published, "{r:?}");
        out.push(r);
    }
    out
}

/// No metadata lost: every managed-ledger, cursor and schema node is present
/// and decodable, every cursor and schema stamped `new` with its ledger on
/// `new`.
pub async fn metadata_intact<S: MetadataStore + 'static, M>(stack: &Stack<S, M>) {
    let snapshot = tree(stack.store()).await;
    let new = stack.clusters.get("new").expect("new");
    for m in &stack.members {
        for name in &m.topics {
            let ml_path = format!("/managed-ledgers/{name}");
            let (ml, _) = snapshot
                .get(&ml_path)
                .unwrap_or_else(|| panic!("{ml_path} lost"));
            let info = decode_managed_ledger_info(ml).expect("managed ledger decodes");
            assert!(!info.ledger_info.is_empty(), "{ml_path}");
            let cursor_path = format!("{ml_path}/sub");
            let (c, _) = snapshot
                .get(&cursor_path)
                .unwrap_or_else(|| panic!("{cursor_path} lost"));
            let c = decode_managed_cursor_info(c).expect("cursor decodes");
            assert_eq!(
                c.cluster_stamp().expect("stamp"),
                Some("new"),
                "{cursor_path}"
            );
            assert!(new.contains_ledger(c.cursors_ledger_id), "{cursor_path}");
            let (loc, _) = m
                .node
                .schemas()
                .locator(&schema_id(name))
                .await
                .expect("locator decodes")
                .unwrap_or_else(|| panic!("schema of {name} lost"));
            assert_eq!(
                loc.info.position.cluster_stamp().expect("stamp"),
                Some("new"),
                "{name}"
            );
            let s = m
                .node
                .schemas()
                .get_latest(&schema_id(name))
                .await
                .expect("schema");
            assert_eq!(&s.data[..], b"v1");
        }
    }
}

/// The coordinator duties each node took, node-1 first.
pub fn duties<S, M>(stack: &Stack<S, M>) -> Vec<u64> {
    stack
        .members
        .iter()
        .map(|m| m.node.sync().metrics().snapshot().coordinator_duties)
        .collect()
}

/// The name of a topic's ownership node (`/` as `%2F`).
fn owner_node(topic: &str) -> String {
    let mut out = String::new();
    for b in topic.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// Topic ownership and node registrations as the store holds them: every
/// member's topics owned by that member through an ephemeral node naming it
/// and its REST URL, and every member registered (ephemeral). A member whose
/// metadata session was lost takes both again once its watches report the
/// loss, a moment after it rejoined the election: waited for, up to 20 s.
pub async fn ownership_and_registrations<S: MetadataStore + 'static, M>(stack: &Stack<S, M>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let Some(problem) = ownership_problem(stack).await else {
            return;
        };
        assert!(Instant::now() < deadline, "{problem}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What [`ownership_and_registrations`] finds wrong now, if anything.
async fn ownership_problem<S: MetadataStore + 'static, M>(stack: &Stack<S, M>) -> Option<String> {
    let store = stack.store();
    for m in &stack.members {
        for topic in &m.topics {
            let path = format!("{DEFAULT_OWNERS_ROOT}/{}", owner_node(topic));
            let Some(r) = store.get(&path).await.expect("read ownership") else {
                return Some(format!("{path}: {topic} has no owner"));
            };
            if !r.stat.ephemeral {
                return Some(format!("{path} is not ephemeral"));
            }
            let owner: Ownership = serde_json::from_slice(&r.value).expect("ownership decodes");
            if owner.node_id != m.node.node_id() || owner.url != m.node.url() {
                return Some(format!(
                    "{path}: owned by {} at {}, not {} at {}",
                    owner.node_id,
                    owner.url,
                    m.node.node_id(),
                    m.node.url()
                ));
            }
        }
        let registered = store
            .children(DEFAULT_NODES_ROOT)
            .await
            .expect("list the registered nodes");
        if !registered.iter().any(|c| c == m.node.node_id()) {
            return Some(format!(
                "{} not registered: {registered:?}",
                m.node.node_id()
            ));
        }
    }
    None
}

/// Every node sees the same election leader, `leader`, and exactly that
/// node holds leadership.
pub async fn election_settled<S, M>(stack: &Stack<S, M>, leader: &str, timeout: Duration) {
    wait_for(&format!("{leader} elected on every node"), timeout, || {
        stack.members.iter().all(|m| {
            m.node.sync().leader().as_deref() == Some(leader)
                && m.node.sync().is_leader() == (m.node.node_id() == leader)
        })
    })
    .await;
}

/// The registry's clusters with status ACTIVE (exactly one after a switch).
pub async fn active_clusters(node: &Node) -> Vec<String> {
    node.registry()
        .list()
        .await
        .expect("list")
        .into_iter()
        .filter(|c| c.status == ClusterStatus::Active)
        .map(|c| c.name)
        .collect()
}
