//! Lookups through bkswitch's lookup proxy against Apache Pulsar's own
//! proxy, in front of the same real broker, in the same run; and lookups
//! made straight to the broker.
//!
//! Run with: cargo bench -p bkswitch-bench --bench lookup_proxy
//! (needs the Pulsar broker and proxy classpaths: `scripts/fetch-java-deps.sh`;
//! prints `skipped` without them).
//!
//! One real standalone broker; Pulsar's proxy (`ProxyServiceStarter`,
//! configured as its operators tune it for lookups: one event loop per
//! core, no lookup throttling, see `bkswitch_pulsar_harness::PulsarProxy`)
//! pointed at it; bkswitch's proxy with a default route to it, on a runtime
//! of its own. The load: 8 connections per target, each keeping 32 lookups
//! in flight over 1,000 topics (the broker owns their bundle after the
//! warm-up, as in a running cluster), for 5 s per round after a 2 s
//! warm-up; the targets take turns, 3 rounds each, and the median round is
//! reported. Four targets:
//!
//! - `broker`: lookups straight to the broker (the floor).
//! - `pulsar-proxy`: Pulsar's proxy, which asks the broker and answers
//!   `Connect` through itself.
//! - `bkswitch-proxy`: bkswitch's proxy, which answers from its routing
//!   table with a `Redirect` to the broker (what a proxy's throughput is).
//! - `bkswitch+redirect`: the same, the redirect followed to the broker on
//!   a connection kept open, as a client does: the whole lookup a client
//!   makes through bkswitch (two round trips).
//!
//! Each line: lookups per second, p50 and p99 in microseconds.
//!
//! With `LOOKUP_BENCH_ROUTES=100,1000000` (no Pulsar needed): bkswitch's
//! proxy alone, once per table size, the table holding that many topic
//! routes (and a default route), the same load over 1,000,000 topic names;
//! whether a lookup gets slower as the table grows (6 rounds of each size,
//! the sizes taking turns in alternating order, median round).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_lookup_proxy::{LookupProxy, ProxyConfig};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_pulsar_harness::{
    pulsar_available, PulsarProxy, PulsarProxyOptions, PulsarStandalone, StandaloneOptions,
};
use bkswitch_pulsar_wire::proto::command_lookup_topic_response::LookupType;
use bkswitch_pulsar_wire::{commands, BaseCommand, CommandType, Frame, PulsarCodec};
use bkswitch_topic_routes::{Change, PulsarCluster, RouteKey, TopicRoutes};
use futures::{SinkExt, StreamExt};
use tokio::net::TcpStream;
use tokio_util::codec::Framed;

const CONNECTIONS: usize = 8;
const IN_FLIGHT: usize = 32;
const TOPICS: usize = 1_000;
const ROUND: Duration = Duration::from_secs(5);
const WARM_UP: Duration = Duration::from_secs(2);
const ROUNDS: usize = 3;
/// Rounds of each size in the table-size mode (an even number: each size
/// goes first as often as last).
const SIZE_ROUNDS: usize = 6;
const PROTOCOL: i32 = 21;

type Conn = Framed<TcpStream, PulsarCodec>;

/// How many topic names the load cycles over ([`TOPICS`], or 1,000,000
/// in the table-size mode).
static SPREAD: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(TOPICS);

fn topic(i: usize) -> String {
    let spread = SPREAD.load(std::sync::atomic::Ordering::Relaxed);
    format!("persistent://public/default/lookup-bench-{}", i % spread)
}

async fn connect(addr: SocketAddr) -> Conn {
    let stream = TcpStream::connect(addr).await.expect("connect");
    stream.set_nodelay(true).expect("nodelay");
    let mut c = Framed::new(stream, PulsarCodec::new());
    c.send(Frame::new(commands::connect(
        "bkswitch-bench",
        PROTOCOL,
        None,
        None,
    )))
    .await
    .expect("send connect");
    let answer = c.next().await.expect("connected").expect("frame");
    assert_eq!(
        answer.kind(),
        Some(CommandType::Connected),
        "{:?}",
        answer.command
    );
    c
}

fn lookup_answer(cmd: &BaseCommand) -> (u64, LookupType, bool) {
    let r = cmd
        .lookup_topic_response
        .as_ref()
        .unwrap_or_else(|| panic!("not a lookup answer: {cmd:?}"));
    let kind = LookupType::try_from(r.response.unwrap_or_default()).expect("lookup type");
    assert_ne!(kind, LookupType::Failed, "lookup failed: {r:?}");
    (r.request_id, kind, r.authoritative.unwrap_or(false))
}

/// One connection's share of a round: latencies in µs of the lookups that
/// completed between `start` and `end` (those before `start` warm up).
async fn drive(
    target: SocketAddr,
    follow: Option<SocketAddr>,
    seed: usize,
    start: Instant,
    end: Instant,
) -> Vec<u32> {
    let mut conn = connect(target).await;
    let mut broker = match follow {
        Some(addr) => Some(connect(addr).await),
        None => None,
    };
    let mut next_id = 1u64;
    let mut sent: HashMap<u64, (Instant, usize)> = HashMap::new();
    let mut latencies = Vec::new();
    let mut n = seed;
    for _ in 0..IN_FLIGHT {
        conn.send(Frame::new(commands::lookup(&topic(n), next_id, false)))
            .await
            .expect("send");
        sent.insert(next_id, (Instant::now(), n));
        next_id += 1;
        n += 7;
    }
    loop {
        let (cmd, from_broker) = match &mut broker {
            Some(b) => tokio::select! {
                f = conn.next() => (f.expect("open").expect("frame").command, false),
                f = b.next() => (f.expect("open").expect("frame").command, true),
            },
            None => (
                conn.next().await.expect("open").expect("frame").command,
                false,
            ),
        };
        if cmd.r#type == CommandType::Ping as i32 {
            let pong = Frame::new(commands::pong());
            if from_broker {
                broker
                    .as_mut()
                    .expect("broker")
                    .send(pong)
                    .await
                    .expect("pong");
            } else {
                conn.send(pong).await.expect("pong");
            }
            continue;
        }
        let (id, kind, authoritative) = lookup_answer(&cmd);
        let (at, t) = sent.remove(&id).expect("a request of ours");
        if kind == LookupType::Redirect && !from_broker {
            if let Some(b) = &mut broker {
                // Follow as a client does: the same lookup, at the broker.
                b.send(Frame::new(commands::lookup(&topic(t), id, authoritative)))
                    .await
                    .expect("send");
                sent.insert(id, (at, t));
                continue;
            }
        }
        let now = Instant::now();
        if now >= start {
            latencies.push(now.duration_since(at).as_micros() as u32);
        }
        if now >= end {
            if sent.is_empty() {
                return latencies;
            }
            continue;
        }
        conn.send(Frame::new(commands::lookup(&topic(n), next_id, false)))
            .await
            .expect("send");
        sent.insert(next_id, (Instant::now(), n));
        next_id += 1;
        n += 7;
    }
}

struct Figures {
    per_sec: f64,
    p50: u32,
    p99: u32,
}

async fn round(target: SocketAddr, follow: Option<SocketAddr>) -> Figures {
    let start = Instant::now() + WARM_UP;
    let end = start + ROUND;
    let tasks: Vec<_> = (0..CONNECTIONS)
        .map(|c| tokio::spawn(drive(target, follow, c * 131, start, end)))
        .collect();
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.expect("load task"));
    }
    all.sort_unstable();
    let at = |q: f64| all[((all.len() as f64 * q) as usize).min(all.len() - 1)];
    Figures {
        per_sec: all.len() as f64 / ROUND.as_secs_f64(),
        p50: at(0.50),
        p99: at(0.99),
    }
}

fn addr(url: &str) -> SocketAddr {
    url.trim_start_matches("pulsar://")
        .trim_end_matches('/')
        .parse()
        .expect("host:port")
}

/// The load's runtime and bkswitch's proxy's own, two threads each.
fn runtimes() -> (tokio::runtime::Runtime, tokio::runtime::Runtime) {
    let load = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("load runtime");
    let proxy_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bkswitch-proxy")
        .enable_all()
        .build()
        .expect("proxy runtime");
    (load, proxy_rt)
}

/// The table-size mode: bkswitch's proxy with `sizes` topic routes in
/// turn, each size timed as the main mode times a target.
fn table_sizes(sizes: &[usize]) {
    SPREAD.store(1_000_000, std::sync::atomic::Ordering::Relaxed);
    let (load, proxy_rt) = runtimes();
    let mut results: Vec<Vec<Figures>> = sizes.iter().map(|_| Vec::new()).collect();
    let proxies: Vec<LookupProxy> = sizes
        .iter()
        .map(|&n| {
            proxy_rt.block_on(async {
                let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
                let mut changes = vec![
                    Change::RegisterCluster(PulsarCluster {
                        name: "east".to_owned(),
                        service_url: "pulsar://127.0.0.1:6650".to_owned(),
                        service_url_tls: None,
                        web_service_url: "http://127.0.0.1:8080".to_owned(),
                        admin_url: "http://127.0.0.1:8080".to_owned(),
                    }),
                    Change::SetRoute(RouteKey::Default, "east".to_owned()),
                ];
                changes.extend(
                    (0..n).map(|i| Change::SetRoute(RouteKey::Topic(topic(i)), "east".to_owned())),
                );
                TopicRoutes::new(Arc::clone(&store))
                    .apply(&changes)
                    .await
                    .expect("routes");
                LookupProxy::start(ProxyConfig::new(&format!("bench-{n}")), store)
                    .await
                    .expect("bkswitch's proxy")
            })
        })
        .collect();
    // The sizes take turns, first one first, then last one first: the
    // second of two back-to-back rounds runs slower (by 3-9 % here,
    // whichever size it is), so a fixed order would favour the first.
    for r in 0..SIZE_ROUNDS {
        let mut order: Vec<usize> = (0..proxies.len()).collect();
        if r % 2 == 1 {
            order.reverse();
        }
        for i in order {
            let addr = proxies[i].binary_addr().expect("binary");
            results[i].push(load.block_on(round(addr, None)));
        }
    }
    println!(
        "{:<10} {:>12} {:>9} {:>9}",
        "routes", "lookups/s", "p50 µs", "p99 µs"
    );
    for (i, n) in sizes.iter().enumerate() {
        let rounds = &mut results[i];
        rounds.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
        let m = &rounds[SIZE_ROUNDS / 2];
        println!("{n:<10} {:>12.0} {:>9} {:>9}", m.per_sec, m.p50, m.p99);
    }
    for p in proxies {
        proxy_rt.block_on(p.stop());
    }
}

fn main() {
    if let Ok(sizes) = std::env::var("LOOKUP_BENCH_ROUTES") {
        let sizes: Vec<usize> = sizes
            .split(',')
            .map(|n| {
                n.trim()
                    .parse()
                    .expect("LOOKUP_BENCH_ROUTES: sizes, comma separated")
            })
            .collect();
        table_sizes(&sizes);
        return;
    }
    if !pulsar_available() {
        println!("skipped: the Pulsar classpaths are not installed (scripts/fetch-java-deps.sh)");
        return;
    }
    let (load, proxy_rt) = runtimes();
    let broker = load
        .block_on(PulsarStandalone::start(StandaloneOptions::new("bench")))
        .expect("a standalone broker");
    let pulsar_proxy = load
        .block_on(PulsarProxy::start(PulsarProxyOptions::new(&broker)))
        .expect("Pulsar's proxy");
    let ours = proxy_rt.block_on(async {
        let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
        TopicRoutes::new(Arc::clone(&store))
            .apply(&[
                Change::RegisterCluster(PulsarCluster {
                    name: broker.name().to_owned(),
                    service_url: broker.broker_url(),
                    service_url_tls: None,
                    web_service_url: broker.http_url(),
                    admin_url: broker.http_url(),
                }),
                Change::SetRoute(RouteKey::Default, broker.name().to_owned()),
            ])
            .await
            .expect("routes");
        LookupProxy::start(ProxyConfig::new("bench"), store)
            .await
            .expect("bkswitch's proxy")
    });
    let broker_addr = addr(&broker.broker_url());
    let targets: [(&str, SocketAddr, Option<SocketAddr>); 4] = [
        ("broker", broker_addr, None),
        ("pulsar-proxy", addr(&pulsar_proxy.service_url()), None),
        ("bkswitch-proxy", ours.binary_addr().expect("binary"), None),
        (
            "bkswitch+redirect",
            ours.binary_addr().expect("binary"),
            Some(broker_addr),
        ),
    ];
    // Every topic's bundle owned before anything is timed.
    load.block_on(round(broker_addr, None));
    let mut results: Vec<Vec<Figures>> = targets.iter().map(|_| Vec::new()).collect();
    for _ in 0..ROUNDS {
        for (i, (_, target, follow)) in targets.iter().enumerate() {
            results[i].push(load.block_on(round(*target, *follow)));
        }
    }
    println!(
        "{:<18} {:>12} {:>9} {:>9}",
        "target", "lookups/s", "p50 µs", "p99 µs"
    );
    for (i, (name, _, _)) in targets.iter().enumerate() {
        let rounds = &mut results[i];
        rounds.sort_by(|a, b| a.per_sec.total_cmp(&b.per_sec));
        let m = &rounds[ROUNDS / 2];
        println!("{name:<18} {:>12.0} {:>9} {:>9}", m.per_sec, m.p50, m.p99);
    }
    proxy_rt.block_on(ours.stop());
    drop(pulsar_proxy);
    drop(broker);
}
