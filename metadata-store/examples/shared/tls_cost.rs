//! What the TLS cost examples share: the certificates and the timed loops.

use std::time::{Duration, Instant};

use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use rcgen::{BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, KeyPair};

/// The number of operations per loop: the first argument, else 2,000.
pub(crate) fn ops() -> usize {
    std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000)
}

/// Writes `text` to `name` in `dir`; its path.
pub(crate) fn write(dir: &std::path::Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    path
}

/// A CA and a certificate it signed for `127.0.0.1`, for server and client
/// use: `(ca_pem, cert_pem, key_pem)`.
pub(crate) fn pki() -> (String, String, String) {
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
    (ca.pem(), cert.pem(), key.serialize_pem())
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

/// `ops` sequential gets, then `ops` sequential puts, of a 64-byte value;
/// prints mean, p50 and p99 of each.
pub(crate) async fn measure(label: &str, store: &dyn MetadataStore, ops: usize) {
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
