//! Topic moves against two in-memory clusters whose clients look their
//! topics up again through the routing table when unloaded.

mod common;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_metadata_store::{CreateMode, MetadataStore};
use bkswitch_topic_switch::{
    Batch, Phase, Plan, PulsarAdmin, SloProbe, State, SwitchError, SwitchOptions, TopicSwitcher,
};
use common::{one, quick, topic, World, NS};

fn switcher(w: &World, owner: &str, store: Arc<dyn MetadataStore>) -> TopicSwitcher {
    TopicSwitcher::new(store, w.routes.clone(), owner).with_admins(w.admins())
}

async fn tree(w: &World) -> (Option<Vec<u8>>, Vec<u8>) {
    let rec = w
        .store
        .get("/admin/pulsar-routes/switch")
        .await
        .unwrap()
        .map(|r| r.value);
    let table = w
        .store
        .get(&w.routes.table_path())
        .await
        .unwrap()
        .unwrap()
        .value;
    (rec, table)
}

#[tokio::test]
async fn a_topic_moves_its_clients_and_comes_back_on_rollback() {
    let w = World::new(&["t1", "t2"]).await;
    w.model.lock().backlog.insert(("a".into(), topic("t1")), 7);
    let s = switcher(&w, "c1", Arc::new(w.store.clone()));
    let rec = s
        .start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    assert_eq!(rec.state, State::Running);
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::Done, "{rec:#?}");
    assert_eq!(w.where_is("t1"), "b");
    assert_eq!(w.where_is("t2"), "a", "only the routed topic moves");
    let b = &rec.batches[0];
    assert_eq!(b.phase, Phase::Done);
    assert_eq!(b.topics.keys().collect::<Vec<_>>(), vec![&topic("t1")]);
    let notes: Vec<&str> = b.evidence.iter().map(|e| e.note.as_str()).collect();
    assert!(
        notes.iter().any(|n| n.contains("acknowledged")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("no client left")),
        "{notes:?}"
    );
    assert!(
        notes.iter().any(|n| n.contains("replication drained")),
        "{notes:?}"
    );
    // Only the old cluster was unloaded.
    assert!(w.model.lock().unloads.iter().all(|(c, _)| c == "a"));

    s.rollback().await.unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::RolledBack, "{rec:#?}");
    assert_eq!(w.where_is("t1"), "a");
    // The route that did not exist before is gone again.
    let table = w.routes.table().await.unwrap();
    assert!(!table.routes.contains_key(&format!("topic:{}", topic("t1"))));
    assert_eq!(table.routes[&format!("namespace:{NS}")], "a");
}

/// The side the clients left shows no replicator (its topic just loaded
/// again after the unload): what it did not send before the unload is still
/// to send, so the batch is not settled, and fails at the settle timeout.
#[tokio::test]
async fn a_batch_does_not_settle_while_no_replicator_runs_where_the_clients_left() {
    let w = World::new(&["t1"]).await;
    // Once unloaded on `a`, the stats read that loads the topic again there
    // shows no replicator yet.
    w.model
        .lock()
        .no_replicator
        .insert(("a".into(), topic("t1")));
    let s = switcher(&w, "c1", Arc::new(w.store.clone()));
    s.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    let rec = s.run().await.unwrap();
    let b = &rec.batches[0];
    let error = b.error.as_deref().unwrap_or_default();
    assert!(error.contains("no replicator from a to b"), "{rec:#?}");
    assert_ne!(b.phase, Phase::Done, "{rec:#?}");
}

#[tokio::test]
async fn a_move_that_could_lose_messages_is_refused_with_nothing_written() {
    let w = World::new(&["t1", "t2", "t3"]).await;
    {
        let mut m = w.model.lock();
        // t1: its subscription is not replicated.
        m.subscriptions
            .get_mut(&("a".into(), topic("t1")))
            .unwrap()
            .insert("sub".into(), false);
        // t2: its subscription does not exist on b; 3 partitions on a.
        m.subscriptions
            .get_mut(&("b".into(), topic("t2")))
            .unwrap()
            .clear();
        m.partitions.insert(("a".into(), topic("t2")), 3);
        // t3: replication is far behind.
        m.backlog.insert(("a".into(), topic("t3")), 5_000);
    }
    let s = switcher(&w, "c1", Arc::new(w.store.clone()));
    let before = tree(&w).await;
    let err = s
        .start("m1", one(&format!("namespace:{NS}")), quick())
        .await
        .unwrap_err();
    let SwitchError::Refused { reports } = &err else {
        panic!("{err}")
    };
    let problems = reports[0].problems.join("\n");
    for expected in [
        "subscription `sub` of `persistent://geo/ns/t1` is not replicated",
        "subscription `sub` of `persistent://geo/ns/t2` does not exist on `b`",
        "has 3 partitions on `a` and 0 on `b`",
        "5000 messages behind",
    ] {
        assert!(
            problems.contains(expected),
            "missing `{expected}` in:\n{problems}"
        );
    }
    assert_eq!(tree(&w).await, before, "a refused move writes nothing");

    // The namespace not replicated to the target; the target down; the
    // target unknown; a tenant route.
    w.model
        .lock()
        .replication
        .insert(("b".into(), NS.into()), vec!["b".into()]);
    let err = s
        .start("m1", one(&format!("topic:{}", topic("t3"))), quick())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("replicates to [b]"), "{err}");
    w.model.lock().down.push("b".into());
    let err = s
        .start("m1", one(&format!("topic:{}", topic("t3"))), quick())
        .await
        .unwrap_err();
    assert!(err.to_string().contains("not reachable"), "{err}");
    let mut plan = one(&format!("topic:{}", topic("t3")));
    plan.to = "c".into();
    let err = s.start("m1", plan, quick()).await.unwrap_err();
    assert!(err.to_string().contains("`c` is not registered"), "{err}");
    let err = s.start("m1", one("tenant:geo"), quick()).await.unwrap_err();
    assert!(matches!(err, SwitchError::Invalid(_)), "{err}");
    assert_eq!(tree(&w).await, before);
}

#[tokio::test]
async fn a_proxy_that_does_not_acknowledge_holds_the_move_before_any_client_moves() {
    let w = World::new(&["t1"]).await;
    // A live proxy stuck on an old table.
    let proxy = w.store.new_session();
    let v = w.routes.table().await.unwrap().version;
    bkswitch_topic_routes::TopicRoutes::new(Arc::new(proxy.clone()))
        .ack("stuck-proxy", v)
        .await
        .unwrap();
    let s = switcher(&w, "c1", Arc::new(w.store.clone()));
    s.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    let rec = s.run().await.unwrap();
    // The barrier failed, and so did the rollback's (the proxy still lags):
    // nobody was evicted, the move is failed, naming the proxy.
    assert_eq!(rec.state, State::Failed);
    assert!(
        rec.batches[0]
            .error
            .as_deref()
            .unwrap()
            .contains("stuck-proxy"),
        "{rec:#?}"
    );
    assert!(w.model.lock().unloads.is_empty());
    assert_eq!(w.where_is("t1"), "a");
    // Once that proxy is gone (its session ended), a rollback completes.
    proxy.expire_session().unwrap();
    s.rollback().await.unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::RolledBack, "{rec:#?}");
    assert!(!w
        .routes
        .table()
        .await
        .unwrap()
        .routes
        .contains_key(&format!("topic:{}", topic("t1"))));
}

#[tokio::test]
async fn abort_before_clients_move_and_not_after() {
    let w = World::new(&["t1"]).await;
    let s = switcher(&w, "c1", Arc::new(w.store.clone()));
    let table = w.routes.table().await.unwrap();
    s.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    s.abort().await.unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::Aborted);
    assert_eq!(w.routes.table().await.unwrap().routes, table.routes);
    assert!(w.model.lock().unloads.is_empty());
    // After a move, an abort is refused (roll back instead).
    s.start("m2", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    assert_eq!(s.run().await.unwrap().state, State::Done);
    let err = s.abort().await.unwrap_err();
    assert!(
        err.to_string().contains("nothing to abort")
            || matches!(err, SwitchError::AbortRefused { .. }),
        "{err}"
    );
    // And a second start while one runs is refused.
    s.rollback().await.unwrap();
    let err = s
        .start("m3", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap_err();
    assert!(matches!(err, SwitchError::AlreadyRunning { .. }), "{err}");
}

#[tokio::test]
async fn a_client_that_keeps_coming_back_fails_the_eviction_and_the_batch_rolls_back() {
    let w = World::new(&["t1"]).await;
    w.model.lock().clients.get_mut(&topic("t1")).unwrap().sticky = Some("a".into());
    let s = switcher(&w, "c1", Arc::new(w.store.clone()));
    s.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::Failed, "{rec:#?}");
    let b = &rec.batches[0];
    assert_eq!(b.phase, Phase::RolledBack);
    let error = b.error.as_deref().unwrap();
    assert!(
        error.contains("clients still attached") && error.contains("t1"),
        "{error}"
    );
    assert!(!w
        .routes
        .table()
        .await
        .unwrap()
        .routes
        .contains_key(&format!("topic:{}", topic("t1"))));
}

/// Breaches for any batch that holds `t2`.
#[derive(Debug)]
struct BreachOnT2;

#[async_trait]
impl SloProbe for BreachOnT2 {
    async fn check(&self, batch: &Batch, _: &dyn PulsarAdmin) -> Result<(), String> {
        if batch.topics.contains_key(&topic("t2")) {
            Err("p99 send latency 900 ms > 500 ms".into())
        } else {
            Ok(())
        }
    }
}

#[tokio::test]
async fn a_batch_plan_stops_at_a_breach_and_rolls_that_batch_back() {
    let w = World::new(&["t1", "t2", "t3"]).await;
    let s = switcher(&w, "c1", Arc::new(w.store.clone())).with_slo(Arc::new(BreachOnT2));
    let plan = Plan {
        to: "b".into(),
        batches: ["t1", "t2", "t3"]
            .iter()
            .map(|t| vec![format!("topic:{}", topic(t))])
            .collect(),
    };
    let options = SwitchOptions {
        soak_ms: 300,
        ..quick()
    };
    s.start("plan", plan, options).await.unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::Failed, "{rec:#?}");
    let phases: Vec<Phase> = rec.batches.iter().map(|b| b.phase).collect();
    assert_eq!(phases, [Phase::Done, Phase::RolledBack, Phase::Pending]);
    assert!(rec.batches[1].error.as_deref().unwrap().contains("p99"));
    assert_eq!(
        (w.where_is("t1"), w.where_is("t2"), w.where_is("t3")),
        ("b".into(), "a".into(), "a".into())
    );
    // Rolling the plan back brings the first batch back too.
    s.rollback().await.unwrap();
    let rec = s.run().await.unwrap();
    assert_eq!(rec.state, State::RolledBack, "{rec:#?}");
    assert_eq!(w.where_is("t1"), "a");
}

#[tokio::test]
async fn a_coordinator_killed_mid_eviction_is_taken_over_and_the_move_completes() {
    let w = World::new(&["t1"]).await;
    w.model.lock().hang_unloads = true;
    let first = w.store.new_session();
    let s1 = switcher(&w, "c1", Arc::new(first.clone()));
    s1.start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .unwrap();
    let task = tokio::spawn(async move { s1.run().await });
    // Wait until it is stuck evicting.
    let s2 = switcher(&w, "c2", Arc::new(w.store.clone()));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while s2.status().await.unwrap().unwrap().batches[0].phase != Phase::Evict {
        assert!(tokio::time::Instant::now() < deadline);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    // While it holds the lease, nobody else drives.
    assert!(matches!(s2.run().await, Err(SwitchError::LeaseHeld { owner }) if owner == "c1"));
    // It dies (the process is gone, its session ends with it).
    task.abort();
    first.expire_session().unwrap();
    w.model.lock().hang_unloads = false;
    let rec = s2.run().await.unwrap();
    assert_eq!(rec.state, State::Done, "{rec:#?}");
    assert_eq!(rec.owner.as_deref(), Some("c2"));
    assert_eq!(w.where_is("t1"), "b");
    // No lease is left behind.
    assert!(w
        .store
        .get("/admin/pulsar-routes/switch-lease")
        .await
        .unwrap()
        .is_none());
    let _ = CreateMode::EPHEMERAL;
}

#[tokio::test]
async fn an_unreadable_record_is_reported_and_left_alone() {
    let w = World::new(&["t1"]).await;
    w.store
        .create(
            "/admin/pulsar-routes/switch",
            b"{broken",
            CreateMode::PERSISTENT,
        )
        .await
        .unwrap();
    let s = switcher(&w, "c1", Arc::new(w.store.clone()));
    let err = s.status().await.unwrap_err();
    assert!(
        err.to_string().contains("/admin/pulsar-routes/switch"),
        "{err}"
    );
    assert!(s
        .start("m1", one(&format!("topic:{}", topic("t1"))), quick())
        .await
        .is_err());
    assert_eq!(
        w.store
            .get("/admin/pulsar-routes/switch")
            .await
            .unwrap()
            .unwrap()
            .value,
        b"{broken"
    );
}
