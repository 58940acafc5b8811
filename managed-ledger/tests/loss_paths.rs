//! Loss paths of the managed ledger: an ambiguous metadata write (applied,
//! then the answer lost) never deletes a ledger the metadata names, and a
//! topic whose last ledger is missing still loads (as Pulsar's does).

mod common;

use std::sync::Arc;

use bkswitch_bk_client::MemoryCluster;
use bkswitch_managed_ledger::testkit::{InjectedFailure, RecordingStore};
use bkswitch_managed_ledger::{InitialPosition, ManagedLedger, ManagedLedgerFactory, Position};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::{decode_managed_cursor_info, decode_managed_ledger_info};
use bkswitch_proto::ml::ManagedLedgerInfo;
use common::*;

/// What a loss-path scenario runs on: the recording store of an [`Env`]
/// (over the memory store or a real ZooKeeper), its memory cluster and a
/// factory on both (opening again on it is a restart: nothing is cached).
struct Stack<'a> {
    store: Arc<RecordingStore>,
    cluster: &'a MemoryCluster,
    factory: ManagedLedgerFactory,
}

impl Stack<'_> {
    fn on(env: &Env) -> Stack<'_> {
        Stack {
            store: env.store.clone(),
            cluster: &env.cluster,
            factory: env.factory(),
        }
    }

    /// The managed ledger opened with `n` entries appended (3 per ledger)
    /// and their positions.
    async fn with_entries(&self, n: usize) -> (ManagedLedger, Vec<Position>) {
        let ml = self.factory.open(NAME, small_config()).await.unwrap();
        let mut acked = Vec::new();
        for i in 0..n {
            acked.push(ml.append(format!("m{i}")).await.unwrap());
        }
        (ml, acked)
    }

    async fn stored_info(&self) -> ManagedLedgerInfo {
        let r = self.store.get(PATH).await.unwrap().unwrap();
        decode_managed_ledger_info(&r.value).unwrap()
    }

    /// Every data ledger the stored metadata names exists on the cluster.
    async fn assert_every_recorded_ledger_exists(&self) {
        for li in self.stored_info().await.ledger_info {
            assert!(
                self.cluster.contains_ledger(li.ledger_id),
                "the metadata names ledger {} but the cluster no longer holds it",
                li.ledger_id
            );
        }
    }
}

/// The positions `ml` reads from `start` on.
async fn read_from(ml: &ManagedLedger, start: Position) -> Vec<Position> {
    ml.read_entries(start, 100)
        .await
        .unwrap()
        .iter()
        .map(|e| e.position)
        .collect()
}

/// The compare-and-set recording a new data ledger at rollover is applied,
/// its answer is lost and the connection stays down, so reading the metadata
/// back fails too.
async fn ambiguous_rollover(on: &Stack<'_>) {
    let (ml, mut acked) = on.with_entries(3).await;
    on.store
        .fail_writes_matching(PATH, 1, InjectedFailure::AppliedThenUnavailable);
    on.store.fail_reads_matching(PATH, usize::MAX);
    let err = ml.append("lost").await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    on.store.clear_faults();
    let recorded = on.stored_info().await;
    assert_eq!(recorded.ledger_info.len(), 2, "the rollover was applied");
    on.assert_every_recorded_ledger_exists().await;

    // The owner learns what happened and goes on; every acknowledged entry
    // stays readable, also after a restart.
    acked.push(ml.append("m3").await.unwrap());
    drop(ml);
    let ml = on.factory.open(NAME, small_config()).await.unwrap();
    on.assert_every_recorded_ledger_exists().await;
    assert_eq!(read_from(&ml, acked[0]).await, acked);
}

/// The same for the compare-and-set recording a cursor's first cursor
/// ledger.
async fn ambiguous_cursor_ledger_record(on: &Stack<'_>) {
    let (ml, ps) = on.with_entries(3).await;
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let cursor_path = format!("{PATH}/sub");
    on.store
        .fail_writes_matching(&cursor_path, 1, InjectedFailure::AppliedThenUnavailable);
    on.store.fail_reads_matching(&cursor_path, usize::MAX);
    let err = c.mark_delete(ps[1]).await.unwrap_err();
    assert!(err.is_retryable(), "{err}");
    on.store.clear_faults();
    let r = on.store.get(&cursor_path).await.unwrap().unwrap();
    let info = decode_managed_cursor_info(&r.value).unwrap();
    assert!(info.cursors_ledger_id >= 0, "the record was applied");
    assert!(
        on.cluster.contains_ledger(info.cursors_ledger_id),
        "the metadata names cursor ledger {} but the cluster no longer holds it",
        info.cursors_ledger_id
    );

    // The cursor goes on (no fencing of itself) and a restart recovers the
    // last acknowledged position.
    c.mark_delete(ps[2]).await.unwrap();
    drop((ml, c));
    let ml = on.factory.open(NAME, small_config()).await.unwrap();
    assert_eq!(ml.cursor("sub").unwrap().mark_delete_position(), ps[2]);
}

#[tokio::test]
async fn an_ambiguous_rollover_whose_read_back_fails_keeps_the_recorded_ledger() {
    let env = Env::new();
    ambiguous_rollover(&Stack::on(&env)).await;
}

#[tokio::test]
async fn an_ambiguous_cursor_ledger_record_whose_read_back_fails_keeps_the_recorded_ledger() {
    let env = Env::new();
    ambiguous_cursor_ledger_record(&Stack::on(&env)).await;
}

/// Both on a real ZooKeeper server: the writes are applied by ZooKeeper, then
/// reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_zookeeper_an_ambiguous_record_never_deletes_the_recorded_ledger() {
    for scenario in 0..2 {
        let env = Env::on_zookeeper().await;
        let on = Stack::on(&env);
        if scenario == 0 {
            ambiguous_rollover(&on).await;
        } else {
            ambiguous_cursor_ledger_record(&on).await;
        }
        env.inner_store.close().await.unwrap();
    }
}

#[tokio::test]
async fn a_lost_conflict_answer_never_deletes_a_ledger_another_writer_recorded() {
    // A conflict is not proof that the write was not applied (a client that
    // retried an applied write sees its own version as a conflict): the new
    // ledger is deleted only once the stored metadata is read and does not
    // name it.
    let env = Env::new();
    let on = Stack::on(&env);
    let (ml, _) = on.with_entries(3).await;
    env.store
        .fail_writes_matching(PATH, 1, InjectedFailure::BadVersion);
    let err = ml.append("refused").await.unwrap_err();
    assert!(err.to_string().contains("fenced"), "{err}");
    on.assert_every_recorded_ledger_exists().await;
    // Not recorded: the new ledger is gone again (nothing leaks).
    let recorded: Vec<i64> = on
        .stored_info()
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
    let on = Stack::on(&env);
    let (ml, acked) = on.with_entries(4).await;
    let last = ml.current_ledger_id().unwrap();
    drop(ml); // a crash: the last ledger is recorded without entries
    assert!(on
        .stored_info()
        .await
        .ledger_info
        .iter()
        .any(|l| l.ledger_id == last && l.entries.is_none()));
    assert!(env.cluster.remove_ledger(last));

    let ml = env.factory().open(NAME, config.clone()).await.unwrap();
    assert!(!ml.ledger_ids().contains(&last), "{:?}", ml.ledger_ids());
    on.assert_every_recorded_ledger_exists().await;
    // What the sealed ledgers hold is still there, and the topic takes appends.
    assert_eq!(read_from(&ml, acked[0]).await, acked[..3].to_vec());
    ml.append("after").await.unwrap();
    drop(ml);
    // A missing sealed ledger is not the loader's business: it loads as before.
    let ml = env.factory().open(NAME, config).await.unwrap();
    assert!(ml.append("again").await.is_ok());
}
