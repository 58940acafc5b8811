//! Registry behaviour on the in-memory store and on real ZooKeeper.

mod common;

use std::sync::Arc;

use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore};
use bkswitch_registry::{ClusterStatus, Registry, RegistryError};

use common::{snapshot, zk_store};

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

/// Every record under the root as `(name, status)`, read twice until both
/// reads agree (same names, versions and creation times): an atomic snapshot,
/// as records only change through versioned writes.
async fn consistent_statuses(
    store: &dyn MetadataStore,
    root: &str,
) -> Vec<(String, ClusterStatus)> {
    async fn collect(store: &dyn MetadataStore, root: &str) -> Vec<(String, i64, i64, Vec<u8>)> {
        let mut out = Vec::new();
        for c in store.children(root).await.unwrap() {
            if bkswitch_registry::RESERVED_NAMES.contains(&c.as_str()) {
                continue;
            }
            if let Some(r) = store.get(&format!("{root}/{c}")).await.unwrap() {
                out.push((c, r.stat.version, r.stat.created_ms, r.value));
            }
        }
        out
    }
    let mut last = collect(store, root).await;
    loop {
        let again = collect(store, root).await;
        if again == last {
            return again
                .into_iter()
                .map(|(name, _, _, value)| {
                    let rec: bkswitch_registry::ClusterRecord =
                        serde_json::from_slice(&value).unwrap();
                    (name, rec.status)
                })
                .collect();
        }
        last = again;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn colliding_uris_race_exactly_one_wins_on_zookeeper() {
    const TASKS: usize = 8;
    const ROUNDS: usize = 4;
    let chroot = bkswitch_zk_harness::unique_chroot();
    let mut regs = Vec::new();
    for _ in 0..TASKS {
        regs.push(Registry::new(Arc::new(zk_store(&chroot).await)));
    }
    let barrier = Arc::new(tokio::sync::Barrier::new(TASKS));
    let mut tasks = Vec::new();
    for (i, reg) in regs.iter().cloned().enumerate() {
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            let mut outcomes = Vec::new();
            for round in 0..ROUNDS {
                // Spellings of one cluster, and a co-located one sharing host
                // `a` and the ledgers root.
                let uri = match i % 4 {
                    0 => format!("zk://r{round}a:2181,r{round}b/ledgers"),
                    1 => format!("zk+hierarchical://R{round}B:2181;r{round}a/ledgers/"),
                    2 => format!("metadata-store:zk:r{round}b,r{round}a:2181/ledgers"),
                    _ => format!("zk://r{round}a/ledgers"),
                };
                barrier.wait().await;
                let r = reg
                    .register(&format!("r{round}-t{i}"), &uri, ClusterStatus::Standby)
                    .await;
                outcomes.push(match r {
                    Ok(rec) => Ok(rec.name),
                    Err(RegistryError::UriCollision { existing, .. }) => Err(existing),
                    Err(e) => panic!("round {round} task {i}: unexpected {e}"),
                });
            }
            outcomes
        }));
    }
    let mut per_task = Vec::new();
    for t in tasks {
        per_task.push(t.await.unwrap());
    }
    let listed = regs[0].list().await.unwrap();
    assert!(listed.iter().all(|r| r.name != "uri-index"));
    for round in 0..ROUNDS {
        let winners: Vec<&String> = per_task
            .iter()
            .filter_map(|o| o[round].as_ref().ok())
            .collect();
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        for o in &per_task {
            if let Err(existing) = &o[round] {
                assert_eq!(existing, winners[0], "round {round}");
            }
        }
        let names: Vec<_> = listed
            .iter()
            .filter(|r| r.name.starts_with(&format!("r{round}-")))
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(names, [winners[0].clone()], "round {round}");
    }
    // One index node per (host, ledgers root) of each winner, naming it.
    let index = format!("{}/uri-index", regs[0].root());
    let keys = regs[0].store().children(&index).await.unwrap();
    let expected: usize = listed
        .iter()
        .map(|r| {
            bkswitch_registry::ClusterUri::parse(&r.metadata_service_uri)
                .unwrap()
                .index_keys()
                .len()
        })
        .sum();
    assert_eq!(keys.len(), expected, "{keys:?}");
    for k in keys {
        let v = regs[0]
            .store()
            .get(&format!("{index}/{k}"))
            .await
            .unwrap()
            .unwrap();
        let json: serde_json::Value = serde_json::from_slice(&v.value).unwrap();
        let owner = json["cluster"].as_str().unwrap();
        assert!(listed.iter().any(|r| r.name == owner), "{k} names {owner}");
    }
    for reg in regs {
        reg.store().close().await.unwrap();
    }
}

async fn stale_index_scenario(store: Arc<dyn MetadataStore>) {
    let reg = Registry::new(store.clone());
    let index = format!("{}/uri-index", reg.root());
    reg.register("a", "zk://zk1/ledgers", ClusterStatus::Standby)
        .await
        .unwrap();
    let key = format!("{index}/zk%3A%2F%2Fzk1%3A2181%2Fledgers");
    let node = store.get(&key).await.unwrap().expect("index node");
    let json: serde_json::Value = serde_json::from_slice(&node.value).unwrap();
    assert_eq!(json["cluster"], "a");
    assert_eq!(json["metadataServiceUri"], "zk://zk1/ledgers");
    // The record keeps exactly its three fields.
    let rec = store
        .get(&format!("{}/a", reg.root()))
        .await
        .unwrap()
        .unwrap();
    let rec: serde_json::Value = serde_json::from_slice(&rec.value).unwrap();
    let mut fields: Vec<_> = rec.as_object().unwrap().keys().cloned().collect();
    fields.sort();
    assert_eq!(fields, ["metadataServiceUri", "name", "status"]);
    // The index is neither listed nor usable as a name.
    assert_eq!(reg.list().await.unwrap().len(), 1);
    assert!(matches!(
        reg.register("uri-index", "memory://x", ClusterStatus::Standby)
            .await,
        Err(RegistryError::InvalidName { .. })
    ));

    // Unregister removes the index node after the record.
    reg.unregister("a").await.unwrap();
    assert!(store.get(&key).await.unwrap().is_none());

    // A crash between index and record: the node names a cluster without a
    // record. A later registration removes it after the grace period.
    store
        .put(
            &key,
            br#"{"cluster":"ghost","metadataServiceUri":"zk://zk1/ledgers"}"#,
            ExpectedVersion::NotExists,
        )
        .await
        .unwrap();
    reg.register("b", "zk://zk1:2181/ledgers", ClusterStatus::Standby)
        .await
        .unwrap();
    let node = store.get(&key).await.unwrap().unwrap();
    let json: serde_json::Value = serde_json::from_slice(&node.value).unwrap();
    assert_eq!(json["cluster"], "b");
    assert_eq!(
        reg.list()
            .await
            .unwrap()
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>(),
        ["b"]
    );

    // A crash of unregister between record and index: the record is gone, the
    // node stays. Another name can register the URI.
    store
        .delete(&format!("{}/b", reg.root()), ExpectedVersion::Any)
        .await
        .unwrap();
    reg.register("c", "zk://zk1/ledgers", ClusterStatus::Standby)
        .await
        .unwrap();

    // A node naming a cluster whose record now has another URI is stale at once.
    let other = format!("{index}/zk%3A%2F%2Fzk9%3A2181%2Fledgers");
    store
        .put(
            &other,
            br#"{"cluster":"c","metadataServiceUri":"zk://zk9/ledgers"}"#,
            ExpectedVersion::NotExists,
        )
        .await
        .unwrap();
    reg.register("d", "zk://zk9/ledgers", ClusterStatus::Standby)
        .await
        .unwrap();

    // A live owner keeps its key: refused, nothing changed.
    let before = snapshot(&*store, reg.root()).await;
    let e = reg
        .register("e", "zk://ZK9:2181/ledgers/", ClusterStatus::Standby)
        .await
        .unwrap_err();
    match e {
        RegistryError::UriCollision { existing, .. } => assert_eq!(existing, "d"),
        e => panic!("unexpected {e}"),
    }
    assert_eq!(before, snapshot(&*store, reg.root()).await);
    let names: Vec<_> = reg
        .list()
        .await
        .unwrap()
        .into_iter()
        .map(|r| r.name)
        .collect();
    assert_eq!(names, ["c", "d"]);
}

#[tokio::test]
async fn stale_uri_index_is_recovered_on_memory() {
    stale_index_scenario(Arc::new(MemoryStore::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_uri_index_is_recovered_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    stale_index_scenario(Arc::new(zk_store(&chroot).await)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn racing_register_active_and_promotions_keep_one_active_on_zookeeper() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let first = Registry::new(Arc::new(zk_store(&chroot).await));
    for i in 0..4 {
        first
            .register(
                &format!("c{i}"),
                &format!("memory://c{i}"),
                ClusterStatus::Standby,
            )
            .await
            .unwrap();
    }
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let checker = {
        let store = first.store().clone();
        let root = first.root().to_owned();
        let done = done.clone();
        tokio::spawn(async move {
            let mut snapshots = 0usize;
            while !done.load(std::sync::atomic::Ordering::Acquire) || snapshots < 10 {
                let s = consistent_statuses(&*store, &root).await;
                let active: Vec<_> = s
                    .iter()
                    .filter(|(_, st)| *st == ClusterStatus::Active)
                    .collect();
                assert!(active.len() <= 1, "ACTIVE records: {active:?}");
                snapshots += 1;
            }
            snapshots
        })
    };
    let barrier = Arc::new(tokio::sync::Barrier::new(6));
    let mut tasks = Vec::new();
    for i in 0..6 {
        let reg = Registry::new(Arc::new(zk_store(&chroot).await));
        let barrier = barrier.clone();
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            let mut registered_active = 0;
            for round in 0..3 {
                if i < 3 {
                    match reg
                        .register(
                            &format!("a{i}-{round}"),
                            &format!("memory://a{i}-{round}"),
                            ClusterStatus::Active,
                        )
                        .await
                    {
                        Ok(rec) => {
                            assert_eq!(rec.status, ClusterStatus::Active);
                            registered_active += 1;
                        }
                        Err(RegistryError::AnotherActive { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                } else {
                    let target = format!("c{}", (i + round) % 4);
                    match reg.promote_active(&target).await {
                        Ok(()) | Err(RegistryError::Deprecated { .. }) => {}
                        Err(e) => panic!("{e}"),
                    }
                }
            }
            reg.store().close().await.unwrap();
            registered_active
        }));
    }
    let mut registered_active = 0;
    for t in tasks {
        registered_active += t.await.unwrap();
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let snapshots = checker.await.unwrap();
    assert!(snapshots >= 10);
    // Only the first ACTIVE registration can find no ACTIVE cluster.
    assert!(registered_active <= 1, "{registered_active}");
    let s = consistent_statuses(&**first.store(), first.root()).await;
    let active: Vec<_> = s
        .iter()
        .filter(|(_, st)| *st == ClusterStatus::Active)
        .map(|(n, _)| n.clone())
        .collect();
    assert_eq!(active.len(), 1, "{s:?}");
    assert_eq!(first.active().await.unwrap(), Some(active[0].clone()));
    // Refused ACTIVE registrations left no record behind.
    let names: Vec<_> = s.iter().map(|(n, _)| n.clone()).collect();
    let a_records = names.iter().filter(|n| n.starts_with('a')).count();
    assert_eq!(a_records, registered_active, "{names:?}");
}

/// One rule for override prefixes, so that a prefix scopes managed ledgers
/// (`tenant/ns/persistent/topic`) and schemas (`tenant/ns/topic`, no domain
/// segment) alike: the tenant, namespace and domain segments end with `/`;
/// only the topic name may be a partial prefix. A prefix that stops inside
/// the domain segment (`t/ns/pers`), names a non-domain third segment
/// (`t/ns/orders-`) or omits the domain's `/` is refused, naming the prefix
/// and what to use, with nothing written.
#[tokio::test]
async fn override_prefixes_end_on_a_segment_boundary_up_to_the_topic() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let reg = Registry::new(store.clone());
    reg.register("a", "memory://a", ClusterStatus::Active)
        .await
        .unwrap();
    reg.register("b", "memory://b", ClusterStatus::Standby)
        .await
        .unwrap();
    let before = snapshot(store.as_ref(), "/admin").await;
    for (prefix, advice) in [
        ("t/ns/pers", "`t/ns/persistent/`"),
        ("t/ns/p", "`t/ns/persistent/`"),
        ("t/ns/persistent", "`t/ns/persistent/`"),
        ("t/ns/non-persistent", "`t/ns/non-persistent/`"),
        ("t/ns/orders-", "`t/ns/persistent/orders-`"),
        ("t/ns", "`t/ns/`"),
    ] {
        let e = reg
            .set_prefix_override(prefix, "b", None, 0)
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert!(
            matches!(e, RegistryError::InvalidPrefix { .. })
                && msg.contains(&format!("`{prefix}`"))
                && msg.contains(advice),
            "{prefix}: {msg}"
        );
        assert_eq!(snapshot(store.as_ref(), "/admin").await, before, "{prefix}");
    }
    for prefix in [
        "t/ns/",
        "t/ns/persistent/",
        "t/ns/persistent/orders-",
        "t/ns/non-persistent/x",
    ] {
        reg.set_prefix_override(prefix, "b", None, 0).await.unwrap();
    }
}
