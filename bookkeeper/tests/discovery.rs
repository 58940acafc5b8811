//! Connecting by metadata-service URI, the factory, and following bookies as
//! they join, leave and turn read-only, on real bookies.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_bk_client::{BkErrorKind, BookKeeper, ClientFactory, LedgerConfig, WriteHandle};
use bkswitch_bk_harness::{shared, BkCluster};
use bkswitch_bookkeeper::{
    BookKeeperClient, BookKeeperClientFactory, ClientConfig, LedgerManagerKind,
};
use bytes::Bytes;

async fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !check() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_uri_form_reaches_the_cluster() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let hosts = cluster.zk_connect();
    let root = cluster.ledgers_root();
    for uri in [
        format!("zk+hierarchical://{hosts}{root}"),
        format!("zk://{hosts}{root}"),
        format!("zk+null://{hosts}{root}"),
        format!("zk+hierarchical://{hosts};{hosts}{root}"),
    ] {
        let bk = BookKeeperClient::connect(&uri, ClientConfig::default())
            .await
            .unwrap_or_else(|e| panic!("{uri}: {e}"));
        assert_eq!(bk.ledger_manager(), LedgerManagerKind::Hierarchical);
        assert_eq!(bk.bookies().writable.len(), 3, "{uri}");
        assert_eq!(bk.cluster_name(), uri, "default name is the URI");
        bk.close().await.unwrap();
    }
    // A URI asking for another layout than the cluster's is refused.
    let e = BookKeeperClient::connect(
        &format!("zk+longhierarchical://{hosts}{root}"),
        ClientConfig::default(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), BkErrorKind::InvalidArgument, "{e}");
    assert!(e.to_string().contains("LAYOUT"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn factory_names_clients_and_refuses_bad_uris_clearly() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = shared();
    let uri = cluster.metadata_service_uri();
    let factory = BookKeeperClientFactory::new(ClientConfig::default()).with_name(&uri, "bk-east");
    let bk: Arc<dyn BookKeeper> = factory.create(&uri).await.unwrap();
    assert_eq!(bk.cluster_name(), "bk-east");
    assert_eq!(
        bk.writable_bookies(),
        Some(cluster.writable_bookies().len())
    );
    // `create_named` names the client, unless `with_name` named the URI.
    let named = BookKeeperClientFactory::new(ClientConfig::default())
        .create_named("bk-west", &uri)
        .await
        .unwrap();
    assert_eq!(named.cluster_name(), "bk-west");
    named.close().await.unwrap();
    let fixed = factory.create_named("bk-west", &uri).await.unwrap();
    assert_eq!(fixed.cluster_name(), "bk-east");
    fixed.close().await.unwrap();
    let w = bk.create_ledger(&LedgerConfig::default()).await.unwrap();
    w.add_entry(Bytes::from_static(b"via the factory"))
        .await
        .unwrap();
    w.close().await.unwrap();
    bk.close().await.unwrap();

    let e = factory.create("memory://bk-east").await.unwrap_err();
    assert_eq!(e.code(), -14);
    assert!(e.to_string().contains("zk+hierarchical"), "{e}");
    // Nothing listens on port 1: a retryable error, quickly.
    let quick = BookKeeperClientFactory::new(
        ClientConfig::default().with_zk_operation_timeout(Duration::from_secs(2)),
    );
    let started = Instant::now();
    let e = quick
        .create("zk+hierarchical://127.0.0.1:1/ledgers")
        .await
        .unwrap_err();
    assert!(e.is_retryable(), "{e}");
    assert!(started.elapsed() < Duration::from_secs(10));
    // A ZooKeeper without this cluster: the error says so and what to do.
    let e = quick
        .create(&format!(
            "zk+hierarchical://{}/no-such-root",
            cluster.zk_connect()
        ))
        .await
        .unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
    assert!(e.to_string().contains("initnewcluster"), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bookies_joining_leaving_and_read_only() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let cluster = BkCluster::on_shared_zk(3);
    let bk = BookKeeperClient::connect(&cluster.metadata_service_uri(), ClientConfig::default())
        .await
        .unwrap();
    assert_eq!(bk.bookies().writable.len(), 3);
    assert_eq!(BookKeeper::writable_bookies(&bk), Some(3));
    // Four bookies are needed for an ensemble of 4.
    let e = bk
        .create_ledger(&LedgerConfig::default().with_quorums(4, 2, 2))
        .await
        .unwrap_err();
    assert_eq!(e.code(), -6, "{e}");
    let added = tokio::task::block_in_place(|| cluster.add_bookie());
    let new_id = cluster.bookie_id(added);
    eventually("the new bookie is seen", || {
        bk.bookies().writable.contains(&new_id)
    })
    .await;
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(4, 2, 2))
        .await
        .unwrap();
    assert!(w.metadata().first_ensemble().contains(&new_id));
    w.add_entry(Bytes::from_static(b"on four")).await.unwrap();
    w.close().await.unwrap();

    tokio::task::block_in_place(|| cluster.stop(added));
    eventually("the stopped bookie is gone", || {
        !bk.bookies().writable.contains(&new_id)
    })
    .await;
    assert_eq!(BookKeeper::writable_bookies(&bk), Some(3));

    // A read-only bookie is never placed in an ensemble.
    let ro = tokio::task::block_in_place(|| cluster.add_bookie_with(&["forceReadOnlyBookie=true"]));
    let ro_id = cluster.bookie_id(ro);
    eventually("the read-only bookie is seen", || {
        bk.bookies().readonly.contains(&ro_id)
    })
    .await;
    assert!(!bk.bookies().writable.contains(&ro_id));
    for _ in 0..10 {
        let w = bk
            .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
            .await
            .unwrap();
        assert!(!w.metadata().first_ensemble().contains(&ro_id));
    }
    bk.close().await.unwrap();
}
