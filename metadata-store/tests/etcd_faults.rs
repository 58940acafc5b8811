//! `EtcdStore` beyond the conformance suite, on real etcd servers: the lease as
//! the session (revoked, expired while etcd is frozen under write load), watches
//! across a killed member and a compaction of etcd's history, paged children,
//! version import, Pulsar's key layout, and bad URLs.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_etcd_harness::{shared, unique_prefix, EtcdCluster};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, EtcdStore, EtcdStoreOptions, ExpectedVersion, MetadataStore,
    Notification, SessionEvent, WatchStream,
};
use futures::StreamExt;

fn options(session_secs: u64) -> EtcdStoreOptions {
    EtcdStoreOptions {
        session_timeout: Duration::from_secs(session_secs),
        operation_timeout: Duration::from_secs(10),
        connect_timeout: Duration::from_secs(20),
        ..EtcdStoreOptions::default()
    }
}

async fn next(w: &mut WatchStream, within: Duration) -> Notification {
    tokio::time::timeout(within, w.next())
        .await
        .unwrap_or_else(|_| panic!("no notification on {} within {within:?}", w.path()))
        .expect("stream ended")
}

/// Waits until `want` arrives, skipping anything else; returns what was skipped.
async fn wait_for(w: &mut WatchStream, want: &Notification, within: Duration) -> Vec<Notification> {
    let deadline = tokio::time::Instant::now() + within;
    let mut skipped = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        let n = next(w, left.max(Duration::from_millis(1))).await;
        if &n == want {
            return skipped;
        }
        skipped.push(n);
    }
}

async fn raw_client(endpoints: &str) -> etcd_client::Client {
    let eps: Vec<String> = endpoints
        .split(',')
        .map(|e| format!("http://{e}"))
        .collect();
    etcd_client::Client::connect(eps, None)
        .await
        .expect("raw client")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoked_lease_is_a_lost_session_and_a_new_lease_follows() {
    let url = shared().url(&unique_prefix());
    let a = EtcdStore::connect(&url, options(5)).await.expect("connect");
    let b = EtcdStore::connect(&url, options(5)).await.expect("connect");
    let (eph, _) = a
        .create("/e", b"mine", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    assert!(
        b.exists(&eph)
            .await
            .expect("exists")
            .expect("there")
            .ephemeral
    );
    let mut on_a = a.watch(&eph).await.expect("watch");
    let mut on_b = b.watch(&eph).await.expect("watch");
    let lease = a.lease_id();
    raw_client(&shared().endpoints())
        .await
        .lease_client()
        .revoke(lease)
        .await
        .expect("revoke");
    // The other session sees the node go.
    wait_for(
        &mut on_b,
        &Notification::Deleted { path: eph.clone() },
        Duration::from_secs(10),
    )
    .await;
    // The owner is told its session ended, then that a new one is up.
    wait_for(
        &mut on_a,
        &Notification::Session(SessionEvent::SessionExpired),
        Duration::from_secs(15),
    )
    .await;
    wait_for(
        &mut on_a,
        &Notification::Session(SessionEvent::SessionReestablished),
        Duration::from_secs(15),
    )
    .await;
    assert_eq!(a.session_generation(), 2);
    assert_ne!(a.lease_id(), lease);
    assert!(a.get(&eph).await.expect("get").is_none());
    // Ephemeral nodes work again on the new lease, and end with it.
    a.create("/e", b"again", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral on the new lease");
    a.close().await.expect("close");
    assert!(b.get("/e").await.expect("get").is_none(), "gone with close");
    b.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lease_expires_while_etcd_is_frozen_under_write_load() {
    let cluster = EtcdCluster::start(1);
    let url = cluster.url("/load");
    let owner = EtcdStore::connect(&url, options(2)).await.expect("connect");
    let writer = EtcdStore::connect(&url, options(30))
        .await
        .expect("connect");
    owner
        .create("/owner", b"", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    let mut w = owner.watch("/owner").await.expect("watch");
    // Writers keep etcd busy during the whole test.
    let stop = Arc::new(AtomicBool::new(false));
    let writes = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let (writer, stop, writes) = (writer.clone(), stop.clone(), writes.clone());
        tasks.push(tokio::spawn(async move {
            let path = format!("/load/{i}");
            while !stop.load(Ordering::Relaxed) {
                if writer.put(&path, b"x", ExpectedVersion::Any).await.is_ok() {
                    writes.fetch_add(1, Ordering::Relaxed);
                }
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    // Frozen for longer than the 2 s lease: the owner cannot renew it.
    cluster.pause(0);
    tokio::time::sleep(Duration::from_secs(5)).await;
    cluster.resume(0);
    let skipped = wait_for(
        &mut w,
        &Notification::Session(SessionEvent::SessionExpired),
        Duration::from_secs(30),
    )
    .await;
    assert!(
        skipped.contains(&Notification::Session(SessionEvent::ConnectionLost)),
        "the frozen server first shows as a lost connection: {skipped:?}"
    );
    let after = wait_for(
        &mut w,
        &Notification::Session(SessionEvent::SessionReestablished),
        Duration::from_secs(30),
    )
    .await;
    let deleted = Notification::Deleted {
        path: "/owner".to_owned(),
    };
    if !skipped.contains(&deleted) && !after.contains(&deleted) {
        wait_for(&mut w, &deleted, Duration::from_secs(10)).await;
    }
    assert!(writer.get("/owner").await.expect("get").is_none());
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.expect("writer");
    }
    assert!(writes.load(Ordering::Relaxed) > 0, "the load ran");
    owner.close().await.expect("close");
    writer.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_after_a_killed_member_and_a_compaction() {
    let cluster = EtcdCluster::start(3);
    let prefix = "/compact";
    // The watcher talks to member 0 only; the writer to the two others.
    let watcher = EtcdStore::connect(
        &format!("etcd://{}{prefix}", cluster.endpoint(0)),
        options(10),
    )
    .await
    .expect("connect");
    let writer_url = format!(
        "etcd://{},{}{prefix}",
        cluster.endpoint(1),
        cluster.endpoint(2)
    );
    let writer = EtcdStore::connect(&writer_url, options(10))
        .await
        .expect("connect");
    writer
        .put("/n", b"0", ExpectedVersion::Any)
        .await
        .expect("put");
    let mut w = watcher.watch("/n").await.expect("watch");
    writer
        .put("/n", b"1", ExpectedVersion::Any)
        .await
        .expect("put");
    wait_for(
        &mut w,
        &Notification::Modified {
            path: "/n".to_owned(),
        },
        Duration::from_secs(10),
    )
    .await;

    // Member 0 goes (whether it led or not); meanwhile the node changes and
    // etcd's history is compacted past what the watch saw.
    cluster.kill(0);
    for i in 2..20 {
        // A new leader may be being elected: retry what may be retried.
        let mut attempts = 0;
        loop {
            match writer
                .put("/n", i.to_string().as_bytes(), ExpectedVersion::Any)
                .await
            {
                Ok(_) => break,
                Err(e) if e.is_retryable() && attempts < 50 => {
                    attempts += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => panic!("put with a member down: {e}"),
            }
        }
    }
    let mut raw = raw_client(&format!("{},{}", cluster.endpoint(1), cluster.endpoint(2))).await;
    let rev = raw
        .get("x", None)
        .await
        .expect("revision")
        .header()
        .expect("header")
        .revision();
    raw.compact(rev, None).await.expect("compact");
    cluster.start_again(0);
    // The watch resumes, finds its revision compacted, re-reads: the last
    // change is reported.
    wait_for(
        &mut w,
        &Notification::Modified {
            path: "/n".to_owned(),
        },
        Duration::from_secs(60),
    )
    .await;
    let got = watcher.get("/n").await.expect("get").expect("exists");
    assert_eq!(got.value, b"19");
    assert_eq!(got.stat.version, 19);
    // And later changes still arrive.
    writer
        .delete("/n", ExpectedVersion::Exactly(19))
        .await
        .expect("delete");
    wait_for(
        &mut w,
        &Notification::Deleted {
            path: "/n".to_owned(),
        },
        Duration::from_secs(30),
    )
    .await;
    watcher.close().await.expect("close");
    writer.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn children_are_listed_in_pages_past_subtrees() {
    let url = shared().url(&unique_prefix());
    let store = EtcdStore::connect(
        &url,
        EtcdStoreOptions {
            children_page_size: 3,
            ..options(5)
        },
    )
    .await
    .expect("connect");
    let mut expected = Vec::new();
    for i in 0..12 {
        let child = format!("c{i:02}");
        store
            .put(&format!("/p/{child}"), b"", ExpectedVersion::Any)
            .await
            .expect("child");
        if i % 3 == 0 {
            // A subtree bigger than a page, and a sibling sorting inside it.
            for g in 0..5 {
                store
                    .put(&format!("/p/{child}/g{g}"), b"", ExpectedVersion::Any)
                    .await
                    .expect("grandchild");
            }
            let dash = format!("{child}-x");
            store
                .put(&format!("/p/{dash}"), b"", ExpectedVersion::Any)
                .await
                .expect("sibling");
            expected.push(dash);
        }
        expected.push(child);
    }
    expected.sort();
    assert_eq!(store.children("/p").await.expect("children"), expected);
    let stat = store.exists("/p").await.expect("exists").expect("there");
    assert_eq!(stat.num_children, expected.len() as i64);
    store.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn imported_versions_hold_for_conditional_writes() {
    let url = shared().url(&unique_prefix());
    let store = EtcdStore::connect(&url, options(5)).await.expect("connect");
    let stat = store
        .import_version("/m/ledger", b"v41", 41)
        .await
        .expect("import");
    assert_eq!(stat.version, 41);
    let e = store
        .import_version("/m/ledger", b"again", 7)
        .await
        .expect_err("exists");
    assert_eq!(e.kind(), ErrorKind::AlreadyExists);
    let e = store
        .import_version("/m/neg", b"", -2)
        .await
        .expect_err("negative");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("negative version"), "{e}");
    assert!(store.get("/m/neg").await.expect("get").is_none());
    // A holder of version 41 writes conditionally; a stale one loses.
    let e = store
        .put("/m/ledger", b"stale", ExpectedVersion::Exactly(40))
        .await
        .expect_err("stale");
    assert_eq!(e.kind(), ErrorKind::BadVersion);
    let stat = store
        .put("/m/ledger", b"v42", ExpectedVersion::Exactly(41))
        .await
        .expect("cas on the imported version");
    assert_eq!(stat.version, 42);
    let got = store.get("/m/ledger").await.expect("get").expect("there");
    assert_eq!((got.value.as_slice(), got.stat.version), (&b"v42"[..], 42));
    let e = store
        .delete("/m/ledger", ExpectedVersion::Exactly(41))
        .await
        .expect_err("stale delete");
    assert_eq!(e.kind(), ErrorKind::BadVersion);
    store
        .delete("/m/ledger", ExpectedVersion::Exactly(42))
        .await
        .expect("delete");
    // Re-created, it starts at 0 again.
    let stat = store
        .put("/m/ledger", b"", ExpectedVersion::NotExists)
        .await
        .expect("recreate");
    assert_eq!(stat.version, 0);
    store.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_are_stored_as_pulsar_stores_them() {
    let store = EtcdStore::connect(&shared().url(""), options(5))
        .await
        .expect("connect");
    let base = unique_prefix();
    let path = format!("{base}/managed-ledgers/t/ns/persistent/topic");
    let value = vec![0u8, 1, 2, 0xff, b'\n'];
    store
        .put(&path, &value, ExpectedVersion::Any)
        .await
        .expect("put");
    store
        .put(&path, &value, ExpectedVersion::Exactly(0))
        .await
        .expect("put");
    let mut raw = raw_client(&shared().endpoints()).await;
    let got = raw.get(path.as_bytes(), None).await.expect("raw get");
    let kv = &got.kvs()[0];
    assert_eq!(kv.value(), value.as_slice(), "value bytes as they are");
    assert_eq!(kv.version() - 1, 1, "Pulsar's version is etcd's - 1");
    // Pulsar's children listing (every key under `parent/`) sees only nodes.
    let parent = format!("{base}/managed-ledgers/t/ns/persistent/");
    let listed = raw
        .get(
            parent.as_bytes(),
            Some(
                etcd_client::GetOptions::new()
                    .with_prefix()
                    .with_keys_only(),
            ),
        )
        .await
        .expect("raw list");
    let keys: Vec<&[u8]> = listed.kvs().iter().map(|kv| kv.key()).collect();
    assert_eq!(keys, [path.as_bytes()]);
    // A value written the way Pulsar writes it (a bare put) reads back.
    let theirs = format!("{base}/schemas/t/ns/topic");
    raw.put(theirs.as_bytes(), b"schema-bytes".to_vec(), None)
        .await
        .expect("raw put");
    let got = store.get(&theirs).await.expect("get").expect("there");
    assert_eq!(got.value, b"schema-bytes");
    assert_eq!(got.stat.version, 0);
    assert_eq!(
        store
            .children(&format!("{base}/schemas/t"))
            .await
            .expect("children"),
        ["ns"],
        "children of a tree Pulsar wrote (no parent keys) are listed"
    );
    store.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_options_are_rejected_before_connecting() {
    for url in [
        "127.0.0.1:1",
        "etcd://",
        "etcd://h",
        "etcd://h:1/a/",
        "zk://h:1",
    ] {
        let e = EtcdStore::connect(url, options(5)).await.expect_err(url);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(e.to_string().contains("etcd://host:port"), "{e}");
    }
    let e = EtcdStore::connect(
        &shared().url(""),
        EtcdStoreOptions {
            session_timeout: Duration::from_millis(500),
            ..options(5)
        },
    )
    .await
    .expect_err("too short a lease");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("session_timeout"), "{e}");
    // Nobody listens: unavailable within the connect timeout, not a hang.
    let e = EtcdStore::connect(
        "etcd://127.0.0.1:1",
        EtcdStoreOptions {
            connect_timeout: Duration::from_secs(2),
            ..options(5)
        },
    )
    .await
    .expect_err("nobody there");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_resumes_from_its_revision_with_every_change_in_order() {
    let cluster = EtcdCluster::start(3);
    let prefix = "/resume";
    let watcher = EtcdStore::connect(
        &format!("etcd://{}{prefix}", cluster.endpoint(0)),
        options(10),
    )
    .await
    .expect("connect");
    let writer_url = format!(
        "etcd://{},{}{prefix}",
        cluster.endpoint(1),
        cluster.endpoint(2)
    );
    let writer = EtcdStore::connect(&writer_url, options(10))
        .await
        .expect("connect");
    let mut w = watcher.watch("/p").await.expect("watch");
    cluster.kill(0);
    // While the watcher's member is down: created, 3 writes, 2 children.
    let mut attempts = 0;
    while let Err(e) = writer.put("/p", b"0", ExpectedVersion::NotExists).await {
        assert!(e.is_retryable() && attempts < 50, "create: {e}");
        attempts += 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    for i in 1..=3 {
        writer
            .put(
                "/p",
                format!("{i}").as_bytes(),
                ExpectedVersion::Exactly(i - 1),
            )
            .await
            .expect("write");
    }
    writer
        .put("/p/a", b"", ExpectedVersion::Any)
        .await
        .expect("child");
    writer
        .delete("/p/a", ExpectedVersion::Any)
        .await
        .expect("child gone");
    cluster.start_again(0);
    let mut nodes = Vec::new();
    while nodes.len() < 6 {
        match next(&mut w, Duration::from_secs(60)).await {
            Notification::Session(_) => {}
            n => nodes.push(n),
        }
    }
    let p = "/p".to_owned();
    assert_eq!(
        nodes,
        [
            Notification::Created { path: p.clone() },
            Notification::Modified { path: p.clone() },
            Notification::Modified { path: p.clone() },
            Notification::Modified { path: p.clone() },
            Notification::ChildrenChanged { path: p.clone() },
            Notification::ChildrenChanged { path: p },
        ],
        "every change made while the member was down, in order"
    );
    watcher.close().await.expect("close");
    writer.close().await.expect("close");
}

/// A member that is down (killed, connections refused) is taken out of the
/// client's use: with a follower of three killed, every operation of a store
/// on the three endpoints succeeds at the first call — none is lost to the
/// dead member — and after it restarts the store keeps working.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_member_costs_no_operation() {
    let cluster = EtcdCluster::start(3);
    let store = EtcdStore::connect(&cluster.url("/failover"), options(10))
        .await
        .expect("connect");
    store
        .put("/p", b"", ExpectedVersion::Any)
        .await
        .expect("put");
    let leader = cluster.leader().expect("a leader");
    let follower = (leader + 1) % 3;
    cluster.kill(follower);
    let round = |i: usize| {
        let store = &store;
        async move {
            let v = i.to_string();
            store
                .put("/p/n", v.as_bytes(), ExpectedVersion::Any)
                .await
                .unwrap_or_else(|e| panic!("put {i} with a member down: {e}"));
            let got = store
                .get("/p/n")
                .await
                .unwrap_or_else(|e| panic!("get {i} with a member down: {e}"))
                .expect("exists");
            assert_eq!(got.value, v.as_bytes());
            store
                .create("/p/s-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
                .await
                .unwrap_or_else(|e| panic!("create {i} with a member down: {e}"));
            store
                .children("/p")
                .await
                .unwrap_or_else(|e| panic!("children {i} with a member down: {e}"));
        }
    };
    for i in 0..30 {
        round(i).await;
    }
    cluster.start_again(follower);
    for i in 30..45 {
        round(i).await;
    }
    assert_eq!(store.children("/p").await.expect("children").len(), 46);
    store.close().await.expect("close");
}

/// Concurrent writes of different nodes leave in shared requests (each a
/// nested transaction with its own compares): every write keeps its own
/// outcome and version, a conflict on one node fails only that write, and
/// two racing writes of one node never both win.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_writes_share_requests_and_keep_their_own_outcome() {
    let url = shared().url(&unique_prefix());
    let store = Arc::new(
        EtcdStore::connect(&url, options(10))
            .await
            .expect("connect"),
    );
    let lanes = 24;
    let rounds = 40;
    for i in 0..lanes {
        store
            .put(&format!("/w/n{i}"), b"0", ExpectedVersion::NotExists)
            .await
            .expect("seed");
    }
    let before = store.write_batches();

    // Every lane writes its own node with the version it last wrote.
    let lanes_done = futures::future::join_all((0..lanes).map(|i| {
        let store = store.clone();
        async move {
            let path = format!("/w/n{i}");
            let mut version = 0;
            for r in 0..rounds {
                let value = format!("{i}:{r}");
                let stat = store
                    .put(&path, value.as_bytes(), ExpectedVersion::Exactly(version))
                    .await
                    .unwrap_or_else(|e| panic!("{path} at version {version}: {e}"));
                assert_eq!(stat.version, version + 1, "{path}");
                assert!(!stat.ephemeral);
                version = stat.version;
            }
            version
        }
    }))
    .await;
    assert!(lanes_done.iter().all(|v| *v == rounds));
    for i in 0..lanes {
        let got = store.get(&format!("/w/n{i}")).await.unwrap().expect("node");
        assert_eq!(got.value, format!("{i}:{}", rounds - 1).as_bytes());
        assert_eq!(got.stat.version, rounds);
    }
    let after = store.write_batches();
    assert!(
        after.requests > before.requests && after.writes >= 2 * (after.requests - before.requests),
        "concurrent writes should have shared requests: {before:?} → {after:?}"
    );

    // Stale versions in the middle of a batch fail alone; racing writers of
    // one node: exactly one wins each version.
    let outcomes = futures::future::join_all((0..lanes).map(|i| {
        let store = store.clone();
        async move {
            let path = format!("/w/n{}", i / 2);
            let stale = i % 5 == 0;
            let expected = if stale { rounds - 1 } else { rounds };
            let r = store
                .put(&path, b"race", ExpectedVersion::Exactly(expected))
                .await;
            (i / 2, stale, r)
        }
    }))
    .await;
    let mut winners = std::collections::BTreeMap::new();
    for (node, stale, r) in outcomes {
        match r {
            Ok(stat) => {
                assert!(!stale, "a stale version won on /w/n{node}");
                assert_eq!(stat.version, rounds + 1);
                *winners.entry(node).or_insert(0) += 1;
            }
            Err(e) => assert_eq!(e.kind(), ErrorKind::BadVersion, "/w/n{node}: {e}"),
        }
    }
    for node in 0..lanes / 2 {
        let got = store.get(&format!("/w/n{node}")).await.unwrap().unwrap();
        let won = winners.get(&node).copied().unwrap_or(0);
        assert_eq!(won, 1, "/w/n{node}: one of its racing writers wins");
        assert_eq!(got.stat.version, rounds + won as i64, "/w/n{node}");
    }
    store.close().await.expect("close");
}

/// Concurrent reads of many nodes share read-only requests, and each gets
/// its own node back: value, version, children, the ephemeral flag, a missing
/// node as missing, the root, and values of the largest size side by side.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_reads_share_requests_and_each_gets_its_own_node() {
    let url = shared().url(&unique_prefix());
    let store = Arc::new(
        EtcdStore::connect(&url, options(10))
            .await
            .expect("connect"),
    );
    let nodes = 24;
    for i in 0..nodes {
        let path = format!("/r/n{i}");
        store
            .put(&path, format!("v{i}").as_bytes(), ExpectedVersion::Any)
            .await
            .expect("seed");
        for _ in 0..(i % 3) {
            store
                .put(&path, format!("v{i}").as_bytes(), ExpectedVersion::Any)
                .await
                .expect("rewrite");
        }
        for c in 0..(i % 4) {
            store
                .put(&format!("{path}/c{c}"), b"", ExpectedVersion::Any)
                .await
                .expect("child");
        }
    }
    store
        .create("/r/eph", b"e", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    let big = vec![b'x'; bkswitch_metadata_store::MAX_VALUE_LEN];
    for i in 0..4 {
        store
            .put(&format!("/r/big{i}"), &big, ExpectedVersion::Any)
            .await
            .expect("a value of the largest size");
    }
    let before = store.read_batches();
    for _ in 0..10 {
        let mut paths: Vec<String> = (0..nodes).map(|i| format!("/r/n{i}")).collect();
        paths.extend((0..4).map(|i| format!("/r/big{i}")));
        paths.extend(["/r/eph", "/r/missing", "/"].map(String::from));
        let got = futures::future::join_all(paths.iter().map(|p| {
            let store = store.clone();
            async move { store.get(p).await }
        }))
        .await;
        for (path, r) in paths.iter().zip(got) {
            let r = r.unwrap_or_else(|e| panic!("get {path}: {e}"));
            match path.as_str() {
                "/r/missing" => assert!(r.is_none(), "{path}: {r:?}"),
                "/" => {
                    let r = r.expect("the root");
                    assert_eq!(r.stat.num_children, 1, "the root has /r");
                }
                "/r/eph" => {
                    let r = r.expect("ephemeral");
                    assert_eq!(r.value, b"e");
                    assert!(r.stat.ephemeral);
                }
                p if p.starts_with("/r/big") => {
                    let r = r.expect("big");
                    assert_eq!(r.value.len(), big.len(), "{p}");
                    assert!(!r.stat.ephemeral);
                }
                p => {
                    let i: i64 = p["/r/n".len()..].parse().expect("index");
                    let r = r.unwrap_or_else(|| panic!("{p} missing"));
                    assert_eq!(r.value, format!("v{i}").as_bytes(), "{p}");
                    assert_eq!(r.stat.version, i % 3, "{p}");
                    assert_eq!(r.stat.num_children, i % 4, "{p}");
                    assert_eq!(r.stat.cversion, i % 4, "{p}");
                    assert!(!r.stat.ephemeral, "{p}");
                    assert!(r.stat.created_ms > 0 && r.stat.modified_ms >= r.stat.created_ms);
                }
            }
        }
    }
    let after = store.read_batches();
    assert!(
        after.requests > before.requests && after.reads >= 2 * (after.requests - before.requests),
        "concurrent reads should have shared requests: {before:?} → {after:?}"
    );
    store.close().await.expect("close");
}
