//! A switch never destroys what it did not create and never starts what it
//! cannot finish. BUILD never deletes a target ledger it did not create: a
//! schema ledger whose id is already taken on the target by a ledger native
//! to it (another topic's data) is recorded FAILED and stays on the source,
//! the native ledger untouched; a partial copy this switch created before a
//! crash is replaced. A target whose client does not start is refused before
//! the directive is written.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, LedgerConfig, ReadHandleExt};
use bkswitch_managed_ledger::schema::SchemaStorageOptions;
use bkswitch_metadata_store::{ExpectedVersion, MemoryStore, MetadataStore};
use bkswitch_switch_orchestrator::{LedgerKind, LedgerState, Phase};
use bytes::Bytes;
use common::*;

/// A ledger on `cluster` under `id` holding `payloads`, created with the
/// schema ledgers' digest and password so that a copy can compare it.
async fn ledger_at(client: &dyn BookKeeper, id: i64, payloads: &[&'static [u8]]) {
    let cfg = SchemaStorageOptions::default().ledger_config;
    let config = LedgerConfig::default()
        .with_quorums(1, 1, 1)
        .with_digest_type(cfg.digest_type)
        .with_password(cfg.password);
    let w = client.create_ledger_adv(id, &config).await.unwrap();
    for (i, p) in payloads.iter().enumerate() {
        w.add_entry_at(i as i64, Bytes::from_static(p))
            .await
            .unwrap();
    }
    w.close().await.unwrap();
}

async fn entries(client: &dyn BookKeeper, id: i64) -> Vec<Vec<u8>> {
    let cfg = SchemaStorageOptions::default().ledger_config;
    let h = client
        .open_ledger_no_recovery(id, cfg.digest_type, &cfg.password)
        .await
        .unwrap();
    h.read_all()
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.data.to_vec())
        .collect()
}

fn schema_ledgers(meta: &std::collections::BTreeMap<String, Vec<u8>>) -> Vec<i64> {
    ledgers(meta)
        .into_iter()
        .filter(|(kind, ..)| *kind == LedgerKind::Schema)
        .map(|(_, _, id, _)| id)
        .collect()
}

#[tokio::test]
async fn a_native_target_ledger_under_a_copied_id_is_never_deleted() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    env.populate(2, 2).await;
    let meta = metadata(store.as_ref()).await;
    let ids = schema_ledgers(&meta);
    let taken = ids[0];
    // The target already holds another ledger under that id.
    let new = env.client(NEW);
    ledger_at(new.as_ref(), taken, &[b"another topic's data"]).await;

    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    let status = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(status.phase, Phase::Switched, "{status:?}");
    assert_eq!(status.counts.failed, 1, "{:?}", status.counts);

    // Untouched on the target; still on the source, and readable there.
    assert_eq!(
        entries(new.as_ref(), taken).await,
        vec![b"another topic's data".to_vec()]
    );
    let rec = orch
        .ledger_records(&s.switch_id)
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.ledger_id == taken)
        .unwrap();
    assert_eq!(rec.state, LedgerState::Failed);
    let reason = rec.reason.clone().unwrap_or_default();
    assert!(reason.contains("was not created by switch"), "{reason}");
    assert!(!rec.target_copy, "{rec:?}");
    let after = metadata(store.as_ref()).await;
    let stamp = ledgers(&after)
        .into_iter()
        .find(|(_, _, id, _)| *id == taken)
        .and_then(|(.., s)| s);
    assert_ne!(
        stamp.as_deref(),
        Some(NEW),
        "the failed ledger stays on the source"
    );
    assert!(!entries(env.client(OLD).as_ref(), taken).await.is_empty());
    // Every other schema ledger moved.
    for id in ids.iter().filter(|id| **id != taken) {
        assert_same_ledger(
            env.client(OLD).as_ref(),
            new.as_ref(),
            *id,
            LedgerKind::Schema,
        )
        .await;
    }
}

#[tokio::test]
async fn a_partial_copy_this_switch_created_is_replaced() {
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    env.populate(1, 2).await;
    let meta = metadata(store.as_ref()).await;
    let id = schema_ledgers(&meta)[0];
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    // A crash after this switch created the copy and recorded it, before the
    // entries were written: an empty ledger under the id on the target.
    let new = env.client(NEW);
    ledger_at(new.as_ref(), id, &[]).await;
    store
        .put(
            &format!("{}/{}/created/{id}", orch.records_root(), s.switch_id),
            b"",
            ExpectedVersion::NotExists,
        )
        .await
        .unwrap();

    let status = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(status.phase, Phase::Switched, "{status:?}");
    assert_eq!(status.counts.failed, 0, "{:?}", status.counts);
    assert_same_ledger(
        env.client(OLD).as_ref(),
        new.as_ref(),
        id,
        LedgerKind::Schema,
    )
    .await;
}

/// A switch to a target whose client does not start is refused before the
/// directive: nothing is written, and a later switch is not "in progress".
#[tokio::test]
async fn a_target_whose_client_does_not_start_is_refused_before_the_directive() {
    use bkswitch_switch_orchestrator::{Orchestrator, OrchestratorConfig, StaticClients};
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let env = env(store.clone()).await;
    env.populate(1, 1).await;
    let before = metadata(store.as_ref()).await;
    // Only the source has a client.
    let clients = StaticClients::new().with(OLD, env.client(OLD));
    let orch = Orchestrator::new(
        store.clone(),
        env.registry.clone(),
        Arc::new(clients),
        Arc::new(env.topics.clone()),
        OrchestratorConfig::default(),
    )
    .with_idgen(Arc::new(bkswitch_registry::MemoryIdgenSource {
        clusters: env.clusters.clone(),
    }));
    let e = orch.start_switch(NEW, None).await.unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains(NEW) && msg.contains("nothing was written"),
        "{msg}"
    );
    assert!(e.is_retryable());
    assert_eq!(metadata(store.as_ref()).await, before, "nothing written");
    assert!(env.registry.switch_directive().await.unwrap().is_none());
    assert!(orch.current_status().await.unwrap().is_none());
    // With the target reachable the switch starts.
    let s = env.orchestrator().start_switch(NEW, None).await.unwrap();
    assert_eq!(s.phase, Phase::Build);
}
