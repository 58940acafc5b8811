//! An embedded stack without HTTP: two in-memory bookie clusters behind the
//! multi-cluster storage, the registry, schema storage, the locally open
//! topics and an orchestrator, all on one in-memory metadata store.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bkswitch_managed_ledger::schema::SchemaStorageOptions;
use bkswitch_managed_ledger::{ManagedLedgerFactory, Position};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::{Orchestrator, OrchestratorConfig};

pub use bkswitch_switch_orchestrator::testkit::{EmbeddedStack, NEW, OLD};

pub const CURSORS: [&str; 2] = ["sub-a", "sub-b"];

/// The orchestrator crate's embedded stack plus the helpers of these tests.
pub struct Env(pub EmbeddedStack);

impl std::ops::Deref for Env {
    type Target = EmbeddedStack;

    fn deref(&self) -> &EmbeddedStack {
        &self.0
    }
}

/// A fresh stack on a fresh in-memory store, ACTIVE on `old`, `new` STANDBY
/// with its id generator ahead of `old`'s.
pub async fn env() -> Env {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    Env(EmbeddedStack::start_with(
        store,
        true,
        SchemaStorageOptions::default().with_max_attempts(1_000),
    )
    .await
    .unwrap())
}

pub fn topic(i: usize) -> String {
    format!("tenant/ns/persistent/topic-{i}")
}

pub fn schema_id(i: usize) -> String {
    format!("tenant/ns/schema-{i}")
}

impl Env {
    pub fn config(&self) -> ManagedLedgerConfig {
        self.ledger_config(
            ManagedLedgerConfig::default()
                .with_max_entries_per_ledger(20)
                .with_cursor_rollover(1_000, Duration::from_secs(3600)),
        )
    }

    /// A new factory on the storage's current default class.
    pub fn factory(&self) -> ManagedLedgerFactory {
        self.0.factory().unwrap()
    }

    pub fn orchestrator(&self) -> Orchestrator {
        self.0.orchestrator(
            OrchestratorConfig::default().with_promote_retry(50, Duration::from_millis(10)),
        )
    }

    /// What an operator does before switching (or rolling back) from `from`
    /// to `to`: advance `to`'s id generator beyond every id `from` handed out.
    pub fn advance_beyond(&self, to: &str, from: &str) {
        self.0.advance_beyond(to, from, 1_000).unwrap();
    }

    /// Whether cluster `name` holds ledger `id`.
    pub fn holds(&self, name: &str, id: i64) -> bool {
        self.clusters.get(name).unwrap().contains_ledger(id)
    }

    /// Asserts every schema and cursor ledger lives on the cluster its stamp
    /// names (unstamped: the bootstrap cluster).
    pub async fn assert_stamps_match_ledgers(&self) {
        let meta = metadata(self.store.as_ref()).await;
        for (kind, path, id, stamp) in ledgers(&meta) {
            let cluster = stamp.as_deref().unwrap_or(OLD);
            assert!(
                self.holds(cluster, id),
                "{kind} ledger {id} of {path} is stamped {stamp:?} but {cluster} does not hold it \
                 (old: {}, new: {})",
                self.holds(OLD, id),
                self.holds(NEW, id)
            );
        }
    }

    /// Asserts exactly one registered cluster is ACTIVE and the active marker
    /// names it (I12).
    pub async fn assert_one_active(&self) {
        let records = self.registry.list().await.unwrap();
        let active: Vec<_> = records
            .iter()
            .filter(|r| r.status == ClusterStatus::Active)
            .map(|r| r.name.clone())
            .collect();
        assert_eq!(active.len(), 1, "ACTIVE clusters: {records:?}");
        assert_eq!(
            self.registry.active().await.unwrap().as_deref(),
            Some(active[0].as_str())
        );
    }
}

/// Every node under `root` with its value, sorted by path.
pub async fn dump(store: &dyn MetadataStore, root: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        if let Some(r) = store.get(&p).await.unwrap() {
            out.insert(p.clone(), r.value);
        }
        for c in store.children(&p).await.unwrap() {
            stack.push(if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            });
        }
    }
    out
}

/// `/schemas` and `/managed-ledgers`.
pub async fn metadata(store: &dyn MetadataStore) -> BTreeMap<String, Vec<u8>> {
    let mut m = dump(store, "/schemas").await;
    m.extend(dump(store, "/managed-ledgers").await);
    m
}

pub fn is_cursor(value: &[u8]) -> bool {
    !value.is_empty()
        && decode_managed_ledger_info(value).is_err()
        && decode_managed_cursor_info(value).is_ok()
}

/// Schema locators and cursors with every stamp removed, re-encoded.
pub fn unstamped_all(meta: &BTreeMap<String, Vec<u8>>) -> BTreeMap<String, Vec<u8>> {
    meta.iter()
        .filter_map(|(p, v)| unstamped(p, v).map(|u| (p.clone(), u)))
        .collect()
}

pub fn unstamped(path: &str, value: &[u8]) -> Option<Vec<u8>> {
    if value.is_empty() {
        return None;
    }
    if path.starts_with("/schemas/") {
        let mut l = SchemaLocator::decode(value).ok()?;
        l.info.position.remove_cluster_stamp().unwrap();
        for e in &mut l.index {
            e.position.remove_cluster_stamp().unwrap();
        }
        return Some(l.encode_to_vec());
    }
    if is_cursor(value) {
        let mut c = decode_managed_cursor_info(value).unwrap();
        c.remove_cluster_stamp().unwrap();
        return Some(c.encode_to_vec());
    }
    None
}

/// (kind, path, ledger id, stamp) of every schema and cursor ledger.
pub fn ledgers(
    meta: &BTreeMap<String, Vec<u8>>,
) -> Vec<(&'static str, String, i64, Option<String>)> {
    let mut out = Vec::new();
    for (path, value) in meta {
        if value.is_empty() {
            continue;
        }
        if path.starts_with("/schemas/") {
            let l = SchemaLocator::decode(value.as_slice()).unwrap();
            for e in std::iter::once(&l.info).chain(l.index.iter()) {
                if e.position.ledger_id >= 0 {
                    out.push((
                        "schema",
                        path.clone(),
                        e.position.ledger_id,
                        e.position.cluster_stamp().unwrap().map(str::to_owned),
                    ));
                }
            }
        } else if is_cursor(value) {
            let c = decode_managed_cursor_info(value).unwrap();
            if c.cursors_ledger_id >= 0 {
                out.push((
                    "cursor",
                    path.clone(),
                    c.cursors_ledger_id,
                    c.cluster_stamp().unwrap().map(str::to_owned),
                ));
            }
        }
    }
    out.sort();
    out.dedup();
    out
}

/// The position a cursor's acknowledgement of `p` leaves as mark-delete.
pub fn pos(p: Position) -> (i64, i64) {
    (p.ledger_id, p.entry_id)
}
