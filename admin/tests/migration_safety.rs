//! A metadata-migration start through a node: every refusal is decided
//! before the start lock is taken and leaves the whole source tree as it was
//! (data, versions, child versions); input errors are 400s naming the
//! field; a wipe is listed by a dry run and confirmed by naming the root.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::testkit::tree_with_child_versions;
use bkswitch_admin::{AdminClient, ClientError, MigrationHandle, Node};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_metadata_migration::{
    CoordinatorOptions, MigratingStore, NamedMemoryStores, ParticipantOptions,
};
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use common::{clusters, raw, ADMIN};

async fn node(id: &str, stores: &NamedMemoryStores, clusters: &MemoryClusters) -> Node {
    let p = MigratingStore::open(
        "memory://old",
        Arc::new(stores.clone()),
        ParticipantOptions {
            name: id.into(),
            poll_interval: Duration::from_millis(50),
            ..ParticipantOptions::default()
        },
    )
    .await
    .unwrap();
    let mut handle = MigrationHandle::new(p.clone());
    handle.coordinate = false;
    handle.coordinator = CoordinatorOptions {
        poll_interval: Duration::from_millis(10),
        ..CoordinatorOptions::default()
    };
    let cfg = bkswitch_admin::testkit::node_config(id, Arc::new(p), clusters);
    Node::start(cfg.with_migration(handle)).await.unwrap()
}

fn api(e: &ClientError) -> (u16, String) {
    match e {
        ClientError::Api {
            status, message, ..
        } => (*status, message.clone()),
        other => panic!("not an API error: {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn refused_starts_write_nothing_and_a_wipe_is_confirmed_by_its_root() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    let node = node("node-1", &stores, &clusters).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    let url = format!("{}/admin/v2/metadata/migration", node.url());
    let new = stores.session("new");
    new.put("/leftover/a", b"x", ExpectedVersion::Any)
        .await
        .unwrap();
    let bk = stores.session("bk");
    for (path, value) in [
        ("/ledgers/LAYOUT", &b"2\n"[..]),
        ("/ledgers/INSTANCEID", b"b1d0"),
        ("/ledgers/00/0000/L0001", b"ledger"),
    ] {
        bk.put(path, value, ExpectedVersion::Any).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = stores.session("old");
    let before = tree_with_child_versions(&old).await;
    let before_new = tree_with_child_versions(&new).await;
    let before_bk = tree_with_child_versions(&bk).await;

    // Input errors: 400 naming the field, before anything is opened.
    for (body, field, needle) in [
        (
            r#"{"targetUrl":"etcd://127.0.0.1 :22379/x"}"#,
            "targetUrl",
            "(targetUrl)",
        ),
        (r#"{"targetUrl":"bogus://x"}"#, "targetUrl", "bogus://x"),
        (r#"{"targetUrl":""}"#, "targetUrl", "empty"),
        (
            r#"{"targetUrl":"memory://OLD"}"#,
            "targetUrl",
            "source store",
        ),
        (
            r#"{"targetUrl":"memory://new","wipeTarget":true}"#,
            "wipeTarget",
            "must name the root",
        ),
        (
            r#"{"targetUrl":"memory://new"}"#,
            "targetUrl",
            "wipeTarget `/`",
        ),
        (
            r#"{"targetUrl":"memory://new","wipeTarget":"/pulsar"}"#,
            "targetUrl",
            "does not name the target's root",
        ),
        (
            r#"{"targetUrl":"memory://bk","wipeTarget":"/"}"#,
            "targetUrl",
            "BookKeeper ledger metadata at /ledgers (instance id b1d0)",
        ),
        (
            r#"{"targetUrl":"memory://bk","dryRun":true}"#,
            "targetUrl",
            "never deletes",
        ),
    ] {
        let (status, answer) = raw("POST", &url, Some(ADMIN), Some(body.as_bytes())).await;
        assert_eq!(status, 400, "{body}: {answer}");
        assert_eq!(answer["field"], field, "{body}: {answer}");
        let msg = answer["error"].as_str().unwrap_or_default().to_owned();
        assert!(msg.contains(needle), "{body}: {msg}");
        if body.contains("memory://bk") {
            assert!(
                !msg.contains("wipeTarget"),
                "never advises a refused wipe: {msg}"
            );
        }
        assert_eq!(
            tree_with_child_versions(&old).await,
            before,
            "{body}: the source tree changed (the start lock is taken only by a start that \
             proceeds)"
        );
    }
    assert_eq!(tree_with_child_versions(&new).await, before_new);
    assert_eq!(tree_with_child_versions(&bk).await, before_bk);

    // The dry run lists what a wipe deletes and the root that confirms it,
    // and writes nothing.
    let plan = admin.plan_migration("memory://new").await.unwrap();
    assert!(plan.dry_run);
    assert_eq!(plan.root, "/");
    assert_eq!(plan.nodes, 2);
    assert_eq!(plan.would_delete.len(), 1);
    assert_eq!(plan.would_delete[0].path, "/leftover");
    assert_eq!(tree_with_child_versions(&old).await, before);
    assert_eq!(tree_with_child_versions(&new).await, before_new);

    // Confirmed: the start goes through and the leftover goes.
    let started = admin
        .start_migration("memory://new", Some("/"))
        .await
        .unwrap();
    assert_eq!(started.phase, "PREPARATION");
    assert!(new.exists("/leftover").await.unwrap().is_none());

    // While it runs: another start is 409, refused before the lock too.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let running = tree_with_child_versions(&old).await;
    let (status, msg) = api(&admin
        .start_migration("memory://other", None)
        .await
        .unwrap_err());
    assert_eq!(status, 409, "{msg}");
    assert_eq!(tree_with_child_versions(&old).await, running);
    node.stop().await;
}

/// The library API refuses as REST does: an embedder calling the node gets
/// the same refusals, with nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_node_api_refuses_as_rest_does() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    let node = node("node-1", &stores, &clusters).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old: Arc<dyn MetadataStore> = Arc::new(stores.session("old"));
    let before = tree_with_child_versions(old.as_ref()).await;
    let e = node
        .start_metadata_migration("memory://old", Some("/"))
        .await
        .unwrap_err();
    assert!(
        matches!(e, bkswitch_admin::NodeError::InvalidMigration { .. }),
        "{e}"
    );
    let e = node
        .plan_metadata_migration("zk://h:1/a/")
        .await
        .unwrap_err();
    assert!(
        matches!(e, bkswitch_admin::NodeError::InvalidMigration { .. }),
        "{e}"
    );
    assert_eq!(tree_with_child_versions(old.as_ref()).await, before);
    node.stop().await;
}

/// The metadata roots of the registered bookie clusters are protected
/// whatever the spelling of their hosts: a target that holds one or lies
/// inside one is refused from the URLs alone, before anything is opened.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bookie_clusters_metadata_root_is_never_a_target() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    let node = node("node-1", &stores, &clusters).await;
    // Recorded as the registry records it (the probe needs real bookies;
    // what matters here is the URI).
    node.registry()
        .register(
            "bk",
            "zk+hierarchical://127.0.0.1:2181;localhost:2182/ledgers-bk",
            bkswitch_registry::ClusterStatus::Standby,
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let old = stores.session("old");
    let before = tree_with_child_versions(&old).await;
    for (target, needle) in [
        (
            "zk://localhost:2181",
            "holds (at /ledgers-bk) the metadata root of bookie cluster `bk`",
        ),
        (
            "zk://127.0.0.1:2182/ledgers-bk/pulsar",
            "lies inside the metadata root of bookie cluster `bk`",
        ),
        (
            "zk://[::1]:2181/ledgers-bk",
            "is the metadata root of bookie cluster `bk`",
        ),
    ] {
        let e = node
            .start_metadata_migration(target, Some("/"))
            .await
            .unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains(needle), "{target}: {msg}");
        assert_eq!(tree_with_child_versions(&old).await, before, "{target}");
    }
    node.stop().await;
}
