//! A task that keeps many adds in flight takes every answered one in one turn:
//! an add's future does not spend the awaiting task's cooperative budget
//! (tokio's 128 polls per turn), so no answered add waits for the task's next
//! turn behind the connections' tasks. The bookies are the test kit's fake
//! bookies; the metadata is a `MemoryStore`.

use bkswitch_bk_client::{BookKeeper, LedgerConfig, WriteHandle};
use bkswitch_bookkeeper::testkit::{generated_payload, FakeBookies};
use bkswitch_bookkeeper::ClientConfig;
use futures::FutureExt;

const ADDS: i64 = 1_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answered_adds_are_all_ready_in_one_turn_of_the_awaiting_task() {
    let (_fakes, bk) = FakeBookies::with_client(3, ClientConfig::default())
        .await
        .unwrap();
    let w = bk
        .create_ledger(&LedgerConfig::default().with_quorums(3, 2, 2))
        .await
        .unwrap();

    // In a task of its own (a task has a budget): issue the adds and wait for
    // the last one only (answers reach their adds in entry order, so then
    // every add is answered), then, in a fresh turn, poll each of the others
    // exactly once without yielding.
    let writer = w.clone();
    let (ready, ids) = tokio::spawn(async move {
        let mut adds: Vec<_> = (0..ADDS)
            .map(|i| writer.add_entry(generated_payload(i, 1024)))
            .collect();
        let last = adds.pop().unwrap();
        assert_eq!(last.await.unwrap(), ADDS - 1);
        tokio::task::yield_now().await;
        let mut ready = 1;
        let mut ids = Vec::new();
        for add in adds {
            if let Some(answer) = add.now_or_never() {
                ready += 1;
                ids.push(answer.unwrap());
            }
        }
        (ready, ids)
    })
    .await
    .unwrap();
    assert_eq!(
        ready, ADDS,
        "of {ADDS} answered adds only {ready} were ready in one turn of the awaiting task"
    );
    assert_eq!(ids, (0..ADDS - 1).collect::<Vec<_>>());
    w.close().await.unwrap();
}
