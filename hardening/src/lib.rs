#![doc = include_str!("../README.md")]

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_metadata_store::{ZkStore, ZkStoreOptions};
use bkswitch_switch_orchestrator::SwitchStatus;

pub use bkswitch_admin::testkit::{clusters, node_config, start_node, tree, ADMIN, INTERNAL};

/// Base path of the REST API.
pub const BASE: &str = "/admin/v2/bookie-clusters";

/// A new session on the shared test ZooKeeper under `chroot`.
///
/// # Panics
///
/// When ZooKeeper cannot be reached.
pub async fn zk_store(chroot: &str) -> Arc<ZkStore> {
    let url = format!(
        "zk://{}{chroot}",
        bkswitch_zk_harness::shared().connect_string()
    );
    Arc::new(
        ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .expect("ZooKeeper session"),
    )
}

/// Waits until `f` holds, polling every 20 ms.
///
/// # Panics
///
/// After `timeout`, naming `what`.
pub async fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let deadline = Instant::now() + timeout;
    while !f() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Waits until the latest switch known to `orch` reached a phase past
/// BUILD/PROMOTE and returns its status.
///
/// # Panics
///
/// After `timeout`.
pub async fn wait_switched(orch: &bkswitch_admin::Switches, timeout: Duration) -> SwitchStatus {
    let deadline = Instant::now() + timeout;
    loop {
        if let Ok(Some(st)) = orch.current_status().await {
            if st.phase.is_built() {
                return st;
            }
        }
        assert!(Instant::now() < deadline, "switch did not reach SWITCHED");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
