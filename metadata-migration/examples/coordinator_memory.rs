//! The coordinator's peak heap while it migrates N metadata nodes from a real
//! ZooKeeper to a real etcd (`zk-harness`, `etcd-harness`): the stores run
//! in their own processes, so the heap counted here (a counting global
//! allocator) is the coordinator's — its walk, its pages, its two clients.
//!
//! The tree is shaped like a Pulsar cluster's managed-ledger metadata, in one
//! of two shapes (the second argument):
//! - `wide` (the default): `/managed-ledgers/tenant-{i % 10}/ns-{i % 100}/persistent/topic-{i}`,
//!   a namespace holds N / 100 topics, so the widest level grows with N;
//! - `bounded`: `/managed-ledgers/tenant-{i / 10,000}/ns-{(i / 100) % 100}/persistent/topic-{i}`,
//!   100 topics per namespace and 100 namespaces per tenant at every N.
//!
//! The peak is measured from the heap after the tree was written and the
//! seeding client closed, over the whole migration (start → COMPLETED).
//!
//! Run (figures in `bench/RESULTS.md`):
//!
//! ```text
//! cargo run -p bkswitch-metadata-migration --example coordinator_memory -- 10000
//! cargo run -p bkswitch-metadata-migration --example coordinator_memory -- 100000
//! cargo run -p bkswitch-metadata-migration --example coordinator_memory -- 100000 bounded
//! ```

#![allow(unsafe_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_metadata_migration::{
    Coordinator, CoordinatorOptions, MigrationRequest, Phase, StoreOpener, UrlOpener,
};
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore, StoreTimeouts};

/// Counts live heap bytes and their high-water mark, then hands every call
/// to the system allocator unchanged.
struct Counting;

static CURRENT: AtomicUsize = AtomicUsize::new(0);
static PEAK: AtomicUsize = AtomicUsize::new(0);

fn grow(n: usize) {
    let now = CURRENT.fetch_add(n, Ordering::Relaxed) + n;
    PEAK.fetch_max(now, Ordering::Relaxed);
}

// SAFETY: delegates every call to the system allocator unchanged; only counts bytes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        grow(layout.size());
        // SAFETY: same contract as the caller's.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        CURRENT.fetch_sub(layout.size(), Ordering::Relaxed);
        // SAFETY: same contract as the caller's.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if new_size >= layout.size() {
            grow(new_size - layout.size());
        } else {
            CURRENT.fetch_sub(layout.size() - new_size, Ordering::Relaxed);
        }
        // SAFETY: same contract as the caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn topic(i: usize, bounded: bool) -> String {
    let (tenant, ns) = if bounded {
        (i / 10_000, (i / 100) % 100)
    } else {
        (i % 10, i % 100)
    };
    format!("/managed-ledgers/tenant-{tenant}/ns-{ns}/persistent/topic-{i:07}")
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn seed(store: Arc<dyn MetadataStore>, n: usize, bounded: bool) {
    let mut set = tokio::task::JoinSet::new();
    for w in 0..64 {
        let store = store.clone();
        set.spawn(async move {
            for i in (w..n).step_by(64) {
                store
                    .put(
                        &topic(i, bounded),
                        b"{\"ledgers\":[1,2,3],\"cursor\":\"sub\"}",
                        ExpectedVersion::Any,
                    )
                    .await
                    .expect("seed");
            }
        });
    }
    while let Some(r) = set.join_next().await {
        r.expect("seeding task");
    }
}

fn main() {
    let n: usize = std::env::args()
        .nth(1)
        .map(|a| a.replace('_', "").parse().expect("N, a number of nodes"))
        .unwrap_or(10_000);
    let bounded = match std::env::args().nth(2).as_deref() {
        None | Some("wide") => false,
        Some("bounded") => true,
        Some(other) => panic!("shape `{other}`: use `wide` or `bounded`"),
    };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    bkswitch_zk_harness::require_zk();
    let zk = bkswitch_zk_harness::shared();
    let etcd = bkswitch_etcd_harness::shared();
    let nonce = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_millis())
            .unwrap_or_default()
    );
    let zk_url = format!("zk://{}/memory-{nonce}", zk.connect_string());
    let etcd_url = etcd.url(&format!("/memory-{nonce}"));
    runtime.block_on(async {
        let opener = UrlOpener {
            timeouts: StoreTimeouts {
                session: Duration::from_secs(10),
                operation: Duration::from_secs(30),
                connect: Duration::from_secs(30),
            },
        };
        let seeding = Instant::now();
        let seeder = opener.open(&zk_url).await.expect("zk");
        seed(seeder.clone(), n, bounded).await;
        seeder.close().await.expect("close");
        drop(seeder);
        println!(
            "seeded {n} topics ({} shape) in {:.1?}",
            if bounded { "bounded" } else { "wide" },
            seeding.elapsed()
        );

        let source = opener.open(&zk_url).await.expect("zk");
        let base = CURRENT.load(Ordering::Relaxed);
        PEAK.store(base, Ordering::Relaxed);
        let started = Instant::now();
        let mut c = Coordinator::start(
            source.clone(),
            &opener,
            MigrationRequest {
                id: None,
                source_url: zk_url.clone(),
                target_url: etcd_url.clone(),
                wipe_target: None,
                protected: Vec::new(),
            },
            CoordinatorOptions::default(),
        )
        .await
        .expect("start");
        let rec = c.run().await.expect("migration");
        let took = started.elapsed();
        assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
        assert!(rec.copied >= n as u64, "{rec:?}");
        let peak = PEAK.load(Ordering::Relaxed).saturating_sub(base);
        println!(
            "migrated {n} topics ({} nodes copied) in {took:.1?}: coordinator peak heap \
             {:.2} MiB above the {:.2} MiB before the start; walk held at most {} names",
            rec.copied,
            mib(peak),
            mib(base),
            c.peak_walk_names()
        );
        drop(c);
        source.close().await.ok();
    });
}
