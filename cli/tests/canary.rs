//! A canary on a real ZooKeeper: two nodes, live traffic in two namespaces;
//! one namespace is moved to `new` first (a per-prefix override): only its
//! new ledgers land on `new`, its cursors are copied and promoted, the other
//! namespace stays on `old`, 0 publish failures. A cluster-wide switch is
//! to another cluster is refused while the override exists; removing it
//! rolls the namespace back; a cluster-wide switch to the canary's cluster
//! finishes the canary (the rest follows, the override is removed).

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::Node;
use bkswitch_cli::{TopicHandle, Traffic};
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};
use bkswitch_proto::Stamped;
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::Phase;
use common::*;

async fn zk(chroot: &str) -> Arc<dyn MetadataStore> {
    bkswitch_zk_harness::require_zk();
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

async fn open(node: &Node, name: &str) -> TopicHandle {
    let ledger = node.open_topic(name).await.unwrap();
    let cursor = ledger
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    TopicHandle { ledger, cursor }
}

fn last_ledger_stamp(h: &TopicHandle) -> Option<String> {
    h.ledger
        .metadata()
        .0
        .ledger_info
        .last()
        .and_then(|l| l.cluster_stamp().ok().flatten().map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_namespace_moves_first_and_back() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let clusters = clusters();
    let n1 = start("node-1", zk(&chroot).await, &clusters).await;
    let n2 = start("node-2", zk(&chroot).await, &clusters).await;
    n1.register_cluster("new", "memory://new", ClusterStatus::Standby)
        .await
        .unwrap();
    let canary: Vec<String> = (0..2)
        .map(|i| format!("tenant/canary/persistent/t{i}"))
        .collect();
    let rest: Vec<String> = (0..2)
        .map(|i| format!("tenant/rest/persistent/t{i}"))
        .collect();
    let mut h1 = Vec::new();
    let mut h2 = Vec::new();
    for (i, name) in canary.iter().chain(rest.iter()).enumerate() {
        let node = if i % 2 == 0 { &n1 } else { &n2 };
        let h = open(node, name).await;
        if i % 2 == 0 {
            h1.push(h);
        } else {
            h2.push(h);
        }
    }
    for name in canary.iter().chain(rest.iter()) {
        let id = name.replace("/persistent/", "/");
        n1.schemas().put(&id, b"v1", b"h1").await.unwrap();
    }
    let t1 = Traffic::start(&h1, 50, 64);
    let t2 = Traffic::start(&h2, 50, 64);
    tokio::time::sleep(Duration::from_millis(300)).await;

    // Bad input changes nothing: a prefix that names no namespace (400), an
    // unknown cluster (404).
    let admin = bkswitch_admin::AdminClient::new(n1.url(), ADMIN).unwrap();
    let before = tree(n1.registry().store().as_ref()).await;
    for (body, code) in [
        (r#"{"prefix":"tenant","cluster":"new"}"#, 400),
        (r#"{"prefix":"tenant/canary/","cluster":"ghost"}"#, 404),
    ] {
        let (got, answer) = raw(
            "POST",
            &format!("{}{BASE}/overrides", n1.url()),
            Some(ADMIN),
            Some(body.as_bytes()),
        )
        .await;
        assert_eq!(got, code, "{body}: {answer}");
    }
    assert_eq!(tree(n1.registry().store().as_ref()).await, before);

    let st = admin.set_override("tenant/canary/", "new").await.unwrap();
    assert_eq!(st.phase_name(), Some("BUILD"), "{:?}", st.raw());
    let canary_orch = n1.orchestrator().for_prefix("tenant/canary/");
    let deadline = Instant::now() + Duration::from_secs(60);
    let st = loop {
        let st = canary_orch.current_status().await.unwrap().unwrap();
        if st.phase.is_built() {
            break st;
        }
        assert!(Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert_eq!(st.phase, Phase::Switched, "{st:?}");
    assert_eq!(st.counts.failed, 0, "{st:?}");
    assert!(
        st.counts.built >= 4,
        "the canary's two cursors and two schemas: {st:?}"
    );
    for name in canary.iter().chain(rest.iter()) {
        let id = name.replace("/persistent/", "/");
        let (loc, _) = n1.schemas().locator(&id).await.unwrap().unwrap();
        let want = if name.starts_with("tenant/canary/") {
            "new"
        } else {
            "old"
        };
        assert_eq!(
            loc.info.position.cluster_stamp().unwrap(),
            Some(want),
            "{id}"
        );
        let s = n2.schemas().get_latest(&id).await.unwrap();
        assert_eq!(&s.data[..], b"v1");
    }

    // Every canary topic rolls onto `new`; the others stay on `old`.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let all: Vec<(String, Option<String>)> = h1
            .iter()
            .chain(h2.iter())
            .map(|h| (h.ledger.name().to_owned(), last_ledger_stamp(h)))
            .collect();
        let done = all.iter().all(|(name, stamp)| {
            let want = if name.starts_with("tenant/canary/") {
                "new"
            } else {
                "old"
            };
            stamp.as_deref() == Some(want)
        });
        if done {
            break;
        }
        assert!(Instant::now() < deadline, "{all:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for h in h1.iter().chain(h2.iter()) {
        let (info, _) = h.cursor.metadata().await;
        if info.cursors_ledger_id < 0 {
            continue;
        }
        let want = if h.ledger.name().starts_with("tenant/canary/") {
            "new"
        } else {
            "old"
        };
        assert_eq!(
            info.cluster_stamp().unwrap(),
            Some(want),
            "{}",
            h.ledger.name()
        );
    }
    assert_eq!(n1.storage().active_cluster().as_deref(), Some("old"));

    // A cluster-wide switch elsewhere is refused while the override exists.
    clusters
        .get_or_create("third")
        .advance_ledger_id_to(9_000_000)
        .unwrap();
    n1.register_cluster("third", "memory://third", ClusterStatus::Standby)
        .await
        .unwrap();
    let e = n1.start_switch("third").await.unwrap_err();
    assert!(e.to_string().contains("tenant/canary/"), "{e}");

    // Back: the reverse idgen step, then the override's removal rolls the
    // canary back.
    clusters
        .get("old")
        .unwrap()
        .advance_ledger_id_to(5_000_000)
        .unwrap();
    // The CLI shows it too.
    let argv = [
        "bookie-clusters",
        "--url",
        n1.url(),
        "--token",
        ADMIN,
        "list-overrides",
    ];
    let mut out = Vec::new();
    bkswitch_cli::cli::run(
        <bkswitch_cli::cli::Cli as clap::Parser>::try_parse_from(argv).unwrap(),
        &mut out,
    )
    .await
    .unwrap();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("tenant/canary/  new  SWITCHED"), "{text}");
    let list = admin.list_overrides().await.unwrap();
    assert_eq!(list[0]["prefix"], "tenant/canary/", "{list}");
    assert_eq!(list[0]["cluster"], "new", "{list}");
    assert_eq!(list[0]["switch"]["phase"], "SWITCHED", "{list}");
    let back = admin.remove_override("tenant/canary/").await.unwrap();
    assert_eq!(back.phase_name(), Some("ROLLED_BACK"), "{:?}", back.raw());
    assert!(n1.registry().prefix_overrides().await.unwrap().0.is_empty());
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h1
        .iter()
        .chain(h2.iter())
        .all(|h| last_ledger_stamp(h).as_deref() == Some("old"))
    {
        assert!(Instant::now() < deadline, "the canary did not come back");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Canary again, then the rest follows: a cluster-wide switch to the
    // canary's cluster finishes it (the override is removed).
    clusters
        .get("new")
        .unwrap()
        .advance_ledger_id_to(6_000_000)
        .unwrap();
    let again = admin.set_override("tenant/canary/", "new").await.unwrap();
    let id = again.switch_id().unwrap().to_owned();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !canary_orch.status(&id).await.unwrap().phase.is_built() {
        assert!(Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    admin.switch("new").await.unwrap();
    assert!(n1.registry().prefix_overrides().await.unwrap().0.is_empty());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = n1.orchestrator().current_status().await.unwrap().unwrap();
        if st.phase.is_built() {
            assert_eq!(st.phase, Phase::Switched, "{st:?}");
            assert_eq!(st.counts.failed, 0, "{st:?}");
            break;
        }
        assert!(Instant::now() < deadline, "{st:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while !h1
        .iter()
        .chain(h2.iter())
        .all(|h| last_ledger_stamp(h).as_deref() == Some("new"))
    {
        assert!(Instant::now() < deadline, "the rest did not follow");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The absorbed canary cannot be rolled back on its own any more.
    let e = admin.remove_override("tenant/canary/").await.unwrap_err();
    assert!(e.to_string().contains("absorbed"), "{e}");
    for t in [t1, t2] {
        let r = t.stop(Duration::from_secs(10)).await;
        assert_eq!(r.publish_failures, 0, "{:?}", r.first_publish_error);
        assert_eq!(r.consumer_gaps, 0);
        assert!(r.published > 0);
    }
    n1.stop().await;
    n2.stop().await;
}

/// A canary whose coordinator died in BUILD (here: it wrote the override and
/// the record, and never ran) is taken over by the elected leader within its
/// periodic duty interval, and reaches SWITCHED.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_takes_over_a_canary_left_in_build() {
    let chroot = bkswitch_zk_harness::unique_chroot();
    let clusters = clusters();
    let mut cfg = bkswitch_admin::testkit::node_config("node-1", zk(&chroot).await, &clusters);
    cfg.orchestrator = cfg
        .orchestrator
        .clone()
        .with_auto_cleanup(Duration::from_millis(100), 10);
    let n1 = Node::start(cfg).await.unwrap();
    n1.register_cluster("new", "memory://new", ClusterStatus::Standby)
        .await
        .unwrap();
    let h = open(&n1, "tenant/canary/persistent/t0").await;
    let p = h.ledger.append(&b"x"[..]).await.unwrap();
    h.cursor.mark_delete(p).await.unwrap();
    n1.schemas()
        .put("tenant/canary/t0", b"v1", b"h1")
        .await
        .unwrap();
    // A canary whose origin (`node-9`) never ran: started around the node's
    // verbs on purpose, as the test kit allows.
    let dead = bkswitch_admin::testkit::unchecked_orchestrator(&n1).for_prefix("tenant/canary/");
    let st = dead.start_switch("new", Some("node-9")).await.unwrap();
    assert_eq!(st.phase, Phase::Build);
    drop(dead);
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let now = n1
            .orchestrator()
            .for_prefix("tenant/canary/")
            .status(&st.switch_id)
            .await
            .unwrap();
        if now.phase == Phase::Switched {
            assert_eq!(now.counts.failed, 0, "{now:?}");
            assert!(now.counts.promoted >= 2, "{now:?}");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "nobody took the canary over: {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
