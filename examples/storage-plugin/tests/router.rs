//! The plugin in production shape: its hooks come from bkswitch's router
//! (`MultiClusterManagedLedgerStorage`), it keeps writing through a switch of
//! the active cluster, reads old ledgers where their stamps say, and moves a
//! cursor ledger with the id-preserving copy.

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, MemoryClientFactory, MemoryClusters};
use bkswitch_bk_router::{MultiClusterManagedLedgerStorage, RouterConfig};
use bkswitch_ledger_copy::{copy_ledger_preserving_ids, CopyOptions, CopyOutcome};
use bkswitch_metadata_store::{MemoryStore, MetadataStore};
use bkswitch_mledger_spi::{ManagedLedgerConfig, ManagedLedgerStorage};
use bkswitch_proto::{decode_managed_cursor_info, decode_managed_ledger_info, Stamped};
use example_storage_plugin::TinyLedger;

const NAME: &str = "tenant/ns/persistent/orders";

#[tokio::test]
async fn the_plugin_writes_through_a_switch_with_the_routers_hooks() {
    let clusters = MemoryClusters::new();
    let old = clusters.get_or_create("old");
    let new = clusters.get_or_create("new");
    // The operator's id-generator step: ids on `new` start beyond `old`'s.
    new.advance_ledger_id_to(1_000).unwrap();

    let storage = MultiClusterManagedLedgerStorage::new(RouterConfig::default());
    storage.set_client_factory(Arc::new(MemoryClientFactory::with_clusters(
        clusters.clone(),
    )));
    storage.add_cluster("old", "memory://old").unwrap();
    storage.add_cluster("new", "memory://new").unwrap();
    storage.set_bootstrap("old").unwrap();
    storage.switch_active_cluster("old").await.unwrap();
    let mut config = ManagedLedgerConfig::default();
    storage.configure(&mut config);

    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let default: Arc<dyn BookKeeper> = Arc::new(old.client());
    let ml = TinyLedger::open(store.clone(), default.clone(), config.hooks.clone(), NAME)
        .await
        .unwrap();
    ml.open_cursor("sub").await.unwrap();
    let (before, e0) = ml.append(b"before the switch").await.unwrap();
    ml.mark_delete("sub", before, e0).await.unwrap();
    assert!(old.contains_ledger(before));

    // The switch: new ledgers go to `new`, stamped `new`.
    storage.switch_active_cluster("new").await.unwrap();
    ml.rollover().await.unwrap();
    let (after, _) = ml.append(b"after the switch").await.unwrap();
    assert!(
        new.contains_ledger(after),
        "ledger {after} was not created on new"
    );

    let value = store
        .get(&format!("/managed-ledgers/{NAME}"))
        .await
        .unwrap()
        .unwrap();
    let info = decode_managed_ledger_info(&value.value).unwrap();
    let stamps: Vec<_> = info
        .ledger_info
        .iter()
        .map(|l| (l.ledger_id, l.cluster_stamp().unwrap().map(str::to_owned)))
        .collect();
    assert!(
        stamps.contains(&(before, Some("old".to_owned()))),
        "{stamps:?}"
    );
    assert!(
        stamps.contains(&(after, Some("new".to_owned()))),
        "{stamps:?}"
    );

    // A new owner reads both, each from the cluster its stamp names.
    ml.close().await.unwrap();
    drop(ml);
    let ml = TinyLedger::open(store.clone(), default, config.hooks.clone(), NAME)
        .await
        .unwrap();
    assert_eq!(ml.read(before, 0).await.unwrap(), b"before the switch");
    assert_eq!(ml.read(after, 0).await.unwrap(), b"after the switch");

    // The cursor's ledger moves with the id-preserving copy: same id on `new`.
    ml.open_cursor("sub").await.unwrap();
    let cursor = store
        .get(&format!("/managed-ledgers/{NAME}/sub"))
        .await
        .unwrap()
        .unwrap();
    let cursor_ledger = decode_managed_cursor_info(&cursor.value)
        .unwrap()
        .cursors_ledger_id;
    assert!(old.contains_ledger(cursor_ledger));
    let report = copy_ledger_preserving_ids(
        cursor_ledger,
        &old.client(),
        &new.client(),
        &CopyOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(report.outcome, CopyOutcome::Copied);
    assert!(new.contains_ledger(cursor_ledger));
    assert_eq!(
        ml.mark_delete_position("sub").await.unwrap(),
        (before, e0),
        "the cursor kept its position"
    );
    ml.close().await.unwrap();
}
