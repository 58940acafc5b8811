//! Digest authentication and ACLs on a real ZooKeeper: the nodes a store with
//! credentials creates carry `CREATOR_ALL_ACL`, clients without the
//! credentials or with a wrong password are refused with a clear error, and
//! the password is never printed.

use std::time::Duration;

use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataStore, Secret, ZkAuth, ZkStore, ZkStoreOptions,
};
use bkswitch_zk_harness::{shared, unique_chroot};
use zookeeper_async::{Permission, ZkError, ZooKeeper};

const PASSWORD: &str = "s3cret-Pa55";

fn options(auth: Option<(&str, &str)>) -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(5),
        operation_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(10),
        auth: auth.map(|(user, password)| ZkAuth::digest(user, Secret::new(password))),
        ..ZkStoreOptions::default()
    }
}

fn env() -> bkswitch_metadata_store::testkit::ZkTestEnv {
    bkswitch_metadata_store::testkit::ZkTestEnv::with_options(
        shared().connect_string(),
        options(Some(("suite", PASSWORD))),
    )
}

/// The whole conformance suite with credentials and `CREATOR_ALL_ACL` nodes.
mod zk_digest {
    bkswitch_metadata_store::metadata_store_conformance_tests!(super::env());
}

async fn value(store: &ZkStore, path: &str) -> Option<Vec<u8>> {
    store.get(path).await.expect("get").map(|r| r.value)
}

fn url(chroot: &str) -> String {
    format!("zk://{}{chroot}", shared().connect_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nodes_carry_the_creators_acl_and_others_are_refused() {
    let chroot = unique_chroot();
    let store = ZkStore::connect(&url(&chroot), options(Some(("bk", PASSWORD))))
        .await
        .expect("connect with credentials");
    store
        .put("/ledgers/a", b"v", ExpectedVersion::Any)
        .await
        .expect("put");
    store
        .create("/e", b"x", CreateMode::EPHEMERAL)
        .await
        .expect("create ephemeral");
    assert_eq!(value(&store, "/ledgers/a").await, Some(b"v".to_vec()));

    // A raw client without credentials can neither read the nodes nor their
    // ACL (ZooKeeper 3.8 needs READ or ADMIN for getACL).
    let raw = ZooKeeper::connect(&shared().connect_string(), Duration::from_secs(5), |_| {})
        .await
        .expect("raw client");
    let leaf = format!("{chroot}/ledgers/a");
    let denied = raw.get_data(&leaf, false).await;
    assert!(matches!(denied, Err(ZkError::NoAuth)), "{denied:?}");
    let denied = raw.set_data(&leaf, b"w".to_vec(), None).await;
    assert!(matches!(denied, Err(ZkError::NoAuth)), "{denied:?}");
    let denied = raw.get_acl(&leaf).await;
    assert!(matches!(denied, Err(ZkError::NoAuth)), "{denied:?}");

    // With the credentials: every node created (chroot, parents, nodes) has
    // one ACL entry, all rights to the digest id of `bk`.
    raw.add_auth("digest", format!("bk:{PASSWORD}").into_bytes())
        .await
        .expect("add_auth");
    for path in [
        chroot.clone(),
        format!("{chroot}/ledgers"),
        leaf.clone(),
        format!("{chroot}/e"),
    ] {
        let (acl, _) = raw.get_acl(&path).await.expect("get_acl");
        assert_eq!(acl.len(), 1, "{path}: {acl:?}");
        assert_eq!(acl[0].scheme, "digest", "{path}: {acl:?}");
        assert!(acl[0].id.starts_with("bk:"), "{path}: {acl:?}");
        assert_eq!(acl[0].perms, Permission::ALL, "{path}: {acl:?}");
    }

    // A store without credentials connects (the chroot exists) but is refused
    // on every read and write, with a PermissionDenied error.
    let anonymous = ZkStore::connect(&url(&chroot), options(None))
        .await
        .expect("connect without credentials");
    let e = anonymous.get("/ledgers/a").await.expect_err("read refused");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    assert!(!e.is_retryable());
    assert!(e.to_string().contains("without credentials"), "{e}");
    let e = anonymous
        .put("/ledgers/a", b"w", ExpectedVersion::Any)
        .await
        .expect_err("write refused");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    let e = anonymous
        .put("/ledgers/b", b"w", ExpectedVersion::Any)
        .await
        .expect_err("create refused");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    anonymous.close().await.expect("close");

    // The same user with a wrong password is refused at connect, clearly,
    // and the error shows neither password.
    let wrong = "wrong-Pa55";
    let e = ZkStore::connect(&url(&chroot), options(Some(("bk", wrong))))
        .await
        .expect_err("wrong password");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    let msg = format!("{e} {e:?}");
    assert!(
        msg.contains("`bk`") && msg.contains("wrong password"),
        "{msg}"
    );
    assert!(!msg.contains(wrong) && !msg.contains(PASSWORD), "{msg}");

    // Another user is refused too.
    let e = ZkStore::connect(&url(&chroot), options(Some(("other", PASSWORD))))
        .await
        .expect_err("other user");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");

    // The right credentials again: a second store reads what the first wrote.
    let again = ZkStore::connect(&url(&chroot), options(Some(("bk", PASSWORD))))
        .await
        .expect("reconnect with credentials");
    assert_eq!(value(&again, "/ledgers/a").await, Some(b"v".to_vec()));
    again.close().await.expect("close");
    store.close().await.expect("close");
    raw.close().await.expect("close raw");
}

#[test]
fn options_never_print_the_password() {
    let o = options(Some(("bk", PASSWORD)));
    let shown = format!("{o:?}");
    assert!(shown.contains("bk") && shown.contains("***"), "{shown}");
    assert!(!shown.contains(PASSWORD), "{shown}");
}

#[test]
fn digest_users_with_a_colon_are_refused() {
    let rt = tokio::runtime::Runtime::new().expect("runtime");
    let e = rt
        .block_on(ZkStore::connect(
            &url("/x"),
            options(Some(("a:b", PASSWORD))),
        ))
        .expect_err("bad user");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_are_sent_again_after_a_lost_connection() {
    // A restart of the server keeps the session (its data folder stays) but
    // drops the connection, and with it the credentials.
    let server = bkswitch_zk_harness::ZkServer::start();
    let url = format!("zk://{}{}", server.connect_string(), unique_chroot());
    let mut o = options(Some(("bk", PASSWORD)));
    o.session_timeout = Duration::from_secs(30);
    let store = ZkStore::connect(&url, o).await.expect("connect");
    store
        .put("/a", b"1", ExpectedVersion::Any)
        .await
        .expect("put");
    let generation = store.session_generation();
    server.stop();
    server.start_again();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        match store.get("/a").await {
            Ok(v) => {
                assert_eq!(v.map(|r| r.value), Some(b"1".to_vec()));
                break;
            }
            Err(e) => {
                assert_ne!(e.kind(), ErrorKind::PermissionDenied, "{e}");
                assert!(tokio::time::Instant::now() < deadline, "{e}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    assert_eq!(store.session_generation(), generation, "same session");
    store
        .put("/a", b"2", ExpectedVersion::Any)
        .await
        .expect("write after reconnect");
    store.close().await.expect("close");
}
