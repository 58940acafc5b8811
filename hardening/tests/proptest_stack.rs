//! Random sequences of broker and operator operations against the embedded
//! stack, one at a time, with the switch invariants checked after every
//! operation: one ACTIVE cluster (I12), a PROMOTE changes only stamps (I9,
//! I10), every stamp names the cluster holding its ledger, every appended
//! entry stays readable, every cursor keeps (and after a reload recovers) its
//! last acknowledged position, and no schema version is lost.

mod embedded;

use std::collections::BTreeMap;

use bkswitch_managed_ledger::{InitialPosition, Position};
use bkswitch_registry::ClusterStatus;
use bkswitch_switch_orchestrator::{CleanupOptions, OrchestratorError, Phase};
use embedded::*;
use proptest::prelude::*;

const TOPICS: usize = 2;
const SCHEMAS: usize = 2;

#[derive(Debug, Clone)]
enum Op {
    Append(usize, usize),
    Ack(usize),
    RollCursor(usize, usize),
    PutSchema(usize),
    Reopen(usize),
    Switch,
    Rollback,
    CleanupForce,
    CleanupDryRun,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (0..TOPICS, 1usize..6).prop_map(|(t, n)| Op::Append(t, n)),
        3 => (0..TOPICS).prop_map(Op::Ack),
        1 => (0..TOPICS, 0..CURSORS.len()).prop_map(|(t, c)| Op::RollCursor(t, c)),
        2 => (0..SCHEMAS).prop_map(Op::PutSchema),
        2 => (0..TOPICS).prop_map(Op::Reopen),
        2 => Just(Op::Switch),
        1 => Just(Op::Rollback),
        1 => Just(Op::CleanupForce),
        1 => Just(Op::CleanupDryRun),
    ]
}

/// What the test expects of the stack.
#[derive(Default)]
struct Model {
    /// Per topic, every appended entry.
    entries: BTreeMap<usize, Vec<(Position, String)>>,
    /// Per (topic, cursor), the last acknowledged position.
    acked: BTreeMap<(usize, usize), Position>,
    /// Per schema, the data of every version.
    schemas: BTreeMap<usize, Vec<String>>,
    /// The latest switch and its source and target.
    switch: Option<(String, String, String)>,
    puts: usize,
}

async fn setup(env: &Env, m: &mut Model) {
    let factory = env.factory();
    for t in 0..TOPICS {
        let ml = factory.open(&topic(t), env.config()).await.unwrap();
        for k in 0..3 {
            let data = format!("t{t}-init-{k}");
            let p = ml.append(data.clone()).await.unwrap();
            m.entries.entry(t).or_default().push((p, data));
        }
        for (c, name) in CURSORS.iter().enumerate() {
            let cursor = ml
                .open_cursor_at(name, InitialPosition::Earliest)
                .await
                .unwrap();
            let e = cursor.read_entries(1).await.unwrap();
            cursor.mark_delete(e[0].position).await.unwrap();
            m.acked.insert((t, c), e[0].position);
        }
        env.topics.insert(ml);
    }
    for s in 0..SCHEMAS {
        let data = format!("s{s}-init");
        env.schemas
            .put(&schema_id(s), data.as_bytes(), data.as_bytes())
            .await
            .unwrap();
        m.schemas.insert(s, vec![data]);
    }
}

async fn phase(env: &Env, m: &Model) -> Option<Phase> {
    let (id, _, _) = m.switch.as_ref()?;
    Some(env.orchestrator().status(id).await.unwrap().phase)
}

async fn apply(env: &Env, m: &mut Model, op: &Op) {
    match *op {
        Op::Append(t, n) => {
            let ml = env.topics.get(&topic(t)).unwrap();
            for _ in 0..n {
                let data = format!("t{t}-{}", m.entries[&t].len());
                let p = ml.append(data.clone()).await.unwrap();
                m.entries.get_mut(&t).unwrap().push((p, data));
            }
        }
        Op::Ack(t) => {
            let ml = env.topics.get(&topic(t)).unwrap();
            for (c, name) in CURSORS.iter().enumerate() {
                let cursor = ml.cursor(name).unwrap();
                let e = cursor.read_entries(3).await.unwrap();
                if let Some(last) = e.last() {
                    cursor.mark_delete(last.position).await.unwrap();
                    m.acked.insert((t, c), last.position);
                }
            }
        }
        Op::RollCursor(t, c) => {
            let ml = env.topics.get(&topic(t)).unwrap();
            ml.cursor(CURSORS[c])
                .unwrap()
                .roll_cursor_ledger()
                .await
                .unwrap();
        }
        Op::PutSchema(s) => {
            m.puts += 1;
            let data = format!("s{s}-{}", m.puts);
            let v = env
                .schemas
                .put(&schema_id(s), data.as_bytes(), data.as_bytes())
                .await
                .unwrap();
            let versions = m.schemas.get_mut(&s).unwrap();
            assert_eq!(v.0 as usize, versions.len(), "schema {s} version number");
            versions.push(data);
        }
        Op::Reopen(t) => {
            let ml = env.topics.remove(&topic(t)).unwrap();
            ml.close().await.unwrap();
            let ml = env.factory().open(&topic(t), env.config()).await.unwrap();
            env.topics.insert(ml);
        }
        Op::Switch => switch(env, m).await,
        Op::Rollback => {
            let Some((id, source, target)) = m.switch.clone() else {
                return;
            };
            let orch = env.orchestrator();
            let before = dump(env.store.as_ref(), "/").await;
            match phase(env, m).await.unwrap() {
                Phase::Switched | Phase::RolledBack => {
                    env.advance_beyond(&source, &target);
                    let st = orch.rollback(&id).await.unwrap();
                    assert_eq!(st.phase, Phase::RolledBack);
                    env.storage.switch_active_cluster(&source).await.unwrap();
                }
                _ => {
                    let e = orch.rollback(&id).await.unwrap_err();
                    assert!(matches!(e, OrchestratorError::CleanupStarted { .. }), "{e}");
                    assert_eq!(dump(env.store.as_ref(), "/").await, before);
                }
            }
        }
        Op::CleanupForce => {
            let Some((id, source, target)) = m.switch.clone() else {
                return;
            };
            let was = phase(env, m).await.unwrap();
            let r = env
                .orchestrator()
                .cleanup(&id, CleanupOptions::execute().with_force(true))
                .await
                .unwrap();
            assert!(!r.dry_run);
            assert_eq!(r.phase, Phase::Done, "{r:?}");
            if was == Phase::Switched {
                assert_eq!(
                    env.registry.get(&source).await.unwrap().unwrap().status,
                    ClusterStatus::Deprecated
                );
                assert_eq!(
                    env.registry.active().await.unwrap().as_deref(),
                    Some(target.as_str())
                );
            }
        }
        Op::CleanupDryRun => {
            let Some((id, _, _)) = m.switch.clone() else {
                return;
            };
            let before = dump(env.store.as_ref(), "/").await;
            let r = env
                .orchestrator()
                .cleanup(&id, CleanupOptions::default().with_force(true))
                .await
                .unwrap();
            assert!(r.dry_run);
            assert_eq!(dump(env.store.as_ref(), "/").await, before);
        }
    }
}

async fn switch(env: &Env, m: &mut Model) {
    let source = env.registry.active().await.unwrap().unwrap();
    let target = if source == OLD { NEW } else { OLD };
    let orch = env.orchestrator();
    let last = phase(env, m).await;
    env.advance_beyond(target, &source);
    let before = dump(env.store.as_ref(), "/").await;
    let deprecated =
        env.registry.get(target).await.unwrap().unwrap().status == ClusterStatus::Deprecated;
    let started = orch.start_switch(target, Some("node-1")).await;
    if last == Some(Phase::Switched) {
        // The ACTIVE cluster flips at cleanup: asking again for the same
        // target is idempotent and returns the switch in progress.
        let st = started.unwrap();
        assert_eq!(Some(&st.switch_id), m.switch.as_ref().map(|s| &s.0));
        assert_eq!(st.phase, Phase::Switched);
        assert_eq!(dump(env.store.as_ref(), "/").await, before);
        return;
    }
    if deprecated {
        let e = started.unwrap_err();
        assert!(
            matches!(e, OrchestratorError::ClusterDeprecated { .. }),
            "{e}"
        );
        assert_eq!(dump(env.store.as_ref(), "/").await, before);
        return;
    }
    let s = started.unwrap();
    assert_eq!(s.phase, Phase::Build);
    env.storage.switch_active_cluster(target).await.unwrap();
    let meta_before = metadata(env.store.as_ref()).await;
    let st = orch.run(&s.switch_id).await.unwrap();
    assert_eq!(st.phase, Phase::Switched);
    assert_eq!(st.counts.failed, 0, "{:?}", st.failures);
    // I9/I10: only stamps changed, and every schema and cursor ledger moved.
    let meta_after = metadata(env.store.as_ref()).await;
    assert_eq!(unstamped_all(&meta_before), unstamped_all(&meta_after));
    for (kind, path, id, stamp) in ledgers(&meta_after) {
        assert_eq!(stamp.as_deref(), Some(target), "{kind} {path} ledger {id}");
    }
    m.switch = Some((s.switch_id, source, target.to_owned()));
}

async fn check(env: &Env, m: &Model) {
    env.assert_one_active().await;
    env.assert_stamps_match_ledgers().await;
    for t in 0..TOPICS {
        let ml = env.topics.get(&topic(t)).unwrap();
        for (p, data) in &m.entries[&t] {
            let e = ml.read_entries(*p, 1).await.unwrap();
            assert_eq!(e[0].position, *p);
            assert_eq!(e[0].data, data.as_bytes(), "topic {t} entry {p:?}");
        }
        for (c, name) in CURSORS.iter().enumerate() {
            assert_eq!(
                ml.cursor(name).unwrap().mark_delete_position(),
                m.acked[&(t, c)],
                "topic {t} cursor {name}"
            );
        }
    }
    for (s, versions) in &m.schemas {
        let listed = env.schemas.list_versions(&schema_id(*s)).await.unwrap();
        assert_eq!(listed.len(), versions.len(), "schema {s}");
        let latest = env.schemas.get_latest(&schema_id(*s)).await.unwrap();
        assert_eq!(latest.data, versions.last().unwrap().as_bytes());
    }
}

fn run_case(ops: &[Op]) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let env = env().await;
        let mut m = Model::default();
        setup(&env, &mut m).await;
        check(&env, &m).await;
        for op in ops {
            apply(&env, &mut m, op).await;
            check(&env, &m).await;
        }
        // Finally everything is closed and reloaded: every cursor recovers.
        for t in 0..TOPICS {
            let ml = env.topics.remove(&topic(t)).unwrap();
            ml.close().await.unwrap();
        }
        let factory = env.factory();
        for t in 0..TOPICS {
            let ml = factory.open(&topic(t), env.config()).await.unwrap();
            for (c, name) in CURSORS.iter().enumerate() {
                assert_eq!(
                    ml.cursor(name).unwrap().mark_delete_position(),
                    m.acked[&(t, c)]
                );
            }
            env.topics.insert(ml);
        }
        check(&env, &m).await;
    });
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(32)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        failure_persistence: None,
        ..ProptestConfig::default()
    })]

    #[test]
    fn random_operation_sequences_keep_the_invariants(
        ops in proptest::collection::vec(op(), 1..20)
    ) {
        run_case(&ops);
    }
}

/// A fixed sequence through every operation, so that each is exercised
/// whatever the random cases draw.
#[test]
fn every_operation_in_sequence() {
    run_case(&[
        Op::Append(0, 3),
        Op::Ack(0),
        Op::PutSchema(0),
        Op::Switch,
        Op::Switch,
        Op::Append(1, 4),
        Op::Ack(1),
        Op::RollCursor(1, 0),
        Op::Reopen(1),
        Op::CleanupDryRun,
        Op::Rollback,
        Op::PutSchema(1),
        Op::Switch,
        Op::Ack(0),
        Op::Reopen(0),
        Op::CleanupForce,
        Op::Rollback,
        Op::Switch,
        Op::Append(0, 2),
        Op::Ack(0),
    ]);
}
