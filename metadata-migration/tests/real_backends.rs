//! ZooKeeper → etcd and back on real servers, with a live writer.

mod common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use bkswitch_metadata_migration::{Coordinator, MigrationRequest, Phase};
use bkswitch_metadata_store::{CreateMode, MetadataStore};
use common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_to_etcd_and_back_under_live_writes() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter("bkswitch_metadata_migration=info")
        .with_test_writer()
        .try_init();
    let zk_url = format!(
        "zk://{}/migration-{}",
        bkswitch_zk_harness::shared().connect_string(),
        nonce()
    );
    let etcd_url = bkswitch_etcd_harness::shared().url(&format!("/migration-{}", nonce()));
    let opener = url_opener();
    let zk = opener.open(&zk_url).await.expect("zk");
    populate(zk.as_ref(), 100, 1_000).await;

    let p = participant(opener.clone(), &zk_url, "broker-1").await;
    p.create(
        "/loadbalance/brokers/broker-1",
        b"up",
        CreateMode::EPHEMERAL,
    )
    .await
    .expect("ephemeral");
    let live: Vec<String> = (0..10).map(topic).collect();
    let w = start_writer_every(p.clone(), live.clone(), "a", Duration::from_millis(5)).await;

    // ZooKeeper → etcd.
    let mut c = Coordinator::start(
        zk.clone(),
        opener.as_ref(),
        MigrationRequest {
            id: Some("to-etcd".to_owned()),
            source_url: zk_url.clone(),
            target_url: etcd_url.clone(),
            wipe_target: None,
            protected: Vec::new(),
        },
        coordinator_options(),
    )
    .await
    .expect("start");
    loop {
        let phase = c.step().await.expect("step");
        if phase.is_terminal() {
            break;
        }
    }
    let rec = c.record().clone();
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    assert!(rec.copied >= 1_100, "{rec:?}");
    wait_swapped(&[&p], &etcd_url).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let etcd = opener.open(&etcd_url).await.expect("etcd");
    let mut skip: Vec<String> = live.clone();
    skip.push("/new".to_owned());
    let n = assert_same_tree_except(zk.as_ref(), etcd.as_ref(), &skip).await;
    assert!(n >= 1_100, "{n}");
    let b = etcd
        .get("/loadbalance/brokers/broker-1")
        .await
        .expect("get")
        .expect("recreated by its owner");
    assert!(b.stat.ephemeral);
    let idgen = etcd.exists("/ledgers/idgen").await.unwrap().unwrap();
    assert!(idgen.next_sequential_suffix() >= 7);

    // etcd → ZooKeeper (the old data there is wiped on request).
    let mut c = Coordinator::start(
        etcd.clone(),
        opener.as_ref(),
        MigrationRequest {
            id: Some("back-to-zk".to_owned()),
            source_url: etcd_url.clone(),
            target_url: zk_url.clone(),
            // The old tree is still in the ZooKeeper chroot: the wipe names it.
            wipe_target: Some(
                bkswitch_metadata_migration::StoreLocation::parse(&zk_url)
                    .expect("url")
                    .root,
            ),
            protected: Vec::new(),
        },
        coordinator_options(),
    )
    .await
    .expect("start back");
    loop {
        let phase = c.step().await.expect("step back");
        if phase.is_terminal() {
            break;
        }
    }
    let rec = c.record().clone();
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    wait_swapped(&[&p], &zk_url).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    w.stop.store(true, Ordering::Relaxed);
    let held = w.handle.await.expect("writer");
    assert_eq!(
        w.conflicts.load(Ordering::Relaxed),
        0,
        "versions read before both migrations still work"
    );
    assert!(w.writes.load(Ordering::Relaxed) > 20);
    let zk2 = opener.open(&zk_url).await.expect("zk again");
    for (path, v) in &held {
        let got = zk2.get(path).await.unwrap().expect("in ZooKeeper");
        assert_eq!(got.stat.version, *v, "{path}");
    }
    assert_same_tree_except(etcd.as_ref(), zk2.as_ref(), &skip).await;
    let (id, _) = zk2
        .create("/ledgers/idgen/ID-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
        .await
        .expect("seq");
    let suffix: i64 = id.rsplit('-').next().unwrap().parse().unwrap();
    assert!(suffix >= 7, "ids never go back: {id}");
    assert!(zk2
        .get("/loadbalance/brokers/broker-1")
        .await
        .unwrap()
        .is_some_and(|b| b.stat.ephemeral));
    // A node started with the etcd URL follows back to ZooKeeper.
    let late = participant(opener.clone(), &etcd_url, "broker-late").await;
    assert_eq!(late.url(), zk_url);
}
