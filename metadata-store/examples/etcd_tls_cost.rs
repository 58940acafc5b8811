//! The cost of TLS (server verification and client certificates) on etcd
//! metadata operations: the same sequential get and put loops on a plain etcd
//! member and on a TLS member, in the same run.
//!
//! `cargo run --release -p bkswitch-metadata-store --features etcd --example etcd_tls_cost [ops]`

#[path = "shared/tls_cost.rs"]
mod tls_cost;

use bkswitch_etcd_harness::{EtcdCluster, EtcdServerTls};
use bkswitch_metadata_store::{EtcdStore, EtcdStoreOptions, EtcdTls, MetadataStore, Secret};

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let ops = tls_cost::ops();
    let (ca_pem, cert_pem, key_pem) = tls_cost::pki();
    let dir = tempfile::tempdir().expect("tempdir");
    let write = |name: &str, text: &str| tls_cost::write(dir.path(), name, text);
    let tls_files = EtcdServerTls {
        cert: write("cert.pem", &cert_pem.clone()),
        key: write("key.pem", &key_pem.clone()),
        ca: write("ca.pem", &ca_pem.clone()),
        client_cert_auth: true,
    };
    let plain = EtcdCluster::start(1);
    let secure = EtcdCluster::start_tls(1, tls_files);
    let options = EtcdStoreOptions::default();
    let plain_store = EtcdStore::connect(&plain.url("/b"), options.clone())
        .await
        .expect("plain");
    let tls_store = EtcdStore::connect(
        &secure.url("/b"),
        EtcdStoreOptions {
            tls: Some(EtcdTls {
                ca_pem: ca_pem.clone(),
                client: Some((cert_pem.clone(), Secret::new(key_pem.clone()))),
                domain: None,
            }),
            ..options
        },
    )
    .await
    .expect("tls");
    // Twice, alternating, so that neither side only gets a cold start.
    for _ in 0..2 {
        tls_cost::measure("plain", &plain_store, ops).await;
        tls_cost::measure("tls", &tls_store, ops).await;
    }
    plain_store.close().await.expect("close");
    tls_store.close().await.expect("close");
}
