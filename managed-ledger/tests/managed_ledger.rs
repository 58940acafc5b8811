//! Managed ledger and cursor behaviour on MemoryBookKeeper + MemoryStore.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, MemoryCluster};
use bkswitch_managed_ledger::testkit::InjectedFailure;
use bkswitch_managed_ledger::{InitialPosition, ManagedLedgerErrorKind, Position};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_mledger_spi::{
    HookError, NewLedgerContext, NewLedgerPropertiesProvider, StorageHooks,
};
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::ml::managed_ledger_info::LedgerInfo;
use bkswitch_proto::ml::{ManagedCursorInfo, ManagedLedgerInfo};
use bkswitch_proto::{Message, Stamped};
use common::*;

/// An S4 provider that adds nothing.
#[derive(Debug)]
struct NoProps;
impl NewLedgerPropertiesProvider for NoProps {
    fn new_ledger_properties(
        &self,
        _ctx: &NewLedgerContext<'_>,
    ) -> Result<Vec<(String, String)>, HookError> {
        Ok(Vec::new())
    }
}

/// The sequence used by the golden tests; returns every successful write.
async fn golden_sequence(hooks: Option<StorageHooks>) -> (Env, Vec<(String, Vec<u8>)>) {
    let env = Env::new();
    let mut config = small_config();
    if let Some(h) = hooks {
        config = config.with_hooks(h);
    }
    let ml = env.factory().open(NAME, config).await.unwrap();
    let c = ml.open_cursor("sub").await.unwrap();
    append_n(&ml, 0, 4).await; // ledger 0: 3 entries; ledger 1: 1 entry
    env.clock.advance(10);
    c.mark_delete(Position::new(0, 1)).await.unwrap();
    let writes = env
        .store
        .writes()
        .into_iter()
        .filter(|w| w.result.is_ok())
        .map(|w| (w.path, w.value))
        .collect();
    (env, writes)
}

#[tokio::test]
async fn plain_mode_writes_golden_bytes_and_hooks_without_effect_match() {
    let (env, plain) = golden_sequence(None).await;
    let cursor_path = format!("{PATH}/sub");

    // Expected values, built independently from the prost types.
    let empty = ManagedLedgerInfo::default().encode_to_vec();
    let l0_open = LedgerInfo {
        ledger_id: 0,
        timestamp: Some(0),
        ..Default::default()
    };
    let v1 = ManagedLedgerInfo {
        ledger_info: vec![l0_open],
        ..Default::default()
    };
    let v2 = ManagedLedgerInfo {
        ledger_info: vec![
            LedgerInfo {
                ledger_id: 0,
                entries: Some(3),
                size: Some(12),
                timestamp: Some(T0),
                ..Default::default()
            },
            LedgerInfo {
                ledger_id: 1,
                timestamp: Some(0),
                ..Default::default()
            },
        ],
        ..Default::default()
    };
    let cursor_created = ManagedCursorInfo {
        cursors_ledger_id: -1,
        mark_delete_ledger_id: Some(0),
        mark_delete_entry_id: Some(-1),
        ..Default::default()
    };
    let cursor_rolled = ManagedCursorInfo {
        cursors_ledger_id: 2,
        mark_delete_ledger_id: Some(0),
        mark_delete_entry_id: Some(1),
        ..Default::default()
    };
    let expected = vec![
        (PATH.to_string(), empty),
        (PATH.to_string(), v1.encode_to_vec()),
        (cursor_path.clone(), cursor_created.encode_to_vec()),
        (PATH.to_string(), v2.encode_to_vec()),
        (cursor_path.clone(), cursor_rolled.encode_to_vec()),
    ];
    assert_eq!(plain, expected);
    for (_, v) in &plain {
        assert!(!contains_reserved(v));
    }
    // The cursor ledger holds the position as a PositionInfo entry.
    assert!(env.cluster.contains_ledger(2));

    // Hooks that have no effect (same client, identity resolver, no properties)
    // write exactly the same bytes.
    // (hooks on the env's own cluster: S1 returns the storage client, the resolver
    // routes everything to it, S4 adds nothing)
    let env2 = Env::new();
    let hooks2 = Hooks::new(env2.client());
    let h2 = StorageHooks {
        new_ledger_properties: vec![Arc::new(NoProps)],
        new_cursor_ledger_properties: vec![Arc::new(NoProps)],
        ..hooks2.storage_hooks()
    };
    let ml = env2
        .factory()
        .open(NAME, small_config().with_hooks(h2))
        .await
        .unwrap();
    let c = ml.open_cursor("sub").await.unwrap();
    append_n(&ml, 0, 4).await;
    env2.clock.advance(10);
    c.mark_delete(Position::new(0, 1)).await.unwrap();
    let hooked: Vec<_> = env2
        .store
        .writes()
        .into_iter()
        .filter(|w| w.result.is_ok())
        .map(|w| (w.path, w.value))
        .collect();
    assert_eq!(hooked, plain);
}

#[tokio::test]
async fn every_write_recording_a_ledger_carries_its_stamp() {
    let env = Env::new();
    let hooks = Hooks::new(env.client());
    let ml = env
        .factory()
        .open(NAME, small_config().with_hooks(hooks.storage_hooks()))
        .await
        .unwrap();
    let c = ml.open_cursor("sub").await.unwrap();
    let positions = append_n(&ml, 0, 10).await;
    for p in &positions {
        c.mark_delete(*p).await.unwrap(); // 10 mark-deletes: cursor ledger rolls over
    }
    ml.rollover().await.unwrap();
    let cursor_path = format!("{PATH}/sub");
    let mut checked_ml = 0;
    let mut checked_cursor = 0;
    for w in env.store.writes().into_iter().filter(|w| w.result.is_ok()) {
        if w.path == PATH {
            let info = decode_managed_ledger_info(&w.value).unwrap();
            for li in &info.ledger_info {
                assert_eq!(
                    li.cluster_stamp().unwrap(),
                    Some("bk-a"),
                    "ledger {} recorded without its stamp in write {}",
                    li.ledger_id,
                    w.seq
                );
                checked_ml += 1;
            }
        } else if w.path == cursor_path {
            let info = decode_managed_cursor_info(&w.value).unwrap();
            if info.cursors_ledger_id >= 0 {
                assert_eq!(
                    info.cluster_stamp().unwrap(),
                    Some("bk-a"),
                    "write {}",
                    w.seq
                );
                checked_cursor += 1;
            }
        }
    }
    assert!(
        checked_ml >= 4 && checked_cursor >= 3,
        "{checked_ml} {checked_cursor}"
    );
}

#[tokio::test]
async fn fault_between_create_and_cas_leaves_nothing_unrecorded() {
    let env = Env::new();
    let hooks = Hooks::new(env.client());
    let ml = env
        .factory()
        .open(NAME, small_config().with_hooks(hooks.storage_hooks()))
        .await
        .unwrap();
    append_n(&ml, 0, 2).await;
    let before = snapshot(env.inner_store.as_ref()).await;
    let ledgers_before = env.cluster.ledger_ids();

    // 1. The CAS fails (injected): the new ledger is deleted through the resolver.
    env.store
        .fail_writes_matching(PATH, 1, InjectedFailure::Unavailable);
    let next_id = env.cluster.next_ledger_id();
    let err = ml.rollover().await.unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::Metadata, "{err}");
    assert!(!env.cluster.contains_ledger(next_id));
    assert_eq!(hooks.resolver.ledger_calls(next_id), 1);
    // The same metadata, one version on: the node stood unchanged after the
    // lost write, so it was written back (fenced) before the ledger went, and
    // the lost write can never land.
    let after = snapshot(env.inner_store.as_ref()).await;
    let fenced: Vec<_> = before
        .iter()
        .map(|(p, v, ver)| (p.clone(), v.clone(), if p == PATH { ver + 1 } else { *ver }))
        .collect();
    assert_eq!(after, fenced);
    let before = after;

    // 2. The S4 provider fails: the new ledger is deleted, nothing recorded.
    hooks.stamper.set_failing(true);
    let next_id = env.cluster.next_ledger_id();
    let err = ml.rollover().await.unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::Hook, "{err}");
    assert!(!env.cluster.contains_ledger(next_id));
    assert_eq!(snapshot(env.inner_store.as_ref()).await, before);
    hooks.stamper.set_failing(false);

    // 3. A cursor-ledger CAS fails: the cursor ledger is deleted too.
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    env.store
        .fail_writes_matching(&format!("{PATH}/sub"), 1, InjectedFailure::BadVersion);
    let next_id = env.cluster.next_ledger_id();
    assert!(c.mark_delete(Position::new(0, 0)).await.is_err());
    assert!(!env.cluster.contains_ledger(next_id));
    assert_eq!(hooks.resolver.cursor_calls(next_id), 1);

    // The managed ledger keeps working afterwards; no recorded ledger is unstamped.
    let p = ml.append("after").await.unwrap();
    assert!(p.ledger_id > 0);
    for (path, v, _) in snapshot(env.inner_store.as_ref()).await {
        if path == PATH {
            for li in decode_managed_ledger_info(&v).unwrap().ledger_info {
                assert_eq!(li.cluster_stamp().unwrap(), Some("bk-a"));
                assert!(env.cluster.contains_ledger(li.ledger_id));
            }
        }
    }
    // Only recorded ledgers remain on the cluster (plus the sealed one).
    let recorded = ml.ledger_ids();
    for id in env.cluster.ledger_ids() {
        assert!(
            recorded.contains(&id) || ledgers_before.contains(&id) || id == c.cursor_ledger_id(),
            "orphan ledger {id} left on the cluster"
        );
    }
}

#[tokio::test]
async fn resolver_is_consulted_once_per_handle_open_on_every_path() {
    let env = Env::new();
    let hooks = Hooks::new(env.client());
    let config = small_config().with_hooks(hooks.storage_hooks());
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    append_n(&ml, 0, 7).await; // ledgers 0,1 full; 2 current (cursor has none yet)
    let ids = ml.ledger_ids();
    assert_eq!(ids.len(), 3);
    // Data reads: the sealed ledgers' handles are reused from the writer, so
    // reading them twice resolves nothing; the current ledger is read through
    // its write handle.
    for _ in 0..2 {
        let all = ml
            .read_entries(Position::new(ids[0], 0), 100)
            .await
            .unwrap();
        assert_eq!(all.len(), 7);
    }
    assert_eq!(hooks.resolver.total_calls(), 0);
    c.mark_delete(Position::new(ids[0], 1)).await.unwrap();
    let cursor_ledger = c.cursor_ledger_id();
    drop((ml, c));

    // Reopen (new factory): last-ledger recovery resolves the last ledger once;
    // cursor recovery resolves the cursor ledger once.
    hooks.resolver.reset();
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    assert_eq!(hooks.resolver.ledger_calls(ids[2]), 1);
    assert_eq!(hooks.resolver.cursor_calls(cursor_ledger), 1);
    // Reading old ledgers opens a handle each: once per ledger, however often.
    for _ in 0..3 {
        ml.read_entries(Position::new(ids[0], 0), 100)
            .await
            .unwrap();
    }
    assert_eq!(hooks.resolver.ledger_calls(ids[0]), 1);
    assert_eq!(hooks.resolver.ledger_calls(ids[1]), 1);
    assert_eq!(
        hooks.resolver.ledger_calls(ids[2]),
        1,
        "recovered handle reused"
    );

    // Cursor-ledger delete after rollover goes through the cursor resolver.
    let c = ml.cursor("sub").unwrap();
    c.mark_delete(Position::new(ids[1], 2)).await.unwrap();
    assert_ne!(c.cursor_ledger_id(), cursor_ledger);
    assert_eq!(hooks.resolver.cursor_calls(cursor_ledger), 2);
    assert!(!env.cluster.contains_ledger(cursor_ledger));

    // Trim deletes through the resolver (once more per trimmed ledger).
    let trimmed = ml.trim_consumed_ledgers().await.unwrap();
    assert_eq!(trimmed, vec![ids[0], ids[1]]);
    assert_eq!(hooks.resolver.ledger_calls(ids[0]), 2);
    assert_eq!(hooks.resolver.ledger_calls(ids[1]), 2);
    assert!(!env.cluster.contains_ledger(ids[0]));

    // Delete of the managed ledger: every ledger and the cursor ledger resolved.
    let cl = c.cursor_ledger_id();
    let before = hooks.resolver.cursor_calls(cl);
    let ledgers = ml.ledger_ids();
    ml.delete().await.unwrap();
    assert_eq!(hooks.resolver.cursor_calls(cl), before + 1);
    for id in ledgers {
        assert!(hooks.resolver.ledger_calls(id) >= 1);
        assert!(!env.cluster.contains_ledger(id));
    }
    assert!(env.inner_store.get(PATH).await.unwrap().is_none());
}

#[tokio::test]
async fn empty_last_ledger_is_dropped_and_deleted_through_the_resolver() {
    let env = Env::new();
    let hooks = Hooks::new(env.client());
    let config = small_config().with_hooks(hooks.storage_hooks());
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    let empty = ml.current_ledger_id().unwrap();
    drop(ml);
    let ml = env.factory().open(NAME, config).await.unwrap();
    assert!(!ml.ledger_ids().contains(&empty));
    assert!(!env.cluster.contains_ledger(empty));
    assert_eq!(hooks.resolver.ledger_calls(empty), 2); // recovery open + delete
}

#[tokio::test]
async fn reopen_after_crash_recovers_entries_and_cursor_positions() {
    let env = Env::new();
    let config = small_config();
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    let a = ml
        .open_cursor_at("a", InitialPosition::Earliest)
        .await
        .unwrap();
    let b = ml
        .open_cursor_at("b", InitialPosition::Earliest)
        .await
        .unwrap();
    let positions = append_n(&ml, 0, 11).await;
    for p in &positions[..6] {
        a.mark_delete(*p).await.unwrap();
    }
    b.mark_delete(positions[1]).await.unwrap();
    b.delete(&[positions[4], positions[5], positions[7]])
        .await
        .unwrap();
    let b_ranges = b.individually_deleted_ranges();
    assert_eq!(b.mark_delete_position(), positions[1]);
    // Crash: drop without close.
    drop((ml, a, b));

    let ml = env.factory().open(NAME, config).await.unwrap();
    let all = ml.read_entries(positions[0], 100).await.unwrap();
    assert_eq!(all.len(), 11);
    for (i, e) in all.iter().enumerate() {
        assert_eq!(e.position, positions[i]);
        assert_eq!(e.data.as_ref(), payload(i).as_slice());
    }
    let a = ml.cursor("a").unwrap();
    let b = ml.cursor("b").unwrap();
    assert_eq!(a.mark_delete_position(), positions[5]);
    assert_eq!(b.mark_delete_position(), positions[1]);
    assert_eq!(b.individually_deleted_ranges(), b_ranges);
    // b reads 2, 3, 6, 8, 9, 10 (4, 5, 7 individually deleted).
    let got: Vec<_> = b
        .read_entries(100)
        .await
        .unwrap()
        .into_iter()
        .map(|e| e.position)
        .collect();
    let want: Vec<_> = [2, 3, 6, 8, 9, 10].iter().map(|i| positions[*i]).collect();
    assert_eq!(got, want);
    // Deleting 2 and 3 advances the mark-delete position over 4 and 5.
    b.delete(&[positions[2], positions[3]]).await.unwrap();
    assert_eq!(b.mark_delete_position(), positions[5]);
    // New appends continue after the recovered entries.
    let p = ml.append("more").await.unwrap();
    assert!(p > positions[10]);
}

#[tokio::test]
async fn switching_the_supplier_moves_new_ledgers_to_the_new_cluster() {
    let env = Env::new();
    let new_cluster = MemoryCluster::new("bk-b");
    new_cluster.advance_ledger_id_to(1000).unwrap();
    let new_client: Arc<dyn BookKeeper> = Arc::new(new_cluster.client());
    let hooks = Hooks::new(env.client());
    hooks.resolver.add_client(new_client.clone());
    let config = small_config().with_hooks(hooks.storage_hooks());
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let old = append_n(&ml, 0, 4).await;
    c.mark_delete(old[0]).await.unwrap();
    let old_cursor_ledger = c.cursor_ledger_id();
    assert!(env.cluster.contains_ledger(old_cursor_ledger));

    hooks.supplier.switch_to(new_client);
    ml.rollover().await.unwrap();
    let new = append_n(&ml, 4, 4).await;
    c.roll_cursor_ledger().await.unwrap();
    for p in &old {
        assert!(env.cluster.contains_ledger(p.ledger_id));
    }
    for p in &new {
        assert!(new_cluster.contains_ledger(p.ledger_id), "{p}");
        assert!(!env.cluster.contains_ledger(p.ledger_id));
    }
    assert!(new_cluster.contains_ledger(c.cursor_ledger_id()));
    assert!(!env.cluster.contains_ledger(old_cursor_ledger));
    let (info, _) = c.metadata().await;
    assert_eq!(info.cluster_stamp().unwrap(), Some("bk-b"));
    drop((ml, c));

    // After a restart, old ledgers are still read from the old cluster.
    let ml = env.factory().open(NAME, config).await.unwrap();
    let all = ml.read_entries(old[0], 100).await.unwrap();
    assert_eq!(all.len(), 8);
    let (info, _) = ml.metadata();
    for li in &info.ledger_info {
        let stamp = li.cluster_stamp().unwrap().unwrap();
        let on_a = env.cluster.contains_ledger(li.ledger_id);
        assert_eq!(stamp == "bk-a", on_a, "ledger {}", li.ledger_id);
    }
    assert_eq!(ml.cursor("sub").unwrap().mark_delete_position(), old[0]);
}

/// N22: the new cluster's id generator is behind the topic's last ledger
/// (the old cluster's ids were advanced meanwhile, as a rollback's
/// precheck asks): the rollover advances the new cluster's generator past
/// it and creates there, instead of refusing the topic for good.
#[tokio::test]
async fn a_rollover_onto_a_cluster_whose_ids_are_behind_advances_them() {
    let env = Env::new();
    env.cluster.advance_ledger_id_to(5_000).unwrap();
    let new_cluster = MemoryCluster::new("bk-b");
    new_cluster.advance_ledger_id_to(10).unwrap();
    let new_client: Arc<dyn BookKeeper> = Arc::new(new_cluster.client());
    let hooks = Hooks::new(env.client());
    hooks.resolver.add_client(new_client.clone());
    let config = small_config().with_hooks(hooks.storage_hooks());
    let ml = env.factory().open(NAME, config).await.unwrap();
    let old = append_n(&ml, 0, 3).await;
    let last_old = old.last().unwrap().ledger_id;
    assert!(last_old >= 5_000);

    hooks.supplier.switch_to(new_client);
    ml.rollover().await.unwrap();
    let new = append_n(&ml, 3, 3).await;
    for p in &new {
        assert!(new_cluster.contains_ledger(p.ledger_id), "{p}");
        assert!(p.ledger_id > last_old, "{p} not after {last_old}");
    }
    assert!(new_cluster.next_ledger_id() > last_old);
    let (info, _) = ml.metadata();
    let ids: Vec<i64> = info.ledger_info.iter().map(|l| l.ledger_id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
    // Nothing left behind on the new cluster but the topic's ledgers.
    for id in new_cluster.ledger_ids() {
        assert!(ids.contains(&id) || id > last_old, "orphan {id}");
    }
}
