//! A migration between stores that need credentials: ZooKeeper with digest
//! authentication (the nodes carry `CREATOR_ALL_ACL`) to an etcd with
//! authentication on, whose user's role reads and writes only the target's
//! key prefixes. The credentials reach the coordinator and the participant
//! through [`SecureUrlOpener`].

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_migration::{
    Coordinator, MigrationRequest, Phase, SecureUrlOpener, StoreOpener,
};
use bkswitch_metadata_store::{
    etcd_key_prefixes, ErrorKind, EtcdUser, MetadataStore, Secret, StoreSecurity, StoreTimeouts,
    ZkAuth,
};
use common::*;
use etcd_client::{Client, Permission};

fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

fn timeouts() -> StoreTimeouts {
    StoreTimeouts {
        session: Duration::from_secs(5),
        operation: Duration::from_secs(10),
        connect: Duration::from_secs(20),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zookeeper_with_acls_to_etcd_with_a_prefix_role() {
    let etcd = bkswitch_etcd_harness::EtcdCluster::start(1);
    let target_prefix = format!("/migration-{}", nonce());
    // Auth on: root, and `mig` limited to the target's prefixes.
    let mut admin = Client::connect([format!("http://{}", etcd.endpoint(0))], None)
        .await
        .expect("admin");
    admin.role_add("root").await.expect("root role");
    admin.user_add("root", "root-pw", None).await.expect("root");
    admin.user_grant_role("root", "root").await.expect("grant");
    admin.role_add("migration").await.expect("role");
    for key in etcd_key_prefixes(&target_prefix) {
        let end = prefix_end(key.as_bytes());
        admin
            .role_grant_permission(
                "migration",
                Permission::read_write(key.into_bytes()).with_range_end(end),
            )
            .await
            .expect("grant");
    }
    admin.user_add("mig", "mig-pw", None).await.expect("user");
    admin
        .user_grant_role("mig", "migration")
        .await
        .expect("grant");
    admin.auth_enable().await.expect("auth");

    let zk_url = format!(
        "zk://{}/migration-{}",
        bkswitch_zk_harness::shared().connect_string(),
        nonce()
    );
    let etcd_url = etcd.url(&target_prefix);
    let security = StoreSecurity {
        zk_auth: Some(ZkAuth::digest("mig", Secret::new("zk-pw"))),
        etcd_user: Some(EtcdUser {
            name: "mig".to_owned(),
            password: Secret::new("mig-pw"),
        }),
        etcd_tls: None,
        zk_tls: None,
    };
    let opener: Arc<dyn StoreOpener> = Arc::new(SecureUrlOpener {
        timeouts: timeouts(),
        security: security.clone(),
    });
    assert!(!format!("{opener:?}").contains("pw"), "{opener:?}");

    // Without credentials neither side can be used.
    let plain = url_opener();
    let e = match plain.open(&etcd_url).await {
        Err(e) => e,
        Ok(store) => store.get("/").await.expect_err("etcd without a user"),
    };
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");

    let zk = opener.open(&zk_url).await.expect("zk");
    populate(zk.as_ref(), 20, 100).await;
    let anonymous = plain.open(&zk_url).await.expect("zk without credentials");
    let e = anonymous.get("/ledgers").await.expect_err("ACL");
    assert_eq!(e.kind(), ErrorKind::PermissionDenied, "{e}");
    anonymous.close().await.expect("close");

    let p = participant(opener.clone(), &zk_url, "broker-1").await;
    let mut c = Coordinator::start(
        zk.clone(),
        opener.as_ref(),
        MigrationRequest {
            id: Some("secure".to_owned()),
            source_url: zk_url.clone(),
            target_url: etcd_url.clone(),
            wipe_target: None,
            protected: Vec::new(),
        },
        coordinator_options(),
    )
    .await
    .expect("start");
    loop {
        let phase = c.step().await.expect("step");
        if phase.is_terminal() {
            break;
        }
    }
    let rec = c.record().clone();
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    wait_swapped(&[&p], &etcd_url).await;
    let target = opener.open(&etcd_url).await.expect("etcd");
    let n = assert_same_tree_except(zk.as_ref(), target.as_ref(), &[]).await;
    assert!(n >= 120, "{n}");
    target.close().await.expect("close");
    zk.close().await.expect("close");
}
