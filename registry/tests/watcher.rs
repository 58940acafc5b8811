//! The registry watcher on the in-memory store and on real ZooKeeper.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::{MemoryStore, MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_registry::{ClusterStatus, Registry, RegistryEvent, RegistryWatcher};
use bkswitch_zk_harness::ZkServer;

const WAIT: Duration = Duration::from_secs(15);

fn options() -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(2),
        operation_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(10),
        ..ZkStoreOptions::default()
    }
}

async fn zk_store(connect: &str, chroot: &str) -> ZkStore {
    ZkStore::connect(&format!("zk://{connect}{chroot}"), options())
        .await
        .unwrap()
}

/// Next event, failing the test when none comes in time.
async fn next(w: &mut RegistryWatcher) -> RegistryEvent {
    tokio::time::timeout(WAIT, w.next_event())
        .await
        .expect("no registry event in time")
        .expect("the watcher ended")
}

/// Skips events until a directive of `epoch` arrives; fails on an older or
/// repeated directive.
async fn directive(w: &mut RegistryWatcher, epoch: i64) -> RegistryEvent {
    loop {
        let e = next(w).await;
        if let RegistryEvent::Directive(d) = &e {
            assert!(d.epoch <= epoch, "unexpected newer directive {d:?}");
            if d.epoch == epoch {
                return e;
            }
        }
    }
}

#[tokio::test]
async fn memory_reports_records_and_directives_once() {
    let store = MemoryStore::new();
    let reg = Registry::new(Arc::new(store.clone()));
    reg.register("a", "memory://a", ClusterStatus::Active)
        .await
        .unwrap();
    let mut w = reg.watch().await.unwrap();
    match next(&mut w).await {
        RegistryEvent::ClusterAdded(r) => assert_eq!(r.name, "a"),
        e => panic!("unexpected {e:?}"),
    }
    assert!(w.try_next_event().is_none());

    reg.register("b", "memory://b", ClusterStatus::Standby)
        .await
        .unwrap();
    match next(&mut w).await {
        RegistryEvent::ClusterAdded(r) => assert_eq!(r.name, "b"),
        e => panic!("unexpected {e:?}"),
    }
    let d = reg.write_directive("b", Some("n1")).await.unwrap();
    match next(&mut w).await {
        RegistryEvent::Directive(got) => assert_eq!(got, d),
        e => panic!("unexpected {e:?}"),
    }
    // The same directive written again is not reported again.
    reg.write_directive("b", Some("n1")).await.unwrap();
    reg.promote_active("b").await.unwrap();
    let mut changed = Vec::new();
    while changed.len() < 2 {
        match next(&mut w).await {
            RegistryEvent::ClusterChanged(r) => changed.push((r.name, r.status)),
            RegistryEvent::Directive(d) => panic!("directive reported twice: {d:?}"),
            _ => {}
        }
    }
    assert!(changed.contains(&("a".to_owned(), ClusterStatus::Deprecated)));
    assert!(changed.contains(&("b".to_owned(), ClusterStatus::Active)));

    reg.register("c", "memory://c", ClusterStatus::Standby)
        .await
        .unwrap();
    match next(&mut w).await {
        RegistryEvent::ClusterAdded(r) => assert_eq!(r.name, "c"),
        e => panic!("unexpected {e:?}"),
    }
    reg.unregister("c").await.unwrap();
    assert_eq!(
        next(&mut w).await,
        RegistryEvent::ClusterRemoved("c".to_owned())
    );

    // A directive written by another session while this one expires.
    let other = Registry::new(Arc::new(store.new_session()));
    store.expire_session().unwrap();
    let d2 = other.write_directive("c2-missing", None).await;
    assert!(d2.is_err());
    other
        .register("d", "memory://d", ClusterStatus::Standby)
        .await
        .unwrap();
    let d2 = other.write_directive("d", None).await.unwrap();
    let mut resynced = false;
    let mut got = None;
    while got.is_none() || !resynced {
        match next(&mut w).await {
            RegistryEvent::Resynced => resynced = true,
            RegistryEvent::Directive(d) => {
                assert!(got.is_none(), "directive reported twice");
                got = Some(d);
            }
            _ => {}
        }
    }
    assert_eq!(got, Some(d2));

    store.close().await.unwrap();
    let end = tokio::time::timeout(WAIT, async { while w.next_event().await.is_some() {} }).await;
    assert!(end.is_ok(), "the watcher did not end with the store");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_nodes_all_see_one_directive() {
    let connect = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let admin = Registry::new(Arc::new(zk_store(&connect, &chroot).await));
    admin
        .register("old", "memory://old", ClusterStatus::Active)
        .await
        .unwrap();
    admin
        .register("new", "memory://new", ClusterStatus::Standby)
        .await
        .unwrap();
    let mut watchers = Vec::new();
    for _ in 0..3 {
        let reg = Registry::new(Arc::new(zk_store(&connect, &chroot).await));
        watchers.push((reg.watch().await.unwrap(), reg));
    }
    let d = admin.write_directive("new", Some("node-2")).await.unwrap();
    for (w, _) in &mut watchers {
        assert_eq!(
            directive(w, d.epoch).await,
            RegistryEvent::Directive(d.clone())
        );
    }
    for (_, reg) in &watchers {
        reg.store().close().await.unwrap();
    }
    admin.store().close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_directive_written_during_expiry_is_delivered() {
    let server = ZkServer::start();
    // The node's store is on a dedicated server that is wiped, so its session
    // expires.
    let node_store = Arc::new(zk_store(&server.connect_string(), "").await);
    let node = Registry::new(node_store.clone());
    node.register("old", "memory://old", ClusterStatus::Active)
        .await
        .unwrap();
    node.register("new", "memory://new", ClusterStatus::Standby)
        .await
        .unwrap();
    let mut w = node.watch().await.unwrap();
    let mut added = 0;
    while added < 2 {
        if let RegistryEvent::ClusterAdded(_) = next(&mut w).await {
            added += 1;
        }
    }

    server.restart_fresh();
    // The wiped server lost everything; an operator restores the registry and
    // writes a directive while the node is still waiting for its new session.
    let restorer = Registry::new(Arc::new(zk_store(&server.connect_string(), "").await));
    restorer
        .register("new", "memory://new", ClusterStatus::Standby)
        .await
        .unwrap();
    let d = restorer
        .write_directive("new", Some("node-1"))
        .await
        .unwrap();

    let mut resynced = false;
    let mut got = None;
    while got.is_none() || !resynced {
        match next(&mut w).await {
            RegistryEvent::Resynced => resynced = true,
            RegistryEvent::Directive(x) => {
                assert!(got.is_none(), "directive reported twice");
                got = Some(x);
            }
            _ => {}
        }
    }
    assert_eq!(got, Some(d));
    restorer.store().close().await.unwrap();
    node_store.close().await.unwrap();
}

/// Directives and registrations written back to back: a notification of the
/// directive alone reads only the directive, and nothing is lost — every
/// cluster is added, the directives come in increasing order and the last one
/// is reported.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zk_directives_and_records_interleaved_are_all_reported() {
    let connect = bkswitch_zk_harness::shared().connect_string();
    let chroot = bkswitch_zk_harness::unique_chroot();
    let admin = Registry::new(Arc::new(zk_store(&connect, &chroot).await));
    for (name, status) in [("a", ClusterStatus::Active), ("b", ClusterStatus::Standby)] {
        admin
            .register(name, &format!("memory://{name}"), status)
            .await
            .unwrap();
    }
    let reg = Registry::new(Arc::new(zk_store(&connect, &chroot).await));
    let mut w = reg.watch().await.unwrap();
    let mut last = None;
    for i in 0..10 {
        let target = if i % 2 == 0 { "b" } else { "a" };
        last = Some(admin.write_directive(target, None).await.unwrap());
        admin
            .register(
                &format!("c{i}"),
                &format!("memory://c{i}"),
                ClusterStatus::Standby,
            )
            .await
            .unwrap();
    }
    let last = last.unwrap();
    let mut added = std::collections::BTreeSet::new();
    let mut epoch = 0;
    while added.len() < 12 || epoch < last.epoch {
        match next(&mut w).await {
            RegistryEvent::ClusterAdded(r) => assert!(added.insert(r.name), "added twice"),
            RegistryEvent::Directive(d) => {
                assert!(d.epoch > epoch, "directive {} after {epoch}", d.epoch);
                epoch = d.epoch;
            }
            _ => {}
        }
    }
    assert_eq!(epoch, last.epoch);
    reg.store().close().await.unwrap();
    admin.store().close().await.unwrap();
}
