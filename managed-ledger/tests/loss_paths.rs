//! Loss paths of the managed ledger: an ambiguous metadata write (applied,
//! then the answer lost) never deletes a ledger the metadata names, and a
//! topic whose last ledger is missing still loads (as Pulsar's does).

mod common;

use bkswitch_managed_ledger::testkit::InjectedFailure;
use bkswitch_managed_ledger::{InitialPosition, ManagedLedger, Position};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::ml::ManagedLedgerInfo;
use common::*;

/// The positions `ml` reads from `start` on.
async fn read_from(ml: &ManagedLedger, start: Position) -> Vec<Position> {
    ml.read_entries(start, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.position)
        .collect()
}

async fn stored_info(env: &Env) -> ManagedLedgerInfo {
    let r = env.inner_store.get(PATH).await.unwrap().unwrap();
    decode_managed_ledger_info(&r.value).unwrap()
}

/// Every data ledger the stored metadata names exists on the cluster.
async fn assert_every_recorded_ledger_exists(env: &Env) {
    for li in stored_info(env).await.ledger_info {
        assert!(
            env.cluster.contains_ledger(li.ledger_id),
            "the metadata names ledger {} but the cluster no longer holds it",
            li.ledger_id
        );
    }
}

/// The managed ledger opened on `env` with `n` entries appended (3 per
/// ledger) and their positions.
async fn with_entries(env: &Env, n: usize) -> (ManagedLedger, Vec<Position>) {
    let ml = env.factory().open(NAME, small_config()).await.unwrap();
    let mut acked = Vec::new();
    for i in 0..n {
        acked.push(ml.append(format!("m{i}")).await.unwrap());
    }
    (ml, acked)
}

#[tokio::test]
async fn an_ambiguous_rollover_whose_read_back_fails_keeps_the_recorded_ledger() {
    let env = Env::new();
    let config = small_config();
    let (ml, mut acked) = with_entries(&env, 3).await;
    // The next append rolls over: the compare-and-set recording the new
    // ledger is applied, its answer is lost and the connection stays down, so
    // reading the metadata back fails too.
    env.store
        .fail_writes_matching(PATH, 1, InjectedFailure::AppliedThenUnavailable);
    env.store.fail_reads_matching(PATH, usize::MAX);
    let err = ml.append("lost").await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    env.store.clear_faults();
    let recorded = stored_info(&env).await;
    assert_eq!(recorded.ledger_info.len(), 2, "the rollover was applied");
    assert_every_recorded_ledger_exists(&env).await;

    // The owner learns what happened and goes on; every acknowledged entry
    // stays readable, also after a restart.
    acked.push(ml.append("m3").await.unwrap());
    drop(ml);
    let ml = env.factory().open(NAME, config).await.unwrap();
    assert_every_recorded_ledger_exists(&env).await;
    assert_eq!(read_from(&ml, acked[0]).await, acked);
}

#[tokio::test]
async fn an_ambiguous_cursor_ledger_record_whose_read_back_fails_keeps_the_recorded_ledger() {
    let env = Env::new();
    let config = small_config();
    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps: Vec<Position> =
        futures::future::try_join_all((0..3).map(|i| ml.append(format!("m{i}"))))
            .await
            .unwrap();
    let cursor_path = format!("{PATH}/sub");
    // The first persisted position creates the cursor ledger and records it:
    // applied, answer lost, read-back impossible.
    env.store
        .fail_writes_matching(&cursor_path, 1, InjectedFailure::AppliedThenUnavailable);
    env.store.fail_reads_matching(&cursor_path, usize::MAX);
    let err = c.mark_delete(ps[1]).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    env.store.clear_faults();
    let r = env.inner_store.get(&cursor_path).await.unwrap().unwrap();
    let info = decode_managed_cursor_info(&r.value).unwrap();
    assert!(info.cursors_ledger_id >= 0, "the record was applied");
    assert!(
        env.cluster.contains_ledger(info.cursors_ledger_id),
        "the metadata names cursor ledger {} but the cluster no longer holds it",
        info.cursors_ledger_id
    );

    // The cursor goes on (no fencing of itself) and a restart recovers the
    // last acknowledged position.
    c.mark_delete(ps[2]).await.unwrap();
    drop((ml, c));
    let ml = env.factory().open(NAME, config).await.unwrap();
    assert_eq!(ml.cursor("sub").unwrap().mark_delete_position(), ps[2]);
}

#[tokio::test]
async fn a_lost_conflict_answer_never_deletes_a_ledger_another_writer_recorded() {
    // A conflict is not proof that the write was not applied (a client that
    // retried an applied write sees its own version as a conflict): the new
    // ledger is deleted only once the stored metadata is read and does not
    // name it.
    let env = Env::new();
    let (ml, _) = with_entries(&env, 3).await;
    env.store
        .fail_writes_matching(PATH, 1, InjectedFailure::BadVersion);
    let err = ml.append("refused").await.unwrap_err();
    assert!(err.to_string().contains("fenced"), "{err}");
    assert_every_recorded_ledger_exists(&env).await;
    // Not recorded: the new ledger is gone again (nothing leaks).
    let recorded: Vec<i64> = stored_info(&env)
        .await
        .ledger_info
        .iter()
        .map(|l| l.ledger_id)
        .collect();
    for id in env.cluster.ledger_ids() {
        assert!(recorded.contains(&id), "ledger {id} leaked");
    }
}

#[tokio::test]
async fn a_topic_whose_unclosed_last_ledger_is_missing_loads_without_it_as_pulsar_does() {
    let env = Env::new();
    let config = small_config();
    let (ml, acked) = with_entries(&env, 4).await;
    let last = ml.current_ledger_id().unwrap();
    drop(ml); // a crash: the last ledger is recorded without entries
    assert!(stored_info(&env)
        .await
        .ledger_info
        .iter()
        .any(|l| l.ledger_id == last && l.entries.is_none()));
    assert!(env.cluster.remove_ledger(last));

    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    assert!(!ml.ledger_ids().contains(&last), "{:?}", ml.ledger_ids());
    assert_every_recorded_ledger_exists(&env).await;
    // What the sealed ledgers hold is still there, and the topic takes appends.
    assert_eq!(read_from(&ml, acked[0]).await, acked[..3].to_vec());
    ml.append("after").await.unwrap();
    drop(ml);
    // A missing sealed ledger is not the loader's business: it loads as before.
    let ml = env.factory().open(NAME, config).await.unwrap();
    assert!(ml.append("again").await.is_ok());
}
