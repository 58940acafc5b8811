//! On a real ZooKeeper. A switch never destroys what it did not create and never starts what it
//! cannot finish. BUILD never deletes a target ledger it did not create: a
//! schema ledger whose id is already taken on the target by a ledger native
//! to it (another topic's data) is recorded FAILED and stays on the source,
//! the native ledger untouched; a partial copy this switch created before a
//! crash is replaced. A target whose client does not start is refused before
//! the directive is written, and a switch whose target dies afterwards rolls
//! back without it.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, LedgerConfig, ReadHandleExt};
use bkswitch_managed_ledger::schema::SchemaStorageOptions;
use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
use bkswitch_switch_orchestrator::{
    LedgerKind, Orchestrator, OrchestratorConfig, Phase, StaticClients, SwitchLedgerState,
};
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_native_target_ledger_under_a_copied_id_is_never_deleted() {
    let store = zk_store().await;
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
    assert_eq!(rec.state, SwitchLedgerState::Failed);
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_copy_this_switch_created_is_replaced() {
    let store = zk_store().await;
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
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_target_whose_client_does_not_start_is_refused_before_the_directive() {
    let store = zk_store().await;
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
    .with_idgen(Arc::new(env.clusters.clone()));
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

/// A store on the shared real ZooKeeper, under its own chroot.
async fn zk_store() -> Arc<dyn MetadataStore> {
    use bkswitch_metadata_store::{ZkStore, ZkStoreOptions};
    bkswitch_zk_harness::require_zk();
    let url = format!(
        "zk://{}{}",
        bkswitch_zk_harness::shared().connect_string(),
        bkswitch_zk_harness::unique_chroot()
    );
    Arc::new(
        ZkStore::connect(&url, ZkStoreOptions::default())
            .await
            .unwrap(),
    )
}

/// An orchestrator whose clients know only the source: the target's client
/// no longer starts (its cluster died after the switch started).
fn without_target(env: &Env, store: Arc<dyn MetadataStore>) -> Orchestrator {
    let clients = StaticClients::new().with(OLD, env.client(OLD));
    Orchestrator::new(
        store,
        env.registry.clone(),
        Arc::new(clients),
        Arc::new(env.topics.clone()),
        OrchestratorConfig::default(),
    )
    .with_idgen(Arc::new(env.clusters.clone()))
}

/// A switch whose target's client stops starting after the directive, stuck
/// in BUILD (every run fails building its context), rolls back to completion
/// without that client: flipping stamps back needs the metadata only. On a
/// real ZooKeeper. Before, the rollback wrote the directive back and then
/// failed at the same step, for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switch_stuck_on_a_dead_target_rolls_back_without_it() {
    let store = zk_store().await;
    let env = env(store.clone()).await;
    env.populate(2, 2).await;
    let before: Vec<_> = ledgers(&metadata(store.as_ref()).await);
    let s = env.orchestrator().start_switch(NEW, None).await.unwrap();
    assert_eq!(s.phase, Phase::Build);

    let orch = without_target(&env, store.clone());
    let e = orch.run(&s.switch_id).await.unwrap_err();
    assert!(e.to_string().contains(NEW), "{e}");
    assert!(e.is_retryable(), "{e}");
    // The operator's reverse idgen step (the rollback's precheck reads the
    // target's generator, which needs its ZooKeeper, not its bookies).
    env.advance_old_beyond_new();
    let rolled = orch.rollback(&s.switch_id).await.unwrap();
    assert_eq!(rolled.phase, Phase::RolledBack, "{rolled:?}");
    let d = env.registry.switch_directive().await.unwrap().unwrap();
    assert_eq!(d.target, OLD, "the directive names the source again");
    // Every stamp is what it was; a new switch may start.
    assert_eq!(ledgers(&metadata(store.as_ref()).await), before);
    assert!(orch.current_status().await.unwrap().unwrap().phase == Phase::RolledBack);
}

/// The same after PROMOTE: the switch reached SWITCHED, then the target
/// died; the rollback flips every promoted stamp back without its client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switched_switch_rolls_back_after_its_target_died() {
    let store = zk_store().await;
    let env = env(store.clone()).await;
    env.populate(2, 2).await;
    let before: Vec<_> = ledgers(&metadata(store.as_ref()).await);
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    let st = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(st.phase, Phase::Switched, "{st:?}");
    assert!(st.counts.promoted >= 4, "{:?}", st.counts);
    assert_ne!(ledgers(&metadata(store.as_ref()).await), before);

    let orch = without_target(&env, store.clone());
    env.advance_old_beyond_new();
    let rolled = orch.rollback(&s.switch_id).await.unwrap();
    assert_eq!(rolled.phase, Phase::RolledBack, "{rolled:?}");
    let after = ledgers(&metadata(store.as_ref()).await);
    for (kind, path, id, stamp) in &after {
        if before.iter().any(|(_, p, i, _)| p == path && i == id) {
            assert_eq!(stamp.as_deref(), Some(OLD), "{kind:?} {path} {id}");
        }
    }
}

/// Ledger records live in buckets of 1,024 ids (a ZooKeeper listing of more
/// than about 58,000 flat record names exceeds the 1 MiB reply limit).
/// Records an earlier version wrote flat under `…/ledgers/<kind>-<id>` are
/// still read and updated where they are: moved flat after SWITCHED, the
/// status counts them and a rollback flips them back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_are_bucketed_and_flat_records_of_an_earlier_version_still_count() {
    let store = zk_store().await;
    let env = env(store.clone()).await;
    env.populate(3, 3).await;
    let orch = env.orchestrator();
    let s = orch.start_switch(NEW, None).await.unwrap();
    let st = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(st.phase, Phase::Switched, "{st:?}");
    let base = format!("{}/{}/ledgers", orch.records_root(), s.switch_id);
    let buckets = store.children(&base).await.unwrap();
    assert!(
        !buckets.is_empty() && buckets.iter().all(|b| b.parse::<i64>().is_ok()),
        "{buckets:?}"
    );
    // Move every record flat, as an earlier version wrote them.
    let mut moved = 0;
    for b in &buckets {
        let dir = format!("{base}/{b}");
        for name in store.children(&dir).await.unwrap() {
            let from = format!("{dir}/{name}");
            let r = store.get(&from).await.unwrap().unwrap();
            store
                .put(
                    &format!("{base}/{name}"),
                    &r.value,
                    ExpectedVersion::NotExists,
                )
                .await
                .unwrap();
            store.delete(&from, ExpectedVersion::Any).await.unwrap();
            moved += 1;
        }
        store.delete(&dir, ExpectedVersion::Any).await.unwrap();
    }
    assert!(moved >= 6);
    let again = orch.status(&s.switch_id).await.unwrap();
    assert_eq!(again.counts, st.counts);
    env.advance_old_beyond_new();
    let rolled = orch.rollback(&s.switch_id).await.unwrap();
    assert_eq!(rolled.phase, Phase::RolledBack, "{rolled:?}");
    assert_eq!(rolled.counts.rolled_back, st.counts.promoted, "{rolled:?}");
    // Updated in place: still flat, no bucket recreated.
    let after = store.children(&base).await.unwrap();
    assert_eq!(after.len(), moved, "{after:?}");
}
