//! The lookup proxy's route resolution with many routes: the memory each
//! route takes in a proxy (the table, and the lookup index the proxy builds
//! on it), the time of one resolve (topic route hit, longest prefix,
//! namespace fallback) through the table's sorted maps and through the
//! index, at 100, 10,000 and 1,000,000 routes, and how the table lies in
//! the store (written through `TopicRoutes` to the in-memory store: whole
//! in one node, or sharded; the largest node).
//!
//! Run with: cargo bench -p bkswitch-bench --bench lookup_routes
//! (`-- --quick`: 100 and 10,000 routes only.)
//!
//! Each resolve figure is the median of 15 rounds of 200,000 resolves of
//! names drawn from a fixed pseudo-random sequence (the same at every
//! size), so that caches do not see one name again and again. Memory is
//! counted by a global allocator that adds up live bytes: the table's
//! bytes after it is built, minus those before, divided by the routes (plus,
//! for the index, the memory mapping its topic routes lie in when large).

#![allow(unsafe_code, reason = "the counting allocator needs unsafe impls")]

#[path = "shared/counting_alloc.rs"]
mod counting_alloc;

use std::hint::black_box;
use std::sync::atomic::Ordering;
use std::time::Instant;

use std::sync::Arc;

use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_topic_routes::{
    Change, PulsarCluster, RouteIndex, RouteKey, RoutingTable, TopicRoutes,
};
use counting_alloc::{Counting, CURRENT};

#[global_allocator]
static ALLOC: Counting = Counting;

const NAMESPACES: usize = 100;
const ROUNDS: usize = 15;
const PER_ROUND: usize = 200_000;

fn cluster(name: &str, port: u16) -> PulsarCluster {
    PulsarCluster {
        name: name.to_owned(),
        service_url: format!("pulsar://127.0.0.1:{port}"),
        service_url_tls: None,
        web_service_url: format!("http://127.0.0.1:{}", port + 1),
        admin_url: format!("http://127.0.0.1:{}", port + 1),
    }
}

fn topic(i: usize) -> String {
    format!("persistent://tenant/ns-{}/orders-{i:07}", i % NAMESPACES)
}

/// `n` routes: 98 % topic routes, 1 % prefix routes, 1 % namespace routes
/// (capped at the namespaces there are), and a default.
fn table(n: usize) -> RoutingTable {
    let mut changes = vec![
        Change::RegisterCluster(cluster("east", 6650)),
        Change::RegisterCluster(cluster("west", 7650)),
        Change::SetRoute(RouteKey::Default, "east".to_owned()),
    ];
    let prefixes = n / 100;
    let namespaces = (n / 100).min(NAMESPACES / 2);
    for i in 0..n - prefixes - namespaces {
        let to = if i % 2 == 0 { "east" } else { "west" };
        changes.push(Change::SetRoute(RouteKey::Topic(topic(i)), to.to_owned()));
    }
    for i in 0..prefixes {
        // Topics numbered past the topic routes: `orders-9xxxxx…`.
        let p = format!("persistent://tenant/ns-{}/batch-{i:06}", i % NAMESPACES);
        changes.push(Change::SetRoute(RouteKey::Prefix(p), "west".to_owned()));
    }
    for i in 0..namespaces {
        changes.push(Change::SetRoute(
            RouteKey::Namespace(format!("tenant/ns-{i}")),
            "west".to_owned(),
        ));
    }
    RoutingTable::default().apply(&changes).expect("table")
}

/// The median ns per resolve over [`ROUNDS`] rounds of `names`, through
/// `index` when given, else through the table.
fn time(t: &RoutingTable, index: Option<&RouteIndex>, names: &[String]) -> f64 {
    let mut rounds: Vec<f64> = (0..ROUNDS)
        .map(|_| {
            let started = Instant::now();
            for name in names {
                let r = match index {
                    Some(index) => index.resolve(t, name),
                    None => t.resolve(name),
                }
                .expect("resolve");
                black_box(r.map(|r| r.cluster.name.len()));
            }
            started.elapsed().as_nanos() as f64 / names.len() as f64
        })
        .collect();
    rounds.sort_by(f64::total_cmp);
    rounds[ROUNDS / 2]
}

/// A fixed pseudo-random sequence (xorshift), the same at every size.
fn draws(bound: usize) -> impl Iterator<Item = usize> {
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    std::iter::repeat_with(move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % bound as u64) as usize
    })
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let sizes: &[usize] = if quick {
        &[100, 10_000]
    } else {
        &[100, 10_000, 1_000_000]
    };
    println!(
        "{:>9} {:>11} {:>11} {:>7} {:>11} {:>10} {:>18} {:>18} {:>18}",
        "routes",
        "table B/rt",
        "index B/rt",
        "nodes",
        "largest B",
        "reload ms",
        "topic ns tbl/idx",
        "prefix ns tbl/idx",
        "fallback ns tbl/idx"
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("runtime");
    for &n in sizes {
        let before = CURRENT.load(Ordering::Relaxed);
        let t = table(n);
        let bytes = CURRENT.load(Ordering::Relaxed).saturating_sub(before);
        let before = CURRENT.load(Ordering::Relaxed);
        let index = RouteIndex::new(&t);
        // A large index's topic routes lie in a memory mapping, which the
        // allocator does not see: counted apart.
        let index_bytes =
            CURRENT.load(Ordering::Relaxed).saturating_sub(before) + index.mapped_bytes();
        let (nodes, largest, reload_ms) = runtime.block_on(stored(&t));
        let topic_routes = n - n / 100 - (n / 100).min(NAMESPACES / 2);
        let hits: Vec<String> = draws(topic_routes).take(PER_ROUND).map(topic).collect();
        let prefixed: Vec<String> = draws((n / 100).max(1))
            .take(PER_ROUND)
            .map(|i| {
                format!(
                    "persistent://tenant/ns-{}/batch-{i:06}-x{}",
                    i % NAMESPACES,
                    i % 7
                )
            })
            .collect();
        // Names no topic or prefix route matches: their namespace's route
        // or the default answers.
        let misses: Vec<String> = draws(1 << 30)
            .take(PER_ROUND)
            .map(|i| format!("persistent://tenant/ns-{}/other-{i}", i % NAMESPACES))
            .collect();
        // Every class resolves to a route of its own kind, the same through
        // the index as through the table.
        let kind = |name: &str| t.resolve(name).unwrap().unwrap().route;
        assert!(matches!(kind(&hits[0]), RouteKey::Topic(_)));
        assert!(matches!(kind(&prefixed[0]), RouteKey::Prefix(_)));
        for name in hits.iter().chain(&prefixed).chain(&misses).step_by(97) {
            assert_eq!(t.resolve(name).unwrap(), index.resolve(&t, name).unwrap());
        }
        let both = |names: &[String]| {
            format!(
                "{:.0} / {:.0}",
                time(&t, None, names),
                time(&t, Some(&index), names)
            )
        };
        println!(
            "{n:>9} {:>11.0} {:>11.0} {nodes:>7} {largest:>11} {reload_ms:>10.1} {:>18} {:>18} {:>18}",
            bytes as f64 / n as f64,
            index_bytes as f64 / n as f64,
            both(&hits),
            both(&prefixed),
            both(&misses)
        );
        drop(index);
        drop(t);
    }
}

/// `t` written through `TopicRoutes` (default layout) to an in-memory
/// store, read back; the nodes it takes, the largest one's bytes, and the
/// milliseconds a proxy's reload takes (read the whole table, index it).
async fn stored(t: &RoutingTable) -> (usize, usize, f64) {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let routes = TopicRoutes::new(Arc::clone(&store));
    let mut changes: Vec<Change> = t
        .clusters
        .values()
        .map(|c| Change::RegisterCluster(c.clone()))
        .collect();
    changes.extend(
        t.routes
            .iter()
            .map(|(k, c)| Change::SetRoute(k.parse().expect("a stored route parses"), c.clone())),
    );
    routes.apply(&changes).await.expect("written");
    // What a proxy does on every change: read the table, index it.
    let started = Instant::now();
    let read = routes.table().await.expect("read");
    let index = RouteIndex::new(&read);
    let reload = started.elapsed();
    black_box(&index);
    assert_eq!(read.routes, t.routes);
    let mut sizes = vec![store
        .get(&routes.table_path())
        .await
        .unwrap()
        .unwrap()
        .value
        .len()];
    for c in store.children(&routes.shards_path()).await.unwrap() {
        let node = format!("{}/{c}", routes.shards_path());
        sizes.push(store.get(&node).await.unwrap().unwrap().value.len());
    }
    (
        sizes.len(),
        sizes.into_iter().max().unwrap_or(0),
        reload.as_secs_f64() * 1e3,
    )
}
