//! Schema storage over the in-memory BookKeeper and metadata store: golden
//! locator bytes without hooks, stamping in the locator write
//! (docs/INVARIANTS.md I1), routing of reads and deletes through `resolve`
//! (docs/INVARIANTS.md I4, I15), CAS conflicts and orphan cleanup, hook
//! failures, bad input and deduplication.

mod common;

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bkswitch_bk_client::{DeleteMissing, MemoryCluster, MemoryClusterConfig};
use bkswitch_managed_ledger::schema::{
    locator_path, SchemaStorage, SchemaStorageError, SchemaVersion,
};
use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore};
use bkswitch_proto::schema::{IndexEntry, KeyValue, PositionInfo, SchemaEntry, SchemaLocator};
use bkswitch_proto::{Message, Stamped, ATTR_KEY};
use bkswitch_schema_spi::SingleClientSchemaProvider;

use common::schema::*;

// ---------------------------------------------------------------------------
// Tests.
// ---------------------------------------------------------------------------

#[tokio::test]
async fn no_hook_locator_bytes_match_golden_bytes() {
    let cluster = MemoryCluster::new("bk");
    let provider = Arc::new(SingleClientSchemaProvider::new(Arc::new(cluster.client())));
    let store = RecordingStore::new();
    let storage = storage(store.clone(), provider);

    let versions: [(&[u8], &[u8]); 3] = [
        (b"schema-0", b"hash-0"),
        (b"schema-1", b"hash-1"),
        (b"schema-2", b"hash-2"),
    ];
    for (expected_version, (data, hash)) in versions.iter().enumerate() {
        let version = storage.put(ID, data, hash).await.unwrap();
        assert_eq!(version, SchemaVersion(expected_version as i64));
    }

    // Golden values computed from the prost types: ledgers 0, 1, 2 from the
    // cluster's id generator, entry 0, no property anywhere.
    let e0 = index_entry(0, 0, b"hash-0");
    let e1 = index_entry(1, 1, b"hash-1");
    let e2 = index_entry(2, 2, b"hash-2");
    let golden = [
        SchemaLocator {
            info: e0.clone(),
            index: vec![e0.clone()],
        },
        SchemaLocator {
            info: e1.clone(),
            index: vec![e0.clone(), e1.clone()],
        },
        SchemaLocator {
            info: e2.clone(),
            index: vec![e0.clone(), e1.clone(), e2.clone()],
        },
    ];

    let puts = store.puts();
    assert_eq!(puts.len(), 3, "one locator write per version: {puts:?}");
    let expected_conditions = [
        ExpectedVersion::NotExists,
        ExpectedVersion::Exactly(0),
        ExpectedVersion::Exactly(1),
    ];
    for ((put, locator), condition) in puts.iter().zip(&golden).zip(expected_conditions) {
        assert!(put.ok);
        assert_eq!(put.path, "/schemas/public/default/orders");
        assert_eq!(put.expected, condition);
        assert_eq!(put.value, locator.encode_to_vec(), "locator bytes differ");
    }
    let stored = store
        .inner
        .get("/schemas/public/default/orders")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(stored.value, golden[2].encode_to_vec());

    // The schema entries: the first with Pulsar's placeholder index, then the
    // index before each version.
    let placeholder = IndexEntry {
        version: 0,
        position: PositionInfo {
            ledger_id: -1,
            entry_id: -1,
            properties: Vec::new(),
        },
        hash: b"hash-0".to_vec(),
    };
    let expected_entries = [
        SchemaEntry {
            schema_data: b"schema-0".to_vec(),
            index: vec![placeholder],
        },
        SchemaEntry {
            schema_data: b"schema-1".to_vec(),
            index: vec![e0.clone()],
        },
        SchemaEntry {
            schema_data: b"schema-2".to_vec(),
            index: vec![e0, e1],
        },
    ];
    assert_eq!(cluster.ledger_ids(), vec![0, 1, 2]);
    for (ledger_id, expected) in expected_entries.iter().enumerate() {
        assert_eq!(
            &read_schema_entry(&cluster, ledger_id as i64).await,
            expected
        );
        let metadata = cluster.ledger_metadata(ledger_id as i64).unwrap();
        assert_eq!(metadata.custom_metadata["application"], b"pulsar".to_vec());
        assert_eq!(metadata.custom_metadata["component"], b"schema".to_vec());
        assert_eq!(
            metadata.custom_metadata["pulsar/schemaId"],
            ID.as_bytes().to_vec()
        );
    }

    let (locator, version) = storage.locator(ID).await.unwrap().unwrap();
    assert_eq!(locator, golden[2]);
    assert_eq!(version, 2);
}

#[tokio::test]
async fn stamping_provider_stamps_every_locator_write_in_that_write() {
    let blue = MemoryCluster::new("blue");
    let green = MemoryCluster::new("green");
    let provider = StampingProvider::new(&[&blue, &green]);
    let store = RecordingStore::new();
    let storage = storage(store.clone(), provider.clone());

    storage.put(ID, b"a", b"ha").await.unwrap();
    storage.put(ID, b"b", b"hb").await.unwrap();
    provider.switch_to("green");
    storage.put(ID, b"c", b"hc").await.unwrap();

    let writes = store.successful_puts();
    assert_eq!(writes.len(), 3);
    let active_at_write = ["blue", "blue", "green"];
    let mut previous_index: Vec<IndexEntry> = Vec::new();
    for (write, cluster_name) in writes.iter().zip(active_at_write) {
        let locator = decode_locator(&write.value);
        let info = &locator.info;
        // The new entry is stamped in the very write that records its ledger
        // (docs/INVARIANTS.md I1).
        assert_eq!(info.position.cluster_stamp().unwrap(), Some(cluster_name));
        assert_eq!(
            info.position.properties,
            vec![KeyValue {
                key: ATTR_KEY.to_owned(),
                value: cluster_name.to_owned()
            }]
        );
        let cluster = if cluster_name == "blue" {
            &blue
        } else {
            &green
        };
        assert!(cluster.contains_ledger(info.position.ledger_id));
        // Earlier entries are carried over unchanged and the new one is appended.
        assert_eq!(&locator.index[..previous_index.len()], &previous_index[..]);
        assert_eq!(locator.index.last(), Some(info));
        previous_index = locator.index.clone();
    }
    // Every version is readable; no resolve happened during the writes.
    assert!(provider.resolves().is_empty());
    assert_eq!(&storage.get_latest(ID).await.unwrap().data[..], b"c");
}

#[tokio::test]
async fn switching_clusters_routes_reads_by_stamp_once_per_open() {
    let old = MemoryCluster::new("old");
    let new = MemoryCluster::new("new");
    let provider = StampingProvider::new(&[&old, &new]);
    let storage = storage(Arc::new(MemoryStore::new()), provider.clone());

    assert_eq!(
        storage.put(ID, b"v0-data", b"h0").await.unwrap(),
        SchemaVersion(0)
    );
    provider.switch_to("new");
    assert_eq!(
        storage.put(ID, b"v1-data", b"h1").await.unwrap(),
        SchemaVersion(1)
    );

    // Both clusters hand out ledger id 0 first: only the stamp tells them apart.
    let (locator, _) = storage.locator(ID).await.unwrap().unwrap();
    assert_eq!(locator.index[0].position.ledger_id, 0);
    assert_eq!(locator.index[1].position.ledger_id, 0);
    assert_eq!(old.ledger_ids(), vec![0]);
    assert_eq!(new.ledger_ids(), vec![0]);

    let v0 = storage.get(ID, SchemaVersion(0)).await.unwrap();
    assert_eq!(&v0.data[..], b"v0-data");
    assert_eq!(&v0.hash[..], b"h0");
    assert_eq!(provider.resolves(), vec![(0, Some("old".to_owned()))]);

    let v1 = storage.get(ID, SchemaVersion(1)).await.unwrap();
    assert_eq!(&v1.data[..], b"v1-data");
    assert_eq!(provider.resolves().len(), 2);
    assert_eq!(provider.resolves()[1], (0, Some("new".to_owned())));

    let latest = storage.get_latest(ID).await.unwrap();
    assert_eq!(latest.version, SchemaVersion(1));
    assert_eq!(&latest.data[..], b"v1-data");
    assert_eq!(provider.resolves().len(), 3, "one resolve per open");

    // The old cluster is really the one read: make it unreachable and v0 fails
    // with a retryable BookKeeper error while v1 still reads.
    old.set_unavailable(bkswitch_bk_client::UnavailableMode::FailFast);
    let err = storage.get(ID, SchemaVersion(0)).await.unwrap_err();
    assert!(
        matches!(err, SchemaStorageError::BookKeeper { .. }),
        "{err:?}"
    );
    assert!(err.is_retryable(), "{err}");
    assert!(err.to_string().contains(ID), "{err}");
    assert_eq!(
        &storage.get(ID, SchemaVersion(1)).await.unwrap().data[..],
        b"v1-data"
    );
    old.set_available();
}

#[tokio::test]
async fn concurrent_puts_both_succeed_and_the_losers_orphan_is_deleted() {
    let cluster = MemoryCluster::new("bk");
    let provider = StampingProvider::new(&[&cluster]);
    let store = RecordingStore::with_barrier(2);
    let storage = storage(store.clone(), provider.clone());

    let (a, b) = tokio::join!(storage.put(ID, b"a", b"ha"), storage.put(ID, b"b", b"hb"));
    let mut versions = vec![a.unwrap(), b.unwrap()];
    versions.sort();
    assert_eq!(versions, vec![SchemaVersion(0), SchemaVersion(1)]);

    let (locator, _) = storage.locator(ID).await.unwrap().unwrap();
    let referenced: Vec<i64> = locator.index.iter().map(|e| e.position.ledger_id).collect();
    assert_eq!(referenced.len(), 2);

    // Three ledgers were created (0 and 1 by the first attempts, 2 by the
    // loser's retry); the loser's first one was deleted through resolve.
    let orphan = [0, 1]
        .into_iter()
        .find(|id| !referenced.contains(id))
        .expect("one first-attempt ledger lost");
    assert_eq!(provider.resolves(), vec![(orphan, Some("bk".to_owned()))]);
    assert!(!cluster.contains_ledger(orphan));
    let mut on_cluster = cluster.ledger_ids();
    on_cluster.sort_unstable();
    let mut expected = referenced.clone();
    expected.sort_unstable();
    assert_eq!(on_cluster, expected);

    // One losing compare-and-set was recorded.
    assert_eq!(store.puts().iter().filter(|p| !p.ok).count(), 1);
}

#[tokio::test]
async fn concurrent_puts_of_the_same_schema_deduplicate() {
    let cluster = MemoryCluster::new("bk");
    let provider = StampingProvider::new(&[&cluster]);
    let store = RecordingStore::with_barrier(2);
    let storage = storage(store.clone(), provider.clone());

    let (a, b) = tokio::join!(
        storage.put(ID, b"same", b"h"),
        storage.put(ID, b"same", b"h")
    );
    assert_eq!(a.unwrap(), SchemaVersion(0));
    assert_eq!(b.unwrap(), SchemaVersion(0));
    assert_eq!(
        storage.list_versions(ID).await.unwrap(),
        vec![SchemaVersion(0)]
    );
    // The loser's ledger was deleted through resolve; only the winner's remains.
    assert_eq!(provider.resolves().len(), 1);
    assert_eq!(cluster.ledger_ids().len(), 1);
}

#[tokio::test]
async fn exhausted_retries_give_a_conflict_and_leave_no_orphan() {
    let cluster = MemoryCluster::new("bk");
    let provider = StampingProvider::new(&[&cluster]);
    let store = RecordingStore::new();
    let storage = SchemaStorage::new(
        store.clone(),
        provider.clone(),
        options().with_max_attempts(3),
    );
    storage.put(ID, b"v0", b"h0").await.unwrap();
    let (before, _) = storage.locator(ID).await.unwrap().unwrap();
    let ledgers_before = cluster.ledger_ids();

    store.interfere.store(true, Ordering::SeqCst);
    let err = storage.put(ID, b"v1", b"h1").await.unwrap_err();
    store.interfere.store(false, Ordering::SeqCst);

    match &err {
        SchemaStorageError::Conflict {
            schema_id,
            attempts,
            ..
        } => {
            assert_eq!(schema_id, ID);
            assert_eq!(*attempts, 3);
        }
        other => panic!("expected a conflict, got {other:?}"),
    }
    assert!(err.is_retryable());
    let message = err.to_string();
    assert!(
        message.contains(ID) && message.contains("3 times"),
        "{message}"
    );

    // Three orphans, each deleted through resolve; the locator is unchanged.
    assert_eq!(provider.resolves().len(), 3);
    assert_eq!(cluster.ledger_ids(), ledgers_before);
    let (after, _) = storage.locator(ID).await.unwrap().unwrap();
    assert_eq!(after, before);
}

#[tokio::test]
async fn failing_creation_properties_leaves_no_ledger_and_no_locator_change() {
    let cluster = MemoryCluster::new("bk");
    let provider = StampingProvider::new(&[&cluster]);
    let store = RecordingStore::new();
    let storage = storage(store.clone(), provider.clone());

    provider.fail_properties.store(true, Ordering::SeqCst);
    let err = storage.put(ID, b"v0", b"h0").await.unwrap_err();
    assert!(matches!(err, SchemaStorageError::Hook { .. }), "{err:?}");
    assert!(err.to_string().contains("attribution refused"), "{err}");
    assert!(storage.locator(ID).await.unwrap().is_none());
    assert!(cluster.ledger_ids().is_empty());
    assert!(store.puts().is_empty());

    provider.fail_properties.store(false, Ordering::SeqCst);
    storage.put(ID, b"v0", b"h0").await.unwrap();
    let before = store
        .inner
        .get(&locator_path(ID).unwrap())
        .await
        .unwrap()
        .unwrap();
    let ledgers = cluster.ledger_ids();

    provider.fail_properties.store(true, Ordering::SeqCst);
    let err = storage.put(ID, b"v1", b"h1").await.unwrap_err();
    assert!(matches!(err, SchemaStorageError::Hook { .. }), "{err:?}");
    let after = store
        .inner
        .get(&locator_path(ID).unwrap())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(after, before, "locator untouched");
    assert_eq!(cluster.ledger_ids(), ledgers, "no ledger left behind");
}

#[tokio::test]
async fn unknown_schema_and_unknown_version_are_typed_errors() {
    let cluster = MemoryCluster::new("bk");
    let provider = StampingProvider::new(&[&cluster]);
    let store = RecordingStore::new();
    let storage = storage(store.clone(), provider);

    let err = storage
        .get_latest("public/default/missing")
        .await
        .unwrap_err();
    assert!(
        matches!(err, SchemaStorageError::SchemaNotFound { .. }),
        "{err:?}"
    );
    assert!(err.is_not_found() && !err.is_retryable());
    assert!(err.to_string().contains("public/default/missing"), "{err}");
    let err = storage
        .get("public/default/missing", SchemaVersion(0))
        .await
        .unwrap_err();
    assert!(
        matches!(err, SchemaStorageError::SchemaNotFound { .. }),
        "{err:?}"
    );
    assert!(storage
        .list_versions("public/default/missing")
        .await
        .unwrap()
        .is_empty());
    assert!(storage
        .locator("public/default/missing")
        .await
        .unwrap()
        .is_none());
    assert!(!storage.delete("public/default/missing").await.unwrap());

    storage.put(ID, b"v0", b"h0").await.unwrap();
    let before = store.inner.get(&locator_path(ID).unwrap()).await.unwrap();
    for version in [1, 7, -1] {
        let err = storage.get(ID, SchemaVersion(version)).await.unwrap_err();
        match &err {
            SchemaStorageError::VersionNotFound {
                schema_id,
                version: v,
                latest,
            } => {
                assert_eq!(schema_id, ID);
                assert_eq!(*v, version);
                assert_eq!(*latest, 0);
            }
            other => panic!("expected VersionNotFound, got {other:?}"),
        }
        let message = err.to_string();
        assert!(
            message.contains(ID) && message.contains(&format!("version {version}")),
            "{message}"
        );
    }
    assert_eq!(
        store.inner.get(&locator_path(ID).unwrap()).await.unwrap(),
        before
    );
    assert_eq!(cluster.ledger_ids().len(), 1);
}

#[tokio::test]
async fn invalid_schema_ids_are_rejected_without_touching_anything() {
    let cluster = MemoryCluster::new("bk");
    let provider = StampingProvider::new(&[&cluster]);
    let store = RecordingStore::new();
    let storage = storage(store.clone(), provider.clone());

    assert_eq!(
        locator_path("public/default/orders").unwrap(),
        "/schemas/public/default/orders"
    );
    assert_eq!(locator_path("single").unwrap(), "/schemas/single");
    assert_eq!(
        locator_path("prop/cluster/ns/topic").unwrap(),
        "/schemas/prop/cluster/ns/topic"
    );

    let invalid = [
        "",
        "/public/default/t",
        "public/default/t/",
        "public//t",
        "public/../t",
        "public/./t",
        "..",
        "a/b/c/d/e",
        "pub\u{0}lic/default/t",
        "public/default/t\n",
        "public/default/\u{7f}",
    ];
    for id in invalid {
        let check = |err: SchemaStorageError| {
            assert!(
                matches!(err, SchemaStorageError::InvalidSchemaId { .. }),
                "{id:?}: {err:?}"
            );
            assert_eq!(err.schema_id(), id);
            assert!(!err.is_retryable());
            assert!(err.to_string().contains("invalid schema id"), "{err}");
        };
        check(locator_path(id).unwrap_err());
        check(storage.put(id, b"d", b"h").await.unwrap_err());
        check(storage.get(id, SchemaVersion(0)).await.unwrap_err());
        check(storage.get_latest(id).await.unwrap_err());
        check(storage.list_versions(id).await.unwrap_err());
        check(storage.locator(id).await.unwrap_err());
        check(storage.delete(id).await.unwrap_err());
    }
    assert!(store.puts().is_empty());
    assert_eq!(store.deletes.load(Ordering::SeqCst), 0);
    assert!(store.inner.children("/").await.unwrap().is_empty());
    assert!(cluster.ledger_ids().is_empty());
    assert!(provider.resolves().is_empty());
}

#[tokio::test]
async fn deduplication_by_the_latest_hash() {
    let cluster = MemoryCluster::new("bk");
    let provider = Arc::new(SingleClientSchemaProvider::new(Arc::new(cluster.client())));
    let store = RecordingStore::new();
    let storage = storage(store.clone(), provider);

    assert_eq!(
        storage.put(ID, b"a", b"ha").await.unwrap(),
        SchemaVersion(0)
    );
    assert_eq!(
        storage.put(ID, b"a", b"ha").await.unwrap(),
        SchemaVersion(0)
    );
    assert_eq!(store.puts().len(), 1, "a duplicate writes nothing");
    assert_eq!(
        cluster.ledger_ids().len(),
        1,
        "a duplicate creates no ledger"
    );

    assert_eq!(
        storage.put(ID, b"b", b"hb").await.unwrap(),
        SchemaVersion(1)
    );
    // Only the latest version is compared, as in Pulsar's storage layer.
    assert_eq!(
        storage.put(ID, b"a", b"ha").await.unwrap(),
        SchemaVersion(2)
    );
    // An empty hash (Pulsar's delete marker) never deduplicates.
    assert_eq!(storage.put(ID, b"", b"").await.unwrap(), SchemaVersion(3));
    assert_eq!(storage.put(ID, b"", b"").await.unwrap(), SchemaVersion(4));
    assert_eq!(
        storage.list_versions(ID).await.unwrap(),
        (0..5).map(SchemaVersion).collect::<Vec<_>>()
    );
    assert_eq!(cluster.ledger_ids().len(), 5);
    assert_eq!(
        &storage.get(ID, SchemaVersion(2)).await.unwrap().data[..],
        b"a"
    );
}

#[tokio::test]
async fn delete_removes_every_ledger_through_resolve_then_the_locator() {
    let old = MemoryCluster::with_config(
        "old",
        MemoryClusterConfig::default().with_delete_missing(DeleteMissing::NoSuchLedger),
    );
    let new = MemoryCluster::new("new");
    let provider = StampingProvider::new(&[&old, &new]);
    let store = RecordingStore::new();
    let storage = storage(store.clone(), provider.clone());

    storage.put(ID, b"v0", b"h0").await.unwrap();
    storage.put(ID, b"v1", b"h1").await.unwrap();
    provider.switch_to("new");
    storage.put(ID, b"v2", b"h2").await.unwrap();
    assert_eq!(old.ledger_ids().len(), 2);
    assert_eq!(new.ledger_ids().len(), 1);

    // A ledger already gone (-7 on this cluster) counts as deleted.
    assert!(old.remove_ledger(old.ledger_ids()[0]));

    assert!(storage.delete(ID).await.unwrap());
    assert!(old.ledger_ids().is_empty());
    assert!(new.ledger_ids().is_empty());
    assert!(storage.locator(ID).await.unwrap().is_none());
    let stamps: Vec<Option<String>> = provider.resolves().into_iter().map(|(_, s)| s).collect();
    assert_eq!(
        stamps,
        vec![
            Some("old".to_owned()),
            Some("old".to_owned()),
            Some("new".to_owned())
        ]
    );

    assert!(!storage.delete(ID).await.unwrap());
    let err = storage.get_latest(ID).await.unwrap_err();
    assert!(
        matches!(err, SchemaStorageError::SchemaNotFound { .. }),
        "{err:?}"
    );
    // The id can be used again from version 0.
    assert_eq!(
        storage.put(ID, b"again", b"h").await.unwrap(),
        SchemaVersion(0)
    );
}
