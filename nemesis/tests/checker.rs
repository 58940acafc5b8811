//! The checker itself: it must report what it is there to catch.

use std::time::Duration;

use bkswitch_nemesis::checker::{check, references, ViolationKind, Violations};
use bkswitch_nemesis::plan::Plan;
use bkswitch_nemesis::stack::Stack;
use bkswitch_nemesis::traffic::Traffic;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap()
}

#[test]
fn a_healthy_history_passes_and_a_deleted_ledger_or_lost_message_is_reported() {
    runtime().block_on(async {
        let mut stack = Stack::start(Plan::generate(1).settings).await;
        let traffic = Traffic::start(stack.directory.clone());
        tokio::time::sleep(Duration::from_secs(3)).await;
        let model = traffic.stop().await;
        assert!(model.published() > 50, "{model:?}");
        // As after a history: every node restarted (topic ownership released).
        for i in 0..stack.slots.len() {
            stack.stop_node(i).await;
            stack.start_node(i).await.unwrap();
        }
        let node = stack.any_node().unwrap().clone();

        let mut found = Violations::default();
        check(&stack, &node, &model, &mut found).await;
        assert!(found.0.is_empty(), "{:?}", found.0);

        // A message acknowledged but never written is reported lost.
        let mut lying = model.clone();
        let topic = bkswitch_nemesis::plan::TOPICS[0].to_owned();
        let last = *lying.acked[&topic].last().unwrap();
        let mut pos = last.0;
        pos.entry_id += 1_000;
        lying
            .acked
            .get_mut(&topic)
            .unwrap()
            .push((pos, last.1 + 1_000));
        let mut found = Violations::default();
        check(&stack, &node, &lying, &mut found).await;
        assert!(
            found
                .0
                .iter()
                .any(|v| v.kind == ViolationKind::MessageLost && v.message.contains(&topic)),
            "{:?}",
            found.0
        );

        // A referenced ledger deleted behind the metadata's back is reported.
        let mut ignore = Violations::default();
        let r = references(&stack.root, &mut ignore)
            .await
            .into_iter()
            .find(|r| r.kind == "schema")
            .unwrap();
        assert!(stack.cluster(&r.cluster).remove_ledger(r.ledger_id));
        let mut found = Violations::default();
        check(&stack, &node, &model, &mut found).await;
        let missing = format!("ledger {} referenced by {}", r.ledger_id, r.path);
        assert!(
            found
                .0
                .iter()
                .any(|v| v.kind == ViolationKind::LedgerMissing && v.message.contains(&missing)),
            "{:?}",
            found.0
        );
        assert!(
            found.0.iter().any(|v| v.kind == ViolationKind::SchemaLost),
            "{:?}",
            found.0
        );
        stack.shutdown().await;
    });
}
