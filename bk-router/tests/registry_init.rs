//! Start-up resolution through the cluster registry (docs/DESIGN.md §3) and the I17
//! check of unstamped ledgers created after bootstrap.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{MemoryClientFactory, MemoryClusters};
use bkswitch_bk_router::{
    MultiClusterManagedLedgerStorage, RouterConfig, RouterError, BOOTSTRAP_CLUSTER_NAME,
    CONFIG_PATH, CURRENT_CLUSTER_NAME,
};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::{
    HookErrorKind, LedgerPurpose, LedgerResolver, ManagedLedgerStorage, NewLedgerContext,
    NewLedgerPropertiesProvider, StorageErrorKind, StorageSettings,
};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::KeyValue;
use bkswitch_proto::ATTR_KEY;
use bkswitch_registry::{ClusterStatus, Registry};
use common::FlakyFactory;

struct Env {
    store: Arc<dyn MetadataStore>,
    registry: Registry,
    clusters: MemoryClusters,
}

fn env() -> Env {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    Env {
        registry: Registry::new(store.clone()),
        store,
        clusters: MemoryClusters::new(),
    }
}

impl Env {
    async fn init(
        &self,
        settings: &StorageSettings,
    ) -> (
        MultiClusterManagedLedgerStorage,
        Result<(), RouterErrorText>,
    ) {
        self.init_with(settings, Arc::new(FlakyFactory::new(self.clusters.clone())))
            .await
    }

    async fn init_with(
        &self,
        settings: &StorageSettings,
        factory: Arc<FlakyFactory>,
    ) -> (
        MultiClusterManagedLedgerStorage,
        Result<(), RouterErrorText>,
    ) {
        let storage = MultiClusterManagedLedgerStorage::default();
        let r = storage
            .initialize(settings, self.store.clone(), factory)
            .await
            .map_err(|e| (e.kind(), e.to_string()));
        (storage, r)
    }

    async fn active(&self) -> Option<String> {
        self.registry.active().await.unwrap()
    }

    async fn bootstrap(&self) -> Option<String> {
        self.registry
            .bootstrap()
            .await
            .unwrap()
            .map(|m| m.bootstrap_cluster_name)
    }
}

type RouterErrorText = (StorageErrorKind, String);

fn names(storage: &MultiClusterManagedLedgerStorage) -> Vec<String> {
    storage.clusters().into_iter().map(|(n, _)| n).collect()
}

#[tokio::test]
async fn a_registry_active_cluster_wins_and_every_record_is_routable() {
    let env = env();
    let reg = &env.registry;
    reg.register("bk-old", "memory://bk-old", ClusterStatus::Active)
        .await
        .unwrap();
    reg.register("bk-a", "memory://bk-a", ClusterStatus::Standby)
        .await
        .unwrap();
    reg.promote_active("bk-a").await.unwrap(); // bk-old → DEPRECATED
    reg.register("bk-b", "memory://bk-b", ClusterStatus::Standby)
        .await
        .unwrap();
    let settings =
        StorageSettings::new("memory://bk-x").with_property(CURRENT_CLUSTER_NAME, "bk-x");
    let (storage, r) = env.init(&settings).await;
    r.unwrap();
    assert_eq!(storage.active_cluster().as_deref(), Some("bk-a"));
    assert_eq!(
        names(&storage),
        ["bk-a", "bk-b", "bk-old"],
        "every registered cluster routed, DEPRECATED included; the hint not"
    );
    assert_eq!(storage.bootstrap_cluster().as_deref(), Some("bk-a"));
    assert_eq!(env.bootstrap().await.as_deref(), Some("bk-a"));
    // The hint was ignored: nothing registered for it.
    assert!(reg.get("bk-x").await.unwrap().is_none());
    assert_eq!(env.active().await.as_deref(), Some("bk-a"));
    storage.close().await.unwrap();
}

#[tokio::test]
async fn b_hint_is_registered_active_or_promoted() {
    // Unregistered hint: registered ACTIVE with the configured URI.
    let env = env();
    let settings =
        StorageSettings::new("memory://bk-h").with_property(CURRENT_CLUSTER_NAME, "bk-h");
    let (storage, r) = env.init(&settings).await;
    r.unwrap();
    assert_eq!(storage.active_cluster().as_deref(), Some("bk-h"));
    let rec = env.registry.get("bk-h").await.unwrap().unwrap();
    assert_eq!(rec.status, ClusterStatus::Active);
    assert_eq!(rec.metadata_service_uri, "memory://bk-h");
    assert_eq!(env.bootstrap().await.as_deref(), Some("bk-h"));

    // Registered STANDBY hint (no ACTIVE yet): promoted, its registered URI used.
    let env = self::env();
    env.registry
        .register("bk-s", "memory://bk-s-registered", ClusterStatus::Standby)
        .await
        .unwrap();
    let settings = StorageSettings::new("memory://whatever")
        .with_property(CURRENT_CLUSTER_NAME, "bk-s")
        .with_property(CONFIG_PATH, "/admin/bookie-clusters");
    let (storage, r) = env.init(&settings).await;
    r.unwrap();
    assert_eq!(env.active().await.as_deref(), Some("bk-s"));
    assert_eq!(
        storage.clusters(),
        [("bk-s".to_owned(), "memory://bk-s-registered".to_owned())]
    );
}

#[tokio::test]
async fn c_name_derived_from_the_client_and_auto_registered_under_config_path() {
    let env = env();
    let settings =
        StorageSettings::new("memory://bk-c").with_property(CONFIG_PATH, "/custom/bookie-clusters");
    let (storage, r) = env.init(&settings).await;
    r.unwrap();
    assert_eq!(storage.active_cluster().as_deref(), Some("bk-c"));
    let custom = Registry::with_root(env.store.clone(), "/custom/bookie-clusters").unwrap();
    assert_eq!(custom.active().await.unwrap().as_deref(), Some("bk-c"));
    assert_eq!(
        custom
            .bootstrap()
            .await
            .unwrap()
            .unwrap()
            .bootstrap_cluster_name,
        "bk-c"
    );
    // Nothing under the default root.
    assert!(env.active().await.is_none());
}

#[tokio::test]
async fn bootstrap_marker_written_once_and_honoured_on_restart() {
    let env = env();
    let (first, r) = env.init(&StorageSettings::new("memory://bk-a")).await;
    r.unwrap();
    let marker = env.registry.bootstrap().await.unwrap().unwrap();
    assert_eq!(marker.bootstrap_cluster_name, "bk-a");
    first.close().await.unwrap();

    // The registry switches to bk-b; a restarted node starts on bk-b and keeps
    // bk-a as the bootstrap cluster, marker untouched.
    env.registry
        .register("bk-b", "memory://bk-b", ClusterStatus::Standby)
        .await
        .unwrap();
    env.registry.promote_active("bk-b").await.unwrap();
    let (second, r) = env.init(&StorageSettings::new("memory://bk-a")).await;
    r.unwrap();
    assert_eq!(second.active_cluster().as_deref(), Some("bk-b"));
    assert_eq!(second.bootstrap_cluster().as_deref(), Some("bk-a"));
    // bk-a is DEPRECATED but stays routable as the bootstrap cluster.
    assert_eq!(names(&second), ["bk-a", "bk-b"]);
    assert_eq!(env.registry.bootstrap().await.unwrap().unwrap(), marker);

    // The property agreeing with the marker is fine.
    let settings =
        StorageSettings::new("memory://bk-a").with_property(BOOTSTRAP_CLUSTER_NAME, "bk-a");
    env.init(&settings).await.1.unwrap();
}

#[tokio::test]
async fn bootstrap_property_names_the_first_marker() {
    let env = env();
    let settings =
        StorageSettings::new("memory://bk-new").with_property(BOOTSTRAP_CLUSTER_NAME, "bk-legacy");
    let (storage, r) = env.init(&settings).await;
    r.unwrap();
    assert_eq!(env.bootstrap().await.as_deref(), Some("bk-legacy"));
    assert_eq!(storage.bootstrap_cluster().as_deref(), Some("bk-legacy"));
}

#[tokio::test]
async fn conflicting_bootstrap_property_fails_and_writes_nothing() {
    let env = env();
    let marker = env.registry.ensure_bootstrap("bk-a").await.unwrap();
    let settings = StorageSettings::new("memory://bk-b")
        .with_property(CURRENT_CLUSTER_NAME, "bk-b")
        .with_property(BOOTSTRAP_CLUSTER_NAME, "bk-z");
    let factory = Arc::new(FlakyFactory::new(env.clusters.clone()));
    let (storage, r) = env.init_with(&settings, factory.clone()).await;
    let (kind, msg) = r.unwrap_err();
    assert_eq!(kind, StorageErrorKind::InvalidSettings);
    assert!(msg.contains("'bk-z'") && msg.contains("'bk-a'"), "{msg}");
    // Nothing written, nothing started, nothing routed.
    assert!(env.registry.list().await.unwrap().is_empty());
    assert!(env.active().await.is_none());
    assert_eq!(env.registry.bootstrap().await.unwrap().unwrap(), marker);
    assert!(factory.created.lock().is_empty());
    assert!(storage.clusters().is_empty());
    assert!(storage.active_cluster().is_none());
}

#[tokio::test]
async fn active_client_start_failure_fails_initialize_and_changes_nothing() {
    let env = env();
    let factory = Arc::new(FlakyFactory::new(env.clusters.clone()));
    factory.fail("memory://bk-a");
    let settings =
        StorageSettings::new("memory://bk-a").with_property(CURRENT_CLUSTER_NAME, "bk-a");
    let (storage, r) = env.init_with(&settings, factory.clone()).await;
    let (kind, msg) = r.unwrap_err();
    assert_eq!(kind, StorageErrorKind::Client);
    assert!(
        msg.contains("'bk-a'") && msg.contains("memory://bk-a"),
        "{msg}"
    );
    assert!(env.registry.list().await.unwrap().is_empty());
    assert!(env.registry.bootstrap().await.unwrap().is_none());
    assert!(storage.clusters().is_empty());
    assert!(storage.active_cluster().is_none());
    assert!(storage.bootstrap_cluster().is_none());

    // Registry ACTIVE whose client cannot start: same, registry untouched.
    env.registry
        .register("bk-a", "memory://bk-a", ClusterStatus::Active)
        .await
        .unwrap();
    let (storage, r) = env
        .init_with(&StorageSettings::new("memory://bk-a"), factory.clone())
        .await;
    assert_eq!(r.unwrap_err().0, StorageErrorKind::Client);
    assert!(env.registry.bootstrap().await.unwrap().is_none());
    assert!(storage.active_cluster().is_none());

    factory.heal("memory://bk-a");
    let (storage, r) = env
        .init_with(&StorageSettings::new("memory://bk-a"), factory)
        .await;
    r.unwrap();
    assert_eq!(storage.active_cluster().as_deref(), Some("bk-a"));
}

#[tokio::test]
async fn without_registry_the_store_is_not_touched() {
    let env = env();
    let storage =
        MultiClusterManagedLedgerStorage::new(RouterConfig::default().with_registry(false));
    storage
        .initialize(
            &StorageSettings::new("memory://bk-a"),
            env.store.clone(),
            Arc::new(MemoryClientFactory::with_clusters(env.clusters.clone())),
        )
        .await
        .unwrap();
    assert_eq!(storage.active_cluster().as_deref(), Some("bk-a"));
    assert_eq!(storage.bootstrap_cluster().as_deref(), Some("bk-a"));
    assert!(env.store.exists("/admin").await.unwrap().is_none());
    // A conflicting bootstrap property is refused before anything changes.
    let err = storage
        .initialize(
            &StorageSettings::new("memory://bk-b").with_property(BOOTSTRAP_CLUSTER_NAME, "bk-b"),
            env.store.clone(),
            Arc::new(MemoryClientFactory::with_clusters(env.clusters.clone())),
        )
        .await
        .unwrap_err();
    assert!(err.to_string().contains("'bk-a'"), "{err}");
    assert_eq!(names(&storage), ["bk-a"]);
    assert!(matches!(
        storage.set_bootstrap("bk-b"),
        Err(RouterError::BootstrapAlreadySet { .. })
    ));
}

fn ledger(id: i64, stamp: Option<&str>) -> LedgerInfo {
    LedgerInfo {
        ledger_id: id,
        properties: stamp
            .map(|s| {
                vec![KeyValue {
                    key: ATTR_KEY.to_owned(),
                    value: s.to_owned(),
                }]
            })
            .unwrap_or_default(),
        ..Default::default()
    }
}

#[tokio::test]
async fn i17_unstamped_ledger_newer_than_a_stamped_bootstrap_ledger_is_corrupt() {
    let clusters = MemoryClusters::new();
    let storage = MultiClusterManagedLedgerStorage::new(RouterConfig::default());
    storage.set_client_factory(Arc::new(MemoryClientFactory::with_clusters(clusters)));
    storage.add_cluster("bk-a", "memory://bk-a").unwrap();
    storage.add_cluster("bk-b", "memory://bk-b").unwrap();
    storage.set_bootstrap("bk-a").unwrap();
    storage.connect_cluster("bk-a").await.unwrap();
    storage.switch_active_cluster("bk-b").await.unwrap();
    let router = storage.router();

    // Nothing known yet: every legacy ledger resolves to the bootstrap cluster.
    assert_eq!(
        router
            .resolve_ledger(&ledger(50, None))
            .unwrap()
            .cluster_name(),
        "bk-a"
    );
    assert_eq!(storage.lowest_stamped_on_bootstrap(), None);
    // Stamped ledgers of another cluster teach nothing.
    router.resolve_ledger(&ledger(3, Some("bk-b"))).unwrap();
    assert_eq!(storage.lowest_stamped_on_bootstrap(), None);

    // A ledger created stamped on bk-a (resolved) is learned.
    router.resolve_ledger(&ledger(40, Some("bk-a"))).unwrap();
    assert_eq!(storage.lowest_stamped_on_bootstrap(), Some(40));
    assert_eq!(
        router
            .resolve_ledger(&ledger(39, None))
            .unwrap()
            .cluster_name(),
        "bk-a"
    );
    let err = router.resolve_ledger(&ledger(50, None)).unwrap_err();
    assert_eq!(err.kind(), HookErrorKind::CorruptMetadata);
    assert_eq!(err.ledger_id(), Some(50));
    assert_eq!(err.cluster(), Some("bk-a"));
    let msg = err.to_string();
    assert!(
        msg.contains("ledger 50") && msg.contains("ledger 40") && msg.contains("without"),
        "{msg}"
    );
    assert_eq!(storage.metrics().snapshot().unstamped_after_bootstrap, 1);

    // S4 stamping by a bk-a client lowers the bound; a bk-b client does not.
    let bk_a = storage.connect_cluster("bk-a").await.unwrap();
    let bk_b = storage.connect_cluster("bk-b").await.unwrap();
    for (client, id) in [(&bk_b, 5), (&bk_a, 20)] {
        let ctx = NewLedgerContext {
            managed_ledger: "t/ns/persistent/x",
            ledger_id: id,
            purpose: LedgerPurpose::Data,
            client: &**client,
        };
        router.new_ledger_properties(&ctx).unwrap();
    }
    assert_eq!(storage.lowest_stamped_on_bootstrap(), Some(20));
    assert_eq!(
        router.resolve_ledger(&ledger(30, None)).unwrap_err().kind(),
        HookErrorKind::CorruptMetadata
    );
    assert_eq!(
        router
            .resolve_ledger(&ledger(19, None))
            .unwrap()
            .cluster_name(),
        "bk-a"
    );
    assert_eq!(storage.metrics().snapshot().unstamped_after_bootstrap, 2);
}

/// Holds the first `n` client starts until all `n` have begun, so that `n`
/// initializations all read an empty registry before any of them writes.
#[derive(Debug)]
struct LockstepFactory {
    inner: MemoryClientFactory,
    barrier: tokio::sync::Barrier,
    held: std::sync::atomic::AtomicUsize,
    n: usize,
}

#[async_trait::async_trait]
impl bkswitch_bk_client::ClientFactory for LockstepFactory {
    async fn create_named(
        &self,
        _cluster_name: &str,
        metadata_service_uri: &str,
    ) -> bkswitch_bk_client::Result<Arc<dyn bkswitch_bk_client::BookKeeper>> {
        self.create(metadata_service_uri).await
    }

    async fn create(
        &self,
        uri: &str,
    ) -> bkswitch_bk_client::Result<Arc<dyn bkswitch_bk_client::BookKeeper>> {
        let client = self.inner.create(uri).await;
        if self.held.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < self.n {
            self.barrier.wait().await;
        }
        client
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nodes_starting_together_on_a_fresh_registry_all_follow_one_active_cluster() {
    const NODES: usize = 6;
    let env = env();
    let factory = Arc::new(LockstepFactory {
        inner: MemoryClientFactory::with_clusters(env.clusters.clone()),
        barrier: tokio::sync::Barrier::new(NODES),
        held: std::sync::atomic::AtomicUsize::new(0),
        n: NODES,
    });
    let settings =
        StorageSettings::new("memory://bk-a").with_property(CURRENT_CLUSTER_NAME, "bk-a");
    let mut inits = Vec::new();
    for _ in 0..NODES {
        let store = env.store.clone();
        let factory = factory.clone();
        let settings = settings.clone();
        inits.push(tokio::spawn(async move {
            let storage = MultiClusterManagedLedgerStorage::default();
            let r = storage.initialize(&settings, store, factory).await;
            (storage, r)
        }));
    }
    for init in inits {
        let (storage, r) = init.await.unwrap();
        r.expect("every node initializes, the losers of the race by reading again");
        assert_eq!(storage.active_cluster().as_deref(), Some("bk-a"));
    }
    let records = env.registry.list().await.unwrap();
    assert_eq!(records.len(), 1, "{records:?}");
    assert_eq!(records[0].status, ClusterStatus::Active);
    assert_eq!(env.bootstrap().await.as_deref(), Some("bk-a"));
}

/// A restarted node routes a DEPRECATED cluster that is not the bootstrap
/// cluster from its first moment: an idle managed ledger whose only ledger
/// was created on `bk-b` (active then, DEPRECATED since the next switch)
/// loads and reads right after `initialize`, before any registry watcher has
/// run.
#[tokio::test]
async fn a_deprecated_non_bootstrap_cluster_is_routable_right_after_start() {
    use bkswitch_managed_ledger::{ManagedLedgerFactory, Position};
    use bkswitch_mledger_spi::ManagedLedgerConfig;
    let env = env();
    let reg = &env.registry;
    reg.register("bk-a", "memory://bk-a", ClusterStatus::Active)
        .await
        .unwrap();
    reg.ensure_bootstrap("bk-a").await.unwrap();
    reg.register("bk-b", "memory://bk-b", ClusterStatus::Standby)
        .await
        .unwrap();
    reg.promote_active("bk-b").await.unwrap();
    env.clusters
        .get_or_create("bk-b")
        .advance_ledger_id_to(1_000)
        .unwrap();
    let open = |storage: &MultiClusterManagedLedgerStorage| {
        let mut config = ManagedLedgerConfig::default()
            .with_quorums(1, 1, 1)
            .with_metadata_quorums(1, 1, 1);
        storage.configure(&mut config);
        let class = storage.default_storage_class().unwrap();
        (
            ManagedLedgerFactory::from_storage_class(env.store.clone(), &*class),
            config,
        )
    };
    let name = "tenant/ns/persistent/idle";
    let (first, r) = env.init(&StorageSettings::new("memory://bk-a")).await;
    r.unwrap();
    assert_eq!(first.active_cluster().as_deref(), Some("bk-b"));
    let (factory, config) = open(&first);
    let ml = factory.open(name, config).await.unwrap();
    let mut written = Vec::new();
    for i in 0..3 {
        written.push(ml.append(format!("m{i}")).await.unwrap());
    }
    let ledger = written[0].ledger_id;
    assert!(env.clusters.get("bk-b").unwrap().contains_ledger(ledger));
    ml.close().await.unwrap();
    first.close().await.unwrap();

    // The next switch: bk-c ACTIVE, bk-b DEPRECATED (not the bootstrap).
    env.clusters
        .get_or_create("bk-c")
        .advance_ledger_id_to(5_000)
        .unwrap();
    reg.register("bk-c", "memory://bk-c", ClusterStatus::Standby)
        .await
        .unwrap();
    reg.promote_active("bk-c").await.unwrap();
    assert_eq!(
        reg.get("bk-b").await.unwrap().unwrap().status,
        ClusterStatus::Deprecated
    );

    // The restart: no watcher, only `initialize`.
    let (second, r) = env.init(&StorageSettings::new("memory://bk-a")).await;
    r.unwrap();
    assert_eq!(second.active_cluster().as_deref(), Some("bk-c"));
    let (factory, config) = open(&second);
    let deadline = tokio::time::Instant::now() + common::WAIT;
    let ml = loop {
        match factory.open(name, config.clone()).await {
            Ok(ml) => break ml,
            Err(e) if e.is_retryable() && tokio::time::Instant::now() < deadline => {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
            Err(e) => panic!("the idle topic does not load after a restart: {e}"),
        }
    };
    let entries = ml.read_entries(Position::new(ledger, 0), 10).await.unwrap();
    assert_eq!(entries.len(), 3);
    assert_eq!(&entries[2].data[..], b"m2");
    assert!(
        names(&second).contains(&"bk-b".to_owned()),
        "{:?}",
        names(&second)
    );
    ml.close().await.unwrap();
    second.close().await.unwrap();
}
