//! Helpers of the migration tests.
#![allow(dead_code, unreachable_pub)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_migration::{
    is_control_path, Coordinator, CoordinatorOptions, MigratingStore, MigrationRequest,
    NamedMemoryStores, ParticipantOptions, StoreOpener,
};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataStore, MetadataStoreExt,
};

pub fn coordinator_options() -> CoordinatorOptions {
    CoordinatorOptions {
        ack_timeout: Duration::from_secs(5),
        page_size: 100,
        pause_threshold: 50,
        max_catch_up_rounds: 6,
        poll_interval: Duration::from_millis(5),
    }
}

pub fn participant_options(name: &str) -> ParticipantOptions {
    ParticipantOptions {
        name: name.to_owned(),
        poll_interval: Duration::from_millis(20),
        ..ParticipantOptions::default()
    }
}

pub fn topic(i: usize) -> String {
    format!("/managed-ledgers/public/default/persistent/topic-{i:06}")
}

/// `n` topics (versions 0..3), a sequential id generator with a counter of 7
/// (children deleted) and a parent with `wide` children.
pub async fn populate(store: &dyn MetadataStore, n: usize, wide: usize) {
    for i in 0..n {
        let p = topic(i);
        store
            .put(&p, format!("ml-{i}").as_bytes(), ExpectedVersion::Any)
            .await
            .expect("put");
        for _ in 0..(i % 3) {
            store
                .put(&p, format!("ml-{i}").as_bytes(), ExpectedVersion::Any)
                .await
                .expect("put again");
        }
    }
    store
        .put("/ledgers/idgen", b"", ExpectedVersion::Any)
        .await
        .expect("idgen");
    for _ in 0..7 {
        let (p, _) = store
            .create("/ledgers/idgen/ID-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
            .await
            .expect("seq");
        store.delete(&p, ExpectedVersion::Any).await.expect("del");
    }
    for i in 0..wide {
        store
            .put(&format!("/wide/c{i:06}"), b"w", ExpectedVersion::Any)
            .await
            .expect("wide");
    }
}

/// Every persistent node of `source` is in `target` with the same value and
/// version, sequential counters are not behind, and `target` has nothing
/// else (control nodes and ephemerals aside). Returns the nodes compared.
pub async fn assert_same_tree(source: &dyn MetadataStore, target: &dyn MetadataStore) -> usize {
    assert_same_tree_except(source, target, &[]).await
}

/// [`assert_same_tree`] leaving out the paths in `skip` (written after the
/// flip) and their subtrees.
pub async fn assert_same_tree_except(
    source: &dyn MetadataStore,
    target: &dyn MetadataStore,
    skip: &[String],
) -> usize {
    let skipped = |p: &str| {
        is_control_path(p)
            || p == "/zookeeper"
            || skip
                .iter()
                .any(|s| p == s || p.starts_with(&format!("{s}/")))
    };
    let mut stack = vec!["/".to_owned()];
    let mut n = 0;
    while let Some(p) = stack.pop() {
        let mut names = source.children(&p).await.expect("children");
        let t_names = target.children(&p).await.expect("children");
        for t in &t_names {
            let child = join(&p, t);
            if skipped(&child) {
                continue;
            }
            let s = source.get(&child).await.expect("get");
            let tg = target.get(&child).await.expect("get").expect("listed");
            assert!(
                s.is_some() || tg.stat.ephemeral,
                "{child} is in the target only"
            );
        }
        names.retain(|c| !skipped(&join(&p, c)));
        for c in names {
            let child = join(&p, &c);
            let s = source.get(&child).await.expect("get").expect("listed");
            if s.stat.ephemeral {
                continue;
            }
            let t = target
                .get(&child)
                .await
                .expect("get")
                .unwrap_or_else(|| panic!("{child} missing in the target"));
            assert_eq!(s.value, t.value, "value of {child}");
            assert_eq!(s.stat.version, t.stat.version, "version of {child}");
            assert!(
                t.stat.next_sequential_suffix() >= s.stat.next_sequential_suffix(),
                "counter of {child}: {:?} vs {:?}",
                s.stat,
                t.stat
            );
            n += 1;
            stack.push(child);
        }
    }
    n
}

pub fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Conditional writes with versions read before the migration, through a
/// participant; retries on `WritesPaused`, counts every conflict.
pub struct Writer {
    pub stop: Arc<AtomicBool>,
    pub conflicts: Arc<AtomicU64>,
    pub paused: Arc<AtomicU64>,
    pub writes: Arc<AtomicU64>,
    pub handle: tokio::task::JoinHandle<Vec<(String, i64)>>,
}

pub async fn start_writer(store: MigratingStore, topics: Vec<String>, tag: &'static str) -> Writer {
    start_writer_every(store, topics, tag, Duration::from_millis(1)).await
}

/// [`start_writer`] with a pause of `every` between writes.
pub async fn start_writer_every(
    store: MigratingStore,
    topics: Vec<String>,
    tag: &'static str,
    every: Duration,
) -> Writer {
    let mut held = Vec::new();
    for t in topics {
        let v = store
            .get(&t)
            .await
            .expect("get")
            .expect("exists")
            .stat
            .version;
        held.push((t, v));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let conflicts = Arc::new(AtomicU64::new(0));
    let paused = Arc::new(AtomicU64::new(0));
    let writes = Arc::new(AtomicU64::new(0));
    let (s2, c2, p2, w2) = (
        stop.clone(),
        conflicts.clone(),
        paused.clone(),
        writes.clone(),
    );
    let handle = tokio::spawn(async move {
        let mut i = 0u64;
        while !s2.load(Ordering::Relaxed) {
            let k = (i as usize) % held.len();
            let (path, v) = held[k].clone();
            match store
                .put(
                    &path,
                    format!("{tag}-{i}").as_bytes(),
                    ExpectedVersion::Exactly(v),
                )
                .await
            {
                Ok(stat) => {
                    held[k].1 = stat.version;
                    w2.fetch_add(1, Ordering::Relaxed);
                }
                Err(e) if e.kind() == ErrorKind::WritesPaused => {
                    p2.fetch_add(1, Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(2)).await;
                    continue;
                }
                Err(e) if e.is_conflict() => {
                    c2.fetch_add(1, Ordering::Relaxed);
                    let now = store.get(&path).await.expect("get").expect("exists");
                    held[k].1 = now.stat.version;
                }
                Err(e) => panic!("writer {tag}: {e}"),
            }
            // New nodes and deletions too.
            if i % 7 == 0 {
                let p = format!("/new/{tag}/n{i}");
                loop {
                    match store.put(&p, b"n", ExpectedVersion::NotExists).await {
                        Ok(_) => break,
                        Err(e) if e.kind() == ErrorKind::WritesPaused => {
                            tokio::time::sleep(Duration::from_millis(2)).await
                        }
                        Err(e) => panic!("writer {tag} create: {e}"),
                    }
                }
                if i % 21 == 0 {
                    loop {
                        match store.delete(&p, ExpectedVersion::Any).await {
                            Ok(_) => break,
                            Err(e) if e.kind() == ErrorKind::WritesPaused => {
                                tokio::time::sleep(Duration::from_millis(2)).await
                            }
                            Err(e) => panic!("writer {tag} delete: {e}"),
                        }
                    }
                }
            }
            i += 1;
            tokio::time::sleep(every).await;
        }
        held
    });
    Writer {
        stop,
        conflicts,
        paused,
        writes,
        handle,
    }
}

pub async fn wait_swapped(stores: &[&MigratingStore], url: &str) {
    for _ in 0..500 {
        if stores.iter().all(|s| s.url() == url && !s.is_paused()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("participants did not swap to {url}");
}

pub async fn participant(opener: Arc<dyn StoreOpener>, url: &str, name: &str) -> MigratingStore {
    MigratingStore::open(url, opener, participant_options(name))
        .await
        .expect("participant")
}

pub async fn clear(store: &dyn MetadataStore) {
    store.delete_recursive("/").await.expect("clear");
}

/// Every node of `store` as `(path, value, version)`, sorted (control paths
/// and ephemeral nodes included).
pub async fn tree(store: &dyn MetadataStore) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let mut todo = vec!["/".to_owned()];
    while let Some(p) = todo.pop() {
        for c in store.children(&p).await.expect("children") {
            let path = if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            };
            if let Some(r) = store.get(&path).await.expect("get") {
                out.push((path.clone(), r.value, r.stat.version));
            }
            todo.push(path);
        }
    }
    out.sort();
    out
}

/// Opens `zk://` and `etcd://` URLs with short sessions (the real-server
/// tests).
pub fn url_opener() -> Arc<dyn StoreOpener> {
    Arc::new(bkswitch_metadata_migration::UrlOpener {
        timeouts: bkswitch_metadata_store::StoreTimeouts {
            session: Duration::from_secs(5),
            operation: Duration::from_secs(10),
            connect: Duration::from_secs(20),
        },
    })
}

/// A name part no other test process or run uses.
pub fn nonce() -> String {
    let n = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{}-{n:x}", std::process::id())
}

/// A migration request from `memory://src` to `memory://dst`.
pub fn request(id: &str) -> MigrationRequest {
    MigrationRequest {
        id: Some(id.to_owned()),
        source_url: "memory://src".to_owned(),
        target_url: "memory://dst".to_owned(),
        wipe_target: None,
        protected: Vec::new(),
    }
}

/// `memory://src` populated with `n` nodes (`wide` under one parent), and an
/// opener of the named stores.
pub async fn setup(n: usize, wide: usize) -> (NamedMemoryStores, Arc<dyn StoreOpener>) {
    let stores = NamedMemoryStores::new();
    populate(&stores.session("src"), n, wide).await;
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    (stores, opener)
}

/// A session of `memory://src`.
pub fn src(stores: &NamedMemoryStores) -> Arc<dyn MetadataStore> {
    Arc::new(stores.session("src"))
}

/// A coordinator of migration `id` from `memory://src` to `memory://dst`
/// with [`coordinator_options`].
pub async fn start_coordinator(
    stores: &NamedMemoryStores,
    opener: &Arc<dyn StoreOpener>,
    id: &str,
) -> Coordinator {
    Coordinator::start(
        src(stores),
        opener.as_ref(),
        request(id),
        coordinator_options(),
    )
    .await
    .expect("start")
}

/// A participant wrapping a new session of `memory://src`.
pub async fn wrap_src(
    stores: &NamedMemoryStores,
    opener: &Arc<dyn StoreOpener>,
    options: ParticipantOptions,
) -> MigratingStore {
    MigratingStore::wrap(
        Arc::new(stores.session("src")),
        "memory://src",
        opener.clone(),
        options,
    )
    .await
    .expect("participant")
}

/// Waits (up to a second) until every one of `participants` closed its
/// write gate.
pub async fn wait_paused(participants: &[&MigratingStore]) {
    for _ in 0..200 {
        if participants.iter().all(|p| p.is_paused()) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    panic!("participants did not pause");
}
