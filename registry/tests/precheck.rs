//! The registry's idgen precheck (docs/INVARIANTS.md I11): BookKeeper's id
//! generator layout on real ZooKeeper, memory clusters, and a source whose
//! generator cannot be read.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::MemoryClusters;
use bkswitch_bookkeeper::{ClientConfig, ZkIdgenSource};
use bkswitch_metadata_store::{CreateMode, ExpectedVersion, MemoryStore, MetadataStore};
use bkswitch_registry::{ClusterStatus, Registry, RegistryError};

use common::zk_store;

async fn bk_layout(store: &dyn MetadataStore, root: &str, short: usize, hobs: &[(i64, usize)]) {
    for _ in 0..short {
        let (p, _) = store
            .create(
                &format!("{root}/idgen/ID-"),
                b"",
                CreateMode::EPHEMERAL_SEQUENTIAL,
            )
            .await
            .unwrap();
        store.delete(&p, ExpectedVersion::Any).await.unwrap();
    }
    for (hob, n) in hobs {
        let dir = format!("{root}/idgen-long/HOB-{hob:010}");
        store.put(&dir, b"", ExpectedVersion::Any).await.unwrap();
        for _ in 0..*n {
            let (p, _) = store
                .create(&format!("{dir}/ID-"), b"", CreateMode::EPHEMERAL_SEQUENTIAL)
                .await
                .unwrap();
            store.delete(&p, ExpectedVersion::Any).await.unwrap();
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idgen_layout_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let store = zk_store("").await;
    let src = format!("{chroot}/src/ledgers");
    let dst = format!("{chroot}/dst/ledgers");
    let port = bkswitch_zk_harness::shared().port();
    let next = |root: &str| {
        let uri = format!("zk://127.0.0.1:{port}{root}");
        async move { bkswitch_bookkeeper::next_ledger_id(&uri, &ClientConfig::default()).await }
    };
    // No cluster at the root: an error naming it, not a guess.
    let e = next(&src).await.unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    store.put(&src, b"", ExpectedVersion::Any).await.unwrap();
    assert_eq!(next(&src).await.unwrap(), 0);
    bk_layout(&store, &src, 7, &[]).await;
    assert_eq!(next(&src).await.unwrap(), 7);
    store
        .put(&format!("{dst}/idgen-long"), b"", ExpectedVersion::Any)
        .await
        .unwrap();
    assert_eq!(next(&dst).await.unwrap(), 1 << 32);
    bk_layout(&store, &dst, 3, &[(1, 2), (3, 5), (2, 9)]).await;
    assert_eq!(next(&dst).await.unwrap(), (3 << 32) | 5);
    // Reading wrote nothing (not even a LAYOUT).
    assert!(store.get(&format!("{src}/LAYOUT")).await.unwrap().is_none());

    let reg = Registry::new(Arc::new(MemoryStore::new()));
    reg.register(
        "src",
        &format!("zk+hierarchical://127.0.0.1:{port}{src}"),
        ClusterStatus::Active,
    )
    .await
    .unwrap();
    reg.register(
        "dst",
        &format!("zk://127.0.0.1:{port}{dst}"),
        ClusterStatus::Standby,
    )
    .await
    .unwrap();
    let r = reg
        .precheck("src", "dst", &[1, 6], &ZkIdgenSource::default())
        .await
        .unwrap();
    assert!(r.ready);
    assert_eq!(r.source_next_ledger_id, Some(7));
    let r = reg
        .precheck("dst", "src", &[1, 6, 8, 9], &ZkIdgenSource::default())
        .await
        .unwrap();
    assert!(!r.ready);
    assert_eq!(r.at_risk_ledger_ids, vec![8, 9]);
    let json = serde_json::to_value(&r).unwrap();
    assert_eq!(json["targetNextLedgerId"], 7);
    assert_eq!(json["atRiskLedgerCount"], 2);
}

#[tokio::test]
async fn precheck_on_memory_clusters() {
    let reg = Registry::new(Arc::new(MemoryStore::new()));
    reg.register("old", "memory://old", ClusterStatus::Active)
        .await
        .unwrap();
    reg.register("new", "memory://new", ClusterStatus::Standby)
        .await
        .unwrap();
    let clusters = MemoryClusters::new();
    clusters
        .get_or_create("old")
        .advance_ledger_id_to(50)
        .unwrap();
    clusters
        .get_or_create("new")
        .advance_ledger_id_to(20)
        .unwrap();
    let idgen = clusters.clone();
    // Copied ids are below the target's next id, but the source handed out 49:
    // the ordering rule refuses.
    let r = reg.precheck("old", "new", &[3, 10], &idgen).await.unwrap();
    assert!(r.idgen_advanced_beyond_source);
    assert!(!r.ready);
    // Equal next ids are not enough: both clusters' next ledgers would get 50.
    clusters
        .get("new")
        .unwrap()
        .advance_ledger_id_to(50)
        .unwrap();
    assert!(
        !reg.precheck("old", "new", &[3, 10], &idgen)
            .await
            .unwrap()
            .ready
    );
    clusters
        .get("new")
        .unwrap()
        .advance_ledger_id_to(51)
        .unwrap();
    let r = reg.precheck("old", "new", &[3, 10], &idgen).await.unwrap();
    assert!(r.ready, "{r:?}");
    assert_eq!(r.source_idgen_error, None);
    assert!(serde_json::to_value(&r)
        .unwrap()
        .get("sourceIdgenError")
        .is_none());

    // A source whose generator cannot be read: not ready, and why (it used
    // to be skipped silently).
    reg.register(
        "zk-src",
        "zk+hierarchical://127.0.0.1:1/ledgers",
        ClusterStatus::Standby,
    )
    .await
    .unwrap();
    let r = reg.precheck("zk-src", "new", &[3], &idgen).await.unwrap();
    assert!(!r.ready, "{r:?}");
    assert!(r.idgen_advanced_beyond_source);
    assert_eq!(r.source_next_ledger_id, None);
    let why = r.source_idgen_error.clone().expect("the reason");
    assert!(why.contains("memory://"), "{why}");
    assert_eq!(
        serde_json::to_value(&r).unwrap()["sourceIdgenError"],
        serde_json::Value::String(why)
    );
    // A target whose generator cannot be read: an error naming the cluster,
    // keeping the reader's error.
    match reg.precheck("new", "zk-src", &[3], &idgen).await {
        Err(RegistryError::Idgen { cluster, source }) => {
            assert_eq!(cluster, "zk-src");
            assert_eq!(source.code(), -14);
        }
        other => panic!("{other:?}"),
    }
}

/// The sixth item on a real ZooKeeper (registry and id generators on
/// it): a source whose id generator cannot be read (a malformed `HOB-` node)
/// makes the precheck not ready, naming the reason, instead of skipping the
/// check; nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_source_generator_is_not_ready_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let store = zk_store("").await;
    let src = format!("{chroot}/src/ledgers");
    let dst = format!("{chroot}/dst/ledgers");
    bk_layout(&store, &src, 7, &[]).await;
    store
        .put(
            &format!("{src}/idgen-long/HOB-zz"),
            b"",
            ExpectedVersion::Any,
        )
        .await
        .unwrap();
    bk_layout(&store, &dst, 3, &[(1, 2)]).await;
    let port = bkswitch_zk_harness::shared().port();
    let reg = Registry::new(Arc::new(zk_store(&format!("{chroot}/registry")).await));
    reg.register(
        "src",
        &format!("zk+hierarchical://127.0.0.1:{port}{src}"),
        ClusterStatus::Active,
    )
    .await
    .unwrap();
    reg.register(
        "dst",
        &format!("zk+hierarchical://127.0.0.1:{port}{dst}"),
        ClusterStatus::Standby,
    )
    .await
    .unwrap();
    let before = store
        .get(&format!("{src}/idgen-long/HOB-zz"))
        .await
        .unwrap();
    let r = reg
        .precheck("src", "dst", &[1, 6], &ZkIdgenSource::default())
        .await
        .unwrap();
    assert!(!r.ready, "{r:?}");
    let why = r.source_idgen_error.clone().expect("the reason");
    assert!(why.contains("HOB-zz"), "{why}");
    assert_eq!(
        store
            .get(&format!("{src}/idgen-long/HOB-zz"))
            .await
            .unwrap(),
        before
    );
}
