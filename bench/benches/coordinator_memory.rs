//! The coordinator's memory during BUILD + PROMOTE, by number of topics.
//!
//! An in-memory metadata store holds N managed ledgers (200 per namespace),
//! each with a cursor whose cursor ledger (one entry) lives on the in-memory
//! cluster `old`; a node (the same `Node` that `bookie-switch serve` and
//! `bookie-switch coordinator` run) switches to `new`, copying and promoting
//! all N cursor ledgers, with no topic loaded (the coordinator flips every
//! cursor itself). A counting allocator records the heap: before the switch,
//! at its peak while the switch runs, and once it is SWITCHED. The copies,
//! the N ledger records and the metadata stay in this process's heap (the
//! clusters and the store are in memory), so the figure that belongs to the
//! coordinator is the **peak above the final heap**: its working memory.
//!
//! Run with: cargo bench -p bkswitch-bench --bench coordinator_memory
//! (`COORDINATOR_MEMORY_SIZES=1000,10000` to choose the sizes; default
//! 10000 and 100000).
#![allow(unsafe_code)]

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::testkit::{clusters, start_node};
use bkswitch_bk_client::{BookKeeper, LedgerConfig, WriteHandleExt};
use bkswitch_metadata_store::{CreateMode, MemoryStore, MetadataStore};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::codec::{encode_managed_cursor_info, encode_managed_ledger_info};
use bkswitch_proto::ml::{CompressionType, KeyValue, ManagedCursorInfo, ManagedLedgerInfo};
use bkswitch_proto::Stamped;
use bkswitch_registry::ClusterStatus;
use bytes::Bytes;

#[path = "shared/counting_alloc.rs"]
mod counting_alloc;
use counting_alloc::{Counting, CURRENT, PEAK};

#[global_allocator]
static GLOBAL: Counting = Counting;

const PER_NAMESPACE: usize = 200;
const MIB: f64 = 1024.0 * 1024.0;

fn heap() -> usize {
    CURRENT.load(Ordering::Relaxed)
}

async fn create(store: &dyn MetadataStore, path: &str, value: &[u8]) {
    if let Err(e) = store.create(path, value, CreateMode::PERSISTENT).await {
        assert!(
            e.kind() == bkswitch_metadata_store::ErrorKind::AlreadyExists,
            "{e}"
        );
    }
}

async fn run(topics: usize) {
    let store = Arc::new(MemoryStore::new());
    let clusters = clusters();
    let node = start_node("coordinator", store.clone(), &clusters).await;
    let old = clusters.get("old").expect("old").client();
    let ml_cfg = ManagedLedgerConfig::default();
    let ledger_cfg = LedgerConfig {
        ensemble_size: 1,
        write_quorum_size: 1,
        ack_quorum_size: 1,
        digest_type: ml_cfg.digest_type,
        password: ml_cfg.password.clone(),
        ..LedgerConfig::default()
    };
    for p in ["/managed-ledgers", "/managed-ledgers/t"] {
        create(store.as_ref(), p, b"").await;
    }
    let ml_value = encode_managed_ledger_info(
        &ManagedLedgerInfo {
            properties: vec![KeyValue {
                key: "bench".into(),
                value: "1".into(),
            }],
            ..Default::default()
        },
        CompressionType::None,
    )
    .expect("encode");
    let t0 = Instant::now();
    for t in 0..topics {
        let ns = format!("/managed-ledgers/t/ns{}", t / PER_NAMESPACE);
        if t % PER_NAMESPACE == 0 {
            create(store.as_ref(), &ns, b"").await;
            create(store.as_ref(), &format!("{ns}/persistent"), b"").await;
        }
        let w = old.create_ledger(&ledger_cfg).await.expect("create");
        w.add_all([Bytes::from_static(b"cursor position 0:41")])
            .await
            .expect("add");
        w.close().await.expect("close");
        let mut cursor = ManagedCursorInfo {
            cursors_ledger_id: w.id(),
            mark_delete_ledger_id: Some(1),
            mark_delete_entry_id: Some(41),
            ..Default::default()
        };
        cursor.set_cluster_stamp("old").expect("stamp");
        let ml = format!("{ns}/persistent/topic-{t}");
        create(store.as_ref(), &ml, &ml_value).await;
        let bytes = encode_managed_cursor_info(&cursor, CompressionType::None).expect("encode");
        create(store.as_ref(), &format!("{ml}/sub"), &bytes).await;
    }
    let populated = t0.elapsed();

    let before = heap();
    PEAK.store(before, Ordering::Relaxed);
    let started = Instant::now();
    let orch = node.orchestrator();
    node.registry()
        .register("new", "memory://new", ClusterStatus::Standby)
        .await
        .expect("register");
    let s = node.start_switch("new").await.expect("switch");
    let st = loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (rec_phase, done) = {
            let st = orch.status(&s.switch_id).await.expect("status");
            (st.phase, st.phase.is_built())
        };
        if done {
            break orch.status(&s.switch_id).await.expect("status");
        }
        assert!(
            started.elapsed() < Duration::from_secs(1800),
            "still {rec_phase} after 30 min"
        );
    };
    let took = started.elapsed();
    let peak = PEAK.load(Ordering::Relaxed);
    let after = heap();
    assert_eq!(st.phase.as_str(), "SWITCHED", "{st:?}");
    assert_eq!(st.counts.failed, 0, "{st:?}");
    assert_eq!(st.counts.promoted as usize, topics, "{st:?}");
    println!(
        "  {topics:>7} topics (cursor ledgers): populated in {:.1} s; BUILD+PROMOTE {:.1} s; \
         heap before {:.1} MiB, peak +{:.1} MiB, after +{:.1} MiB; \
         working memory (peak above final) {:.1} MiB",
        populated.as_secs_f64(),
        took.as_secs_f64(),
        before as f64 / MIB,
        peak.saturating_sub(before) as f64 / MIB,
        after.saturating_sub(before) as f64 / MIB,
        peak.saturating_sub(after) as f64 / MIB,
    );
    node.stop().await;
}

fn main() {
    // `cargo bench` passes `--bench`; this bench takes no filter.
    let sizes: Vec<usize> = std::env::var("COORDINATOR_MEMORY_SIZES")
        .ok()
        .map(|v| v.split(',').filter_map(|s| s.trim().parse().ok()).collect())
        .unwrap_or_else(|| vec![10_000, 100_000]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    println!("coordinator memory during BUILD + PROMOTE (counting allocator):");
    for n in sizes {
        rt.block_on(run(n));
    }
}
