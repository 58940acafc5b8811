//! Shared helpers of the registry tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use bkswitch_metadata_store::{MetadataStore, ZkStore, ZkStoreOptions};

/// A store on the shared test ZooKeeper under `chroot`.
pub async fn zk_store(chroot: &str) -> ZkStore {
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    ZkStore::connect(&url, ZkStoreOptions::default())
        .await
        .unwrap()
}

/// Every node under `root` as `(path, value, version)`, sorted.
pub async fn snapshot(store: &dyn MetadataStore, root: &str) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        if let Some(r) = store.get(&p).await.unwrap() {
            out.push((p.clone(), r.value, r.stat.version));
        }
        for c in store.children(&p).await.unwrap() {
            stack.push(format!("{p}/{c}"));
        }
    }
    out.sort();
    out
}
