//! Pulsar reads what bkswitch wrote, and bkswitch reads what Pulsar wrote.
//!
//! A node on a real ZooKeeper runs topics with cursors and schemas through a
//! switch `old` → `new`; then every managed-ledger, cursor and schema znode it
//! left is decoded and re-encoded by Apache Pulsar's own classes
//! (`org.apache.pulsar:managed-ledger` and `pulsar-broker`, driven by
//! `bkswitch_bk_harness::PulsarJudge`): the bytes come back identical, and the
//! stamp `_pulsar.bookieClusterName` is where Pulsar's accessors look for it.
//! The reverse: metadata built with Pulsar's classes decodes in bkswitch and
//! re-encodes byte for byte, stamps included.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::AdminClient;
use bkswitch_bk_harness::{encoded, judged, PulsarJudge, PulsarKind};
use bkswitch_cli::{TopicHandle, Traffic};
use bkswitch_hardening::{clusters, start_node, wait_switched, ADMIN};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::{ml, schema, Stamped};
use bkswitch_registry::ClusterStatus;
use prost::Message;

/// Every znode below `root` with its value.
async fn walk(store: &dyn MetadataStore, root: &str) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    let mut todo = vec![root.to_owned()];
    while let Some(p) = todo.pop() {
        if let Some(v) = store.get(&p).await.expect("get") {
            if !v.value.is_empty() {
                out.push((p.clone(), v.value));
            }
        }
        for c in store.children(&p).await.expect("children") {
            todo.push(format!("{}/{c}", p.trim_end_matches('/')));
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulsar_classes_read_the_metadata_a_switch_left() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let url = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    let store = Arc::new(
        ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .expect("ZooKeeper"),
    );
    let clusters = clusters();
    let node = start_node("node-1", store.clone(), &clusters).await;
    let admin = AdminClient::new(node.url(), ADMIN).expect("client");
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .expect("register new");
    let mut handles = Vec::new();
    for t in 0..3 {
        let name = format!("tenant/ns/persistent/pf-{t}");
        let ledger = node.open_topic(&name).await.expect("topic");
        let cursor = ledger
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .expect("cursor");
        node.schemas()
            .put(&format!("schema-pf-{t}"), b"v1", b"h1")
            .await
            .expect("schema");
        handles.push(TopicHandle { ledger, cursor });
    }
    let traffic = Traffic::start(&handles, 50, 64);
    tokio::time::sleep(Duration::from_millis(500)).await;
    admin.switch("new").await.expect("switch");
    wait_switched(&node.orchestrator(), Duration::from_secs(40)).await;
    // Schemas written after the switch are stamped `new`.
    for t in 0..3 {
        node.schemas()
            .put(&format!("schema-pf-{t}"), b"v2", b"h2")
            .await
            .expect("schema v2");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let report = traffic.stop(Duration::from_secs(10)).await;
    assert_eq!(report.publish_failures, 0, "{report:?}");

    // What the run left in ZooKeeper, by kind.
    let mut judge = PulsarJudge::new();
    let mut expected = Vec::new();
    for (path, value) in walk(store.as_ref(), "/managed-ledgers").await {
        let depth = path.trim_start_matches('/').split('/').count();
        let (kind, stamps) = if depth == 5 {
            let info = decode_managed_ledger_info(&value).expect("ours decodes");
            let stamps: Vec<String> = info
                .ledger_info
                .iter()
                .filter_map(|l| l.cluster_stamp().ok().flatten().map(str::to_owned))
                .collect();
            (PulsarKind::ManagedLedger, stamps)
        } else {
            let info = decode_managed_cursor_info(&value).expect("ours decodes");
            let stamps = info
                .cluster_stamp()
                .ok()
                .flatten()
                .map(str::to_owned)
                .into_iter()
                .collect();
            (PulsarKind::Cursor, stamps)
        };
        judge.decode(kind, &value);
        expected.push((path, kind, stamps));
    }
    for (path, value) in walk(store.as_ref(), "/schemas").await {
        schema::SchemaLocator::decode(value.as_slice()).expect("ours decodes");
        judge.decode(PulsarKind::SchemaLocator, &value);
        expected.push((path, PulsarKind::SchemaLocator, Vec::new()));
    }
    let kinds: Vec<_> = expected.iter().map(|e| e.1).collect();
    assert!(kinds.contains(&PulsarKind::ManagedLedger));
    assert!(kinds.contains(&PulsarKind::Cursor));
    assert!(kinds.contains(&PulsarKind::SchemaLocator));
    let answers = tokio::task::block_in_place(|| judge.run()).expect("Pulsar's classes");
    let mut stamped = 0;
    for ((path, kind, stamps), answer) in expected.iter().zip(&answers) {
        let j = judged(answer).unwrap_or_else(|e| panic!("Pulsar cannot decode {path}: {e}"));
        match kind {
            // Pulsar's schema `PositionInfo` (4.2) has no `properties` field yet
            // (PIP-477 adds it). Pulsar reads every field it knows exactly as
            // bkswitch wrote it; it cannot re-encode a stamped locator (its
            // LightProto writer keeps the parsed lengths and pads the dropped
            // properties with zero bytes — see docs/FORMATS.md §2).
            PulsarKind::SchemaLocator => {
                let original = walk(store.as_ref(), path).await[0].1.clone();
                let ours = schema::SchemaLocator::decode(original.as_slice()).expect("ours");
                let listed: Vec<(i64, i64, i64, Vec<u8>)> = std::iter::once(&ours.info)
                    .chain(ours.index.iter())
                    .map(|e| {
                        (
                            e.version,
                            e.position.ledger_id,
                            e.position.entry_id,
                            e.hash.clone(),
                        )
                    })
                    .collect();
                assert_eq!(
                    j.schema_entries, listed,
                    "{path}: what Pulsar reads of the locator"
                );
                assert!(
                    ours.info.position.properties.is_empty() || !j.identical,
                    "{path}: a stamped locator cannot come back identical from Pulsar 4.2"
                );
            }
            _ => {
                assert!(
                    j.identical,
                    "{path}: Pulsar re-encoded {kind:?} differently"
                );
                assert_eq!(&j.stamps, stamps, "{path}: stamps Pulsar's accessors see");
                stamped += stamps.len();
            }
        }
    }
    assert!(stamped > 0, "no stamped ledger in the metadata");

    // The reverse: Pulsar writes, bkswitch decodes and re-encodes byte for byte.
    let mut judge = PulsarJudge::new();
    judge
        .encode(PulsarKind::ManagedLedger, Some("blue"))
        .encode(PulsarKind::Cursor, Some("blue"))
        .encode(PulsarKind::Position, None)
        .encode(PulsarKind::ManagedLedger, None);
    let answers = tokio::task::block_in_place(|| judge.run()).expect("Pulsar's classes");
    let ml_bytes = encoded(&answers[0]).expect("managed ledger");
    let info = decode_managed_ledger_info(&ml_bytes).expect("decodes");
    assert_eq!(info.encode_to_vec(), ml_bytes);
    assert_eq!(info.ledger_info.len(), 2);
    assert!(info
        .ledger_info
        .iter()
        .all(|l| l.cluster_stamp().ok().flatten() == Some("blue")));
    let cursor_bytes = encoded(&answers[1]).expect("cursor");
    let cursor = decode_managed_cursor_info(&cursor_bytes).expect("decodes");
    assert_eq!(cursor.encode_to_vec(), cursor_bytes);
    assert_eq!(cursor.cluster_stamp().ok().flatten(), Some("blue"));
    let position_bytes = encoded(&answers[2]).expect("position");
    let position = ml::PositionInfo::decode(position_bytes.as_slice()).expect("decodes");
    assert_eq!(position.encode_to_vec(), position_bytes);
    let legacy =
        decode_managed_ledger_info(&encoded(&answers[3]).expect("unstamped")).expect("decodes");
    assert!(legacy
        .ledger_info
        .iter()
        .all(|l| l.cluster_stamp().ok().flatten().is_none()));

    node.stop().await;
    let _ = store.close().await;
}
