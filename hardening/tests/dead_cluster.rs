//! Scenario A (docs/DESIGN.md §5.4): after a switch old → new reached SWITCHED, the old
//! cluster becomes unavailable — failing fast, or hanging. Migrated metadata
//! (schemas, cursors) stays readable, reads of data ledgers still stamped
//! `old` fail within `oldLedgerReadTimeoutMs` with a structured, retryable
//! error naming the cluster and the ledger, and publishes keep succeeding on
//! the new cluster.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::AdminClient;
use bkswitch_admin::Node;
use bkswitch_bk_client::{MemoryClusters, UnavailableMode};
use bkswitch_cli::{TopicHandle, Traffic};
use bkswitch_hardening::{clusters, node_config, wait_for, wait_switched, ADMIN};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_proto::Stamped;
use bkswitch_registry::ClusterStatus;

/// `oldLedgerReadTimeoutMs` of the nodes.
const OLD_READ_TIMEOUT: Duration = Duration::from_millis(300);
/// Scheduling slack allowed on top of [`OLD_READ_TIMEOUT`] (2 shared cores).
const MARGIN: Duration = Duration::from_millis(1500);

async fn node(id: &str, store: Arc<dyn MetadataStore>, clusters: &MemoryClusters) -> Node {
    let mut cfg = node_config(id, store, clusters);
    cfg.old_ledger_read_timeout = OLD_READ_TIMEOUT;
    Node::start(cfg).await.expect("node starts")
}

fn schema_id(topic: &str) -> String {
    format!("schema-{topic}").replace('/', "-")
}

async fn open(node: &Node, name: &str) -> TopicHandle {
    let ledger = node.open_topic(name).await.expect("open topic");
    let cursor = ledger
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .expect("cursor");
    TopicHandle { ledger, cursor }
}

/// Ids of the topic's data ledgers stamped `cluster`.
fn ledgers_on(node: &Node, topic: &str, cluster: &str) -> Vec<i64> {
    let ml = node.topics().get(topic).expect("owned topic");
    let (info, _) = ml.metadata();
    info.ledger_info
        .iter()
        .filter(|l| l.cluster_stamp().ok().flatten() == Some(cluster))
        .map(|l| l.ledger_id)
        .collect()
}

async fn scenario_a(mode: UnavailableMode) {
    let clusters = clusters();
    let store = MemoryStore::new();
    let nodes = [
        node("node-1", Arc::new(store.new_session()), &clusters).await,
        node("node-2", Arc::new(store.new_session()), &clusters).await,
    ];
    let names: Vec<String> = (0..3)
        .map(|t| format!("tenant/ns/persistent/t{t}"))
        .collect();
    let mut handles = Vec::new();
    for (i, name) in names.iter().enumerate() {
        handles.push(open(&nodes[0], name).await);
        nodes[0]
            .schemas()
            .put(&schema_id(name), format!("v1-{i}").as_bytes(), b"h1")
            .await
            .expect("schema");
    }
    let traffic = Traffic::start(&handles, 100, 64);
    tokio::time::sleep(Duration::from_millis(300)).await;

    let admin = AdminClient::new(nodes[0].url(), ADMIN).expect("client");
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .expect("register");
    admin.switch("new").await.expect("switch");
    let st = wait_switched(&nodes[0].orchestrator(), Duration::from_secs(15)).await;
    assert_eq!(st.phase.as_str(), "SWITCHED", "{st:?}");
    assert_eq!(st.counts.failed, 0, "{st:?}");
    // Every topic writes to `new` (forced rollover).
    wait_for("forced rollovers", Duration::from_secs(10), || {
        names.iter().all(|n| {
            let ml = nodes[0].topics().get(n).expect("owned");
            ml.metadata()
                .0
                .ledger_info
                .last()
                .and_then(|l| l.cluster_stamp().ok().flatten())
                == Some("new")
        })
    })
    .await;
    let old_ledgers: Vec<Vec<i64>> = names
        .iter()
        .map(|n| ledgers_on(&nodes[0], n, "old"))
        .collect();
    assert!(old_ledgers.iter().all(|l| !l.is_empty()), "{old_ledgers:?}");
    // Appends already in flight to an old ledger complete within this pause.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let published_at_switch = traffic.published();
    // Every entry still on `old` was published before this point: let the
    // consumers read them before `old` dies (entries left unread on a dead
    // cluster cannot be read — that is scenario A, checked below).
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while traffic.consumed() < published_at_switch {
        assert!(
            std::time::Instant::now() < deadline,
            "consumers did not catch up with the entries on old"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // `old` dies.
    clusters.get("old").expect("old").set_unavailable(mode);
    tokio::time::sleep(Duration::from_millis(700)).await;
    let report = traffic.stop(Duration::from_secs(5)).await;
    assert!(
        report.published > published_at_switch,
        "no publish after the switch"
    );
    assert_eq!(
        report.publish_failures, 0,
        "publishes must keep succeeding on new: {:?}",
        report.first_publish_error
    );
    assert_eq!(report.consumer_gaps, 0);
    assert_eq!(report.published, report.consumed);

    // Migrated schema ledgers stay readable, on both nodes.
    for (i, name) in names.iter().enumerate() {
        for n in &nodes {
            let s = n
                .schemas()
                .get_latest(&schema_id(name))
                .await
                .expect("schema readable");
            assert_eq!(&s.data[..], format!("v1-{i}").as_bytes());
        }
    }

    // Cursors recover on another node: their ledgers are on `new`.
    for (t, name) in names.iter().enumerate() {
        let acked = report
            .acknowledged
            .get(name)
            .copied()
            .expect("acked position");
        let started = Instant::now();
        nodes[0].unload_topic(name).await.expect("unload");
        let unload = started.elapsed();
        let h = open(&nodes[1], name).await;
        assert_eq!(h.cursor.mark_delete_position(), acked, "{name}");
        let (info, _) = h.cursor.metadata().await;
        assert_eq!(info.cluster_stamp().expect("stamp"), Some("new"), "{name}");
        assert!(
            unload < OLD_READ_TIMEOUT + MARGIN,
            "closing {name} with `old` down took {unload:?}"
        );

        // A reader from the start hits the first `old` ledger: a structured,
        // retryable error within the timeout.
        let reader = h
            .ledger
            .open_cursor_at("reader", InitialPosition::Earliest)
            .await
            .expect("reader cursor");
        let started = Instant::now();
        let err = reader
            .read_entries(10)
            .await
            .expect_err("old ledger read must fail");
        let elapsed = started.elapsed();
        assert!(
            elapsed < OLD_READ_TIMEOUT + MARGIN,
            "{mode:?}: old read failed after {elapsed:?}"
        );
        assert!(err.is_retryable(), "{err}");
        let bk = err
            .bk_error()
            .unwrap_or_else(|| panic!("no client error in {err}"));
        assert_eq!(bk.cluster(), Some("old"), "{err}");
        assert_eq!(bk.ledger_id(), Some(old_ledgers[t][0]), "{err}");
        assert!(bk.is_retryable(), "{err}");
        eprintln!("{mode:?}: {name}: old read failed in {elapsed:?}: {err}");
    }
    // The operator sees them: node-2 counts its fail-fast operations on
    // `old`, and exports them.
    let fail_fast = nodes[1]
        .storage()
        .fail_fast_reads()
        .into_iter()
        .find(|(c, _)| c == "old")
        .map_or(0, |(_, n)| n);
    assert!(fail_fast >= names.len() as u64, "{mode:?}: {fail_fast}");
    let text = bkswitch_admin::exposition::render(&nodes[1]).await;
    let exported: u64 = text
        .lines()
        .find_map(|l| l.strip_prefix("bkswitch_fail_fast_reads_total{cluster=\"old\"} "))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no fail-fast counter for `old`:\n{text}"));
    assert!(exported >= fail_fast, "{exported} < {fail_fast}");

    // Publishing continues on node-2, on `new`.
    let handles: Vec<TopicHandle> = names
        .iter()
        .map(|n| {
            let ledger = nodes[1].topics().get(n).expect("owned");
            let cursor = ledger.cursor("sub").expect("cursor");
            TopicHandle { ledger, cursor }
        })
        .collect();
    let traffic = Traffic::start(&handles, 100, 64);
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = traffic.stop(Duration::from_secs(5)).await;
    assert!(report.published > 0);
    assert_eq!(
        report.publish_failures, 0,
        "{:?}",
        report.first_publish_error
    );
    assert_eq!(report.consumer_gaps, 0);
    for n in &names {
        let ml = nodes[1].topics().get(n).expect("owned");
        let last = ml
            .metadata()
            .0
            .ledger_info
            .last()
            .cloned()
            .expect("a ledger");
        assert_eq!(last.cluster_stamp().expect("stamp"), Some("new"));
    }
    for n in &nodes {
        n.stop().await;
    }
}

/// Scenario A with `old` failing every operation at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_cluster_failing_fast_after_the_switch() {
    scenario_a(UnavailableMode::FailFast).await;
}

/// Scenario A with `old` hanging every operation (no answer ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn old_cluster_hanging_after_the_switch() {
    scenario_a(UnavailableMode::Hang).await;
}
