//! The conformance suite on a real ZooKeeper (one server for the whole test
//! binary, a fresh chroot per rule), directly and through `Arc<dyn
//! MetadataStore>`.

use std::time::Duration;

use bkswitch_metadata_store::testkit::ZkTestEnv;
use bkswitch_metadata_store::{
    ErrorKind, ExpectedVersion, MetadataStore, MetadataStoreExt, ZkStore, ZkStoreOptions,
};
use bkswitch_zk_harness::{shared, unique_chroot};

fn env() -> ZkTestEnv {
    ZkTestEnv::new(shared().connect_string())
}

mod zk {
    bkswitch_metadata_store::metadata_store_conformance_tests!(super::env());
}

mod zk_via_arc {
    use bkswitch_metadata_store::testkit::ViaArc;
    bkswitch_metadata_store::metadata_store_conformance_tests!(ViaArc(super::env()));
}

fn options() -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(5),
        operation_timeout: Duration::from_secs(5),
        ..ZkStoreOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chroot_is_created_and_isolates() {
    let server = shared();
    let base = unique_chroot();
    let deep = format!("{base}/a/b");
    let url = format!("zk://{}{deep}", server.connect_string());
    let store = ZkStore::connect(&url, options()).await.expect("connect");
    assert_eq!(store.url(), url);
    assert!(store.is_connected());
    assert_eq!(store.session_generation(), 1);
    store
        .put("/x", b"1", ExpectedVersion::Any)
        .await
        .expect("put");

    // The same data seen without the chroot.
    let root_url = format!("zk://{}", server.connect_string());
    let root = ZkStore::connect(&root_url, options())
        .await
        .expect("connect");
    let got = root
        .get(&format!("{deep}/x"))
        .await
        .expect("get")
        .expect("exists");
    assert_eq!(got.value, b"1");
    // The reserved subtree is not listed and cannot be written.
    assert!(!root
        .children("/")
        .await
        .expect("children")
        .contains(&"zookeeper".to_owned()));
    assert!(
        root.get("/zookeeper").await.expect("get").is_some(),
        "readable"
    );
    let e = root
        .put("/zookeeper/x", b"", ExpectedVersion::Any)
        .await
        .expect_err("reserved");
    assert_eq!(e.kind(), ErrorKind::InvalidPath);

    // A second chroot sees nothing of the first.
    let other = ZkStore::connect(
        &format!("zk://{}{base}/other", server.connect_string()),
        options(),
    )
    .await
    .expect("connect");
    assert!(other.get("/x").await.expect("get").is_none());

    root.delete_recursive(&base).await.expect("cleanup");
    for s in [store, root, other] {
        s.close().await.expect("close");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_urls_and_options_are_rejected_before_connecting() {
    let cs = shared().connect_string();
    for url in [
        "127.0.0.1:1",
        "zk://",
        "zk://h",
        "zk://h:1/a/",
        "zk://u@h:1",
    ] {
        let e = ZkStore::connect(url, options()).await.expect_err(url);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}: {e}");
        assert!(e.to_string().contains("zk://host:port"), "{e}");
    }
    let e = ZkStore::connect(
        &format!("zk://{cs}"),
        ZkStoreOptions {
            session_timeout: Duration::from_millis(500),
            ..options()
        },
    )
    .await
    .expect_err("too short a session");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("session_timeout"), "{e}");
}
