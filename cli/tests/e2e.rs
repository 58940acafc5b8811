//! Three nodes on a real ZooKeeper (each with its own session and HTTP server,
//! sharing the in-memory bookie clusters), live traffic on every node, a switch
//! through the REST API of one node, and an owner node stopped while the
//! switch runs.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::{AdminClient, Node};
use bkswitch_cli::{TopicHandle, Traffic};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_proto::codec::decode_managed_cursor_info;
use bkswitch_proto::Stamped;
use bkswitch_registry::ClusterStatus;
use common::*;

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

async fn topics(node: &Node, names: &[String]) -> Vec<TopicHandle> {
    let mut out = Vec::new();
    for (i, name) in names.iter().enumerate() {
        let ledger = node.open_topic(name).await.unwrap();
        let cursor = ledger
            .open_cursor_at("sub", InitialPosition::Earliest)
            .await
            .unwrap();
        node.schemas()
            .put(
                &format!("schema-{name}").replace('/', "-"),
                format!("v1-{i}").as_bytes(),
                b"h1",
            )
            .await
            .unwrap();
        out.push(TopicHandle { ledger, cursor });
    }
    out
}

async fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn three_nodes_switch_over_rest_with_an_owner_stopped_mid_switch() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let clusters = clusters();
    // Slow the new cluster a little so the switch is still running when the
    // owner node stops.
    clusters
        .get("new")
        .unwrap()
        .set_latency_all(Duration::from_millis(2));
    let stores = [zk(&chroot).await, zk(&chroot).await, zk(&chroot).await];
    let mut nodes = Vec::new();
    for (i, s) in stores.iter().enumerate() {
        let store: Arc<dyn MetadataStore> = s.clone();
        nodes.push(start(&format!("node-{}", i + 1), store, &clusters).await);
    }
    let names: Vec<Vec<String>> = (0..3)
        .map(|n| {
            (0..3)
                .map(|t| format!("tenant/ns/persistent/n{n}-t{t}"))
                .collect()
        })
        .collect();
    let mut traffic = Vec::new();
    for (n, node) in nodes.iter().enumerate() {
        let handles = topics(node, &names[n]).await;
        traffic.push(Traffic::start(&handles, 100, 128));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;

    let admin = AdminClient::new(nodes[0].url(), ADMIN).unwrap();
    admin
        .register("new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    assert!(admin.precheck("new").await.unwrap().ready);
    let sw = admin.switch("new").await.unwrap();
    let epoch = sw.epoch().unwrap();

    // Stop node-3 while the switch runs; its session ends, so its ownership
    // nodes disappear and node-2 takes its topics over.
    let t3 = traffic.pop().unwrap();
    let r3 = t3.stop(Duration::from_secs(5)).await;
    nodes[2].stop().await;
    stores[2].close().await.unwrap();
    let moved = topics(&nodes[1], &names[2]).await;
    let t3b = Traffic::start(&moved, 100, 128);

    // Every surviving node applies the directive; node-1 (the origin)
    // coordinates and the switch converges.
    for n in &nodes[..2] {
        let mut w = n.sync().applied_epoch_watch();
        tokio::time::timeout(Duration::from_secs(20), w.wait_for(|e| *e >= epoch))
            .await
            .expect("directive applied")
            .unwrap();
        assert_eq!(n.storage().active_cluster().as_deref(), Some("new"));
        assert_eq!(n.storage().read_mode().as_str(), "DUAL_READ");
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let st = nodes[0]
            .orchestrator()
            .current_status()
            .await
            .unwrap()
            .unwrap();
        if st.phase.is_built() {
            break st;
        }
        assert!(Instant::now() < deadline, "switch did not converge: {st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(status.phase.as_str(), "SWITCHED", "{status:?}");
    assert_eq!(status.counts.failed, 0, "{status:?}");
    // Every recorded ledger moved: promoted, moved by rollover, or found
    // obsolete (a live cursor rolled onto `new` between the scan and the copy).
    assert_eq!(
        status.counts.promoted + status.counts.rollover_fallback + status.counts.obsolete,
        status.counts.to_build,
        "{status:?}"
    );
    // At least the 9 schema ledgers were copied; cursor ledgers were copied
    // when BUILD found them still on `old` (cursors of the moved topics may
    // already have rolled onto `new` when node-2 reloaded them).
    assert!(status.counts.built >= 9, "{status:?}");
    // The origin coordinated, and only it.
    assert_eq!(nodes[0].sync().metrics().snapshot().coordinator_duties, 1);
    assert_eq!(nodes[1].sync().metrics().snapshot().coordinator_duties, 0);
    // Cursor promotions for node-2's topics travelled over HTTP.
    assert!(
        nodes[1].cursor_promotions_served() > 0,
        "node-2 executed no promotion"
    );
    // Every topic on the surviving nodes writes to `new` (forced rollover).
    wait_for("forced rollovers", Duration::from_secs(20), || {
        nodes[..2].iter().all(|n| {
            n.topics().list().iter().all(|t| {
                let ml = n.topics().get(t).unwrap();
                let (info, _) = ml.metadata();
                info.ledger_info
                    .last()
                    .and_then(|l| l.cluster_stamp().ok().flatten())
                    == Some("new")
            })
        })
    })
    .await;

    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut reports = Vec::new();
    for t in traffic {
        reports.push(t.stop(Duration::from_secs(10)).await);
    }
    reports.push(t3b.stop(Duration::from_secs(10)).await);
    for r in &reports {
        assert_eq!(r.publish_failures, 0, "{:?}", r.first_publish_error);
        assert_eq!(r.consumer_gaps, 0);
        assert_eq!(r.published, r.consumed);
        assert!(r.published > 0);
    }
    assert_eq!(r3.consumer_gaps, 0);

    // Every cursor now lives on `new` (promoted or rolled over).
    let store = stores[0].clone();
    for group in &names {
        for name in group {
            let path = format!("/managed-ledgers/{name}/sub");
            let r = store.get(&path).await.unwrap().unwrap();
            let info = decode_managed_cursor_info(&r.value).unwrap();
            assert_eq!(info.cluster_stamp().unwrap(), Some("new"), "{path}");
            assert!(clusters
                .get("new")
                .unwrap()
                .contains_ledger(info.cursors_ledger_id));
        }
    }
    for n in &nodes[..2] {
        n.stop().await;
    }
    for s in &stores[..2] {
        s.close().await.unwrap();
    }
}
