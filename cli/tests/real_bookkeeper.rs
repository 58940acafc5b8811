//! The switch on real bookie clusters: three nodes on a real ZooKeeper, two
//! real BookKeeper clusters (bookie JVMs started by `bkswitch-bk-harness`, two
//! ledgers roots on one ZooKeeper), live traffic and schemas.
//!
//! - Registration probes the cluster: a malformed URI, an unreachable
//!   ZooKeeper, a root without bookies and an unknown scheme are refused and
//!   the registry is left untouched.
//! - The precheck reads both clusters' own id generators; the operator step
//!   (`advance_ledger_id_generator`) makes it ready.
//! - BUILD copies every cursor and schema ledger with the same ledger and entry
//!   ids (read back from both clusters with the Java client), PROMOTE flips
//!   them, cleanup deletes the old copies; 0 publish failures, 0 gaps.
//! - Every node restarts on the same metadata: topics open, cursors recover
//!   their acknowledged position, old data ledgers are read from the old
//!   cluster and new ones from the new cluster.
//! - With every old bookie killed, reads of old ledgers fail fast within
//!   `oldLedgerReadTimeoutMs` and publishing goes on.
//! - Rollback, with the reverse id-generator step.
//!
//! Needs Java and the BookKeeper jars (`scripts/fetch-java-deps.sh`); skipped
//! with a note without them unless `BKSWITCH_REQUIRE_BK=1`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::wire::CleanupRequest;
use bkswitch_admin::{
    standard_client_factory, standard_idgen_source, AdminClient, Node, NodeConfig,
};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_bk_harness::{BkCluster, DigestType, JavaClient};
use bkswitch_bookkeeper::{advance_ledger_id_generator, ClientConfig};
use bkswitch_cli::{TopicHandle, Traffic};
use bkswitch_managed_ledger::{InitialPosition, Position};
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::codec::decode_managed_cursor_info;
use bkswitch_proto::Stamped;
use bkswitch_registry::ClusterStatus;
use common::*;

const TOPICS_PER_NODE: usize = 2;
const OLD_READ_TIMEOUT: Duration = Duration::from_secs(2);

fn bk_available() -> bool {
    if bkswitch_bk_harness::bk_available() {
        return true;
    }
    bkswitch_bk_harness::require_bk();
    eprintln!("skipped: Java or the BookKeeper jars are missing (scripts/fetch-java-deps.sh)");
    false
}

async fn zk(chroot: &str) -> Arc<ZkStore> {
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    Arc::new(
        ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .unwrap(),
    )
}

fn config(id: &str, store: Arc<dyn MetadataStore>, old: &BkCluster) -> NodeConfig {
    let memory = MemoryClusters::new();
    let mut cfg = NodeConfig::new(
        id,
        store,
        standard_client_factory(memory.clone(), ClientConfig::default()),
        &old.metadata_service_uri(),
        ADMIN,
        INTERNAL,
    );
    cfg.cluster_name = Some("old".into());
    cfg.idgen = Some(standard_idgen_source(memory));
    cfg.ledger_config = ManagedLedgerConfig::default()
        .with_quorums(2, 2, 2)
        .with_metadata_quorums(2, 2, 2)
        .with_max_entries_per_ledger(200);
    let schema_ledgers = cfg
        .schema_options
        .ledger_config
        .clone()
        .with_quorums(2, 2, 2);
    cfg.schema_options = cfg
        .schema_options
        .clone()
        .with_ledger_config(schema_ledgers);
    cfg.old_ledger_read_timeout = OLD_READ_TIMEOUT;
    cfg
}

async fn start_nodes(chroot: &str, old: &BkCluster) -> (Vec<Node>, Vec<Arc<ZkStore>>) {
    let mut nodes = Vec::new();
    let mut stores = Vec::new();
    for i in 0..3 {
        let store = zk(chroot).await;
        let cfg = config(&format!("node-{}", i + 1), store.clone(), old);
        nodes.push(Node::start(cfg).await.expect("node starts"));
        stores.push(store);
    }
    (nodes, stores)
}

async fn stop_nodes(nodes: Vec<Node>, stores: Vec<Arc<ZkStore>>) {
    for n in nodes {
        n.stop().await;
    }
    for s in stores {
        s.close().await.unwrap();
    }
}

fn topic_names() -> Vec<Vec<String>> {
    (0..3)
        .map(|n| {
            (0..TOPICS_PER_NODE)
                .map(|t| format!("tenant/ns/persistent/real-n{n}-t{t}"))
                .collect()
        })
        .collect()
}

fn schema_id(topic: &str) -> String {
    format!("schema-{topic}").replace('/', "-")
}

async fn open_topics(node: &Node, names: &[String], with_schemas: bool) -> Vec<TopicHandle> {
    let mut out = Vec::new();
    for name in names {
        let ledger = node.open_topic(name).await.unwrap();
        let cursor = ledger
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        if with_schemas {
            for v in 0..2 {
                node.schemas()
                    .put(
                        &schema_id(name),
                        format!("{name} v{v}").as_bytes(),
                        format!("h{v}").as_bytes(),
                    )
                    .await
                    .unwrap();
            }
        }
        out.push(TopicHandle { ledger, cursor });
    }
    out
}

async fn wait_switched(
    node: &Node,
    timeout: Duration,
) -> bkswitch_switch_orchestrator::SwitchStatus {
    let deadline = Instant::now() + timeout;
    loop {
        let st = node.orchestrator().current_status().await.unwrap().unwrap();
        if st.phase.is_built() {
            return st;
        }
        assert!(Instant::now() < deadline, "switch did not converge: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Gives every topic of `node` a second subscription, `idle`, that acknowledges
/// a few entries, then closes its cursor ledger and stays still: the closed
/// ledger is copied whole and promoted by the switch. (A cursor ledger still
/// open for writing is copied up to its last add confirmed, which on real
/// bookies lags its last entry, so PROMOTE finds entries beyond the copy and
/// rolls the cursor over instead: safe, and what live cursors do.)
async fn idle_cursors(node: &Node, names: &[String]) {
    for name in names {
        let ml = node.topics().get(name).unwrap();
        let idle = ml
            .open_cursor_at("idle", InitialPosition::Earliest)
            .await
            .unwrap();
        let read = idle.read_entries(5).await.unwrap();
        let last = read.last().expect("entries were published").position;
        idle.mark_delete(last).await.unwrap();
        idle.close().await;
    }
}

/// Every cursor and schema ledger stamped `cluster` in the metadata, with
/// what holds it.
async fn metadata_ledgers(
    store: &dyn MetadataStore,
    node: &Node,
    cluster: &str,
) -> BTreeMap<i64, String> {
    let mut out = BTreeMap::new();
    for name in topic_names().iter().flatten() {
        for cursor in ["sub", "idle"] {
            let path = format!("/managed-ledgers/{name}/{cursor}");
            let Some(r) = store.get(&path).await.unwrap() else {
                continue;
            };
            let info = decode_managed_cursor_info(&r.value).unwrap();
            if info.cluster_stamp().unwrap() == Some(cluster) && info.cursors_ledger_id >= 0 {
                out.insert(info.cursors_ledger_id, format!("cursor {path}"));
            }
        }
        let (locator, _) = node
            .schemas()
            .locator(&schema_id(name))
            .await
            .unwrap()
            .unwrap();
        for entry in &locator.index {
            let pos = &entry.position;
            if pos.cluster_stamp().unwrap() == Some(cluster) {
                out.insert(pos.ledger_id, format!("schema {} v{}", name, entry.version));
            }
        }
    }
    out
}

fn read_all(java: &JavaClient, ledger_id: i64) -> Vec<(i64, Vec<u8>)> {
    let opened = java
        .open(ledger_id, false, DigestType::Crc32c, b"")
        .unwrap_or_else(|e| panic!("open {ledger_id} on {}: {e}", java.metadata_service_uri()));
    let lac = opened.lac;
    if lac < 0 {
        return Vec::new();
    }
    java.read(ledger_id, 0, lac)
        .unwrap()
        .into_iter()
        .map(|e| (e.entry_id, e.data))
        .collect()
}

async fn registry_tree(store: &dyn MetadataStore) -> BTreeMap<String, (Vec<u8>, i64)> {
    tree(store)
        .await
        .into_iter()
        .filter(|(p, _)| p.starts_with(bkswitch_registry::DEFAULT_ROOT))
        .collect()
}

/// Two real clusters of 2 bookies, three nodes on `old` (the metadata under
/// `chroot`), each with its topics, cursors, schemas and live traffic, after
/// `warm_up` of traffic.
struct Running {
    old: BkCluster,
    new: BkCluster,
    chroot: String,
    nodes: Vec<Node>,
    stores: Vec<Arc<ZkStore>>,
    names: Vec<Vec<String>>,
    traffic: Vec<Traffic>,
}

async fn running(warm_up: Duration) -> Running {
    let old = BkCluster::on_shared_zk(2);
    let new = BkCluster::on_shared_zk(2);
    let chroot = bkswitch_zk_harness::unique_chroot();
    let (nodes, stores) = start_nodes(&chroot, &old).await;
    let names = topic_names();
    let mut traffic = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        let handles = open_topics(node, &names[n], true).await;
        traffic.push(Traffic::start(&handles, 40, 128));
    }
    tokio::time::sleep(warm_up).await;
    Running {
        old,
        new,
        chroot,
        nodes,
        stores,
        names,
        traffic,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn switch_restart_and_dead_old_cluster_on_real_bookies() {
    if !bk_available() {
        return;
    }
    let Running {
        old,
        new,
        chroot,
        nodes,
        stores,
        names,
        traffic,
    } = running(Duration::from_millis(1500)).await;
    for (n, node) in nodes.iter().enumerate() {
        idle_cursors(node, &names[n]).await;
    }
    let admin = AdminClient::new(nodes[0].url(), ADMIN)
        .unwrap()
        .with_timeout(Duration::from_secs(60));

    // Registration refuses clusters that cannot serve, writing nothing.
    let before = registry_tree(stores[0].as_ref()).await;
    let zk_connect = bkswitch_zk_harness::shared().connect_string();
    let empty_root = bkswitch_bk_harness::unique_ledgers_root();
    let plain = zk("").await;
    plain
        .put(
            &empty_root,
            b"",
            bkswitch_metadata_store::ExpectedVersion::NotExists,
        )
        .await
        .unwrap();
    plain.close().await.unwrap();
    for (uri, status) in [
        // Malformed (bad port), unknown scheme, no such ledgers root.
        ("zk+hierarchical://127.0.0.1:x/ledgers".to_owned(), 400),
        ("etcd://127.0.0.1:2379/ledgers".to_owned(), 400),
        (
            format!(
                "zk+hierarchical://{zk_connect}{}",
                bkswitch_bk_harness::unique_ledgers_root()
            ),
            400,
        ),
        // A root without a bookie, an unreachable ZooKeeper: may come right.
        (format!("zk+hierarchical://{zk_connect}{empty_root}"), 503),
        ("zk+hierarchical://127.0.0.1:1/ledgers".to_owned(), 503),
    ] {
        let (code, body) = raw(
            "POST",
            &format!("{}{BASE}/ghost", nodes[0].url()),
            Some(ADMIN),
            Some(format!(r#"{{"metadataServiceUri":"{uri}"}}"#).as_bytes()),
        )
        .await;
        assert_eq!(code, status, "{uri}: {body}");
        let text = body.to_string();
        assert!(
            text.contains("ghost") || text.contains(&uri),
            "{uri}: {text}"
        );
        assert_eq!(
            registry_tree(stores[0].as_ref()).await,
            before,
            "{uri} wrote"
        );
    }

    // Register the real new cluster; its generator is behind the old one's.
    admin
        .register(
            "new",
            &new.metadata_service_uri(),
            Some(ClusterStatus::Standby),
        )
        .await
        .unwrap();
    let pre = admin.precheck("new").await.unwrap();
    assert!(!pre.ready, "{pre:?}");
    let source_next = pre
        .source_next_ledger_id
        .expect("the old generator is read");
    assert!(source_next > 0, "{pre:?}");
    let step = advance_ledger_id_generator(
        &new.metadata_service_uri(),
        source_next + 10_000,
        &ClientConfig::default(),
    )
    .await
    .unwrap();
    assert!(step.advanced && step.next_after > source_next, "{step:?}");
    let pre = admin.precheck("new").await.unwrap();
    assert!(pre.ready, "{pre:?}");

    let to_copy = metadata_ledgers(stores[0].as_ref(), &nodes[0], "old").await;
    assert!(to_copy.len() >= 3 * TOPICS_PER_NODE * 2, "{to_copy:?}");
    let sw = admin.switch("new").await.unwrap();
    let status = wait_switched(&nodes[0], Duration::from_secs(120)).await;
    assert_eq!(status.phase.as_str(), "SWITCHED", "{status:?}");
    assert_eq!(status.counts.failed, 0, "{status:?}");
    let epoch = sw.epoch().unwrap();
    for n in &nodes {
        let mut w = n.sync().applied_epoch_watch();
        tokio::time::timeout(Duration::from_secs(20), w.wait_for(|e| *e >= epoch))
            .await
            .expect("directive applied")
            .unwrap();
    }

    // Every promoted copy holds the same entries under the same ids on both
    // clusters, read by BookKeeper's own Java client.
    let promoted = metadata_ledgers(stores[0].as_ref(), &nodes[0], "new").await;
    let java_old = JavaClient::start(&old.metadata_service_uri());
    let java_new = JavaClient::start(&new.metadata_service_uri());
    let mut compared = 0;
    let mut cursors = 0;
    for (id, what) in &to_copy {
        if !promoted.contains_key(id) {
            continue; // a live cursor, rolled onto a new ledger instead
        }
        let a = read_all(&java_old, *id);
        let b = read_all(&java_new, *id);
        assert!(!a.is_empty(), "{what}: ledger {id} is empty");
        assert_eq!(a, b, "{what}: ledger {id} differs between the clusters");
        compared += 1;
        cursors += usize::from(what.starts_with("cursor"));
    }
    // Every schema ledger (2 per topic) and every idle cursor's ledger.
    let topics = 3 * TOPICS_PER_NODE;
    assert!(compared >= 3 * topics, "only {compared} copies compared");
    assert!(cursors >= topics, "only {cursors} cursor copies compared");

    // Traffic ran through the switch without a failure or a gap.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for t in traffic {
        let r = t.stop(Duration::from_secs(10)).await;
        assert_eq!(r.publish_failures, 0, "{:?}", r.first_publish_error);
        assert_eq!(r.consumer_gaps, 0);
        assert_eq!(r.published, r.consumed);
        assert!(r.published > 0);
    }

    // Cleanup deletes the old copies (forced: inside the rollback window).
    let report = admin
        .cleanup(&CleanupRequest {
            dry_run: false,
            src_cluster_filter: None,
            max_deletions: 0,
            force: true,
        })
        .await
        .unwrap();
    let raw_report = report.raw();
    assert_eq!(raw_report["outcome"], "DONE", "{raw_report}");
    let deleted: Vec<i64> = raw_report["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["cluster"] == "old")
        .map(|t| t["ledgerId"].as_i64().unwrap())
        .collect();
    assert!(deleted.len() >= compared, "{raw_report}");
    for id in &deleted {
        let e = java_old
            .open(*id, false, DigestType::Crc32c, b"")
            .expect_err("a cleaned-up copy is gone from the old cluster");
        assert!(e.to_string().contains("NoSuch"), "{e}");
    }

    // What each cursor acknowledged, before every node stops.
    let mut acked = BTreeMap::new();
    for (n, node) in nodes.iter().enumerate() {
        for name in &names[n] {
            let ml = node.topics().get(name).unwrap();
            acked.insert(
                name.clone(),
                ml.cursor("sub").unwrap().mark_delete_position(),
            );
        }
    }
    stop_nodes(nodes, stores).await;

    // Every node restarts on the same metadata.
    let (nodes, stores) = start_nodes(&chroot, &old).await;
    for n in &nodes {
        assert_eq!(n.storage().active_cluster().as_deref(), Some("new"));
    }
    let mut old_ledger = None;
    for (n, node) in nodes.iter().enumerate() {
        for name in &names[n] {
            let ml = node.open_topic(name).await.unwrap();
            let cursor = ml.open_cursor("sub").await.unwrap();
            assert_eq!(cursor.mark_delete_position(), acked[name], "{name}");
            let (info, _) = ml.metadata();
            let mut clusters_read = Vec::new();
            for l in info
                .ledger_info
                .iter()
                .filter(|l| l.entries.unwrap_or(0) > 0)
            {
                let at = Position {
                    ledger_id: l.ledger_id,
                    entry_id: 0,
                };
                let read = ml.read_entries(at, 1).await.unwrap();
                assert_eq!(read.len(), 1, "{name}: ledger {}", l.ledger_id);
                let stamp = l.cluster_stamp().unwrap().map(str::to_owned);
                if stamp.as_deref() == Some("old") {
                    old_ledger.get_or_insert((n, name.clone(), at));
                }
                clusters_read.push(stamp);
            }
            assert!(clusters_read.contains(&Some("old".to_owned())), "{name}");
            assert!(clusters_read.contains(&Some("new".to_owned())), "{name}");
        }
    }

    // The old cluster dies: its ledgers fail fast, publishing goes on.
    for i in 0..old.bookie_count() {
        old.kill(i);
    }
    let (n, name, at) = old_ledger.expect("an old data ledger");
    let ml = nodes[n].topics().get(&name).unwrap();
    ml.rollover().await.ok();
    let started = Instant::now();
    let err = ml
        .read_entries(Position { entry_id: 1, ..at }, 1)
        .await
        .expect_err("the old cluster is dead");
    let took = started.elapsed();
    assert!(
        took < OLD_READ_TIMEOUT + Duration::from_secs(3),
        "took {took:?}: {err}"
    );
    assert!(err.to_string().contains("old"), "{err}");
    ml.append(&b"after the old cluster died"[..]).await.unwrap();
    stop_nodes(nodes, stores).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rollback_on_real_bookies_with_the_reverse_idgen_step() {
    if !bk_available() {
        return;
    }
    let Running {
        old,
        new,
        chroot: _,
        nodes,
        stores,
        names,
        traffic,
    } = running(Duration::from_millis(1000)).await;
    let admin = AdminClient::new(nodes[0].url(), ADMIN)
        .unwrap()
        .with_timeout(Duration::from_secs(60));
    admin
        .register(
            "new",
            &new.metadata_service_uri(),
            Some(ClusterStatus::Standby),
        )
        .await
        .unwrap();
    let pre = admin.precheck("new").await.unwrap();
    let cfg = ClientConfig::default();
    let step = advance_ledger_id_generator(
        &new.metadata_service_uri(),
        pre.source_next_ledger_id.unwrap() + 10_000,
        &cfg,
    )
    .await
    .unwrap();
    let copied = metadata_ledgers(stores[0].as_ref(), &nodes[0], "old").await;
    admin.switch("new").await.unwrap();
    let st = wait_switched(&nodes[0], Duration::from_secs(120)).await;
    assert_eq!(st.phase.as_str(), "SWITCHED", "{st:?}");
    tokio::time::sleep(Duration::from_millis(1000)).await;

    // The reverse step: the old generator must go beyond every id the new
    // cluster handed out, or topics rolling back onto `old` would get ids
    // below their `new` ledgers.
    let refused = admin
        .rollback()
        .await
        .expect_err("rollback before the reverse step is refused");
    assert_eq!(refused.status(), Some(409), "{refused}");
    let new_next = bkswitch_bookkeeper::next_ledger_id(&new.metadata_service_uri(), &cfg)
        .await
        .unwrap();
    let back = advance_ledger_id_generator(&old.metadata_service_uri(), new_next + 10_000, &cfg)
        .await
        .unwrap();
    assert!(back.advanced, "{back:?}");
    let rb = admin.rollback().await.unwrap();
    let epoch = rb.epoch().unwrap();
    for n in &nodes {
        let mut w = n.sync().applied_epoch_watch();
        tokio::time::timeout(Duration::from_secs(30), w.wait_for(|e| *e >= epoch))
            .await
            .expect("rollback applied")
            .unwrap();
        assert_eq!(n.storage().active_cluster().as_deref(), Some("old"));
    }
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let st = nodes[0]
            .orchestrator()
            .current_status()
            .await
            .unwrap()
            .unwrap();
        if st.phase.as_str() == "ROLLED_BACK" {
            break;
        }
        assert!(Instant::now() < deadline, "rollback did not finish: {st:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for t in traffic {
        let r = t.stop(Duration::from_secs(10)).await;
        assert_eq!(r.publish_failures, 0, "{:?}", r.first_publish_error);
        assert_eq!(r.consumer_gaps, 0);
        assert_eq!(r.published, r.consumed);
    }
    // Every copied cursor and schema ledger is stamped `old` again; what
    // still names `new` are ledgers created there during the switch (native
    // ids, read from `new` until they roll over), and ledger ids increase
    // along every topic across both flips.
    let on_new = metadata_ledgers(stores[0].as_ref(), &nodes[0], "new").await;
    for (id, what) in &on_new {
        assert!(!copied.contains_key(id), "{what}: copy {id} still promoted");
        assert!(*id >= step.next_after, "{what}: {id} is not native to new");
    }
    let on_old = metadata_ledgers(stores[0].as_ref(), &nodes[0], "old").await;
    assert!(
        on_old.keys().filter(|id| copied.contains_key(id)).count() > 0,
        "no copy flipped back: {on_old:?}"
    );
    for (n, node) in nodes.iter().enumerate() {
        for name in &names[n] {
            let ml = node.topics().get(name).unwrap();
            let ids = ml.ledger_ids();
            assert!(ids.windows(2).all(|w| w[0] < w[1]), "{name}: {ids:?}");
        }
    }
    stop_nodes(nodes, stores).await;
}

/// A bookie of the new cluster is SIGKILLed while BUILD copies: the copies
/// go on (ensemble change to the spare bookie, or the ledger retried), the
/// switch converges with nothing failed, and every promoted copy holds the
/// source's entries (read by the Java client on both clusters).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_bookie_dies_during_build_and_the_switch_converges() {
    if !bk_available() {
        return;
    }
    let old = BkCluster::on_shared_zk(2);
    let new = BkCluster::on_shared_zk(3);
    let chroot = bkswitch_zk_harness::unique_chroot();
    let store = zk(&chroot).await;
    let mut cfg = config("node-1", store.clone(), &old);
    // One copy at a time, so that BUILD is still running when the bookie dies.
    cfg.orchestrator.migration_concurrency = 1;
    let node = Node::start(cfg).await.expect("node starts");
    let names: Vec<String> = topic_names().into_iter().flatten().collect();
    let handles = open_topics(&node, &names, true).await;
    let traffic = Traffic::start(&handles, 40, 128);
    tokio::time::sleep(Duration::from_millis(1000)).await;
    let admin = AdminClient::new(node.url(), ADMIN)
        .unwrap()
        .with_timeout(Duration::from_secs(60));
    admin
        .register(
            "new",
            &new.metadata_service_uri(),
            Some(ClusterStatus::Standby),
        )
        .await
        .unwrap();
    let pre = admin.precheck("new").await.unwrap();
    advance_ledger_id_generator(
        &new.metadata_service_uri(),
        pre.source_next_ledger_id.unwrap() + 10_000,
        &ClientConfig::default(),
    )
    .await
    .unwrap();
    let mut to_copy = BTreeMap::new();
    for name in &names {
        let (locator, _) = node
            .schemas()
            .locator(&schema_id(name))
            .await
            .unwrap()
            .unwrap();
        for e in &locator.index {
            to_copy.insert(
                e.position.ledger_id,
                format!("schema {name} v{}", e.version),
            );
        }
    }
    admin.switch("new").await.unwrap();

    // Kill a bookie of `new` once BUILD has copied a few ledgers.
    let deadline = Instant::now() + Duration::from_secs(60);
    let killed_during = loop {
        let st = node.orchestrator().current_status().await.unwrap().unwrap();
        // (BUILD records the ledgers it finds as it scans: `to_build` grows.)
        if st.counts.built >= 2 || st.phase.is_built() {
            new.kill(0);
            break st;
        }
        assert!(Instant::now() < deadline, "BUILD did not start: {st:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    };
    assert_eq!(
        killed_during.phase.as_str(),
        "BUILD",
        "the bookie must die during BUILD: {killed_during:?}"
    );
    let status = wait_switched(&node, Duration::from_secs(180)).await;
    assert_eq!(status.phase.as_str(), "SWITCHED", "{status:?}");
    assert_eq!(status.counts.failed, 0, "{status:?}");

    let java_old = JavaClient::start(&old.metadata_service_uri());
    let java_new = JavaClient::start(&new.metadata_service_uri());
    let dead = new.bookie_id(0);
    let mut changed = 0;
    for (id, what) in &to_copy {
        let a = read_all(&java_old, *id);
        let b = read_all(&java_new, *id);
        assert_eq!(a, b, "{what}: ledger {id} differs between the clusters");
        let meta = java_new.metadata(*id).unwrap();
        if meta.ensembles.len() > 1 || meta.ensembles.iter().all(|e| !e.bookies.contains(&dead)) {
            changed += 1;
        }
    }
    assert!(changed > 0, "no copy avoided or replaced the dead bookie");
    let r = traffic.stop(Duration::from_secs(10)).await;
    assert_eq!(r.publish_failures, 0, "{:?}", r.first_publish_error);
    assert_eq!(r.consumer_gaps, 0);
    node.stop().await;
    store.close().await.unwrap();
}
