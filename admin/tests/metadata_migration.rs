//! Nodes on a metadata-migration participant (PIP-454): the pause seen by the
//! managed ledgers as a lost session, the REST surface (start, status, abort,
//! refusals that leave the record untouched), the exclusion of bookie-cluster
//! switches and canaries, the `/metrics` series, and the coordinator run by
//! the election's leader and taken over by the next one.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_admin::{AdminClient, ClientError, MigrationHandle, Node, NodeConfig};
use bkswitch_bk_client::MemoryClusters;
use bkswitch_managed_ledger::InitialPosition;
use bkswitch_managed_ledger::ManagedLedgerErrorKind;
use bkswitch_metadata_migration::{
    read_current, Coordinator, CoordinatorOptions, MigratingStore, NamedMemoryStores,
    ParticipantOptions, Phase,
};
use bkswitch_metadata_store::{CreateMode, ExpectedVersion, MetadataStore};
use common::{clusters, raw, tree, ADMIN};

const WAIT: Duration = Duration::from_secs(30);

async fn participant(stores: &NamedMemoryStores, name: &str) -> MigratingStore {
    MigratingStore::open(
        "memory://old",
        Arc::new(stores.clone()),
        ParticipantOptions {
            name: name.into(),
            poll_interval: Duration::from_millis(50),
            ..ParticipantOptions::default()
        },
    )
    .await
    .unwrap()
}

/// A node whose metadata goes through a participant on `memory://old`.
async fn node(
    id: &str,
    stores: &NamedMemoryStores,
    clusters: &MemoryClusters,
    tune: impl FnOnce(&mut MigrationHandle, &mut NodeConfig),
) -> Node {
    let p = participant(stores, id).await;
    let mut handle = MigrationHandle::new(p.clone());
    handle.poll_interval = Duration::from_millis(50);
    handle.coordinator = CoordinatorOptions {
        ack_timeout: Duration::from_secs(10),
        poll_interval: Duration::from_millis(10),
        ..CoordinatorOptions::default()
    };
    let mut cfg = bkswitch_admin::testkit::node_config(id, Arc::new(p), clusters);
    tune(&mut handle, &mut cfg);
    Node::start(cfg.with_migration(handle)).await.unwrap()
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

fn source(stores: &NamedMemoryStores) -> Arc<dyn MetadataStore> {
    Arc::new(stores.session("old"))
}

/// The record and its version, as stored.
async fn stored_record(stores: &NamedMemoryStores) -> Option<(String, i64)> {
    let store = stores.session("old");
    read_current(&store)
        .await
        .unwrap()
        .map(|(r, v)| (serde_json::to_string(&r).unwrap(), v))
}

fn api_status(e: &ClientError) -> (u16, String) {
    match e {
        ClientError::Api {
            status, message, ..
        } => (*status, message.clone()),
        other => panic!("expected an API error, got {other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn trims_wait_out_the_pause_and_resume_after_the_flip() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    // The test drives the coordinator itself.
    let node = node("node-1", &stores, &clusters, |h, cfg| {
        h.coordinate = false;
        cfg.ledger_config = cfg.ledger_config.clone().with_max_entries_per_ledger(2);
    })
    .await;
    let ml = node
        .open_topic("public/default/persistent/t")
        .await
        .unwrap();
    let cursor = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let mut last = None;
    for i in 0..6 {
        last = Some(ml.append(format!("m{i}").into_bytes()).await.unwrap());
    }
    cursor.mark_delete(last.unwrap()).await.unwrap();
    let doomed = node
        .open_topic("public/default/persistent/doomed")
        .await
        .unwrap();
    doomed.append(b"x".to_vec()).await.unwrap();
    let doomed_ledgers = doomed.ledger_ids();
    let session = node.metadata_session();
    assert!(session.is_available());

    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    let started = admin.start_migration("memory://new", None).await.unwrap();
    assert_eq!(started.phase, "PREPARATION");
    let mut c = Coordinator::resume(source(&stores), &stores, CoordinatorOptions::default())
        .await
        .unwrap()
        .unwrap();
    while c.record().phase != Phase::Paused {
        c.step().await.unwrap();
    }
    let p = node.migration().unwrap().participant().clone();
    wait_for("the participant's gate to close", || p.is_paused()).await;
    wait_for("the managed ledgers to see a lost session", || {
        !session.is_available()
    })
    .await;
    let status = admin.migration_status().await.unwrap();
    assert_eq!(status.phase, "PAUSED");
    assert!(status.writes_paused);

    // In the pause: no trim, no rollover; nothing deleted.
    let ledgers = ml.ledger_ids();
    let trims = session.deferred_trims();
    let e = ml.trim_consumed_ledgers().await.unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::MetadataSessionLost, "{e}");
    let e = ml.rollover().await.unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::MetadataSessionLost, "{e}");
    let e = doomed.delete().await.unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::MetadataSessionLost, "{e}");
    assert_eq!(doomed.ledger_ids(), doomed_ledgers, "nothing deleted");
    assert_eq!(session.deferred_trims(), trims + 1);
    assert_eq!(ml.ledger_ids(), ledgers);
    assert_eq!(session.losses(), 1);

    // The flip: writes reopen on the target, the trim runs.
    assert_eq!(c.step().await.unwrap(), Phase::Completed);
    wait_for("the participant to move to the target", || {
        p.url() == "memory://new"
    })
    .await;
    wait_for("the session to come back", || session.is_available()).await;
    let trimmed = ml.trim_consumed_ledgers().await.unwrap();
    assert!(!trimmed.is_empty(), "consumed ledgers are trimmed after it");
    doomed.delete().await.unwrap();
    assert_eq!(session.losses(), 1);
    assert_eq!(session.deferred_trims(), trims + 1);
    // The managed ledger's metadata lives in the target now.
    let target = stores.session("new");
    assert!(target
        .exists("/managed-ledgers/public/default/persistent/t")
        .await
        .unwrap()
        .is_some());
    // The status still shows the finished migration (the record stayed in
    // the source store).
    let status = admin.migration_status().await.unwrap();
    assert_eq!(status.phase, "COMPLETED");
    assert_eq!(status.node_store_url.as_deref(), Some("memory://new"));
    assert!(!status.writes_paused);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn rest_starts_shows_refuses_and_aborts_a_migration() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    let node = node("node-1", &stores, &clusters, |h, _| h.coordinate = false).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    let url = format!("{}/admin/v2/metadata/migration", node.url());

    // None yet: 404 with a message saying how to start one.
    let (status, msg) = api_status(&admin.migration_status().await.unwrap_err());
    assert_eq!(status, 404);
    assert!(msg.contains("metadata-migration start"), "{msg}");
    // The same auth as every admin endpoint.
    let (status, _) = raw("GET", &url, None, None).await;
    assert_eq!(status, 401);
    let (status, _) = raw("POST", &url, Some("wrong"), Some(b"{}")).await;
    assert_eq!(status, 401);

    let before = tree(&stores.session("old")).await;
    // Bad requests: 400, nothing written.
    let (status, body) = raw(
        "POST",
        &url,
        Some(ADMIN),
        Some(br#"{"targetUrl":"memory://new","wipe":true}"#),
    )
    .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["field"], "wipe", "{body}");
    let e = admin.start_migration("bogus://x", None).await.unwrap_err();
    let (status, msg) = api_status(&e);
    assert_eq!(status, 400);
    assert!(msg.contains("bogus://x"), "{msg}");
    let (status, msg) = api_status(&admin.start_migration("", None).await.unwrap_err());
    assert_eq!(status, 400);
    assert!(msg.contains("empty"), "{msg}");
    let (status, msg) = api_status(
        &admin
            .start_migration("memory://old", None)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 400);
    assert!(msg.contains("source"), "{msg}");
    // A target that is not empty needs wipeTarget.
    stores
        .session("new")
        .create("/leftover", b"x", CreateMode::PERSISTENT)
        .await
        .unwrap();
    let (status, msg) = api_status(
        &admin
            .start_migration("memory://new", None)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 400);
    assert!(
        msg.contains("not empty") && msg.contains("leftover"),
        "{msg}"
    );
    assert!(stores
        .session("new")
        .exists("/leftover")
        .await
        .unwrap()
        .is_some());
    assert_eq!(
        tree(&stores.session("old")).await,
        before,
        "nothing written"
    );
    assert_eq!(stored_record(&stores).await, None);

    // Start (wiping the target): the record is written.
    let started = admin
        .start_migration("memory://new", Some("/"))
        .await
        .unwrap();
    assert_eq!(started.phase, "PREPARATION");
    assert_eq!(started.source_url, "memory://old");
    assert_eq!(started.target_url, "memory://new");
    assert!(stores
        .session("new")
        .exists("/leftover")
        .await
        .unwrap()
        .is_none());
    let status = admin.migration_status().await.unwrap();
    assert_eq!(status.id, started.id);
    let record = stored_record(&stores).await.unwrap();

    // While it is unfinished: another start, a switch and a canary are 409,
    // and the record stays as it was.
    let (status, msg) = api_status(
        &admin
            .start_migration("memory://other", None)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    assert!(msg.contains(&started.id), "{msg}");
    admin.register("new", "memory://new", None).await.unwrap();
    let directive_before = node.registry().switch_directive().await.unwrap();
    let (status, msg) = api_status(&admin.switch("new").await.unwrap_err());
    assert_eq!(status, 409);
    assert!(
        msg.contains("metadata migration") && msg.contains(&started.id),
        "{msg}"
    );
    let (status, msg) = api_status(
        &admin
            .set_override("public/default/", "new")
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    assert!(msg.contains("canary") && msg.contains(&started.id), "{msg}");
    assert_eq!(
        node.registry().switch_directive().await.unwrap(),
        directive_before
    );
    assert!(node
        .orchestrator()
        .current_status()
        .await
        .unwrap()
        .is_none());
    assert_eq!(stored_record(&stores).await.unwrap(), record);

    // Abort: ABORTED, writes go on in the source; a second abort is 409.
    let aborted = admin.abort_migration().await.unwrap();
    assert_eq!(aborted.phase, "ABORTED");
    assert!(aborted.error.as_deref().unwrap_or("").contains("node-1"));
    let (status, msg) = api_status(&admin.abort_migration().await.unwrap_err());
    assert_eq!(status, 409);
    assert!(msg.contains("already ended"), "{msg}");
    let p = node.migration().unwrap().participant().clone();
    assert!(!p.is_paused());
    p.put("/after-abort", b"x", ExpectedVersion::Any)
        .await
        .unwrap();

    // Now a switch may start; while it is unfinished a migration may not.
    admin.switch("new").await.unwrap();
    let aborted_record = stored_record(&stores).await.unwrap();
    let (status, msg) = api_status(
        &admin
            .start_migration("memory://new", Some("/"))
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    assert!(
        msg.contains("bookie-cluster switch") && msg.contains("roll it back"),
        "{msg}"
    );
    assert_eq!(stored_record(&stores).await.unwrap(), aborted_record);
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_without_participant_cannot_start_one() {
    let clusters = clusters();
    let store = Arc::new(bkswitch_metadata_store::MemoryStore::new());
    let node = common::start("node-1", store.clone(), &clusters).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    let (status, msg) = api_status(
        &admin
            .start_migration("memory://new", None)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    assert!(
        msg.contains("without a metadata-migration participant"),
        "{msg}"
    );
    assert_eq!(
        api_status(&admin.migration_status().await.unwrap_err()).0,
        404
    );
    assert!(node.migration().is_none());
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_leader_runs_the_migration_and_the_next_leader_finishes_it() {
    let stores = NamedMemoryStores::new();
    let seed = stores.session("old");
    for i in 0..120 {
        seed.put(&format!("/seed/n{i:03}"), b"v", ExpectedVersion::Any)
            .await
            .unwrap();
    }
    let clusters = clusters();
    // Small pages and a wait between steps: the copy takes many steps.
    let slow = |h: &mut MigrationHandle, _: &mut NodeConfig| {
        h.coordinator.page_size = 5;
        h.step_interval = Duration::from_millis(40);
    };
    let a = node("node-a", &stores, &clusters, slow).await;
    let b = node("node-b", &stores, &clusters, slow).await;
    wait_for("a leader", || a.sync().is_leader() || b.sync().is_leader()).await;
    let (leader, other) = if a.sync().is_leader() { (a, b) } else { (b, a) };
    let admin = AdminClient::new(other.url(), ADMIN).unwrap();
    admin.start_migration("memory://new", None).await.unwrap();

    // The leader copies; stop it mid-copy (its participant goes with it).
    let deadline = Instant::now() + WAIT;
    loop {
        let (rec, _) = read_current(seed_store(&stores).as_ref())
            .await
            .unwrap()
            .unwrap();
        if rec.phase == Phase::Copying && rec.copied >= 20 {
            break;
        }
        assert!(
            !rec.phase.is_terminal(),
            "the migration ended before the leader was stopped: {rec:?}"
        );
        assert!(Instant::now() < deadline, "no copy progress: {rec:?}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let h = leader.migration().unwrap().clone();
    assert!(h.coordinator_runs() >= 1);
    assert!(h.coordinator_steps() >= 4);
    assert_eq!(other.migration().unwrap().coordinator_runs(), 0);
    leader.stop().await;
    h.participant().close().await.unwrap();
    let copied_at_stop = read_current(seed_store(&stores).as_ref())
        .await
        .unwrap()
        .unwrap()
        .0
        .copied;

    // The other node takes the lead and finishes from the record.
    let oh = other.migration().unwrap().clone();
    wait_for("the other node to move to the target", || {
        oh.participant().url() == "memory://new"
    })
    .await;
    assert!(oh.coordinator_runs() >= 1);
    assert!(oh.coordinator_steps() >= 1);
    let (rec, _) = read_current(seed_store(&stores).as_ref())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rec.phase, Phase::Completed, "{rec:?}");
    // Resumed from the cursor, not copied again from the start (which would
    // count the 20 or more nodes copied before the stop twice): a page may be
    // copied twice, and the stopped node's ephemeral nodes were walked but
    // are gone now.
    let copyable = tree(&stores.session("old"))
        .await
        .keys()
        .filter(|p| !bkswitch_metadata_migration::is_control_path(p))
        .count() as u64;
    assert!(
        rec.copied <= copyable + 15,
        "copied {} of {copyable} (at the stop: {copied_at_stop})",
        rec.copied
    );
    let target = stores.session("new");
    for i in 0..120 {
        assert!(
            target
                .exists(&format!("/seed/n{i:03}"))
                .await
                .unwrap()
                .is_some(),
            "/seed/n{i:03} copied"
        );
    }
    // The finished migration is on /metrics of the node that finished it.
    let (status, body) = raw("GET", &format!("{}/metrics", other.url()), None, None).await;
    assert_eq!(status, 200);
    let text = body.as_str().unwrap().to_owned();
    assert!(
        text.contains("bkswitch_metadata_migration_phase{phase=\"COMPLETED\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("bkswitch_metadata_migration_phase{phase=\"COPYING\"} 0"),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "bkswitch_metadata_migration_nodes_copied {}",
            rec.copied
        )),
        "{text}"
    );
    assert!(
        text.contains("bkswitch_metadata_migration_changes_caught_up"),
        "{text}"
    );
    assert!(
        text.contains("bkswitch_metadata_migration_pause_seconds"),
        "{text}"
    );
    assert!(text.contains("bkswitch_metadata_writes_paused 0"), "{text}");
    // The surviving node's writes go to the target.
    let ml = other
        .open_topic("public/default/persistent/after")
        .await
        .unwrap();
    ml.append(b"x".to_vec()).await.unwrap();
    assert!(target
        .exists("/managed-ledgers/public/default/persistent/after")
        .await
        .unwrap()
        .is_some());
    other.stop().await;
}

fn seed_store(stores: &NamedMemoryStores) -> Arc<dyn MetadataStore> {
    source(stores)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unfinished_canary_blocks_a_migration() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    let node = node("node-1", &stores, &clusters, |h, _| h.coordinate = false).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    admin.register("new", "memory://new", None).await.unwrap();
    admin.set_override("public/default/", "new").await.unwrap();
    let before = stored_record(&stores).await;
    let (status, msg) = api_status(
        &admin
            .start_migration("memory://new", None)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409);
    assert!(
        msg.contains("canary") && msg.contains("public/default/"),
        "{msg}"
    );
    assert_eq!(stored_record(&stores).await, before, "nothing written");
    assert!(stores
        .session("new")
        .children("/")
        .await
        .unwrap()
        .is_empty());
    node.stop().await;
}

/// A migration and a switch asked of two nodes at the same moment: the start
/// lock lets at most one of them begin (before it, both could pass their
/// checks and run together). Repeated on fresh stores, since the interleaving
/// varies.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_migration_and_a_switch_started_at_once_never_both_begin() {
    let mut outcomes = std::collections::BTreeMap::new();
    for round in 0..8 {
        let stores = NamedMemoryStores::new();
        let clusters = clusters();
        let a = node("node-a", &stores, &clusters, |h, _| h.coordinate = false).await;
        let b = node("node-b", &stores, &clusters, |h, _| h.coordinate = false).await;
        let admin_a = AdminClient::new(a.url(), ADMIN).unwrap();
        let admin_b = AdminClient::new(b.url(), ADMIN).unwrap();
        admin_a.register("new", "memory://new", None).await.unwrap();
        let (migration, switch) = tokio::join!(
            admin_a.start_migration("memory://target", None),
            admin_b.switch("new")
        );
        let migrating = read_current(&stores.session("old"))
            .await
            .unwrap()
            .is_some_and(|(r, _)| !r.phase.is_terminal());
        let switching = b.orchestrator().current_status().await.unwrap().is_some();
        assert!(
            !(migrating && switching),
            "round {round}: both began (migration {migration:?}, switch {switch:?})"
        );
        assert_eq!(migration.is_ok(), migrating, "round {round}: {migration:?}");
        assert_eq!(switch.is_ok(), switching, "round {round}: {switch:?}");
        for refused in [migration.err(), switch.err()].into_iter().flatten() {
            let (status, msg) = api_status(&refused);
            assert_eq!(status, 409, "round {round}: {msg}");
            *outcomes
                .entry(msg.split(':').next().unwrap_or("").to_owned())
                .or_insert(0) += 1;
        }
        a.stop().await;
        b.stop().await;
    }
    eprintln!("refusals: {outcomes:?}");
}

/// A start lock held by another node refuses a start with 409 naming that
/// node and writes nothing; the lock of a node whose session ended (it died
/// while starting) is gone with it, and a finished start removes its lock.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_start_lock_refuses_while_held_and_goes_with_its_session() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    let node = node("node-1", &stores, &clusters, |h, _| h.coordinate = false).await;
    let admin = AdminClient::new(node.url(), ADMIN).unwrap();
    admin.register("new", "memory://new", None).await.unwrap();
    // Another node's session holds the lock.
    let other = stores.session("old").new_session();
    let held = serde_json::json!({"node": "node-9", "what": "a canary", "atMs": 1});
    other
        .create(
            bkswitch_admin::START_LOCK_PATH,
            held.to_string().as_bytes(),
            CreateMode::EPHEMERAL,
        )
        .await
        .unwrap();
    let before = tree(&stores.session("old")).await;
    let (status, msg) = api_status(&admin.switch("new").await.unwrap_err());
    assert_eq!(status, 409, "{msg}");
    assert!(msg.contains("node-9") && msg.contains("a canary"), "{msg}");
    let (status, msg) = api_status(
        &admin
            .start_migration("memory://target", None)
            .await
            .unwrap_err(),
    );
    assert_eq!(status, 409, "{msg}");
    assert!(msg.contains("node-9"), "{msg}");
    assert_eq!(
        tree(&stores.session("old")).await,
        before,
        "nothing written"
    );
    // Its session ends: the lock goes with it, the start passes and leaves
    // no lock behind.
    other.close().await.unwrap();
    admin.switch("new").await.unwrap();
    assert!(node
        .orchestrator()
        .current_status()
        .await
        .unwrap()
        .is_some());
    assert!(stores
        .session("old")
        .get(bkswitch_admin::START_LOCK_PATH)
        .await
        .unwrap()
        .is_none());
    node.stop().await;
}

/// The start lock itself, with the window between check and write made wide
/// on purpose: two nodes each check that the other's record is absent, wait,
/// then write their own. Without the lock both would write; with it exactly
/// one does and the other is refused naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_start_lock_serializes_check_then_write_across_nodes() {
    let stores = NamedMemoryStores::new();
    let clusters = clusters();
    let a = node("node-a", &stores, &clusters, |h, _| h.coordinate = false).await;
    let b = node("node-b", &stores, &clusters, |h, _| h.coordinate = false).await;
    let store = stores.session("old");
    let start = |me: &'static str, other: &'static str| {
        let store = store.clone();
        async move {
            assert!(store
                .get(&format!("/race/{other}"))
                .await
                .unwrap()
                .is_none());
            tokio::time::sleep(Duration::from_millis(200)).await;
            store
                .put(&format!("/race/{me}"), b"", ExpectedVersion::NotExists)
                .await
                .unwrap();
            Ok::<_, bkswitch_admin::NodeError>(me)
        }
    };
    let (ra, rb) = tokio::join!(
        bkswitch_admin::testkit::exclusive_start(&a, "race a", start("a", "b")),
        bkswitch_admin::testkit::exclusive_start(&b, "race b", start("b", "a"))
    );
    let written = store.children("/race").await.unwrap();
    assert_eq!(written.len(), 1, "{written:?}");
    let refused = match (ra, rb) {
        (Ok("a"), Err(e)) => (e, "node-a"),
        (Err(e), Ok("b")) => (e, "node-b"),
        other => panic!("exactly one must pass: {other:?}"),
    };
    assert!(
        matches!(&refused.0, bkswitch_admin::NodeError::StartInProgress { node, .. } if node == refused.1),
        "{}",
        refused.0
    );
    a.stop().await;
    b.stop().await;
}
