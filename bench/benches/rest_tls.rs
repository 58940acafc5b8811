//! What TLS costs the REST API: the same node twice in one process, one
//! serving plain HTTP, one HTTPS (rustls, an ECDSA P-256 certificate made
//! here), each called through `AdminClient` as the CLI calls it.
//!
//! Run with: cargo bench -p bkswitch-bench --bench rest_tls
//!
//! Three measures per round, the two nodes taking turns, 5 rounds, the
//! median round reported:
//!
//! - `sequential`: one client, one call at a time (`GET` of the cluster
//!   list, keep-alive connection): latency p50 and p99.
//! - `16 in flight`: sixteen tasks sharing the client: calls per second.
//! - `new client`: a fresh client per call, so a new connection (and for
//!   HTTPS a full handshake) each time: latency p50.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::testkit::{clusters, node_config, ADMIN};
use bkswitch_admin::tls::{client_config, TlsServerSettings};
use bkswitch_admin::{AdminClient, Node};
use bkswitch_metadata_store::MemoryStore;
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};

const SEQUENTIAL: usize = 2_000;
const CONCURRENT: usize = 16;
const CONCURRENT_FOR: Duration = Duration::from_secs(3);
const FRESH: usize = 200;
const ROUNDS: usize = 5;

struct Figures {
    p50_us: f64,
    p99_us: f64,
    per_sec: f64,
    fresh_p50_us: f64,
}

fn quantile(v: &mut [Duration], q: f64) -> f64 {
    v.sort_unstable();
    v[((v.len() as f64 * q) as usize).min(v.len() - 1)].as_secs_f64() * 1e6
}

async fn measure(make: &(dyn Fn() -> AdminClient + Sync)) -> Figures {
    let client = make();
    client.list().await.expect("warm-up call");
    let mut lat = Vec::with_capacity(SEQUENTIAL);
    for _ in 0..SEQUENTIAL {
        let t = Instant::now();
        client.list().await.expect("call");
        lat.push(t.elapsed());
    }
    let (p50_us, p99_us) = (quantile(&mut lat, 0.5), quantile(&mut lat, 0.99));

    let client = Arc::new(client);
    let end = Instant::now() + CONCURRENT_FOR;
    let tasks: Vec<_> = (0..CONCURRENT)
        .map(|_| {
            let c = Arc::clone(&client);
            tokio::spawn(async move {
                let mut n = 0u64;
                while Instant::now() < end {
                    c.list().await.expect("call");
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut calls = 0;
    for t in tasks {
        calls += t.await.expect("task");
    }

    let mut fresh = Vec::with_capacity(FRESH);
    for _ in 0..FRESH {
        let t = Instant::now();
        make().list().await.expect("call");
        fresh.push(t.elapsed());
    }
    Figures {
        p50_us,
        p99_us,
        per_sec: calls as f64 / CONCURRENT_FOR.as_secs_f64(),
        fresh_p50_us: quantile(&mut fresh, 0.5),
    }
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let dir = tempfile::tempdir().expect("tempdir");
    let ca_key = KeyPair::generate().expect("key");
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .expect("params")
        .signed_by(&key, &ca, &ca_key)
        .expect("leaf");
    let (cert_path, key_path, ca_path) = (
        dir.path().join("node.crt"),
        dir.path().join("node.key"),
        dir.path().join("ca.crt"),
    );
    std::fs::write(&cert_path, leaf.pem()).expect("write");
    std::fs::write(&key_path, key.serialize_pem()).expect("write");
    std::fs::write(&ca_path, ca.pem()).expect("write");

    let (plain, secure) = rt.block_on(async {
        let c = clusters();
        let plain = Node::start(node_config("plain", Arc::new(MemoryStore::new()), &c))
            .await
            .expect("plain node");
        let mut cfg = node_config("tls", Arc::new(MemoryStore::new()), &c);
        cfg.tls = Some(TlsServerSettings::new(cert_path.clone(), key_path.clone()));
        let secure = Node::start(cfg).await.expect("TLS node");
        (plain, secure)
    });
    let plain_url = plain.url().to_owned();
    let secure_url = secure.url().to_owned();
    let make_plain = move || AdminClient::new(&plain_url, ADMIN).expect("client");
    let make_tls = move || {
        let tls = client_config(Some(ca_path.as_path()), None).expect("trust");
        AdminClient::with_tls(&secure_url, ADMIN, Some(tls)).expect("client")
    };
    let mut rounds: [Vec<Figures>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..ROUNDS {
        rounds[0].push(rt.block_on(measure(&make_plain)));
        rounds[1].push(rt.block_on(measure(&make_tls)));
    }
    println!(
        "{:<6} {:>12} {:>12} {:>16} {:>16}",
        "", "seq p50 µs", "seq p99 µs", "16 in flight/s", "new client p50 µs"
    );
    for (name, r) in ["plain", "TLS"].iter().zip(rounds.iter_mut()) {
        let median = |f: &dyn Fn(&Figures) -> f64| {
            let mut v: Vec<f64> = r.iter().map(f).collect();
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        println!(
            "{name:<6} {:>12.0} {:>12.0} {:>16.0} {:>16.0}",
            median(&|f| f.p50_us),
            median(&|f| f.p99_us),
            median(&|f| f.per_sec),
            median(&|f| f.fresh_p50_us)
        );
    }
    rt.block_on(async {
        plain.stop().await;
        secure.stop().await;
    });
}
