//! The checker itself: it must report what it is there to catch.

use std::time::Duration;

use bkswitch_nemesis::checker::{check, references, ViolationKind, Violations};
use bkswitch_nemesis::plan::{Plan, TOPICS};
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

/// Runs traffic for a while and restarts every node, as after a history.
async fn healed_stack_with_traffic() -> (Stack, bkswitch_nemesis::traffic::Model) {
    let mut stack = Stack::start(Plan::generate(1).settings).await;
    let traffic = Traffic::start(stack.directory.clone());
    tokio::time::sleep(Duration::from_secs(3)).await;
    let model = traffic.stop().await;
    for i in 0..stack.slots.len() {
        stack.stop_node(i).await;
        stack.start_node(i).await.unwrap();
    }
    (stack, model)
}

fn kinds(found: &Violations) -> Vec<ViolationKind> {
    found.0.iter().map(|v| v.kind).collect()
}

#[test]
fn the_consumer_side_and_the_cursor_are_checked_exactly() {
    runtime().block_on(async {
        let (mut stack, model) = healed_stack_with_traffic().await;
        let node = stack.any_node().unwrap().clone();
        let topic = TOPICS[0].to_owned();
        assert!(model.observed.is_empty(), "{:?}", model.observed);
        assert!(!model.delivered[&topic].is_empty(), "{model:?}");

        // A consumed message the consumer never received: a consumer gap.
        let mut gap = model.clone();
        let (_, first) = gap.acked[&topic][0];
        gap.delivered.get_mut(&topic).unwrap().remove(&first);
        let mut found = Violations::default();
        check(&stack, &node, &gap, &mut found).await;
        assert!(
            kinds(&found).contains(&ViolationKind::ConsumerGap),
            "{:?}",
            found.0
        );

        // More redeliveries than the reopens allow.
        let mut dups = model.clone();
        *dups
            .delivered
            .get_mut(&topic)
            .unwrap()
            .get_mut(&first)
            .unwrap() += 50;
        let mut found = Violations::default();
        check(&stack, &node, &dups, &mut found).await;
        assert!(
            kinds(&found).contains(&ViolationKind::Duplicates),
            "{:?}",
            found.0
        );

        // The cursor is durably ahead of everything the traffic asked for.
        let mut behind_model = model.clone();
        let (pos, _) = behind_model.acked[&topic][0];
        behind_model.mark_deleted.insert(topic.clone(), pos);
        behind_model.md_attempts.remove(&topic);
        let mut found = Violations::default();
        check(&stack, &node, &behind_model, &mut found).await;
        assert!(
            kinds(&found).contains(&ViolationKind::CursorAhead),
            "{:?}",
            found.0
        );

        // ... and a later attempt that failed may have applied: then it is
        // where that attempt put it, and fine.
        let mut attempted = behind_model.clone();
        attempted
            .md_attempts
            .insert(topic.clone(), vec![model.mark_deleted[&topic]]);
        let mut found = Violations::default();
        check(&stack, &node, &attempted, &mut found).await;
        assert!(found.0.is_empty(), "{:?}", found.0);
        stack.shutdown().await;
    });
}

#[test]
fn a_ledger_that_does_not_hold_what_was_acknowledged_is_reported() {
    runtime().block_on(async {
        let (mut stack, model) = healed_stack_with_traffic().await;
        let node = stack.any_node().unwrap().clone();
        let topic = TOPICS[1].to_owned();
        let (pos, n) = *model.acked[&topic].last().unwrap();
        let mut ignore = Violations::default();
        let r = references(&stack.root, &mut ignore)
            .await
            .into_iter()
            .find(|r| r.kind == "data" && r.ledger_id == pos.ledger_id)
            .expect("the last message's ledger is referenced");
        assert!(stack.cluster(&r.cluster).replace_entry(
            pos.ledger_id,
            pos.entry_id,
            bytes::Bytes::from_static(b"someone else's bytes"),
        ));
        let mut found = Violations::default();
        check(&stack, &node, &model, &mut found).await;
        let want = format!("#{n} at");
        assert!(
            found
                .0
                .iter()
                .any(|v| v.kind == ViolationKind::LedgerContents && v.message.contains(&want)),
            "{:?}",
            found.0
        );
        stack.shutdown().await;
    });
}

#[test]
fn a_corrupt_stamp_and_an_undecodable_cursor_are_violations() {
    use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
    use bkswitch_proto::codec::{decode_managed_ledger_info, encode_managed_ledger_info};
    use bkswitch_proto::ml::KeyValue;
    runtime().block_on(async {
        let (mut stack, _model) = healed_stack_with_traffic().await;
        // Two stamps on one ledger: never read as either cluster.
        let path = format!("/managed-ledgers/{}", TOPICS[2]);
        let got = stack.root.get(&path).await.unwrap().unwrap();
        let mut info = decode_managed_ledger_info(&got.value).unwrap();
        let l = &mut info.ledger_info[0];
        for c in ["old", "new"] {
            l.properties.push(KeyValue {
                key: bkswitch_proto::attribution::ATTR_KEY.to_owned(),
                value: c.to_owned(),
            });
        }
        let bytes = encode_managed_ledger_info(&info, Default::default()).unwrap();
        stack
            .root
            .put(&path, &bytes, ExpectedVersion::Exactly(got.stat.version))
            .await
            .unwrap();
        // A cursor node that does not decode.
        let cursor = format!("/managed-ledgers/{}/sub", TOPICS[3]);
        stack
            .root
            .put(&cursor, b"\xff\xff not a cursor", ExpectedVersion::Any)
            .await
            .unwrap();
        let mut found = Violations::default();
        let _ = references(&stack.root, &mut found).await;
        let corrupt: Vec<&str> = found
            .0
            .iter()
            .filter(|v| v.kind == ViolationKind::CorruptMetadata)
            .map(|v| v.message.as_str())
            .collect();
        assert!(
            corrupt.iter().any(|m| m.contains("stamp"))
                && corrupt.iter().any(|m| m.contains(&cursor)),
            "{corrupt:?}"
        );
        stack.shutdown().await;
    });
}

#[test]
fn a_delivery_from_elsewhere_or_past_an_acknowledged_message_is_seen_as_it_happens() {
    use bkswitch_managed_ledger::{Entry, Position};
    use bkswitch_nemesis::traffic::{check_delivery, Model};
    let topic = TOPICS[0];
    let mut m = Model::default();
    m.attempted.insert(topic.to_owned(), 3);
    m.acked.insert(
        topic.to_owned(),
        (1..=3)
            .map(|n| (Position::new(7, n as i64 - 1), n))
            .collect(),
    );
    let entry = |data: String, e: i64| Entry {
        position: Position::new(7, e),
        data: data.into(),
    };
    let mut last = None;
    // #1 then #3: #2 was acknowledged and skipped.
    check_delivery(
        topic,
        &[
            entry(format!("{topic}#1"), 0),
            entry(format!("{topic}#3"), 2),
        ],
        &mut last,
        &mut m,
    );
    assert_eq!(
        m.observed.iter().map(|v| v.kind).collect::<Vec<_>>(),
        vec![ViolationKind::ConsumerGap]
    );
    // Another topic's message (a read served from the wrong cluster).
    check_delivery(
        topic,
        &[entry(format!("{}#2", TOPICS[1]), 3)],
        &mut last,
        &mut m,
    );
    assert_eq!(m.observed.last().unwrap().kind, ViolationKind::WrongData);
    assert_eq!(m.delivered[topic].len(), 2);
}

#[test]
fn a_bookie_losing_copies_loses_nothing_and_an_entry_without_copies_is_reported() {
    runtime().block_on(async {
        let (mut stack, model) = healed_stack_with_traffic().await;
        let node = stack.any_node().unwrap().clone();
        // One bookie of `old` loses its disk: every entry keeps a copy (E3
        // WQ2), the checker reads everything from the others.
        let old = stack.cluster("old");
        let lost = old.lose_bookie(&old.bookies()[1].clone(), false);
        assert!(lost > 10, "{lost} copies lost");
        let mut found = Violations::default();
        check(&stack, &node, &model, &mut found).await;
        assert!(found.0.is_empty(), "{:?}", found.0);

        // The fault allowed to take every copy of an acknowledged entry: lost,
        // and reported.
        let topic = TOPICS[2].to_owned();
        let (pos, n) = *model.acked[&topic].last().unwrap();
        for b in old.bookies().to_vec() {
            old.lose_copies(pos.ledger_id, &b, pos.entry_id, pos.entry_id, true);
        }
        assert_eq!(old.copies(pos.ledger_id, pos.entry_id), Some(0));
        let mut found = Violations::default();
        check(&stack, &node, &model, &mut found).await;
        let want = format!("#{n} at");
        assert!(
            found
                .0
                .iter()
                .any(|v| v.kind == ViolationKind::LedgerContents && v.message.contains(&want)),
            "{:?}",
            found.0
        );
        assert!(
            found
                .0
                .iter()
                .any(|v| v.kind == ViolationKind::MessageLost && v.message.contains(&topic)),
            "{:?}",
            found.0
        );
        stack.shutdown().await;
    });
}

#[test]
fn corrupt_metadata_overwritten_deleted_or_left_undecodable_is_reported() {
    use bkswitch_metadata_store::{ExpectedVersion, MetadataStore};
    use bkswitch_nemesis::corrupt::{corrupt_ledger, corrupt_node, repair, Damaged};
    runtime().block_on(async {
        let (mut stack, model) = healed_stack_with_traffic().await;
        let node = stack.any_node().unwrap().clone();
        let clusters = stack.clusters.clone();

        // Repaired untouched: restored, nothing reported.
        let cursor = format!("/managed-ledgers/{}/sub", TOPICS[0]);
        let d = corrupt_node(&stack.root, &cursor).await.unwrap();
        let mut found = Violations::default();
        let r = repair(&stack.root, &clusters, &d, &mut found).await;
        assert!(
            r.contains("restored") && found.0.is_empty(),
            "{r}: {:?}",
            found.0
        );

        // Overwritten while corrupt (even with the bytes it had before).
        let ml = format!("/managed-ledgers/{}", TOPICS[1]);
        let d = corrupt_node(&stack.root, &ml).await.unwrap();
        let Damaged::Node { original, .. } = &d else {
            unreachable!()
        };
        stack
            .root
            .put(&ml, original, ExpectedVersion::Any)
            .await
            .unwrap();
        let mut found = Violations::default();
        repair(&stack.root, &clusters, &d, &mut found).await;
        assert_eq!(kinds(&found), vec![ViolationKind::CorruptionMishandled]);
        assert!(found.0[0].message.contains("overwritten"), "{:?}", found.0);

        // Deleted while corrupt.
        let schema = "/schemas/t/ns1/a";
        let d = corrupt_node(&stack.root, schema).await.unwrap();
        stack
            .root
            .delete(schema, ExpectedVersion::Any)
            .await
            .unwrap();
        let mut found = Violations::default();
        repair(&stack.root, &clusters, &d, &mut found).await;
        assert_eq!(kinds(&found), vec![ViolationKind::CorruptionMishandled]);
        assert!(found.0[0].message.contains("deleted"), "{:?}", found.0);
        let Damaged::Node { original, .. } = &d else {
            unreachable!()
        };
        stack
            .root
            .put(schema, original, ExpectedVersion::NotExists)
            .await
            .unwrap();

        // A ledger's BookKeeper metadata left undecodable: the checker says
        // so, and the topic whose ledger it is cannot be read back.
        let data = references(&stack.root, &mut Violations::default())
            .await
            .into_iter()
            .find(|r| r.kind == "data" && r.path.ends_with(TOPICS[3]) && r.entries > 0)
            .expect("a closed data ledger");
        let c = stack.cluster(&data.cluster);
        let ids = c.ledger_ids();
        let pick = ids.iter().position(|id| *id == data.ledger_id).unwrap() as u64;
        let d = corrupt_ledger(&c, pick).unwrap();
        let mut found = Violations::default();
        check(&stack, &node, &model, &mut found).await;
        let name = format!("ledger {}", data.ledger_id);
        assert!(
            found
                .0
                .iter()
                .any(|v| v.kind == ViolationKind::CorruptMetadata && v.message.contains(&name)),
            "{:?}",
            found.0
        );
        assert!(
            found.0.iter().any(|v| v.kind == ViolationKind::MessageLost
                && v.message.contains(TOPICS[3])
                && v.message.contains("cannot be decoded")),
            "{:?}",
            found.0
        );
        // Restored from the backup: everything reads back.
        let mut found = Violations::default();
        repair(&stack.root, &clusters, &d, &mut found).await;
        check(&stack, &node, &model, &mut found).await;
        assert!(found.0.is_empty(), "{:?}", found.0);
        stack.shutdown().await;
    });
}
