//! The cost of TLS (server verification and client certificates) on
//! ZooKeeper metadata operations: the same sequential get and put loops
//! through the plain client port and through the secure client port of one
//! real ZooKeeper server, in the same run.
//!
//! `cargo run --release -p bkswitch-metadata-store --features zk --example zk_tls_cost [ops]`

#[path = "shared/tls_cost.rs"]
mod tls_cost;

use bkswitch_metadata_store::{MetadataStore, Secret, ZkStore, ZkStoreOptions, ZkTls};
use bkswitch_zk_harness::{ZkServer, ZkServerTls};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let ops = tls_cost::ops();
    let (ca_pem, cert_pem, key_pem) = tls_cost::pki();
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| tls_cost::write(dir.path(), name, text);
    // One server, both ports: the difference is the link alone.
    let server = ZkServer::start_tls(ZkServerTls {
        key_store: write(
            "server.pem",
            &format!("{}{}", key_pem.clone(), cert_pem.clone()),
        ),
        trust_store: write("ca.pem", &ca_pem.clone()),
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
                ca_pem: ca_pem.clone(),
                client: Some((cert_pem.clone(), Secret::new(key_pem.clone()))),
                domain: None,
            }),
            ..ZkStoreOptions::default()
        },
    )
    .await
    .expect("tls");
    // Twice, alternating, so that neither side only gets a cold start.
    for _ in 0..2 {
        tls_cost::measure("plain", &plain, ops).await;
        tls_cost::measure("tls", &secure, ops).await;
    }
    plain.close().await.expect("close");
    secure.close().await.expect("close");
}
