//! A cluster that still holds recorded ledgers cannot be unregistered, on a
//! real ZooKeeper: the second stranding call, where `DELETE …/old`
//! after a forced cleanup answered 204 although every data ledger written
//! before the switch is stamped `old` and lives only there (data ledgers are
//! never copied). The refusal is a 409 with the counts per kind and sample
//! ids, and leaves the metadata as it was; once those ledgers are gone the
//! cluster unregisters. Unstamped (pre-upgrade) ledgers count as the
//! bootstrap cluster's, and a record whose stamp is corrupt blocks too.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::wire::CleanupRequest;
use bkswitch_admin::{AdminClient, Node};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{CreateMode, MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_proto::codec::encode_managed_ledger_info;
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{CompressionType, KeyValue, ManagedLedgerInfo};
use bkswitch_registry::ClusterStatus;
use common::*;

async fn zk(chroot: &str) -> Arc<dyn MetadataStore> {
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

async fn delete(node: &Node, name: &str) -> (u16, serde_json::Value) {
    raw(
        "DELETE",
        &format!("{}{BASE}/{name}", node.url()),
        Some(ADMIN),
        None,
    )
    .await
}

/// Switches `old` → `new` and cleans up (forced), leaving `old` DEPRECATED.
async fn switch_and_clean_up(node: &Node, admin: &AdminClient) {
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    admin.switch("new").await.unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = node.orchestrator().current_status().await.unwrap().unwrap();
        if st.phase.is_built() {
            break;
        }
        assert!(Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let report = admin
        .cleanup(&CleanupRequest {
            dry_run: false,
            src_cluster_filter: None,
            max_deletions: 0,
            force: true,
        })
        .await
        .unwrap();
    assert_eq!(report.raw()["outcome"], "DONE", "{}", report.raw());
    let old = node.registry().get("old").await.unwrap().unwrap();
    assert_eq!(old.status, ClusterStatus::Deprecated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_old_cluster_is_kept_while_its_data_ledgers_live() {
    bkswitch_zk_harness::require_zk();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let clusters = clusters();
    let store = zk(&chroot).await;
    let node = start("node-1", store.clone(), &clusters).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    // Two topics with data, a cursor and a schema each, all on `old`.
    let mut ledgers = Vec::new();
    let mut old_data = Vec::new();
    for t in ["tenant/ns/persistent/a", "tenant/ns/persistent/b"] {
        let ml = node.open_topic(t).await.unwrap();
        let cursor = ml
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        for i in 0..5 {
            let p = ml.append(format!("{t}-{i}").into_bytes()).await.unwrap();
            cursor.mark_delete(p).await.unwrap();
        }
        old_data.push(ml.current_ledger_id().unwrap());
        node.schemas()
            .put(&t.replace('/', "-"), b"v1", b"h1")
            .await
            .unwrap();
        ledgers.push(ml);
    }
    switch_and_clean_up(&node, &admin).await;

    // A cluster that never held anything unregisters at once.
    clusters.get_or_create("spare");
    admin
        .register("spare", "memory://spare", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    let (code, body) = delete(&node, "spare").await;
    assert_eq!(code, 204, "{body}");

    // The data ledgers written before the switch are stamped `old` and only
    // there: `old` cannot go.
    let before = tree(store.as_ref()).await;
    let (code, body) = delete(&node, "old").await;
    assert_eq!(code, 409, "{body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains("`old`") && msg.contains("data ledger") && msg.contains("Nothing"),
        "{msg}"
    );
    let details = &body["details"];
    assert_eq!(details["cluster"], "old", "{body}");
    let data = details["data"]["count"].as_u64().unwrap();
    assert!(data >= old_data.len() as u64, "{body}");
    let sample: Vec<i64> = details["data"]["sample"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect();
    for id in &old_data {
        assert!(sample.contains(id), "ledger {id} not in the sample: {body}");
    }
    // Cursors and schemas were promoted to `new` and their old copies deleted.
    assert_eq!(details["cursor"]["count"], 0, "{body}");
    assert_eq!(details["schema"]["count"], 0, "{body}");
    assert_eq!(tree(store.as_ref()).await, before, "nothing written");
    assert!(node.registry().get("old").await.unwrap().is_some());

    // The exact count agrees with the metadata: one recorded data ledger on
    // `old` per topic (the rest rolled over onto `new` at the switch).
    let usage = node.orchestrator().cluster_usage("old").await.unwrap();
    assert_eq!(usage.data.count, data);
    assert_eq!(usage.data.unstamped, 0);
    assert!(!usage.holds_unstamped || usage.data.unstamped == 0);
    let on_new = node.orchestrator().cluster_usage("new").await.unwrap();
    assert!(
        on_new.cursor.count >= 2 && on_new.schema.count >= 2,
        "{on_new:?}"
    );

    // The managed ledgers are deleted (their data with them): `old` holds
    // nothing any more and unregisters.
    for ml in ledgers {
        ml.delete().await.unwrap();
    }
    // The schemas' ledgers were promoted to `new`; `old` holds none.
    let usage = node.orchestrator().cluster_usage("old").await.unwrap();
    assert!(usage.is_empty(), "{usage:?}");
    let (code, body) = delete(&node, "old").await;
    assert_eq!(code, 204, "{body}");
    assert!(node.registry().get("old").await.unwrap().is_none());
    // `new` is ACTIVE and holds the promoted ledgers: refused either way.
    let (code, body) = delete(&node, "new").await;
    assert_eq!(code, 409, "{body}");
    node.stop().await;
}

/// A pre-upgrade (unstamped) ledger belongs to the bootstrap cluster
/// ([I17]): it keeps that cluster registered, and a record with a corrupt
/// (duplicated) stamp keeps every cluster registered until it is repaired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unstamped_ledgers_keep_the_bootstrap_cluster_and_corrupt_stamps_keep_all() {
    bkswitch_zk_harness::require_zk();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let clusters = clusters();
    let store = zk(&chroot).await;
    let node = start("node-1", store.clone(), &clusters).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    switch_and_clean_up(&node, &admin).await;
    assert_eq!(
        node.orchestrator()
            .cluster_usage("old")
            .await
            .unwrap()
            .total(),
        0,
        "nothing was written before the switch"
    );

    // A managed ledger recorded before the upgrade: its ledger has no stamp.
    let legacy = ManagedLedgerInfo {
        ledger_info: vec![LedgerInfo {
            ledger_id: 4242,
            entries: Some(3),
            size: Some(30),
            ..Default::default()
        }],
        ..Default::default()
    };
    let path = "/managed-ledgers/tenant/legacy/persistent/t";
    let bytes = encode_managed_ledger_info(&legacy, CompressionType::None).unwrap();
    create_all(store.as_ref(), path, &bytes).await;
    let before = tree(store.as_ref()).await;
    let (code, body) = delete(&node, "old").await;
    assert_eq!(code, 409, "{body}");
    assert_eq!(body["details"]["data"]["count"], 1, "{body}");
    assert_eq!(body["details"]["data"]["unstamped"], 1, "{body}");
    assert_eq!(body["details"]["data"]["sample"][0], 4242, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("1 unstamped"),
        "{body}"
    );
    assert_eq!(tree(store.as_ref()).await, before, "nothing written");

    // A duplicated stamp: which cluster holds ledger 77 cannot be told.
    let corrupt = ManagedLedgerInfo {
        ledger_info: vec![LedgerInfo {
            ledger_id: 77,
            properties: vec![
                KeyValue {
                    key: "_pulsar.bookieClusterName".into(),
                    value: "new".into(),
                },
                KeyValue {
                    key: "_pulsar.bookieClusterName".into(),
                    value: "other".into(),
                },
            ],
            ..Default::default()
        }],
        ..Default::default()
    };
    store
        .put(
            path,
            &encode_managed_ledger_info(&corrupt, CompressionType::None).unwrap(),
            bkswitch_metadata_store::ExpectedVersion::Any,
        )
        .await
        .unwrap();
    let usage = node.orchestrator().cluster_usage("old").await.unwrap();
    assert_eq!(usage.corrupt_count, 1, "{usage:?}");
    assert_eq!(usage.corrupt, vec![(path.to_owned(), 77)]);
    let (code, body) = delete(&node, "old").await;
    assert_eq!(code, 409, "{body}");
    assert!(
        body["error"].as_str().unwrap().contains("corrupt stamp"),
        "{body}"
    );
    // Repaired (the record removed): `old` unregisters.
    store
        .delete(path, bkswitch_metadata_store::ExpectedVersion::Any)
        .await
        .unwrap();
    let (code, body) = delete(&node, "old").await;
    assert_eq!(code, 204, "{body}");
    node.stop().await;
}

/// `DELETE …/<name>` is refused: 409, the message names the cluster, says
/// nothing was written and contains every one of `words`; the metadata tree
/// is unchanged.
async fn refused(node: &Node, store: &dyn MetadataStore, name: &str, words: &[&str]) {
    let before = tree(store).await;
    let (code, body) = delete(node, name).await;
    assert_eq!(code, 409, "{body}");
    let msg = body["error"].as_str().unwrap_or_default();
    assert!(
        msg.contains(&format!("`{name}`")) && msg.contains("Nothing"),
        "{msg}"
    );
    for w in words {
        assert!(msg.contains(w), "`{w}` not in: {msg}");
    }
    assert_eq!(tree(store).await, before, "{name}: nothing written");
}

/// Creates `path` with `value`, creating missing parents empty.
async fn create_all(store: &dyn MetadataStore, path: &str, value: &[u8]) {
    let mut at = String::new();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    for (i, p) in parts.iter().enumerate() {
        at.push('/');
        at.push_str(p);
        let v: &[u8] = if i + 1 == parts.len() { value } else { b"" };
        match store.create(&at, v, CreateMode::PERSISTENT).await {
            Ok(_) => {}
            Err(e) if e.kind() == bkswitch_metadata_store::ErrorKind::AlreadyExists => {}
            Err(e) => panic!("creating {at}: {e}"),
        }
    }
}

/// The other holds on a cluster (issue: the target of a canary in BUILD
/// could be unregistered): an override naming it, an unfinished canary
/// whose records name it (even with its override gone), and metadata that
/// cannot be decoded (which cluster it references cannot be told). Each
/// refusal is a 409 naming what holds the cluster and what to do, with the
/// metadata left as it was; once the hold is gone the cluster unregisters.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn canaries_overrides_and_undecodable_metadata_keep_a_cluster() {
    bkswitch_zk_harness::require_zk();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let clusters = clusters();
    let store = zk(&chroot).await;
    let node = start("node-1", store.clone(), &clusters).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    // A canary of `tenant/canary/` to `new`, started and left in BUILD (its
    // coordinator is not run, so it is started around the node's verbs, as
    // the test kit allows): nothing is on `new` yet.
    let prefix = "tenant/canary/";
    let canary = bkswitch_admin::testkit::unchecked_orchestrator(&node).for_prefix(prefix);
    let st = canary.start_switch("new", None).await.unwrap();
    assert!(node
        .orchestrator()
        .cluster_usage("new")
        .await
        .unwrap()
        .is_empty());

    // The override names `new`.
    refused(
        &node,
        store.as_ref(),
        "new",
        &["override", prefix, "remove-override"],
    )
    .await;

    // The override is gone (as after a crash in the middle of a rollback) but
    // the canary's records still say BUILD: still refused.
    node.registry()
        .remove_prefix_override(prefix)
        .await
        .unwrap()
        .unwrap();
    let switch = format!("`{}`", st.switch_id);
    refused(
        &node,
        store.as_ref(),
        "new",
        &["canary", prefix, "target", &switch],
    )
    .await;
    assert!(node.registry().get("new").await.unwrap().is_some());

    // Metadata that decodes as no known record: which cluster its ledgers
    // are on cannot be told, so no cluster goes (here `spare`, which never
    // held anything).
    clusters.get_or_create("spare");
    admin
        .register("spare", "memory://spare", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    let junk = "/managed-ledgers/tenant/junk/persistent/t";
    create_all(store.as_ref(), junk, b"\xff\xfenot a record").await;
    refused(&node, store.as_ref(), "spare", &[junk]).await;
    store
        .delete(junk, bkswitch_metadata_store::ExpectedVersion::Any)
        .await
        .unwrap();
    let (code, body) = delete(&node, "spare").await;
    assert_eq!(code, 204, "{body}");

    // The canary rolled back (its override back first: a canary whose
    // override is gone counts as absorbed by a cluster-wide switch): `new`
    // holds nothing and nothing holds it any more.
    node.registry()
        .set_prefix_override(prefix, "new", None, st.epoch)
        .await
        .unwrap();
    // The reverse idgen step a rollback's precheck asks for.
    clusters
        .get_or_create("old")
        .advance_ledger_id_to(2_000_000)
        .unwrap();
    let rolled = canary.rollback(&st.switch_id).await.unwrap();
    assert_eq!(
        rolled.phase,
        bkswitch_switch_orchestrator::Phase::RolledBack,
        "{rolled:?}"
    );
    let (code, body) = delete(&node, "new").await;
    assert_eq!(code, 204, "{body}");
    node.stop().await;
}
