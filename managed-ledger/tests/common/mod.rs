//! Shared helpers of the managed-ledger tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

pub mod schema;

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, MemoryCluster};
use bkswitch_managed_ledger::testkit::{
    CountingResolver, ManualClock, RecordingStore, StampingProvider, SwitchableSupplier,
};
use bkswitch_managed_ledger::{ManagedLedger, ManagedLedgerFactory, Position};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::{ManagedLedgerConfig, StorageHooks};

pub const NAME: &str = "tenant/ns/persistent/topic";
pub const PATH: &str = "/managed-ledgers/tenant/ns/persistent/topic";
pub const T0: i64 = 1_700_000_000_000;

pub struct Env {
    pub store: Arc<RecordingStore>,
    pub inner_store: Arc<dyn MetadataStore>,
    pub cluster: MemoryCluster,
    pub clock: Arc<ManualClock>,
}

impl Env {
    /// On a fresh memory store.
    pub fn new() -> Env {
        Env::on(Arc::new(MemoryStore::new()))
    }

    /// On `inner_store` (a memory store, a store on a real ZooKeeper).
    pub fn on(inner_store: Arc<dyn MetadataStore>) -> Env {
        Env {
            store: Arc::new(RecordingStore::new(inner_store.clone())),
            inner_store,
            cluster: MemoryCluster::new("bk-a"),
            clock: Arc::new(ManualClock::new(T0)),
        }
    }

    /// On a store of its own chroot on the shared real ZooKeeper server.
    pub async fn on_zookeeper() -> Env {
        use bkswitch_metadata_store::{ZkStore, ZkStoreOptions};
        bkswitch_zk_harness::require_zk();
        let url = format!(
            "zk://{}{}",
            bkswitch_zk_harness::shared().connect_string(),
            bkswitch_zk_harness::unique_chroot()
        );
        Env::on(Arc::new(
            ZkStore::connect(&url, ZkStoreOptions::default())
                .await
                .unwrap(),
        ))
    }

    pub fn client(&self) -> Arc<dyn BookKeeper> {
        Arc::new(self.cluster.client())
    }

    /// A new factory (as after a broker restart) on the same store and cluster.
    pub fn factory(&self) -> ManagedLedgerFactory {
        ManagedLedgerFactory::new(self.store.clone(), self.client()).with_clock(self.clock.clone())
    }
}

pub struct Hooks {
    pub supplier: Arc<SwitchableSupplier>,
    pub resolver: Arc<CountingResolver>,
    pub stamper: Arc<StampingProvider>,
}

impl Hooks {
    pub fn new(client: Arc<dyn BookKeeper>) -> Hooks {
        Hooks {
            supplier: Arc::new(SwitchableSupplier::new(client.clone())),
            resolver: Arc::new(CountingResolver::new(client)),
            stamper: Arc::new(StampingProvider::new()),
        }
    }

    pub fn storage_hooks(&self) -> StorageHooks {
        StorageHooks {
            active_client: Some(self.supplier.clone()),
            ledger_resolver: Some(self.resolver.clone()),
            cursor_resolver: Some(self.resolver.clone()),
            new_ledger_properties: vec![self.stamper.clone()],
            new_cursor_ledger_properties: vec![self.stamper.clone()],
        }
    }
}

pub fn small_config() -> ManagedLedgerConfig {
    ManagedLedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_metadata_quorums(1, 1, 1)
        .with_max_entries_per_ledger(3)
        .with_cursor_rollover(4, std::time::Duration::from_secs(3600))
}

/// Every node under `/managed-ledgers` with its value, sorted by path.
pub async fn snapshot(store: &dyn MetadataStore) -> Vec<(String, Vec<u8>, i64)> {
    let mut out = Vec::new();
    let mut stack = vec!["/managed-ledgers".to_string()];
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

pub fn contains_reserved(bytes: &[u8]) -> bool {
    bytes.windows(8).any(|w| w == b"_pulsar.")
}

/// The payload of the `i`-th test entry.
pub fn payload(i: usize) -> Vec<u8> {
    format!("m{i:03}").into_bytes()
}

/// Appends entries `from..from + n` concurrently; their positions.
pub async fn append_n(ml: &ManagedLedger, from: usize, n: usize) -> Vec<Position> {
    let futs: Vec<_> = (from..from + n).map(|i| ml.append(payload(i))).collect();
    futures::future::try_join_all(futs).await.unwrap()
}
