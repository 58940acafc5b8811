//! The operation loops the two etcd benches (`metadata_backends` and
//! `metadata_backends_alternating`) share: lanes of one operation in flight,
//! each on a key of its own, timed from the first operation to the last.

use std::time::{Duration, Instant};

use bkswitch_bk_harness::PulsarBenchOp;
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use etcd_client::{Compare, CompareOp, PutOptions, Txn, TxnOp};

/// Lane `i`'s share of `iters` operations over `lanes` lanes.
fn share(iters: u64, lanes: usize, i: usize) -> u64 {
    iters / lanes as u64 + u64::from((i as u64) < iters % lanes as u64)
}

/// `iters` operations of `store` over one lane per key: a `get`, or a `put`
/// of `value` expecting the version the lane's previous write returned
/// (`put_version` instead of `put` with `version_only`). Returns the time of
/// all of them.
pub(crate) async fn store_lanes(
    store: &dyn MetadataStore,
    op: PulsarBenchOp,
    keys: &[String],
    iters: u64,
    value: &[u8],
    version_only: bool,
) -> Duration {
    let lanes = keys.len();
    let mut versions = Vec::with_capacity(lanes);
    for k in keys {
        let got = store.get(k).await.expect("get").expect("seeded");
        versions.push(got.stat.version);
    }
    let start = Instant::now();
    futures::future::join_all(keys.iter().zip(versions).enumerate().map(
        |(i, (key, mut version))| async move {
            for _ in 0..share(iters, lanes, i) {
                match op {
                    PulsarBenchOp::Get => {
                        std::hint::black_box(store.get(key).await.expect("get"));
                    }
                    PulsarBenchOp::Put if version_only => {
                        version = store
                            .put_version(key, value, ExpectedVersion::Exactly(version))
                            .await
                            .expect("put_version with version");
                    }
                    PulsarBenchOp::Put => {
                        version = store
                            .put(key, value, ExpectedVersion::Exactly(version))
                            .await
                            .expect("put with version")
                            .version;
                    }
                }
            }
        },
    ))
    .await;
    start.elapsed()
}

/// `iters` of Pulsar's put transaction (`version == expected + 1` → put,
/// with the previous key) from the bare Rust etcd client, one lane per key.
/// Returns the time of all of them.
pub(crate) async fn raw_put_lanes(
    client: &etcd_client::Client,
    keys: &[String],
    iters: u64,
    value: &[u8],
) -> Duration {
    let lanes = keys.len();
    let mut versions = Vec::with_capacity(lanes);
    for k in keys {
        let r = client.kv_client().get(k.as_str(), None).await.expect("get");
        versions.push(r.kvs().first().expect("seeded").version());
    }
    let start = Instant::now();
    futures::future::join_all(keys.iter().zip(versions).enumerate().map(
        |(i, (key, mut version))| async move {
            let mut kv = client.kv_client();
            for _ in 0..share(iters, lanes, i) {
                let txn = Txn::new()
                    .when(vec![Compare::version(
                        key.as_str(),
                        CompareOp::Equal,
                        version,
                    )])
                    .and_then(vec![TxnOp::put(
                        key.as_str(),
                        value.to_vec(),
                        Some(PutOptions::new().with_prev_key()),
                    )]);
                let r = kv.txn(txn).await.expect("txn");
                assert!(r.succeeded(), "{key}: version {version} lost");
                version += 1;
            }
        },
    ))
    .await;
    start.elapsed()
}
