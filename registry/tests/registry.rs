//! Registry behaviour on the in-memory store and on real ZooKeeper.

use std::sync::Arc;

use bkswitch_bk_client::MemoryClusters;
use bkswitch_metadata_store::{
    CreateMode, ExpectedVersion, MemoryStore, MetadataStore, ZkStore, ZkStoreOptions,
};
use bkswitch_registry::{
    next_ledger_id_from_layout, ClusterStatus, MemoryIdgenSource, Registry, RegistryError,
    ZkIdgenSource,
};

async fn zk_store(chroot: &str) -> ZkStore {
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    ZkStore::connect(&url, ZkStoreOptions::default())
        .await
        .unwrap()
}

async fn snapshot(store: &dyn MetadataStore, root: &str) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        if let Some(r) = store.get(&p).await.unwrap() {
            out.push((p.clone(), r.value, r.stat.version));
        }
        for c in store.children(&p).await.unwrap() {
            stack.push(format!("{p}/{c}"));
        }
    }
    out.sort();
    out
}

async fn scenario(store: Arc<dyn MetadataStore>) {
    let reg = Registry::new(store.clone());
    reg.register(
        "a",
        "zk+hierarchical://zk1:2181;zk2/ledgers",
        ClusterStatus::Active,
    )
    .await
    .unwrap();
    reg.register("b", "memory://b", ClusterStatus::Standby)
        .await
        .unwrap();
    assert_eq!(reg.active().await.unwrap().as_deref(), Some("a"));
    let before = snapshot(&*store, reg.root()).await;
    let bad: Vec<(&str, &str)> = vec![
        ("switch-target", "memory://x"),
        ("-x", "memory://x"),
        ("c", "http://x"),
        ("c", "zk://ZK2:2181,zk1/ledgers/"),
        ("c", "metadata-store:zk:zk1:2181/ledgers/sub"),
        ("c", "memory://B"),
        ("b", "memory://zz"),
        ("c", "zk://u@zk1/x"),
    ];
    for (name, uri) in bad {
        let e = reg
            .register(name, uri, ClusterStatus::Standby)
            .await
            .unwrap_err();
        assert!(!e.to_string().is_empty());
    }
    assert!(matches!(
        reg.register("c", "zk://zk1/ledgers", ClusterStatus::Standby)
            .await,
        Err(RegistryError::UriCollision { .. })
    ));
    assert!(matches!(
        reg.unregister("a").await,
        Err(RegistryError::ActiveCluster { .. })
    ));
    assert!(matches!(
        reg.register("c", "memory://c", ClusterStatus::Active).await,
        Err(RegistryError::AnotherActive { .. })
    ));
    assert!(matches!(
        reg.write_directive("nope", None).await,
        Err(RegistryError::NotFound { .. })
    ));
    assert_eq!(before, snapshot(&*store, reg.root()).await);

    // Co-located cluster with another ledgers root is fine.
    reg.register("c", "zk://zk1:2181/other-ledgers", ClusterStatus::Standby)
        .await
        .unwrap();

    // Unknown fields survive a rewrite.
    let path = format!("{}/b", reg.root());
    let v = store.get(&path).await.unwrap().unwrap();
    let mut json: serde_json::Value = serde_json::from_slice(&v.value).unwrap();
    json["futureField"] = serde_json::json!(7);
    store
        .put(
            &path,
            &serde_json::to_vec(&json).unwrap(),
            ExpectedVersion::Exactly(v.stat.version),
        )
        .await
        .unwrap();

    // Bootstrap: written once.
    let m = reg.ensure_bootstrap("a").await.unwrap();
    assert_eq!(reg.ensure_bootstrap("b").await.unwrap(), m);

    // Directive: epochs increase, idempotent.
    let d1 = reg.write_directive("b", Some("n1")).await.unwrap();
    assert_eq!(d1.epoch, 1);
    assert_eq!(reg.write_directive("b", None).await.unwrap(), d1);
    let d2 = reg.write_directive("c", None).await.unwrap();
    assert_eq!(d2.epoch, 2);

    reg.promote_active("b").await.unwrap();
    let recs = reg.list().await.unwrap();
    let active: Vec<_> = recs
        .iter()
        .filter(|r| r.status == ClusterStatus::Active)
        .collect();
    assert_eq!(active.len(), 1);
    assert_eq!(active[0].name, "b");
    assert_eq!(
        active[0].extra.get("futureField"),
        Some(&serde_json::json!(7))
    );
    assert_eq!(
        reg.get("a").await.unwrap().unwrap().status,
        ClusterStatus::Deprecated
    );
    assert!(matches!(
        reg.write_directive("a", None).await,
        Err(RegistryError::Deprecated { .. })
    ));
    assert!(matches!(
        reg.promote_active("a").await,
        Err(RegistryError::Deprecated { .. })
    ));
    reg.unregister("a").await.unwrap();

    // Corrupt records name the path.
    store
        .put(&format!("{}/bad", reg.root()), b"{", ExpectedVersion::Any)
        .await
        .unwrap();
    let e = reg.get("bad").await.unwrap_err();
    assert!(e.to_string().contains("/bad"), "{e}");
}

#[tokio::test]
async fn scenario_on_memory() {
    scenario(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn scenario_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    scenario(Arc::new(zk_store(&chroot).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_promotions_never_give_two_active_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let first = Registry::new(Arc::new(zk_store(&chroot).await));
    for i in 0..4 {
        let status = if i == 0 {
            ClusterStatus::Active
        } else {
            ClusterStatus::Standby
        };
        first
            .register(&format!("c{i}"), &format!("memory://c{i}"), status)
            .await
            .unwrap();
    }
    let mut regs = Vec::new();
    for _ in 0..4 {
        regs.push(Registry::new(Arc::new(zk_store(&chroot).await)));
    }
    let checker = {
        let reg = first.clone();
        tokio::spawn(async move {
            for _ in 0..100 {
                let n = reg
                    .list()
                    .await
                    .unwrap()
                    .iter()
                    .filter(|r| r.status == ClusterStatus::Active)
                    .count();
                assert!(n <= 1, "{n} ACTIVE records");
            }
        })
    };
    let mut tasks = Vec::new();
    for (i, reg) in regs.into_iter().enumerate() {
        tasks.push(tokio::spawn(async move {
            for round in 0..3 {
                let target = format!("c{}", 1 + (i + round) % 3);
                match reg.promote_active(&target).await {
                    Ok(()) | Err(RegistryError::Deprecated { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    checker.await.unwrap();
    let active: Vec<_> = first
        .list()
        .await
        .unwrap()
        .into_iter()
        .filter(|r| r.status == ClusterStatus::Active)
        .collect();
    assert_eq!(active.len(), 1);
    assert_eq!(first.active().await.unwrap(), Some(active[0].name.clone()));
}

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
    assert_eq!(next_ledger_id_from_layout(&store, &src).await.unwrap(), 0);
    bk_layout(&store, &src, 7, &[]).await;
    assert_eq!(next_ledger_id_from_layout(&store, &src).await.unwrap(), 7);
    store
        .put(&format!("{dst}/idgen-long"), b"", ExpectedVersion::Any)
        .await
        .unwrap();
    assert_eq!(
        next_ledger_id_from_layout(&store, &dst).await.unwrap(),
        1 << 32
    );
    bk_layout(&store, &dst, 3, &[(1, 2), (3, 5), (2, 9)]).await;
    assert_eq!(
        next_ledger_id_from_layout(&store, &dst).await.unwrap(),
        (3 << 32) | 5
    );

    let port = bkswitch_zk_harness::shared().port();
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
    let idgen = MemoryIdgenSource {
        clusters: clusters.clone(),
    };
    // Copied ids are below the target's next id, but the source handed out 49:
    // the ordering rule refuses.
    let r = reg.precheck("old", "new", &[3, 10], &idgen).await.unwrap();
    assert!(r.idgen_advanced_beyond_source);
    assert!(!r.ready);
    clusters
        .get("new")
        .unwrap()
        .advance_ledger_id_to(50)
        .unwrap();
    assert!(
        reg.precheck("old", "new", &[3, 10], &idgen)
            .await
            .unwrap()
            .ready
    );
}
