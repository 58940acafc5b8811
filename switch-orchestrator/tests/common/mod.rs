//! Shared helpers of the orchestrator tests.
#![allow(dead_code, unreachable_pub, missing_docs)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{BookKeeper, ReadHandleExt};
use bkswitch_managed_ledger::schema::SchemaStorageOptions;
use bkswitch_managed_ledger::{ManagedLedger, ManagedLedgerFactory, Position};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::ManagedLedgerConfig;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::schema::SchemaLocator;
use bkswitch_proto::{Message, Stamped};
use bkswitch_switch_orchestrator::{
    LedgerKind, Orchestrator, OrchestratorConfig, SwitchLedgerState, TopicOwners,
};
use tokio::task::JoinHandle;

pub use bkswitch_switch_orchestrator::testkit::{EmbeddedStack, NEW, OLD};

/// The crate's embedded stack plus the helpers of these tests.
pub struct Env(pub EmbeddedStack);

impl std::ops::Deref for Env {
    type Target = EmbeddedStack;

    fn deref(&self) -> &EmbeddedStack {
        &self.0
    }
}

impl Env {
    /// What an operator does before rolling back: advance the old cluster's id
    /// generator beyond every id the new cluster handed out (the rollback
    /// precheck requires it).
    pub fn advance_old_beyond_new(&self) {
        self.advance_beyond(OLD, NEW, 1_000_000).unwrap();
    }
}

pub async fn env(store: Arc<dyn MetadataStore>) -> Env {
    env_with(store, true).await
}

pub async fn env_with(store: Arc<dyn MetadataStore>, advance_new: bool) -> Env {
    Env(EmbeddedStack::start(store, advance_new).await.unwrap())
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
                .with_max_entries_per_ledger(50)
                .with_cursor_rollover(1_000, Duration::from_secs(3600)),
        )
    }

    pub fn factory(&self) -> ManagedLedgerFactory {
        self.0.factory().unwrap()
    }

    pub fn orchestrator(&self) -> Orchestrator {
        self.orchestrator_with(Arc::new(self.topics.clone()))
    }

    pub fn orchestrator_with(&self, owners: Arc<dyn TopicOwners>) -> Orchestrator {
        self.0.orchestrator_with(
            owners,
            OrchestratorConfig::default().with_promote_retry(20, Duration::from_millis(20)),
        )
    }

    /// Opens `topics` topics with two cursors each (both with a cursor ledger)
    /// and `schemas` schemas with three versions each; registers the topics.
    pub async fn populate(&self, topics: usize, schemas: usize) -> Vec<ManagedLedger> {
        let factory = self.factory();
        let mut out = Vec::new();
        for i in 0..topics {
            let ml = factory.open(&topic(i), self.config()).await.unwrap();
            let mut last = Position::new(0, 0);
            for n in 0..5 {
                last = ml.append(format!("{n}")).await.unwrap();
            }
            for c in ["sub-a", "sub-b"] {
                let cursor = ml
                    .open_cursor_at(c, bkswitch_managed_ledger::InitialPosition::Earliest)
                    .await
                    .unwrap();
                let first = cursor.read_entries(2).await.unwrap();
                cursor
                    .mark_delete(first.last().unwrap().position)
                    .await
                    .unwrap();
            }
            let _ = last;
            self.topics.insert(ml.clone());
            out.push(ml);
        }
        for i in 0..schemas {
            for v in 0..3 {
                self.schemas
                    .put(
                        &schema_id(i),
                        format!("{{\"v\":{v}}}").as_bytes(),
                        format!("h{v}").as_bytes(),
                    )
                    .await
                    .unwrap();
            }
        }
        out
    }

    pub fn client(&self, cluster: &str) -> Arc<dyn BookKeeper> {
        Arc::new(self.clusters.get(cluster).unwrap().client())
    }
}

/// Every node of the store with its value, sorted by path.
pub async fn dump(store: &dyn MetadataStore, root: &str) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(p) = stack.pop() {
        if let Some(r) = store.get(&p).await.unwrap() {
            out.insert(p.clone(), r.value);
        }
        for c in store.children(&p).await.unwrap() {
            let child = if p == "/" {
                format!("/{c}")
            } else {
                format!("{p}/{c}")
            };
            stack.push(child);
        }
    }
    out
}

/// `/schemas` and `/managed-ledgers` (the metadata a switch may touch).
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

/// The value with every stamp removed (schema locator or cursor), re-encoded;
/// `None` for other nodes.
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

/// (ledger id, stamp) of every schema and cursor ledger.
pub fn ledgers(meta: &BTreeMap<String, Vec<u8>>) -> Vec<(LedgerKind, String, i64, Option<String>)> {
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
                        LedgerKind::Schema,
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
                    LedgerKind::Cursor,
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

/// Asserts the ledger has the same entries (ids and bytes) on both clusters.
pub async fn assert_same_ledger(a: &dyn BookKeeper, b: &dyn BookKeeper, id: i64, kind: LedgerKind) {
    let (digest, pw) = match kind {
        LedgerKind::Schema => {
            let c = SchemaStorageOptions::default().ledger_config;
            (c.digest_type, c.password)
        }
        LedgerKind::Cursor => {
            let c = ManagedLedgerConfig::default();
            (c.digest_type, c.password)
        }
    };
    let ha = a.open_ledger_no_recovery(id, digest, &pw).await.unwrap();
    let hb = b.open_ledger_no_recovery(id, digest, &pw).await.unwrap();
    assert_eq!(
        ha.last_add_confirmed(),
        hb.last_add_confirmed(),
        "ledger {id}"
    );
    let ea = ha.read_all().await.unwrap();
    let eb = hb.read_all().await.unwrap();
    assert_eq!(ea, eb, "ledger {id} differs");
    assert_eq!(ha.metadata().custom_metadata, hb.metadata().custom_metadata);
}

/// What a consumer task returns: topic, cursor, payload sequence, last ack.
type Consumed = (String, String, Vec<u64>, Position);

/// Background producers and consumers on every topic.
pub struct Traffic {
    stop: Arc<AtomicBool>,
    stop_consumers: Arc<AtomicBool>,
    producers: Vec<JoinHandle<(String, u64, u64)>>,
    consumers: Vec<JoinHandle<Consumed>>,
}

/// What traffic observed: per topic the number of successful publishes and
/// failures; per cursor the payload sequence it received and its last
/// acknowledged position.
pub struct TrafficResult {
    pub published: BTreeMap<String, (u64, u64)>,
    pub received: BTreeMap<(String, String), (Vec<u64>, Position)>,
}

impl Traffic {
    pub fn start(mls: &[ManagedLedger]) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let stop_consumers = Arc::new(AtomicBool::new(false));
        let mut producers = Vec::new();
        let mut consumers = Vec::new();
        for ml in mls {
            let (ml2, stop2) = (ml.clone(), stop.clone());
            producers.push(tokio::spawn(async move {
                let (mut ok, mut failed) = (5u64, 0u64);
                while !stop2.load(Ordering::Relaxed) {
                    match ml2.append(format!("{ok}")).await {
                        Ok(_) => ok += 1,
                        Err(_) => failed += 1,
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
                (ml2.name().to_owned(), ok, failed)
            }));
            for c in ["sub-a", "sub-b"] {
                let cursor = ml.cursor(c).unwrap();
                let (stop3, name) = (stop_consumers.clone(), ml.name().to_owned());
                consumers.push(tokio::spawn(async move {
                    let mut seen = Vec::new();
                    let mut acked = cursor.mark_delete_position();
                    loop {
                        let stopping = stop3.load(Ordering::Relaxed);
                        let entries = cursor.read_entries(10).await.unwrap();
                        if entries.is_empty() {
                            if stopping {
                                break;
                            }
                            tokio::time::sleep(Duration::from_millis(3)).await;
                            continue;
                        }
                        for e in &entries {
                            seen.push(std::str::from_utf8(&e.data).unwrap().parse().unwrap());
                        }
                        let last = entries.last().unwrap().position;
                        cursor.mark_delete(last).await.unwrap();
                        acked = last;
                    }
                    (name, cursor.name().to_owned(), seen, acked)
                }));
            }
        }
        Traffic {
            stop,
            stop_consumers,
            producers,
            consumers,
        }
    }

    pub async fn stop(self) -> TrafficResult {
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.stop.store(true, Ordering::Relaxed);
        let mut published = BTreeMap::new();
        for p in self.producers {
            let (name, ok, failed) = p.await.unwrap();
            published.insert(name, (ok, failed));
        }
        self.stop_consumers.store(true, Ordering::Relaxed);
        let mut received = BTreeMap::new();
        for c in self.consumers {
            let (name, cursor, seen, acked) = c.await.unwrap();
            received.insert((name, cursor), (seen, acked));
        }
        TrafficResult {
            published,
            received,
        }
    }
}

/// Every record in a final state after a forward switch.
pub fn assert_records_moved(records: &[bkswitch_switch_orchestrator::SwitchLedgerRecord]) {
    for r in records {
        assert!(
            matches!(
                r.state,
                SwitchLedgerState::Promoted
                    | SwitchLedgerState::RolledOver
                    | SwitchLedgerState::Deleted
            ),
            "{r:?}"
        );
    }
}
