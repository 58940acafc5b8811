//! The router over in-memory clusters and the reference managed ledger.

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{
    BkErrorKind, BookKeeper, DigestType, LedgerConfig, MemoryClientFactory, MemoryClusters,
    ReadHandleExt, UnavailableMode, WriteHandleExt,
};
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, ReadMode, RouterConfig, RouterError};
use bkswitch_managed_ledger::{ManagedLedgerFactory, Position};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::{
    CursorResolver, HookErrorKind, LedgerResolver, ManagedLedgerConfig, ManagedLedgerStorage,
    StorageSettings,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{KeyValue, ManagedCursorInfo};
use bkswitch_proto::schema::PositionInfo;
use bkswitch_proto::{Stamped, ATTR_KEY};
use bytes::Bytes;

const NAME: &str = "tenant/ns/persistent/topic";

struct Env {
    clusters: MemoryClusters,
    store: Arc<dyn MetadataStore>,
    storage: MultiClusterManagedLedgerStorage,
}

fn env(timeout: Duration) -> Env {
    let clusters = MemoryClusters::new();
    let storage = MultiClusterManagedLedgerStorage::new(
        RouterConfig::default().with_old_ledger_read_timeout(timeout),
    );
    storage.set_client_factory(Arc::new(MemoryClientFactory::with_clusters(
        clusters.clone(),
    )));
    storage.add_cluster("bk-a", "memory://bk-a").unwrap();
    storage.add_cluster("bk-b", "memory://bk-b").unwrap();
    storage.set_bootstrap("bk-a").unwrap();
    // Keep the id generators apart, as the idgen precheck (I11) requires.
    clusters
        .get_or_create("bk-b")
        .advance_ledger_id_to(1_000)
        .unwrap();
    Env {
        clusters,
        store: Arc::new(MemoryStore::new()),
        storage,
    }
}

impl Env {
    fn config(&self) -> ManagedLedgerConfig {
        let mut config = ManagedLedgerConfig::default()
            .with_quorums(1, 1, 1)
            .with_metadata_quorums(1, 1, 1);
        self.storage.configure(&mut config);
        config
    }

    fn factory(&self) -> ManagedLedgerFactory {
        let class = self.storage.default_storage_class().unwrap();
        ManagedLedgerFactory::from_storage_class(self.store.clone(), &*class)
    }

    /// A third cluster, `bk-c` (ids from 5,000), and `bk-a` active.
    async fn add_bk_c_and_activate_bk_a(&self) {
        self.clusters
            .get_or_create("bk-c")
            .advance_ledger_id_to(5_000)
            .unwrap();
        self.storage.add_cluster("bk-c", "memory://bk-c").unwrap();
        self.storage.switch_active_cluster("bk-a").await.unwrap();
    }

    fn has(&self, cluster: &str, ledger: i64) -> bool {
        self.clusters.get(cluster).unwrap().contains_ledger(ledger)
    }
}

fn stamped(ledger_id: i64, cluster: &str) -> LedgerInfo {
    LedgerInfo {
        ledger_id,
        properties: vec![KeyValue {
            key: ATTR_KEY.to_owned(),
            value: cluster.to_owned(),
        }],
        ..Default::default()
    }
}

fn legacy(ledger_id: i64) -> LedgerInfo {
    LedgerInfo {
        ledger_id,
        ..Default::default()
    }
}

fn payloads(ml_entries: &[bkswitch_managed_ledger::Entry]) -> Vec<Bytes> {
    ml_entries.iter().map(|e| e.data.clone()).collect()
}

#[tokio::test]
async fn switch_moves_new_ledgers_and_old_ones_stay_readable() {
    let env = env(Duration::from_secs(5));
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    let ml = env.factory().open(NAME, env.config()).await.unwrap();
    let first = ml.append("on-a-0").await.unwrap();
    ml.append("on-a-1").await.unwrap();
    let ledger_a = first.ledger_id;
    assert!(env.has("bk-a", ledger_a));

    env.storage.switch_active_cluster("bk-b").await.unwrap();
    assert_eq!(env.storage.active_cluster().as_deref(), Some("bk-b"));
    ml.rollover().await.unwrap();
    let p = ml.append("on-b-0").await.unwrap();
    assert_ne!(p.ledger_id, ledger_a);
    assert!(env.has("bk-b", p.ledger_id));
    assert!(!env.has("bk-a", p.ledger_id) || p.ledger_id == ledger_a);

    let (info, _) = ml.metadata();
    for li in &info.ledger_info {
        let expected = if li.ledger_id == ledger_a {
            "bk-a"
        } else {
            "bk-b"
        };
        assert_eq!(li.cluster_stamp().unwrap(), Some(expected), "{li:?}");
    }
    // Cursor ledgers created now land on B, stamped B.
    let cursor = ml.open_cursor("sub").await.unwrap();
    cursor.roll_cursor_ledger().await.unwrap();
    let cursor_ledger = cursor.cursor_ledger_id();
    assert!(
        env.has("bk-b", cursor_ledger),
        "cursor ledger {cursor_ledger}"
    );
    let (cinfo, _) = cursor.metadata().await;
    if cinfo.cursors_ledger_id >= 0 {
        assert_eq!(cinfo.cluster_stamp().unwrap(), Some("bk-b"));
    }
    ml.close().await.unwrap();

    // A new owner reads everything: the old ledger from A, the new one from B.
    let ml = env.factory().open(NAME, env.config()).await.unwrap();
    let entries = ml
        .read_entries(Position::new(ledger_a, 0), 10)
        .await
        .unwrap();
    assert_eq!(
        payloads(&entries),
        vec![
            Bytes::from("on-a-0"),
            Bytes::from("on-a-1"),
            Bytes::from("on-b-0")
        ]
    );
}

#[tokio::test]
async fn legacy_ledgers_resolve_to_bootstrap_even_after_the_switch() {
    let env = env(Duration::from_secs(5));
    // A plain single-cluster broker on A wrote unstamped ledgers.
    let a: Arc<dyn BookKeeper> = Arc::new(env.clusters.get_or_create("bk-a").client());
    let plain = ManagedLedgerFactory::new(env.store.clone(), a);
    let config = ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1);
    let ml = plain.open(NAME, config).await.unwrap();
    let first = ml.append("legacy").await.unwrap();
    ml.close().await.unwrap();

    // The storage starts on B (bootstrap A): the legacy ledger still reads from A.
    env.storage.connect_cluster("bk-a").await.unwrap();
    env.storage.switch_active_cluster("bk-b").await.unwrap();
    let router = env.storage.router();
    let client = router.resolve_ledger(&legacy(first.ledger_id)).unwrap();
    assert_eq!(client.cluster_name(), "bk-a");

    let ml = env.factory().open(NAME, env.config()).await.unwrap();
    let entries = ml.read_entries(first, 1).await.unwrap();
    assert_eq!(payloads(&entries), vec![Bytes::from("legacy")]);
    let (info, _) = ml.metadata();
    let current = info.ledger_info.last().unwrap();
    assert_eq!(current.cluster_stamp().unwrap(), Some("bk-b"));
    assert!(env.has("bk-b", current.ledger_id));
}

#[tokio::test]
async fn unknown_and_duplicate_stamps_are_errors_never_a_default() {
    let env = env(Duration::from_secs(5));
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    let router = env.storage.router();
    let err = router.resolve_ledger(&stamped(7, "bk-z")).unwrap_err();
    assert_eq!(err.kind(), HookErrorKind::UnknownCluster);
    assert_eq!(err.cluster(), Some("bk-z"));
    assert_eq!(err.ledger_id(), Some(7));
    assert!(err.to_string().contains("bk-z") && err.to_string().contains("7"));

    let mut dup = stamped(8, "bk-a");
    dup.properties.push(KeyValue {
        key: ATTR_KEY.to_owned(),
        value: "bk-b".to_owned(),
    });
    let err = router.resolve_ledger(&dup).unwrap_err();
    assert_eq!(err.kind(), HookErrorKind::CorruptMetadata);
    assert_eq!(err.ledger_id(), Some(8));

    let mut cursor = ManagedCursorInfo {
        cursors_ledger_id: 9,
        ..Default::default()
    };
    cursor.set_cluster_stamp("bk-q").unwrap();
    let err = router.resolve_cursor(&cursor).unwrap_err();
    assert_eq!(err.kind(), HookErrorKind::UnknownCluster);
    assert_eq!(err.ledger_id(), Some(9));
}

#[tokio::test]
async fn rejected_switch_keeps_the_old_cluster_active() {
    let env = env(Duration::from_secs(5));
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    env.storage
        .add_cluster("bad", "zk://nowhere/ledgers")
        .unwrap();
    let err = env.storage.switch_active_cluster("bad").await.unwrap_err();
    assert!(matches!(err, RouterError::ClientStart { .. }), "{err}");
    assert!(err.to_string().contains("bad"), "{err}");
    assert_eq!(env.storage.active_cluster().as_deref(), Some("bk-a"));
    let err = env.storage.switch_active_cluster("nope").await.unwrap_err();
    assert!(matches!(err, RouterError::UnknownCluster { .. }), "{err}");
    assert_eq!(env.storage.active_cluster().as_deref(), Some("bk-a"));
    use bkswitch_mledger_spi::ActiveClientSupplier;
    assert_eq!(env.storage.router().active_client().cluster_name(), "bk-a");
    // Registration conflicts.
    assert!(matches!(
        env.storage.add_cluster("bk-a", "memory://other"),
        Err(RouterError::Conflict { .. })
    ));
    assert!(matches!(
        env.storage.add_cluster("bk-c", "memory://bk-b"),
        Err(RouterError::Conflict { .. })
    ));
    assert!(matches!(
        env.storage.set_bootstrap("bk-b"),
        Err(RouterError::BootstrapAlreadySet { .. })
    ));
}

#[tokio::test]
async fn read_modes_route_or_refuse() {
    let env = env(Duration::from_secs(5));
    env.storage.connect_cluster("bk-a").await.unwrap();
    env.storage.switch_active_cluster("bk-b").await.unwrap();
    let router = env.storage.router();
    // Legacy ids are below every id created stamped on the bootstrap cluster (I17).
    let (old, new, old_legacy) = (stamped(10, "bk-a"), stamped(2, "bk-b"), legacy(3));

    assert_eq!(env.storage.read_mode(), ReadMode::DualRead);
    assert_eq!(router.resolve_ledger(&old).unwrap().cluster_name(), "bk-a");
    assert_eq!(router.resolve_ledger(&new).unwrap().cluster_name(), "bk-b");

    env.storage.set_read_mode(ReadMode::NewClusterOnly);
    for info in [&old, &old_legacy] {
        let err = router.resolve_ledger(info).unwrap_err();
        assert_eq!(err.kind(), HookErrorKind::RefusedByReadMode);
        assert_eq!(err.cluster(), Some("bk-a"));
        assert_eq!(err.ledger_id(), Some(info.ledger_id));
        assert!(err.to_string().contains("DUAL_READ"), "{err}");
    }
    assert_eq!(router.resolve_ledger(&new).unwrap().cluster_name(), "bk-b");

    env.storage.set_read_mode(ReadMode::OldClusterOnly);
    let err = router.resolve_ledger(&new).unwrap_err();
    assert_eq!(err.kind(), HookErrorKind::RefusedByReadMode);
    assert_eq!(err.cluster(), Some("bk-b"));
    assert_eq!(router.resolve_ledger(&old).unwrap().cluster_name(), "bk-a");
    assert_eq!(
        router.resolve_ledger(&old_legacy).unwrap().cluster_name(),
        "bk-a"
    );
    // Creation is unaffected by the read mode.
    use bkswitch_mledger_spi::ActiveClientSupplier;
    assert_eq!(router.active_client().cluster_name(), "bk-b");

    // Rolling back: switch to A; A is now active and readable in DUAL_READ.
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    env.storage.set_read_mode(ReadMode::DualRead);
    assert_eq!(router.resolve_ledger(&new).unwrap().cluster_name(), "bk-b");
    assert_eq!(
        "new_cluster_only".parse::<ReadMode>().unwrap(),
        ReadMode::NewClusterOnly
    );
    assert!("BOTH".parse::<ReadMode>().is_err());
}

async fn write_ledger(client: &Arc<dyn BookKeeper>) -> i64 {
    let w = client
        .create_ledger(&LedgerConfig::default().with_quorums(1, 1, 1))
        .await
        .unwrap();
    w.add_all([Bytes::from("x"), Bytes::from("y")])
        .await
        .unwrap();
    w.close().await.unwrap();
    w.id()
}

#[tokio::test(start_paused = true)]
async fn unavailable_old_cluster_fails_within_the_timeout() {
    let timeout = Duration::from_millis(300);
    let env = env(timeout);
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    let a = env.storage.connect_cluster("bk-a").await.unwrap();
    let ledger = write_ledger(&a).await;
    let cached = a
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    env.storage.switch_active_cluster("bk-b").await.unwrap();
    let cluster_a = env.clusters.get("bk-a").unwrap();

    cluster_a.set_unavailable(UnavailableMode::Hang);
    let router = env.storage.router();
    let client = router.resolve_ledger(&stamped(ledger, "bk-a")).unwrap();
    let start = tokio::time::Instant::now();
    let err = client
        .open_ledger(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap_err();
    assert_eq!(start.elapsed(), timeout);
    assert_eq!(err.kind(), BkErrorKind::Timeout);
    assert!(err.is_retryable());
    assert_eq!(err.cluster(), Some("bk-a"));
    assert_eq!(err.ledger_id(), Some(ledger));
    assert!(err.to_string().contains("retry"), "{err}");
    // A handle cached before the outage is bounded too.
    let start = tokio::time::Instant::now();
    let err = cached.read_entries(0, 1).await.unwrap_err();
    assert_eq!(start.elapsed(), timeout);
    assert_eq!(err.kind(), BkErrorKind::Timeout);
    let err = client.delete_ledger(ledger).await.unwrap_err();
    assert_eq!(err.kind(), BkErrorKind::Timeout);

    cluster_a.set_unavailable(UnavailableMode::FailFast);
    let start = tokio::time::Instant::now();
    let err = client
        .open_ledger(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap_err();
    assert!(start.elapsed() < timeout);
    assert_eq!(err.kind(), BkErrorKind::Unavailable);
    assert_eq!(err.cluster(), Some("bk-a"));
    assert_eq!(err.ledger_id(), Some(ledger));

    cluster_a.set_available();
    assert_eq!(cached.read_all().await.unwrap().len(), 2);
}

#[tokio::test]
async fn managed_ledger_read_of_a_down_old_cluster_errors_instead_of_hanging() {
    let env = env(Duration::from_millis(200));
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    let ml = env.factory().open(NAME, env.config()).await.unwrap();
    let first = ml.append("a").await.unwrap();
    env.storage.switch_active_cluster("bk-b").await.unwrap();
    ml.rollover().await.unwrap();
    ml.append("b").await.unwrap();
    ml.close().await.unwrap();

    let ml = env.factory().open(NAME, env.config()).await.unwrap();
    env.clusters
        .get("bk-a")
        .unwrap()
        .set_unavailable(UnavailableMode::Hang);
    let start = std::time::Instant::now();
    let err = tokio::time::timeout(Duration::from_secs(5), ml.read_entries(first, 1))
        .await
        .expect("the read must not hang")
        .unwrap_err();
    assert!(start.elapsed() < Duration::from_secs(2));
    assert!(err.to_string().contains("bk-a"), "{err}");
}

#[tokio::test]
async fn close_client_refuses_while_handles_are_open() {
    let env = env(Duration::from_secs(5));
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    let a = env.storage.connect_cluster("bk-a").await.unwrap();
    let ledger = write_ledger(&a).await;
    env.storage.switch_active_cluster("bk-b").await.unwrap();

    let err = env.storage.close_client("bk-b").await.unwrap_err();
    assert!(matches!(err, RouterError::CloseRefused { .. }), "{err}");
    assert!(err.to_string().contains("active"), "{err}");

    let router = env.storage.router();
    let client = router.resolve_ledger(&stamped(ledger, "bk-a")).unwrap();
    let h1 = client
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    let h2 = client
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(
        env.storage.open_handles("bk-a").unwrap(),
        vec![ledger, ledger]
    );
    match env.storage.close_client("bk-a").await.unwrap_err() {
        RouterError::CloseRefused {
            open_handles,
            ledger_ids,
            ..
        } => {
            assert_eq!(open_handles, 2);
            assert_eq!(ledger_ids, vec![ledger, ledger]);
        }
        other => panic!("unexpected {other}"),
    }
    h1.close().await.unwrap();
    drop(h2);
    assert!(env.storage.open_handles("bk-a").unwrap().is_empty());
    env.storage.close_client("bk-a").await.unwrap();
    assert!(env.storage.storage_class("bk-a").is_none());

    // A later resolve starts a new client in the background: retryable error, then success.
    let err = router.resolve_ledger(&stamped(ledger, "bk-a")).unwrap_err();
    assert_eq!(err.kind(), HookErrorKind::ClusterUnavailable);
    assert!(err.is_retryable() && err.retry_after().is_some());
    let mut resolved = None;
    for _ in 0..100 {
        tokio::task::yield_now().await;
        if let Ok(c) = router.resolve_ledger(&stamped(ledger, "bk-a")) {
            resolved = Some(c);
            break;
        }
    }
    let c = resolved.expect("lazy reconnect");
    let h = c
        .open_ledger_no_recovery(ledger, DigestType::Crc32c, b"")
        .await
        .unwrap();
    assert_eq!(h.read_all().await.unwrap().len(), 2);
    assert!(matches!(
        env.storage.close_client("nope").await,
        Err(RouterError::UnknownCluster { .. })
    ));
}

#[tokio::test]
async fn schema_provider_stamps_the_creating_client_and_routes_by_stamp() {
    let env = env(Duration::from_secs(5));
    env.storage.switch_active_cluster("bk-a").await.unwrap();
    let provider = env.storage.schema_provider();
    let created_on = provider.active();
    env.storage.switch_active_cluster("bk-b").await.unwrap();
    // The stamp names the creating client's cluster, not the now-active one.
    let props = provider.creation_properties(&*created_on).unwrap();
    assert_eq!(props, vec![(ATTR_KEY.to_owned(), "bk-a".to_owned())]);
    let mut position = PositionInfo {
        ledger_id: 5,
        entry_id: 0,
        properties: Vec::new(),
    };
    assert_eq!(provider.resolve(&position).unwrap().cluster_name(), "bk-a");
    position.set_cluster_stamp("bk-b").unwrap();
    assert_eq!(provider.resolve(&position).unwrap().cluster_name(), "bk-b");
    assert_eq!(provider.active().cluster_name(), "bk-b");
}

#[tokio::test]
async fn initialize_through_the_storage_spi() {
    let clusters = MemoryClusters::new();
    let storage = MultiClusterManagedLedgerStorage::default();
    let settings =
        StorageSettings::new("memory://bk-a").with_property("oldLedgerReadTimeoutMs", "1500");
    storage
        .initialize(
            &settings,
            Arc::new(MemoryStore::new()),
            Arc::new(MemoryClientFactory::with_clusters(clusters)),
        )
        .await
        .unwrap();
    assert_eq!(storage.active_cluster().as_deref(), Some("bk-a"));
    assert_eq!(storage.bootstrap_cluster().as_deref(), Some("bk-a"));
    assert_eq!(
        storage.old_ledger_read_timeout(),
        Duration::from_millis(1500)
    );
    assert_eq!(storage.default_storage_class().unwrap().name(), "bk-a");
    assert_eq!(storage.storage_classes().len(), 1);
    storage.close().await.unwrap();
}

/// S1 per managed ledger: a prefix override (a canary namespace) creates the
/// new data and cursor ledgers of the managed ledgers under it on another
/// cluster, stamped with it; every other managed ledger keeps the active
/// cluster; the longest prefix wins; removing the overrides goes back to the
/// active cluster; an unknown cluster is refused with nothing changed.
#[tokio::test]
async fn prefix_overrides_route_new_ledgers_of_a_namespace() {
    let env = env(Duration::from_secs(5));
    env.add_bk_c_and_activate_bk_a().await;
    let canary = "tenant/canary/persistent/t";
    let deeper = "tenant/canary/persistent/deep-t";
    let other = "tenant/other/persistent/t";
    let err = env
        .storage
        .set_prefix_overrides(&[("tenant/canary/".into(), "ghost".into())])
        .await
        .unwrap_err();
    assert!(matches!(err, RouterError::UnknownCluster { .. }), "{err}");
    assert!(env.storage.prefix_overrides().is_empty());
    env.storage
        .set_prefix_overrides(&[
            ("tenant/canary/".into(), "bk-b".into()),
            ("tenant/canary/persistent/deep".into(), "bk-c".into()),
        ])
        .await
        .unwrap();
    assert_eq!(
        env.storage.prefix_overrides(),
        vec![
            (
                "tenant/canary/persistent/deep".to_owned(),
                "bk-c".to_owned()
            ),
            ("tenant/canary/".to_owned(), "bk-b".to_owned()),
        ]
    );
    for (name, cluster) in [(canary, "bk-b"), (deeper, "bk-c"), (other, "bk-a")] {
        let ml = env.factory().open(name, env.config()).await.unwrap();
        let p = ml.append("x").await.unwrap();
        assert!(
            env.has(cluster, p.ledger_id),
            "{name}: ledger {}",
            p.ledger_id
        );
        let (info, _) = ml.metadata();
        let last = info.ledger_info.last().unwrap();
        assert_eq!(last.cluster_stamp().unwrap(), Some(cluster), "{name}");
        let cursor = ml.open_cursor("sub").await.unwrap();
        cursor.roll_cursor_ledger().await.unwrap();
        assert!(env.has(cluster, cursor.cursor_ledger_id()), "{name} cursor");
        ml.close().await.unwrap();
    }
    // Removed: the canary's next ledger is on the active cluster again (after
    // the reverse idgen step: a managed ledger's ledger ids must keep
    // increasing, and the managed ledger refuses one that does not), and
    // what it wrote on bk-b still reads (routed by the stamp).
    env.storage.set_prefix_overrides(&[]).await.unwrap();
    env.clusters
        .get("bk-a")
        .unwrap()
        .advance_ledger_id_to(10_000)
        .unwrap();
    let ml = env.factory().open(canary, env.config()).await.unwrap();
    ml.rollover().await.unwrap();
    let p = ml.append("y").await.unwrap();
    assert!(env.has("bk-a", p.ledger_id));
    let (info, _) = ml.metadata();
    let first = info.ledger_info.first().unwrap().ledger_id;
    let entries = ml.read_entries(Position::new(first, 0), 10).await.unwrap();
    assert_eq!(payloads(&entries)[0], Bytes::from("x"));
}

/// S3 under a canary: a new schema version of a topic under an overridden
/// prefix is created on the override's cluster and stamped with it (as the
/// topic's data and cursor ledgers are); schemas of other topics stay on the
/// active cluster. Schema ids carry no domain segment (`tenant/ns/topic`),
/// so the override of `tenant/canary/persistent/deep` covers the schema
/// `tenant/canary/deep-t`.
#[tokio::test]
async fn prefix_overrides_route_new_schema_versions_too() {
    use bkswitch_managed_ledger::schema::{SchemaStorage, SchemaStorageOptions};
    let env = env(Duration::from_secs(5));
    env.add_bk_c_and_activate_bk_a().await;
    let schemas = SchemaStorage::new(
        env.store.clone(),
        env.storage.schema_provider(),
        SchemaStorageOptions::default(),
    );
    // A version written before the canary stays where it was created.
    schemas.put("tenant/canary/t", b"v0", b"h0").await.unwrap();
    env.storage
        .set_prefix_overrides(&[
            ("tenant/canary/".into(), "bk-b".into()),
            ("tenant/canary/persistent/deep".into(), "bk-c".into()),
        ])
        .await
        .unwrap();
    for (id, cluster) in [
        ("tenant/canary/t", "bk-b"),
        ("tenant/canary/deep-t", "bk-c"),
        ("tenant/other/t", "bk-a"),
        ("tenant/canary-not/t", "bk-a"),
    ] {
        schemas.put(id, b"v1", b"h1").await.unwrap();
        let (locator, _) = schemas.locator(id).await.unwrap().unwrap();
        let pos = &locator.info.position;
        assert_eq!(pos.cluster_stamp().unwrap(), Some(cluster), "{id}");
        assert!(env.has(cluster, pos.ledger_id), "{id}: {}", pos.ledger_id);
    }
    let (locator, _) = schemas.locator("tenant/canary/t").await.unwrap().unwrap();
    let first = &locator.index[0].position;
    assert_eq!(first.cluster_stamp().unwrap(), Some("bk-a"));
    // Removed: new versions go to the active cluster again.
    env.storage.set_prefix_overrides(&[]).await.unwrap();
    schemas.put("tenant/canary/t", b"v2", b"h2").await.unwrap();
    let (locator, _) = schemas.locator("tenant/canary/t").await.unwrap().unwrap();
    assert_eq!(locator.info.position.cluster_stamp().unwrap(), Some("bk-a"));
}
