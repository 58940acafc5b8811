//! A start deletes only what a migration may own, refuses a target that
//! overlaps the source or someone else's metadata (compared by identity, not
//! spelling), and writes nothing when it refuses: in memory, and on real
//! ZooKeeper and etcd servers.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_migration::{
    Coordinator, MigrationRequest, NamedMemoryStores, Phase, ProtectedRoot, StoreLocation,
    StoreOpener,
};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataStore, MetadataStoreExt,
};
use common::*;

/// Every node under `root` (itself included): value, version, child version
/// and number of children.
async fn subtree(
    store: &dyn MetadataStore,
    root: &str,
) -> BTreeMap<String, (Vec<u8>, i64, i64, i64)> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        if p == "/zookeeper" {
            continue;
        }
        if let Some(r) = store.get(&p).await.expect("get") {
            out.insert(
                p.clone(),
                (
                    r.value,
                    r.stat.version,
                    r.stat.cversion,
                    r.stat.num_children,
                ),
            );
        }
        if let Ok(children) = store.children(&p).await {
            for c in children {
                stack.push(if p == "/" {
                    format!("/{c}")
                } else {
                    format!("{p}/{c}")
                });
            }
        }
    }
    out
}

fn request(source: &str, target: &str, wipe: Option<&str>) -> MigrationRequest {
    MigrationRequest {
        id: None,
        source_url: source.to_owned(),
        target_url: target.to_owned(),
        wipe_target: wipe.map(str::to_owned),
        protected: Vec::new(),
    }
}

async fn refused(
    source: Arc<dyn MetadataStore>,
    opener: &dyn StoreOpener,
    request: MigrationRequest,
) -> String {
    let target = request.target_url.clone();
    match Coordinator::start(source, opener, request, coordinator_options()).await {
        Ok(c) => panic!("a start to {target} was accepted: {:?}", c.record()),
        Err(e) => {
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{target}: {e}");
            let msg = e.to_string();
            assert!(msg.contains(&target), "{msg}");
            msg
        }
    }
}

/// Lays out what BookKeeper writes at `root` (its layout node and instance
/// id), as ZooKeeper (`upper`) or etcd name them.
async fn bookkeeper_root(store: &dyn MetadataStore, root: &str, upper: bool) {
    let (layout, instance) = if upper {
        ("LAYOUT", "INSTANCEID")
    } else {
        ("layout", "instanceid")
    };
    store
        .put(
            &format!("{root}/{layout}"),
            b"2\norg.apache.bookkeeper.meta.HierarchicalLedgerManagerFactory:1\n",
            ExpectedVersion::Any,
        )
        .await
        .expect("layout");
    store
        .put(
            &format!("{root}/{instance}"),
            b"5d2c7f0e-bk",
            ExpectedVersion::Any,
        )
        .await
        .expect("instance id");
    store
        .put(
            &format!("{root}/00/0000/L0001"),
            b"ledger",
            ExpectedVersion::Any,
        )
        .await
        .expect("ledger");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wipe_is_confirmed_by_naming_the_root_and_lists_what_it_deletes() {
    let stores = NamedMemoryStores::new();
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    populate(src.as_ref(), 10, 10).await;
    let dst = stores.session("dst");
    dst.put("/stale/a/b", b"x", ExpectedVersion::Any)
        .await
        .unwrap();
    dst.put("/other", b"y", ExpectedVersion::Any).await.unwrap();
    let before_src = subtree(src.as_ref(), "/").await;
    let before_dst = subtree(&dst, "/").await;

    // The plan (a dry run) lists every subtree, its size, and the root.
    let plan = Coordinator::plan(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://dst", None),
    )
    .await
    .expect("plan");
    let t = plan.target().clone();
    assert_eq!(t.root, "/");
    let listed: Vec<(&str, u64, bool)> = t
        .entries
        .iter()
        .map(|e| (e.path.as_str(), e.nodes, e.deletable))
        .collect();
    assert_eq!(listed, [("/other", 1, true), ("/stale", 3, true)]);
    assert_eq!(t.nodes(), 4);
    plan.close().await;

    // Not confirmed, or confirmed with another root: refused, the refusal
    // lists what is there and says how to confirm.
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://dst", None),
    )
    .await;
    assert!(
        msg.contains("/stale (3 nodes") && msg.contains("wipeTarget `/`"),
        "{msg}"
    );
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://dst", Some("/pulsar")),
    )
    .await;
    assert!(msg.contains("does not name the target's root `/`"), "{msg}");
    assert_eq!(
        subtree(src.as_ref(), "/").await,
        before_src,
        "nothing written in the source"
    );
    assert_eq!(
        subtree(&dst, "/").await,
        before_dst,
        "nothing deleted in the target"
    );

    // Confirmed: exactly the listed subtrees go, the migration completes.
    let mut c = Coordinator::start(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://dst", Some("/")),
        coordinator_options(),
    )
    .await
    .expect("start");
    assert!(c.record().wipe_target);
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    assert!(dst.exists("/stale").await.unwrap().is_none());
    assert_same_tree(src.as_ref(), &dst).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_migration_does_not_own_is_never_wiped() {
    let stores = NamedMemoryStores::new();
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    populate(src.as_ref(), 5, 5).await;
    let before_src = subtree(src.as_ref(), "/").await;

    // BookKeeper's metadata, as on ZooKeeper and as on etcd.
    for (name, upper) in [("bkzk", true), ("bketcd", false)] {
        let dst = stores.session(name);
        bookkeeper_root(&dst, "/ledgers", upper).await;
        dst.put("/stale", b"x", ExpectedVersion::Any).await.unwrap();
        let before = subtree(&dst, "/").await;
        let url = format!("memory://{name}");
        for wipe in [None, Some("/")] {
            let msg = refused(
                src.clone(),
                opener.as_ref(),
                request("memory://src", &url, wipe),
            )
            .await;
            assert!(
                msg.contains("BookKeeper ledger metadata at /ledgers")
                    && msg.contains("instance id 5d2c7f0e-bk")
                    && !msg.contains("wipeTarget"),
                "the refusal names whose it is and never advises a wipe: {msg}"
            );
        }
        assert_eq!(subtree(&dst, "/").await, before, "{name} untouched");
    }

    // The target's root is BookKeeper's own (its layout node right below).
    let bkroot = stores.session("bkroot");
    bookkeeper_root(&bkroot, "", true).await;
    let before = subtree(&bkroot, "/").await;
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://bkroot", Some("/")),
    )
    .await;
    assert!(msg.contains("the target's root itself"), "{msg}");
    assert_eq!(subtree(&bkroot, "/").await, before);

    // A tree other nodes still use (participants registered in it), even
    // below the target's root.
    let used = stores.session("used");
    used.create(
        "/app/admin/metadata-migration/participants/n1",
        b"{}",
        CreateMode::EPHEMERAL,
    )
    .await
    .unwrap();
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://used", Some("/")),
    )
    .await;
    assert!(
        msg.contains("in use at /app") && msg.contains("n1"),
        "{msg}"
    );
    assert!(used
        .exists("/app/admin/metadata-migration/participants/n1")
        .await
        .unwrap()
        .is_some());

    // The source under another spelling, and a bookie cluster's root.
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://SRC", Some("/")),
    )
    .await;
    assert!(msg.contains("is the source store"), "{msg}");
    let empty = stores.session("bk-cluster");
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        MigrationRequest {
            protected: vec![ProtectedRoot {
                url: "memory://Bk-Cluster".to_owned(),
                owner: "bookie cluster `old`".to_owned(),
            }],
            ..request("memory://src", "memory://bk-cluster", None)
        },
    )
    .await;
    assert!(msg.contains("bookie cluster `old`"), "{msg}");
    assert!(empty.children("/").await.unwrap().is_empty());
    assert_eq!(
        subtree(src.as_ref(), "/").await,
        before_src,
        "nothing written in the source"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_changed_after_its_plan_is_not_wiped() {
    let stores = NamedMemoryStores::new();
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    let dst = stores.session("dst");
    dst.put("/stale", b"x", ExpectedVersion::Any).await.unwrap();
    let plan = Coordinator::plan(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://dst", Some("/")),
    )
    .await
    .expect("plan");
    plan.check_wipe().expect("confirmed");
    // Meanwhile BookKeeper starts using the store.
    bookkeeper_root(&dst, "/ledgers", true).await;
    let e = plan
        .start(coordinator_options())
        .await
        .expect_err("changed");
    assert!(
        e.to_string().contains("changed since it was checked"),
        "{e}"
    );
    assert!(dst.exists("/stale").await.unwrap().is_some());
    assert!(dst.exists("/ledgers/LAYOUT").await.unwrap().is_some());
    assert!(
        src.children("/").await.unwrap().is_empty(),
        "nothing written in the source"
    );
}

// ---- real servers --------------------------------------------------------

/// The root of a store URL.
fn root(url: &str) -> String {
    StoreLocation::parse(url).expect("url").root
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_overlap_is_refused_in_every_spelling_and_nothing_is_written() {
    let zk = bkswitch_zk_harness::shared();
    let port = zk.port();
    let n = nonce();
    let source_url = format!("zk://127.0.0.1:{port}/src-{n}");
    let opener = url_opener();
    let whole = opener
        .open(&format!("zk://127.0.0.1:{port}"))
        .await
        .expect("zk");
    let src = opener.open(&source_url).await.expect("src");
    populate(src.as_ref(), 5, 5).await;
    let before = subtree(whole.as_ref(), &format!("/src-{n}")).await;
    for target in [
        format!("zk://localhost:{port}/src-{n}"),
        format!("zk://LOCALHOST:{port}/src-{n}/nested"),
        format!("zk://127.0.0.1:{port}/src-{n}/a/b"),
        format!("zk://127.0.0.1:{port}"),
        format!("zk://127.0.0.1:{port}/"),
        format!("zk://127.0.0.2:1,127.0.0.1:{port}/src-{n}"),
        format!("zk://[::1]:{port}/src-{n}"),
    ] {
        let msg = refused(
            src.clone(),
            opener.as_ref(),
            request(&source_url, &target, Some(&root(&target))),
        )
        .await;
        assert!(
            msg.contains("overlap the source") || msg.contains("source store"),
            "{msg}"
        );
    }
    // A trailing slash after a chroot is not a URL ZooKeeper takes: refused
    // as malformed, before anything.
    let bad = format!("zk://127.0.0.1:{port}/src-{n}/");
    refused(
        src.clone(),
        opener.as_ref(),
        request(&source_url, &bad, None),
    )
    .await;
    assert_eq!(
        subtree(whole.as_ref(), &format!("/src-{n}")).await,
        before,
        "the source is untouched"
    );
    assert!(whole
        .exists(&format!("/src-{n}/nested"))
        .await
        .unwrap()
        .is_none());

    // ZooKeeper → ZooKeeper on the same ensemble, a root of its own: fine,
    // and the old content of that root is wiped only when named.
    let target = format!("zk://localhost:{port}/dst-{n}");
    whole
        .put(&format!("/dst-{n}/old/x"), b"x", ExpectedVersion::Any)
        .await
        .unwrap();
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request(&source_url, &target, Some("/")),
    )
    .await;
    assert!(msg.contains(&format!("`/dst-{n}`")), "{msg}");
    let mut c = Coordinator::start(
        src.clone(),
        opener.as_ref(),
        request(&source_url, &target, Some(&format!("/dst-{n}"))),
        coordinator_options(),
    )
    .await
    .expect("start");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    assert!(whole
        .exists(&format!("/dst-{n}/old"))
        .await
        .unwrap()
        .is_none());
    let dst = opener.open(&target).await.expect("dst");
    assert_same_tree(src.as_ref(), dst.as_ref()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn etcd_overlap_is_refused_in_every_spelling_and_nothing_is_written() {
    let etcd = bkswitch_etcd_harness::shared();
    let n = nonce();
    let source_url = etcd.url(&format!("/src-{n}"));
    let loc = StoreLocation::parse(&source_url).expect("url");
    let port = loc.servers[0].1;
    let opener = url_opener();
    let whole = opener.open(&etcd.url("")).await.expect("etcd");
    let src = opener.open(&source_url).await.expect("src");
    populate(src.as_ref(), 5, 5).await;
    let before = subtree(whole.as_ref(), &format!("/src-{n}")).await;
    for target in [
        format!("etcd://localhost:{port}/src-{n}"),
        format!("etcd://127.0.0.1:{port}/src-{n}/nested"),
        format!("etcd://127.0.0.1:{port}"),
        format!("etcd://127.0.0.3:1,LocalHost:{port}/src-{n}"),
    ] {
        let msg = refused(
            src.clone(),
            opener.as_ref(),
            request(&source_url, &target, Some(&root(&target))),
        )
        .await;
        assert!(
            msg.contains("overlap the source") || msg.contains("source store"),
            "{msg}"
        );
    }
    // A malformed URL is an input error, not an unreachable store.
    refused(
        src.clone(),
        opener.as_ref(),
        request(&source_url, &format!("etcd://127.0.0.1 :{port}/x"), None),
    )
    .await;
    assert_eq!(
        subtree(whole.as_ref(), &format!("/src-{n}")).await,
        before,
        "the source is untouched"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_way_back_into_a_zookeeper_root_holding_bookkeeper_metadata_is_refused() {
    let zk = bkswitch_zk_harness::shared();
    let port = zk.port();
    let etcd = bkswitch_etcd_harness::shared();
    let n = nonce();
    let opener = url_opener();
    // The way back: etcd → the ZooKeeper root the metadata came from, where
    // BookKeeper keeps its ledgers and the old tree was left behind.
    let source_url = etcd.url(&format!("/moved-{n}"));
    let src = opener.open(&source_url).await.expect("etcd");
    populate(src.as_ref(), 5, 5).await;
    let whole = opener
        .open(&format!("zk://127.0.0.1:{port}"))
        .await
        .expect("zk");
    bookkeeper_root(whole.as_ref(), &format!("/back-{n}/ledgers"), true).await;
    whole
        .put(
            &format!("/back-{n}/managed-ledgers/old"),
            b"x",
            ExpectedVersion::Any,
        )
        .await
        .unwrap();
    let before = subtree(whole.as_ref(), &format!("/back-{n}")).await;
    let target = format!("zk://localhost:{port}/back-{n}");
    for wipe in [None, Some(format!("/back-{n}"))] {
        let msg = refused(
            src.clone(),
            opener.as_ref(),
            request(&source_url, &target, wipe.as_deref()),
        )
        .await;
        assert!(
            msg.contains("BookKeeper ledger metadata") && msg.contains("5d2c7f0e-bk"),
            "{msg}"
        );
        assert!(
            !msg.contains("wipeTarget"),
            "never advises a wipe it refuses: {msg}"
        );
    }
    // A bookie cluster registered on that root: refused from the URLs alone.
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        MigrationRequest {
            protected: vec![ProtectedRoot {
                url: format!("zk://127.0.0.1:{port}/back-{n}/ledgers"),
                owner: "bookie cluster `old`".to_owned(),
            }],
            ..request(
                &source_url,
                &format!("zk://127.0.0.1:{port}/back-{n}/ledgers/sub"),
                None,
            )
        },
    )
    .await;
    assert!(
        msg.contains("lies inside the metadata root of bookie cluster `old`"),
        "{msg}"
    );
    assert_eq!(
        subtree(whole.as_ref(), &format!("/back-{n}")).await,
        before,
        "BookKeeper's metadata untouched"
    );
    assert!(whole
        .exists(&format!("/back-{n}/ledgers/sub"))
        .await
        .unwrap()
        .is_none());
    // No cluster registered: BookKeeper's root recognised all the same, as
    // the target's root itself and as an ancestor of it (read without a
    // chroot: opening the target would create its chroot inside).
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request(
            &source_url,
            &format!("zk://127.0.0.1:{port}/back-{n}/ledgers"),
            Some(&format!("/back-{n}/ledgers")),
        ),
    )
    .await;
    assert!(
        msg.contains("BookKeeper ledger metadata") && msg.contains("the target's root itself"),
        "{msg}"
    );
    let msg = refused(
        src.clone(),
        opener.as_ref(),
        request(
            &source_url,
            &format!("zk://localhost:{port}/back-{n}/ledgers/pulsar/x"),
            None,
        ),
    )
    .await;
    assert!(
        msg.contains(&format!(
            "lies inside BookKeeper ledger metadata at /back-{n}/ledgers"
        )),
        "{msg}"
    );
    assert!(whole
        .exists(&format!("/back-{n}/ledgers/pulsar"))
        .await
        .unwrap()
        .is_none());
    assert_eq!(subtree(whole.as_ref(), &format!("/back-{n}")).await, before);

    // BookKeeper's etcd layout under an etcd target is recognised too.
    let bk_etcd = etcd.url(&format!("/bk-{n}"));
    let t = opener.open(&bk_etcd).await.expect("etcd target");
    bookkeeper_root(t.as_ref(), "/ledgers", false).await;
    let zk_source = format!("zk://127.0.0.1:{port}/src-{n}");
    let zsrc = opener.open(&zk_source).await.expect("zk source");
    let msg = refused(
        zsrc.clone(),
        opener.as_ref(),
        request(&zk_source, &bk_etcd, Some(&format!("/bk-{n}"))),
    )
    .await;
    assert!(
        msg.contains("BookKeeper ledger metadata at /ledgers"),
        "{msg}"
    );
    assert!(t.exists("/ledgers/layout").await.unwrap().is_some());
    let _ = whole.delete_recursive(&format!("/back-{n}")).await;
}

/// The way back into the store a migration left: the wipe keeps that
/// migration's pointer, so a node started meanwhile with the old URL
/// follows it to where the data is and moves back with the others; the
/// pointer goes before the flip, so nobody follows it again afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_way_back_keeps_the_pointer_until_the_flip() {
    let stores = NamedMemoryStores::new();
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    populate(src.as_ref(), 10, 10).await;
    let a = participant(opener.clone(), "memory://src", "a").await;
    let mut c = Coordinator::start(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "memory://dst", None),
        coordinator_options(),
    )
    .await
    .expect("start");
    assert_eq!(c.run().await.expect("run").phase, Phase::Completed);
    wait_swapped(&[&a], "memory://dst").await;

    // Back to `src`: its old tree is listed (not its control tree) and wiped.
    let dst: Arc<dyn MetadataStore> = Arc::new(stores.session("dst"));
    let plan = Coordinator::plan(
        dst.clone(),
        opener.as_ref(),
        request("memory://dst", "memory://src", Some("/")),
    )
    .await
    .expect("plan");
    assert!(plan
        .target()
        .entries
        .iter()
        .all(|e| e.path != "/admin" || e.nodes == 0));
    plan.close().await;
    let mut back = Coordinator::start(
        dst.clone(),
        opener.as_ref(),
        request("memory://dst", "memory://src", Some("/")),
        coordinator_options(),
    )
    .await
    .expect("start back");
    // A node started now with the old URL follows the pointer to `dst` and
    // takes part in the way back.
    let late = participant(opener.clone(), "memory://src", "late").await;
    assert_eq!(late.url(), "memory://dst");
    late.put("/late/write", b"kept", ExpectedVersion::Any)
        .await
        .expect("write");
    assert_eq!(back.run().await.expect("run back").phase, Phase::Completed);
    wait_swapped(&[&a, &late], "memory://src").await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        a.url(),
        "memory://src",
        "nobody follows an old pointer again"
    );
    assert_eq!(late.url(), "memory://src");
    let s = stores.session("src");
    assert_eq!(
        s.get("/late/write").await.unwrap().expect("moved").value,
        b"kept"
    );
    assert!(s
        .get(bkswitch_metadata_migration::CURRENT_PATH)
        .await
        .unwrap()
        .is_none());
    // And a node started with the new URL uses it.
    let fresh = participant(opener.clone(), "memory://src", "fresh").await;
    assert_eq!(fresh.url(), "memory://src");
}

/// A well-formed target that cannot be reached is "unavailable" (retry),
/// within the start's own bound, and nothing is written; a malformed one is
/// an input error at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_target_is_unavailable_within_the_bound() {
    let stores = NamedMemoryStores::new();
    let src: Arc<dyn MetadataStore> = Arc::new(stores.session("src"));
    let opener = url_opener();
    // Nothing listens on port 1.
    let started = std::time::Instant::now();
    let e = Coordinator::plan(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "zk://127.0.0.1:1/x", None),
    )
    .await
    .expect_err("unreachable");
    assert_eq!(e.kind(), ErrorKind::Unavailable, "{e}");
    assert!(e.to_string().contains("Nothing was written"), "{e}");
    assert!(
        started.elapsed() < bkswitch_metadata_migration::OPEN_TIMEOUT + Duration::from_secs(5),
        "{:?}",
        started.elapsed()
    );
    let e = Coordinator::plan(
        src.clone(),
        opener.as_ref(),
        request("memory://src", "etcd://127.0.0.1 :1/x", None),
    )
    .await
    .expect_err("malformed");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(src.children("/").await.unwrap().is_empty());
}
