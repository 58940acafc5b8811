//! Message ids kept apart across a move: Pulsar clients carry the ids of the
//! cluster they leave, and two clusters number their ledgers alike, so a
//! move first numbers the destination's ledger above the source's (an
//! unload while nobody is attached there) and waits for its subscriptions
//! to leave the old ledgers; it refuses, before anybody moved, when it
//! cannot (the loss seen on real brokers: RELIABILITY, "Known limits").

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_metadata_store::MetadataStore;
use bkswitch_topic_switch::{
    ids_clash, parse_internal_stats, Clash, LedgerEntries, ManagedLedgerIds, Phase, State,
    SwitchRecord, TopicSwitcher,
};
use common::*;

fn switcher(w: &World) -> TopicSwitcher {
    let store: Arc<dyn MetadataStore> = Arc::new(w.store.clone());
    TopicSwitcher::new(store, w.routes.clone(), "c1").with_admins(w.admins())
}

fn ledgers(w: &World, cluster: &str, t: &str) -> Vec<u64> {
    w.model.lock().ledgers[&(cluster.to_owned(), topic(t))].clone()
}

#[tokio::test]
async fn a_move_and_its_rollback_number_the_destination_above_the_source_first() {
    let w = World::new(&["t1"]).await;
    assert_eq!(
        ledgers(&w, "a", "t1"),
        ledgers(&w, "b", "t1"),
        "ids collide"
    );
    let s = switcher(&w);
    s.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::Done, "{rec:#?}");
    assert_eq!(w.where_is("t1"), "b");
    // `b` was rolled while the clients were still on `a`.
    let rolls = w.model.lock().rolls.clone();
    assert_eq!(rolls[0], ("b".into(), topic("t1"), "a".into()), "{rolls:?}");
    let a_max = *ledgers(&w, "a", "t1").iter().max().unwrap();
    let b_first_new = ledgers(&w, "b", "t1")[1];
    assert!(b_first_new > ledgers(&w, "a", "t1")[0]);
    assert!(rec.batches[0]
        .evidence
        .iter()
        .any(|e| e.phase == Phase::Pending && e.note.contains("message ids apart")));
    // Back: `a` is numbered above `b` before the routes lead back.
    let b_now = *ledgers(&w, "b", "t1").last().unwrap();
    s.rollback().await.unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::RolledBack, "{rec:#?}");
    assert_eq!(w.where_is("t1"), "a");
    let a_rolled = w
        .model
        .lock()
        .rolls
        .iter()
        .filter(|(c, _, clients)| c == "a" && clients == "b")
        .count();
    assert!(a_rolled > 0, "`a` rolled while the clients were on `b`");
    let a_after: Vec<u64> = ledgers(&w, "a", "t1")
        .into_iter()
        .filter(|id| *id > a_max)
        .collect();
    assert!(
        a_after.iter().any(|id| *id > b_now),
        "a ledger of `a` above `b`'s {b_now}: {a_after:?}"
    );
}

#[tokio::test]
async fn a_destination_numbered_far_below_is_refused_before_anybody_moves() {
    let w = World::new(&["t1"]).await;
    w.model
        .lock()
        .ledgers
        .insert(("a".into(), topic("t1")), vec![5_000]);
    let table = w.routes.table().await.unwrap();
    let s = switcher(&w);
    s.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::Failed, "{rec:#?}");
    let error = rec.batches[0].error.clone().unwrap();
    assert!(error.contains("refused before anybody moved"), "{error}");
    assert!(
        error.contains("Advance `b`'s ledger ids past `a`'s"),
        "{error}"
    );
    assert!(error.contains("not numbered above ledger 5000"), "{error}");
    // Nothing moved, no route changed, nobody was disconnected.
    assert_eq!(w.where_is("t1"), "a");
    assert_eq!(w.routes.table().await.unwrap().routes, table.routes);
    assert!(w.model.lock().unloads.is_empty());
}

/// Moves `t1` while its subscription on `b` is left in its first ledger,
/// released after `release` (`None`: never).
async fn move_with_a_subscription_behind(release: Option<Duration>) -> (World, SwitchRecord) {
    let w = World::new(&["t1"]).await;
    w.model
        .lock()
        .cursor_behind
        .insert(("b".into(), topic("t1")));
    let s = switcher(&w);
    s.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    if let Some(after) = release {
        // Its replicated state arrives a moment later.
        let model = w.model.clone();
        tokio::spawn(async move {
            tokio::time::sleep(after).await;
            model.lock().cursor_behind.clear();
        });
    }
    let rec = s.run().await.unwrap();
    (w, rec)
}

#[tokio::test]
async fn a_subscription_left_in_an_old_ledger_is_waited_for() {
    let (w, rec) = move_with_a_subscription_behind(Some(Duration::from_millis(400))).await;
    assert_eq!(rec.state, State::Done, "{rec:#?}");
    assert_eq!(w.where_is("t1"), "b");

    // One that never catches up: refused, nobody moved.
    let (w, rec) = move_with_a_subscription_behind(None).await;
    assert_eq!(rec.state, State::Failed, "{rec:#?}");
    let error = rec.batches[0].error.clone().unwrap();
    assert!(
        error.contains("subscription `sub` on `b` has messages left"),
        "{error}"
    );
    assert_eq!(w.where_is("t1"), "a");
}

fn ml(ledgers: &[(u64, u64)], cursors: &[(&str, u64, i64)]) -> ManagedLedgerIds {
    ManagedLedgerIds {
        ledgers: ledgers
            .iter()
            .map(|&(id, entries)| LedgerEntries { id, entries })
            .collect(),
        cursors: cursors
            .iter()
            .map(|&(s, l, e)| (s.to_owned(), (l, e)))
            .collect(),
    }
}

#[test]
fn the_clash_rule() {
    let a = ml(&[(9, 100)], &[("sub", 9, 99)]);
    // The same ledger id on both: roll.
    let b = ml(&[(9, 102)], &[("sub", 9, 101)]);
    assert!(matches!(ids_clash("a", &a, "b", &b), Some(Clash::Roll(_))));
    // Rolled above, the subscription still in the old ledger: wait.
    let b = ml(&[(9, 102), (12, 3)], &[("sub", 9, 90)]);
    assert!(matches!(ids_clash("a", &a, "b", &b), Some(Clash::Wait(_))));
    // Past every entry of the old ledger: apart.
    let b = ml(&[(9, 102), (12, 3)], &[("sub", 9, 101)]);
    assert_eq!(ids_clash("a", &a, "b", &b), None);
    let b = ml(&[(9, 102), (12, 3)], &[("sub", 12, 0)]);
    assert_eq!(ids_clash("a", &a, "b", &b), None);
    // Below the source's newest ledger: roll, whatever the cursors.
    let a = ml(&[(9, 100), (20, 5)], &[]);
    assert!(matches!(ids_clash("a", &a, "b", &b), Some(Clash::Roll(_))));
    // A source without ledgers gave no ids out.
    assert_eq!(ids_clash("a", &ml(&[], &[]), "b", &b), None);
}

/// The internal stats as Pulsar 4.2 answers them (trimmed).
#[test]
fn internal_stats_are_read_as_pulsar_writes_them() {
    let v: serde_json::Value = serde_json::from_str(
        r#"{"entriesAddedCounter":105,"numberOfEntries":105,"totalSize":10500,
        "currentLedgerEntries":5,"currentLedgerSize":500,"lastLedgerCreatedTimestamp":"x",
        "waitingCursorsCount":1,"pendingAddEntriesCount":0,"lastConfirmedEntry":"14:4",
        "state":"LedgerOpened",
        "ledgers":[{"ledgerId":9,"entries":100,"size":10000,"offloaded":false,"underReplicated":false},
                   {"ledgerId":14,"entries":0,"size":0,"offloaded":false,"underReplicated":false}],
        "cursors":{"sub":{"markDeletePosition":"14:2","readPosition":"14:3","waitingReadOp":true},
                   "pulsar.repl.a":{"markDeletePosition":"14:4","readPosition":"14:5"}},
        "schemaLedgers":[],"compactedLedger":{"ledgerId":-1,"entries":-1,"size":-1,"offloaded":false,"underReplicated":false}}"#,
    )
    .unwrap();
    let m = parse_internal_stats(&v);
    assert_eq!(m, ml(&[(9, 100), (14, 5)], &[("sub", 14, 2)]));
}
