//! Pulsar's custom ledger metadata on real bookies: a node on a real
//! BookKeeper cluster (`bkswitch-bk-harness`) creates data, cursor and schema
//! ledgers through its managed ledgers and schema storage, and BookKeeper's
//! own Java client reads back each ledger's custom metadata: the keys and
//! values of Pulsar's brokers (`LedgerMetadataUtils`), see
//! `docs/FORMATS.md`.
//!
//! Needs Java and the BookKeeper jars (`scripts/fetch-java-deps.sh`); skipped
//! with a note without them unless `BKSWITCH_REQUIRE_BK=1`.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use bkswitch_admin::{standard_client_factory, standard_idgen_source, Node, NodeConfig};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_bookkeeper::ClientConfig;
use bkswitch_managed_ledger::{InitialPosition, Position};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::ManagedLedgerConfig;
use common::*;

const TOPIC: &str = "tenant/ns/persistent/pulsar-metadata";
const SCHEMA: &str = "tenant/ns/pulsar-metadata";

fn bytes_map(entries: &[(&str, &str)]) -> BTreeMap<String, Vec<u8>> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.as_bytes().to_vec()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn java_reads_pulsars_custom_metadata_of_every_ledger() {
    if !bkswitch_bk_harness::bk_available() {
        bkswitch_bk_harness::require_bk();
        eprintln!("skipped: Java or the BookKeeper jars are missing (scripts/fetch-java-deps.sh)");
        return;
    }
    let cluster = tokio::task::block_in_place(bkswitch_bk_harness::shared);
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let memory = MemoryClusters::new();
    let mut cfg = NodeConfig::new(
        "node-1",
        store,
        standard_client_factory(memory.clone(), ClientConfig::default()),
        &cluster.metadata_service_uri(),
        ADMIN,
        INTERNAL,
    );
    cfg.cluster_name = Some("old".into());
    cfg.idgen = Some(standard_idgen_source(memory));
    cfg.ledger_config = ManagedLedgerConfig::default()
        .with_quorums(2, 2, 2)
        .with_metadata_quorums(2, 2, 2)
        .with_max_entries_per_ledger(3);
    let schema_ledgers = cfg
        .schema_options
        .ledger_config
        .clone()
        .with_quorums(2, 2, 2);
    cfg.schema_options = cfg
        .schema_options
        .clone()
        .with_ledger_config(schema_ledgers);
    let node = Node::start(cfg).await.expect("node starts");

    // Data ledgers (rolling over every 3 entries), a cursor ledger rolled
    // once, and two schema versions.
    let ml = node.open_topic(TOPIC).await.unwrap();
    let cursor = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let mut last = Position {
        ledger_id: -1,
        entry_id: -1,
    };
    for i in 0..7u8 {
        last = ml.append(vec![i; 16]).await.unwrap();
    }
    cursor.mark_delete(last).await.unwrap();
    let first_cursor_ledger = cursor.cursor_ledger_id();
    cursor.roll_cursor_ledger().await.unwrap();
    let cursor_ledger = cursor.cursor_ledger_id();
    assert_ne!(first_cursor_ledger, cursor_ledger);
    for v in 0..2 {
        node.schemas()
            .put(
                SCHEMA,
                format!("v{v}").as_bytes(),
                format!("h{v}").as_bytes(),
            )
            .await
            .unwrap();
    }
    let (locator, _) = node.schemas().locator(SCHEMA).await.unwrap().unwrap();
    let schema_ledgers: Vec<i64> = locator.index.iter().map(|e| e.position.ledger_id).collect();
    assert_eq!(schema_ledgers.len(), 2, "{locator:?}");
    let data_ledgers = ml.ledger_ids();
    assert!(data_ledgers.len() >= 3, "{data_ledgers:?}");

    // BookKeeper's Java client reads them back.
    let java = tokio::task::block_in_place(|| cluster.java_client());
    let custom = |id: i64| {
        tokio::task::block_in_place(|| java.metadata(id))
            .unwrap_or_else(|e| panic!("Java reads the metadata of ledger {id}: {e}"))
            .custom_metadata
    };
    let data = bytes_map(&[
        ("application", "pulsar"),
        ("component", "managed-ledger"),
        ("pulsar/managed-ledger", TOPIC),
    ]);
    for id in &data_ledgers {
        assert_eq!(custom(*id), data, "data ledger {id}");
    }
    let mut cursor_md = data.clone();
    cursor_md.insert("pulsar/cursor".into(), b"sub".to_vec());
    assert_eq!(
        custom(cursor_ledger),
        cursor_md,
        "cursor ledger {cursor_ledger}"
    );
    for id in &schema_ledgers {
        assert_eq!(
            custom(*id),
            bytes_map(&[
                ("application", "pulsar"),
                ("component", "schema"),
                ("pulsar/schemaId", SCHEMA),
            ]),
            "schema ledger {id}"
        );
    }
    node.stop().await;
}
