//! `copy_ledger_preserving_ids` between two real BookKeeper clusters (two
//! ledgers roots on one ZooKeeper, started by `bkswitch-bk-harness`): a ledger
//! written by BookKeeper's Java client on one is copied by the Rust client onto
//! the other, and the Java client reads the copy under the same ledger id with
//! the same entry ids, bytes and custom metadata.

use bkswitch_bk_client::{BookKeeper, DigestType};
use bkswitch_bk_harness::{shared, BkCluster, CreateOptions, DigestType as JavaDigest};
use bkswitch_bookkeeper::{BookKeeperClient, ClientConfig};
use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyOptions, CopyOutcome};

fn java<T>(f: impl FnOnce() -> T) -> T {
    tokio::task::block_in_place(f)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_ledger_copied_to_another_cluster_reads_the_same_in_java() {
    if !bkswitch_bk_harness::bk_available() {
        return;
    }
    let old = shared();
    let new = BkCluster::on_shared_zk(3);
    let src = BookKeeperClient::connect(
        &old.metadata_service_uri(),
        ClientConfig::default().with_cluster_name("old"),
    )
    .await
    .unwrap();
    let dst = BookKeeperClient::connect(
        &new.metadata_service_uri(),
        ClientConfig::default().with_cluster_name("new"),
    )
    .await
    .unwrap();

    let j_old = java(|| old.java_client());
    let options = CreateOptions::new(3, 2, 2)
        .digest(JavaDigest::Crc32c)
        .password(b"cursor-pw".to_vec())
        .custom(
            "pulsar/managed-ledger",
            b"public/default/persistent/t1".to_vec(),
        );
    let id = java(|| j_old.create(&options)).unwrap();
    let payloads: Vec<Vec<u8>> = (0..100u32)
        .map(|i| (0..1024).map(|k| ((i * 7 + k) % 256) as u8).collect())
        .collect();
    java(|| j_old.add_payloads(id, &payloads)).unwrap();
    java(|| j_old.close(id)).unwrap();

    let copy_options = CopyOptions::new(DigestType::Crc32c, b"cursor-pw".to_vec()).with_window(16);
    let report = copy_ledger_preserving_ids(id, &src, &dst, &copy_options)
        .await
        .unwrap();
    assert_eq!(report.outcome, CopyOutcome::Copied);
    assert_eq!(report.last_entry_id, 99);
    assert_eq!(report.bytes, 100 * 1024);
    // A second copy finds it identical: idempotent.
    let again = copy_ledger_preserving_ids(id, &src, &dst, &copy_options)
        .await
        .unwrap();
    assert_eq!(again.outcome, CopyOutcome::AlreadyPresent);

    // The Java client reads the copy on the new cluster: same id, entries, bytes.
    let j_new = java(|| new.java_client());
    let opened = java(|| j_new.open(id, true, JavaDigest::Crc32c, b"cursor-pw")).unwrap();
    assert!(opened.closed);
    assert_eq!(opened.lac, 99);
    assert_eq!(opened.length, 100 * 1024);
    let entries = java(|| j_new.read(id, 0, 99)).unwrap();
    for (e, expected) in entries.iter().zip(&payloads) {
        assert_eq!(&e.data, expected, "entry {}", e.entry_id);
    }
    let copied = java(|| j_new.metadata(id)).unwrap();
    let original = java(|| j_old.metadata(id)).unwrap();
    assert_eq!(copied.custom_metadata, original.custom_metadata);
    assert_eq!(copied.digest_type, original.digest_type);
    assert_eq!(copied.password, original.password);
    assert_eq!(
        (
            copied.ensemble_size,
            copied.write_quorum_size,
            copied.ack_quorum_size
        ),
        (3, 2, 2)
    );
    assert!(copied.ensembles[0]
        .bookies
        .iter()
        .all(|b| new.bookie_ids().contains(b)));
    src.close().await.unwrap();
    dst.close().await.unwrap();
}
