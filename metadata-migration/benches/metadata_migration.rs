//! The write pause of a metadata-store migration and the coordinator's walk
//! memory, at 10,000 topics (and 100,000 with
//! `BKSWITCH_MIGRATION_BENCH_LARGE=1`), memory store to memory store, with a
//! live writer through a participant.
//!
//! Run: `cargo bench -p bkswitch-metadata-migration --bench metadata_migration`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_metadata_migration::{
    Coordinator, CoordinatorOptions, MigratingStore, MigrationRequest, NamedMemoryStores,
    ParticipantOptions, Phase, StoreOpener,
};
use bkswitch_metadata_store::{ErrorKind, ExpectedVersion, MetadataStore};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};

fn topic(i: usize) -> String {
    format!(
        "/managed-ledgers/tenant-{}/ns-{}/persistent/topic-{i:07}",
        i % 10,
        i % 100
    )
}

struct Run {
    pause: Duration,
    pause_nodes: u64,
    peak_walk_names: usize,
}

async fn migrate(topics: usize) -> Run {
    let stores = NamedMemoryStores::new();
    let src = stores.session("src");
    for i in 0..topics {
        src.put(&topic(i), b"{\"ledgers\":[1,2,3]}", ExpectedVersion::Any)
            .await
            .expect("populate");
    }
    let opener: Arc<dyn StoreOpener> = Arc::new(stores.clone());
    let p = MigratingStore::open(
        "memory://src",
        opener.clone(),
        ParticipantOptions {
            name: "broker-1".to_owned(),
            poll_interval: Duration::from_millis(20),
            ..ParticipantOptions::default()
        },
    )
    .await
    .expect("participant");
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (p, stop) = (p.clone(), stop.clone());
        tokio::spawn(async move {
            let mut i = 0;
            while !stop.load(Ordering::Relaxed) {
                match p.put(&topic(i % 50), b"w", ExpectedVersion::Any).await {
                    Ok(_) => {}
                    Err(e) if e.kind() == ErrorKind::WritesPaused => {}
                    Err(e) => panic!("{e}"),
                }
                i += 1;
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
    };
    let mut c = Coordinator::start(
        Arc::new(stores.session("src")),
        opener.as_ref(),
        MigrationRequest {
            id: Some("bench".to_owned()),
            source_url: "memory://src".to_owned(),
            target_url: "memory://dst".to_owned(),
            wipe_target: None,
            protected: Vec::new(),
        },
        CoordinatorOptions {
            poll_interval: Duration::from_millis(1),
            ..CoordinatorOptions::default()
        },
    )
    .await
    .expect("start");
    while c.step().await.expect("step") != Phase::Paused {}
    // The pause: from the record's PAUSED to COMPLETED (gate closed, acks,
    // last dirty paths copied and verified, flip).
    let started = Instant::now();
    let rec = c.run().await.expect("run");
    let pause = started.elapsed();
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    let _ = p.close().await;
    Run {
        pause,
        pause_nodes: rec.pause_nodes,
        peak_walk_names: c.peak_walk_names(),
    }
}

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let mut sizes = vec![10_000];
    if std::env::var_os("BKSWITCH_MIGRATION_BENCH_LARGE").is_some() {
        sizes.push(100_000);
    }
    let mut group = c.benchmark_group("metadata_migration_pause");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    for topics in sizes {
        let run = rt.block_on(migrate(topics));
        println!(
            "{topics} topics: pause {:?} over {} nodes; coordinator walk held at most {} \
             names",
            run.pause, run.pause_nodes, run.peak_walk_names
        );
        group.bench_with_input(BenchmarkId::from_parameter(topics), &topics, |b, &n| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                for _ in 0..iters {
                    total += rt.block_on(migrate(n)).pause;
                }
                total
            });
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
