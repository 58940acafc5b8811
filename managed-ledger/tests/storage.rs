//! The plain single-cluster `ManagedLedgerStorage`.

use std::sync::Arc;

use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_managed_ledger::{BookKeeperStorage, DEFAULT_STORAGE_CLASS};
use bkswitch_metadata_store::MemoryStore;
use bkswitch_mledger_spi::{
    ManagedLedgerConfig, ManagedLedgerStorage, StorageErrorKind, StorageSettings,
};
use bytes::Bytes;

fn config() -> ManagedLedgerConfig {
    ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1)
}

#[tokio::test]
async fn uninitialised_storage_refuses_with_not_initialized() {
    let storage = BookKeeperStorage::new();
    assert!(storage.storage_classes().is_empty());
    assert!(storage.storage_class(DEFAULT_STORAGE_CLASS).is_none());
    let err = storage.default_storage_class().unwrap_err();
    assert_eq!(err.kind(), StorageErrorKind::NotInitialized);
    assert!(err.to_string().contains("initialize"), "{err}");
    assert_eq!(
        storage.factory().unwrap_err().kind(),
        StorageErrorKind::NotInitialized
    );
}

#[tokio::test]
async fn initialised_storage_has_one_class_on_the_configured_cluster_and_no_hooks() {
    let clusters = MemoryClusters::new();
    let storage = BookKeeperStorage::new();
    storage
        .initialize(
            &StorageSettings::new("memory://main"),
            Arc::new(MemoryStore::new()),
            Arc::new(MemoryClientFactory::with_clusters(clusters.clone())),
        )
        .await
        .unwrap();

    let classes = storage.storage_classes();
    assert_eq!(classes.len(), 1);
    assert_eq!(classes[0].name(), DEFAULT_STORAGE_CLASS);
    assert_eq!(classes[0].client().cluster_name(), "main");
    assert!(storage.storage_class(DEFAULT_STORAGE_CLASS).is_some());
    assert!(storage.storage_class("other").is_none());

    let mut config = config();
    storage.configure(&mut config);
    assert!(config.hooks.is_empty(), "a single cluster installs no hook");

    let ml = storage
        .factory()
        .unwrap()
        .open("public/default/persistent/t", config)
        .await
        .unwrap();
    let position = ml.append(Bytes::from_static(b"payload")).await.unwrap();
    let cluster = clusters
        .get("main")
        .expect("cluster created by the factory");
    assert!(cluster.contains_ledger(position.ledger_id));

    // A second initialise is refused and leaves the first in place.
    let err = storage
        .initialize(
            &StorageSettings::new("memory://other"),
            Arc::new(MemoryStore::new()),
            Arc::new(MemoryClientFactory::with_clusters(clusters.clone())),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StorageErrorKind::InvalidSettings);
    assert_eq!(
        storage
            .default_storage_class()
            .unwrap()
            .client()
            .cluster_name(),
        "main"
    );

    storage.close().await.unwrap();
    assert!(storage.storage_classes().is_empty());
}

#[tokio::test]
async fn bad_settings_are_refused_and_leave_the_storage_uninitialised() {
    let storage = BookKeeperStorage::new();
    let factory = Arc::new(MemoryClientFactory::new());
    let err = storage
        .initialize(
            &StorageSettings::new(""),
            Arc::new(MemoryStore::new()),
            factory.clone(),
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StorageErrorKind::InvalidSettings);

    let err = storage
        .initialize(
            &StorageSettings::new("http://not-bookkeeper"),
            Arc::new(MemoryStore::new()),
            factory,
        )
        .await
        .unwrap_err();
    assert_eq!(err.kind(), StorageErrorKind::Client);
    assert!(err.to_string().contains("http://not-bookkeeper"), "{err}");
    assert!(storage.storage_classes().is_empty());
}
