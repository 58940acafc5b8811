//! `MemoryClientFactory`: `memory://<name>` URIs and the errors for other URIs.

use bkswitch_bk_client::{
    BkErrorKind, BookKeeper, ClientFactory, DigestType, LedgerConfig, MemoryClientFactory,
    MemoryClusters, ReadHandle, WriteHandle,
};
use bytes::Bytes;

#[tokio::test]
async fn same_name_shares_a_cluster_and_each_call_is_a_new_client() {
    let factory = MemoryClientFactory::new();
    let a1 = factory.create("memory://a").await.unwrap();
    let a2 = factory.create("memory://a/").await.unwrap();
    let b = factory.create("MEMORY://b").await.unwrap();
    assert_eq!(a1.cluster_name(), "a");
    assert_eq!(a2.cluster_name(), "a");
    assert_eq!(b.cluster_name(), "b");

    let w = a1.create_ledger(&LedgerConfig::default()).await.unwrap();
    w.add_entry(Bytes::from_static(b"x")).await.unwrap();
    // a2 is another client of the same cluster: its recovery open fences a1's writer.
    let r = a2
        .open_ledger(w.id(), DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(r.last_add_confirmed(), 0);
    assert_eq!(
        w.add_entry(Bytes::from_static(b"y"))
            .await
            .unwrap_err()
            .kind(),
        BkErrorKind::LedgerFenced
    );
    // b is another cluster.
    assert_eq!(
        b.open_ledger(w.id(), DigestType::Crc32c, b"")
            .await
            .unwrap_err()
            .kind(),
        BkErrorKind::NoSuchLedgerOnMetadataServer
    );
    // Closing one client leaves the others working.
    a1.close().await.unwrap();
    a2.create_ledger(&LedgerConfig::default()).await.unwrap();
    assert_eq!(factory.clusters().names(), vec!["a", "b"]);
}

#[tokio::test]
async fn factories_can_share_clusters_with_tests() {
    let clusters = MemoryClusters::new();
    let cluster = clusters.get_or_create("shared");
    let factory = MemoryClientFactory::with_clusters(clusters.clone());
    let bk = factory.create("memory://shared").await.unwrap();
    bk.create_ledger(&LedgerConfig::default()).await.unwrap();
    assert_eq!(cluster.ledger_ids(), vec![0]);
}

#[tokio::test]
async fn other_uris_are_rejected_with_a_clear_invalid_argument() {
    let factory = MemoryClientFactory::new();
    for uri in [
        "zk+hierarchical://zk1:2181/ledgers",
        "metadata-store:zk:zk1:2181/ledgers",
        "",
        "memory:/x",
        "memory://",
        "memory:///",
        "memory://has space",
    ] {
        let e = factory.create(uri).await.unwrap_err();
        assert_eq!(e.kind(), BkErrorKind::InvalidArgument, "{uri}: {e}");
        assert_eq!(e.code(), -14);
        let msg = e.to_string();
        assert!(msg.contains(&format!("'{uri}'")), "names the URI: {msg}");
        assert!(
            msg.contains("memory://<cluster-name>"),
            "names the scheme: {msg}"
        );
    }
    assert!(factory.clusters().names().is_empty());
    assert_eq!(
        MemoryClientFactory::cluster_name_of("memory://host/ledgers-a").unwrap(),
        "host/ledgers-a"
    );
}
