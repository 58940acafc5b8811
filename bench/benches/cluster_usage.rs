//! The exact check behind refusing to unregister a cluster that still holds
//! ledgers (`Orchestrator::cluster_usage`): it streams the managed-ledger and
//! schema trees one node at a time, so its heap must stay flat in the number
//! of topics.
//!
//! - `cluster_usage/scan`: time to count the ledgers of one cluster over an
//!   in-memory store of 1,000 and 10,000 managed ledgers (200 per namespace,
//!   3 data ledgers and one cursor each, half of them stamped `old`).
//! - The peak heap above the heap before the scan (the store's own data
//!   excluded), measured with a counting allocator for 1,000, 10,000 and
//!   50,000 managed ledgers, is printed at the end; see bench/RESULTS.md.
//!
//! Run with: cargo bench -p bkswitch-bench --bench cluster_usage
#![allow(unsafe_code)]

use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bkswitch_admin::testkit::{clusters, start_node};
use bkswitch_admin::Node;
use bkswitch_metadata_store::{CreateMode, MemoryStore, MetadataStore};
use bkswitch_proto::codec::{encode_managed_cursor_info, encode_managed_ledger_info};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{CompressionType, ManagedCursorInfo, ManagedLedgerInfo};
use bkswitch_proto::Stamped;
use criterion::{criterion_group, BenchmarkId, Criterion};

#[path = "shared/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Counting, CURRENT, PEAK};

#[global_allocator]
static GLOBAL: Counting = Counting;

const PER_NAMESPACE: usize = 200;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

async fn create(store: &dyn MetadataStore, path: &str, value: &[u8]) {
    if let Err(e) = store.create(path, value, CreateMode::PERSISTENT).await {
        assert!(
            e.kind() == bkswitch_metadata_store::ErrorKind::AlreadyExists,
            "{e}"
        );
    }
}

/// A node on a store holding `topics` managed ledgers.
async fn populated(topics: usize) -> (Node, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::new());
    let node = start_node("bench", store.clone(), &clusters()).await;
    for p in ["/managed-ledgers", "/managed-ledgers/t"] {
        create(store.as_ref(), p, b"").await;
    }
    let mut id = 1i64;
    for t in 0..topics {
        let ns = format!("/managed-ledgers/t/ns{}", t / PER_NAMESPACE);
        if t % PER_NAMESPACE == 0 {
            create(store.as_ref(), &ns, b"").await;
            create(store.as_ref(), &format!("{ns}/persistent"), b"").await;
        }
        let cluster = if t % 2 == 0 { "old" } else { "new" };
        let mut info = ManagedLedgerInfo::default();
        for _ in 0..3 {
            let mut l = LedgerInfo {
                ledger_id: id,
                entries: Some(100),
                size: Some(100 * 1024),
                ..Default::default()
            };
            l.set_cluster_stamp(cluster).unwrap();
            info.ledger_info.push(l);
            id += 1;
        }
        let ml = format!("{ns}/persistent/topic-{t}");
        let bytes = encode_managed_ledger_info(&info, CompressionType::None).unwrap();
        create(store.as_ref(), &ml, &bytes).await;
        let mut cursor = ManagedCursorInfo {
            cursors_ledger_id: id,
            mark_delete_ledger_id: Some(id - 1),
            mark_delete_entry_id: Some(99),
            ..Default::default()
        };
        cursor.set_cluster_stamp(cluster).unwrap();
        id += 1;
        let bytes = encode_managed_cursor_info(&cursor, CompressionType::None).unwrap();
        create(store.as_ref(), &format!("{ml}/sub"), &bytes).await;
    }
    (node, store)
}

fn scan(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("cluster_usage/scan");
    g.sample_size(10);
    for topics in [1_000usize, 10_000] {
        let (node, _store) = rt.block_on(populated(topics));
        g.bench_with_input(BenchmarkId::from_parameter(topics), &topics, |b, _| {
            b.iter(|| {
                let u = rt
                    .block_on(node.orchestrator().cluster_usage("old"))
                    .unwrap();
                black_box(u);
            });
        });
        rt.block_on(node.stop());
    }
    g.finish();
}

fn peak_heap() {
    let rt = runtime();
    println!("\ncluster_usage peak heap above the populated store (counting allocator):");
    for topics in [1_000usize, 10_000, 50_000] {
        let (node, _store) = rt.block_on(populated(topics));
        let before = CURRENT.load(Ordering::Relaxed);
        PEAK.store(before, Ordering::Relaxed);
        let u = rt
            .block_on(node.orchestrator().cluster_usage("old"))
            .unwrap();
        let peak = PEAK.load(Ordering::Relaxed) - before;
        assert_eq!(u.data.count as usize, topics / 2 * 3);
        assert_eq!(u.cursor.count as usize, topics / 2);
        println!(
            "  {topics:>6} managed ledgers ({} data + {} cursor ledgers on `old`): \
             peak +{:.1} KiB",
            u.data.count,
            u.cursor.count,
            peak as f64 / 1024.0
        );
        rt.block_on(node.stop());
    }
}

criterion_group!(benches, scan);

fn main() {
    benches();
    peak_heap();
    Criterion::default().configure_from_args().final_summary();
}
