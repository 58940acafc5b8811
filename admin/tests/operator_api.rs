//! One operator API: a node driven in process ([`Node`] as an [`Operator`])
//! and over HTTP ([`AdminClient`] as an [`Operator`]) gives the same
//! answers — the same refusals with the same HTTP status, code, field and
//! message — and a refused verb writes nothing either way. The switch verbs'
//! rules (validation, the start lock, events) are the node's, not the REST
//! handler's: an embedder cannot start around them.

mod common;

use std::sync::Arc;

use bkswitch_admin::{AdminClient, Operator, OperatorError, START_LOCK_PATH};
use bkswitch_metadata_store::{CreateMode, ExpectedVersion, MemoryStore, MetadataStore};
use bkswitch_registry::ClusterStatus;
use common::*;

/// One refusal as the operator saw it.
#[derive(Debug, PartialEq)]
struct Refusal {
    verb: &'static str,
    status: Option<u16>,
    code: Option<String>,
    field: Option<String>,
    message: String,
}

fn refusal<T: std::fmt::Debug>(verb: &'static str, r: Result<T, OperatorError>) -> Refusal {
    let e = match r {
        Ok(v) => panic!("{verb} was not refused: {v:?}"),
        Err(e) => e,
    };
    let (field, message) = match &e {
        OperatorError::Refused { body, .. } => (body.field.clone(), body.error.clone()),
        other => (None, other.to_string()),
    };
    Refusal {
        verb,
        status: e.status(),
        code: e.code().map(str::to_owned),
        field,
        message,
    }
}

/// Every verb asked what it must refuse, with nothing switched yet.
async fn refusals(op: &dyn Operator) -> Vec<Refusal> {
    vec![
        refusal("switch to ''", op.start_switch("").await),
        refusal("switch to a bad name", op.start_switch("Bad Name!").await),
        refusal("switch to ghost", op.start_switch("ghost").await),
        refusal("precheck ghost", op.precheck("ghost").await),
        refusal("get ghost", op.cluster("ghost").await),
        refusal("unregister ghost", op.unregister_cluster("ghost").await),
        refusal("unregister the active", op.unregister_cluster("old").await),
        refusal("rollback", op.rollback().await),
        refusal("cleanup targets", op.cleanup_targets().await),
        refusal(
            "canary of a bad prefix",
            op.set_override("t/ns1", "new").await,
        ),
        refusal(
            "canary on a bad name",
            op.set_override("t/ns1/", "B A D").await,
        ),
        refusal("remove a canary", op.remove_override("t/ns1/").await),
        refusal("migration status", op.migration_status().await),
        refusal("abort a migration", op.abort_migration().await),
    ]
}

/// With another start holding the start lock.
async fn refusals_under_lock(op: &dyn Operator) -> Vec<Refusal> {
    vec![
        refusal("switch while locked", op.start_switch("new").await),
        refusal(
            "canary while locked",
            op.set_override("t/ns1/", "new").await,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn in_process_and_over_http_a_node_answers_alike_and_refusals_write_nothing() {
    let clusters = clusters();
    let store: Arc<dyn MetadataStore> = Arc::new(MemoryStore::new());
    let node = start("node-1", store.clone(), &clusters).await;
    let client = AdminClient::new(node.url(), ADMIN).unwrap();
    Operator::register_cluster(&node, "new", "memory://new", Some(ClusterStatus::Standby))
        .await
        .unwrap();
    assert_eq!(
        Operator::list_clusters(&client).await.unwrap(),
        Operator::list_clusters(&node).await.unwrap()
    );

    let before = tree(store.as_ref()).await;
    let in_process = refusals(&node).await;
    let over_http = refusals(&client).await;
    assert_eq!(in_process, over_http);
    let status = |verb: &str| in_process.iter().find(|r| r.verb == verb).unwrap().status;
    assert_eq!(status("switch to ''"), Some(400));
    assert_eq!(
        in_process[0].field.as_deref(),
        Some("target"),
        "{in_process:?}"
    );
    assert_eq!(status("get ghost"), Some(404));
    assert_eq!(status("rollback"), Some(404));
    assert_eq!(status("canary of a bad prefix"), Some(400));
    assert_eq!(status("migration status"), Some(404));
    assert_eq!(tree(store.as_ref()).await, before, "a refusal wrote");

    // Another start holds the lock: both ways get the same 409, naming it.
    store
        .create(
            START_LOCK_PATH,
            br#"{"node":"node-9","what":"a metadata migration to `etcd://x`"}"#,
            CreateMode::PERSISTENT,
        )
        .await
        .unwrap();
    let before = tree(store.as_ref()).await;
    let in_process = refusals_under_lock(&node).await;
    assert_eq!(in_process, refusals_under_lock(&client).await);
    for r in &in_process {
        assert_eq!(r.status, Some(409), "{r:?}");
        assert!(
            r.message.contains("node-9") && r.message.contains("etcd://x"),
            "{r:?}"
        );
    }
    assert_eq!(tree(store.as_ref()).await, before, "a refusal wrote");
    store
        .delete(START_LOCK_PATH, ExpectedVersion::Any)
        .await
        .unwrap();

    // Once free, the embedder's switch is the operator's: recorded, with its
    // event counted, and the lock released.
    let started = Operator::start_switch(&node, "new").await.unwrap();
    assert_eq!(started.target(), Some("new"));
    assert!(store.get(START_LOCK_PATH).await.unwrap().is_none());
    // Asked again, either way, the same switch answers (a start is
    // idempotent while it runs).
    let again = Operator::start_switch(&client, "new").await.unwrap();
    assert_eq!(again.switch_id(), started.switch_id());
    let again = Operator::start_switch(&node, "new").await.unwrap();
    assert_eq!(again.switch_id(), started.switch_id());
    assert_eq!(
        node.metrics()
            .switch_events(bkswitch_admin::metrics::SwitchEvent::Started),
        1,
        "a start asked again is not another start"
    );
    node.stop().await;
}
