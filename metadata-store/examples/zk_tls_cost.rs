//! The cost of TLS (server verification and client certificates) on
//! ZooKeeper metadata operations: the same sequential get and put loops
//! through the plain client port and through the secure client port of one
//! real ZooKeeper server, in the same run.
//!
//! `cargo run --release -p bkswitch-metadata-store --features zk --example zk_tls_cost [ops]`

use std::time::{Duration, Instant};

use bkswitch_metadata_store::{
    ExpectedVersion, MetadataStore, Secret, ZkStore, ZkStoreOptions, ZkTls,
};
use bkswitch_zk_harness::{ZkServer, ZkServerTls};
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

async fn measure(label: &str, store: &ZkStore, ops: usize) {
    let value = vec![7u8; 64];
    store
        .put("/bench/a", &value, ExpectedVersion::Any)
        .await
        .expect("warm up");
    for (name, is_put) in [("get", false), ("put", true)] {
        let mut times = Vec::with_capacity(ops);
        let start = Instant::now();
        for _ in 0..ops {
            let t = Instant::now();
            if is_put {
                store
                    .put("/bench/a", &value, ExpectedVersion::Any)
                    .await
                    .expect("put");
            } else {
                store.get("/bench/a").await.expect("get");
            }
            times.push(t.elapsed());
        }
        let total = start.elapsed();
        times.sort();
        println!(
            "{label:<6} {name}: mean {:>7.1} µs  p50 {:>7.1} µs  p99 {:>7.1} µs  ({ops} ops)",
            total.as_secs_f64() * 1e6 / ops as f64,
            percentile(&times, 0.5).as_secs_f64() * 1e6,
            percentile(&times, 0.99).as_secs_f64() * 1e6,
        );
    }
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let ops: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000);
    let ca_key = KeyPair::generate().expect("ca key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("ca params");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key).expect("ca");
    let key = KeyPair::generate().expect("key");
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    params.extended_key_usages = vec![
        ExtendedKeyUsagePurpose::ServerAuth,
        ExtendedKeyUsagePurpose::ClientAuth,
    ];
    let cert = params.signed_by(&key, &ca, &ca_key).expect("cert");
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).expect("write");
        path
    };
    // One server, both ports: the difference is the link alone.
    let server = ZkServer::start_tls(ZkServerTls {
        key_store: write(
            "server.pem",
            &format!("{}{}", key.serialize_pem(), cert.pem()),
        ),
        trust_store: write("ca.pem", &ca.pem()),
        client_auth: true,
    });
    let plain = ZkStore::connect(
        &format!("zk://{}/plain", server.connect_string()),
        ZkStoreOptions::default(),
    )
    .await
    .expect("plain");
    let secure = ZkStore::connect(
        &format!(
            "zk://{}/tls",
            server.secure_connect_string().expect("a secure port")
        ),
        ZkStoreOptions {
            tls: Some(ZkTls {
                ca_pem: ca.pem(),
                client: Some((cert.pem(), Secret::new(key.serialize_pem()))),
                domain: None,
            }),
            ..ZkStoreOptions::default()
        },
    )
    .await
    .expect("tls");
    // Twice, alternating, so that neither side only gets a cold start.
    for _ in 0..2 {
        measure("plain", &plain, ops).await;
        measure("tls", &secure, ops).await;
    }
    plain.close().await.expect("close");
    secure.close().await.expect("close");
}
