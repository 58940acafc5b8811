//! Metadata session loss pauses risky work (as Pulsar's
//! `metadataServiceAvailable` does): while the metadata store's session is
//! lost no ledger is trimmed, rolled over or deleted; work resumes when it is
//! back. On
//! the memory store and on a real ZooKeeper server that is stopped and
//! started again.

mod common;

use std::sync::Arc;
use std::time::Duration;

use bkswitch_bk_client::{LedgerId, MemoryCluster};
use bkswitch_managed_ledger::{
    InitialPosition, ManagedCursor, ManagedLedger, ManagedLedgerErrorKind, ManagedLedgerFactory,
    MetadataSession, Position,
};
use bkswitch_metadata_store::{MemoryStore, MetadataStore, SessionEvent, ZkStore, ZkStoreOptions};
use common::*;

/// A managed ledger whose every next step would trim or roll over: its first
/// ledger is consumed, its current ledger is full, its cursor ledger is full.
struct Ready {
    ml: ManagedLedger,
    cursor: ManagedCursor,
    first: LedgerId,
    ps: Vec<Position>,
}

async fn ready(factory: &ManagedLedgerFactory) -> Ready {
    // 3 entries per data ledger, 4 positions per cursor ledger.
    let ml = factory.open(NAME, small_config()).await.unwrap();
    let cursor = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let mut ps = Vec::new();
    for i in 0..6 {
        ps.push(ml.append(format!("m{i}")).await.unwrap());
    }
    for p in &ps[..4] {
        cursor.mark_delete(*p).await.unwrap();
    }
    let first = ml.ledger_ids()[0];
    assert_ne!(ps[5].ledger_id, first);
    Ready {
        ml,
        cursor,
        first,
        ps,
    }
}

/// While the session is lost: no trim, no data or cursor ledger rollover;
/// appends and acknowledgements go on.
async fn assert_deferred(r: &Ready, session: &MetadataSession, cluster: &MemoryCluster) {
    assert!(!session.is_available());
    let ledgers = r.ml.ledger_ids();
    let cursor_ledger = r.cursor.cursor_ledger_id();
    let (trims, rollovers) = (session.deferred_trims(), session.deferred_rollovers());

    let e = r.ml.trim_consumed_ledgers().await.unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::MetadataSessionLost, "{e}");
    assert!(e.is_retryable());
    assert!(e.to_string().contains(NAME), "{e}");
    let p = r.ml.append("during").await.unwrap();
    assert_eq!(
        p.ledger_id,
        *ledgers.last().unwrap(),
        "the full ledger is kept"
    );
    let e = r.ml.rollover().await.unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::MetadataSessionLost, "{e}");
    r.cursor.mark_delete(r.ps[4]).await.unwrap();
    r.cursor.mark_delete(r.ps[5]).await.unwrap();
    assert_eq!(r.cursor.cursor_ledger_id(), cursor_ledger);
    assert_eq!(r.ml.ledger_ids(), ledgers);
    assert!(cluster.contains_ledger(r.first), "nothing trimmed");
    // Nor deleted: its ledgers would go while the metadata names them.
    let e = r.ml.delete().await.unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::MetadataSessionLost, "{e}");
    assert!(e.to_string().contains("deleting"), "{e}");
    assert!(cluster.contains_ledger(r.first), "nothing deleted");
    assert_eq!(r.ml.ledger_ids(), ledgers);
    assert_eq!(session.deferred_trims(), trims + 1);
    assert!(
        session.deferred_rollovers() >= rollovers + 4,
        "{}",
        session.deferred_rollovers()
    );
}

/// Once the session is back: the next append rolls over, the next position
/// rolls the cursor ledger over, a trim deletes the consumed ledgers.
async fn assert_resumed(r: &Ready, session: &MetadataSession, cluster: &MemoryCluster) {
    assert!(session.is_available());
    let ledgers = r.ml.ledger_ids();
    let cursor_ledger = r.cursor.cursor_ledger_id();
    let p = r.ml.append("after").await.unwrap();
    assert!(p.ledger_id > *ledgers.last().unwrap(), "rolled over: {p}");
    r.cursor.mark_delete(p).await.unwrap();
    assert_ne!(r.cursor.cursor_ledger_id(), cursor_ledger);
    let trimmed = r.ml.trim_consumed_ledgers().await.unwrap();
    assert!(trimmed.contains(&r.first), "{trimmed:?}");
    assert!(!cluster.contains_ledger(r.first));
}

/// Polls `cond` for up to `secs` seconds.
async fn wait_for(what: &str, secs: u64, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "timed out: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn the_factory_follows_the_memory_store_session() {
    let memory = Arc::new(MemoryStore::new());
    let env = Env::on(memory.clone());
    let factory = env.factory();
    let ml = factory.open(NAME, small_config()).await.unwrap();
    let session = ml.metadata_session();
    assert!(Arc::ptr_eq(&session, &factory.metadata_session()));
    assert!(session.is_available());
    // Expiry: SessionExpired, then SessionReestablished.
    memory.expire_session().unwrap();
    wait_for("the expiry to be seen", 5, || session.losses() == 1).await;
    wait_for("the new session", 5, || session.is_available()).await;
}

/// Found by the nemesis's buggify: the watch that follows the session
/// failed once at the first open, and nothing tried again until another
/// ledger opened, so the open ledgers never paused at the next loss.
#[tokio::test]
async fn a_session_watch_that_failed_at_the_first_open_is_armed_again_by_itself() {
    let memory = Arc::new(MemoryStore::new());
    let env = Env::on(memory.clone());
    env.store.fail_watches_matching("/managed-ledgers", 2);
    let factory = env.factory();
    let ml = factory.open(NAME, small_config()).await.unwrap();
    let session = ml.metadata_session();
    // No other open: the factory arms the watch again in the background.
    tokio::time::sleep(Duration::from_millis(500)).await;
    memory.expire_session().unwrap();
    wait_for("the expiry to be seen", 5, || session.losses() == 1).await;
    wait_for("the new session", 5, || session.is_available()).await;
}

#[tokio::test]
async fn while_the_memory_store_session_is_lost_nothing_is_trimmed_or_rolled_over() {
    let env = Env::new();
    let factory = env.factory();
    let r = ready(&factory).await;
    let session = factory.metadata_session();
    // The memory store's expiry has no window (lost and back at once): the
    // loss is held here with the events a store reports.
    session.on_event(SessionEvent::ConnectionLost);
    let writes = env.store.write_count();
    assert_deferred(&r, &session, &env.cluster).await;
    assert_eq!(
        env.store.write_count(),
        writes,
        "no metadata write while the session is lost"
    );
    session.on_event(SessionEvent::SessionExpired);
    assert!(!session.is_available());
    session.on_event(SessionEvent::SessionReestablished);
    assert_resumed(&r, &session, &env.cluster).await;
    assert_eq!(session.losses(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_zookeeper_is_down_nothing_is_trimmed_or_rolled_over() {
    bkswitch_zk_harness::require_zk();
    let zk = bkswitch_zk_harness::ZkServer::start();
    let options = ZkStoreOptions {
        session_timeout: Duration::from_secs(30),
        operation_timeout: Duration::from_secs(5),
        ..ZkStoreOptions::default()
    };
    let store: Arc<dyn MetadataStore> = Arc::new(
        ZkStore::connect(&format!("zk://{}", zk.connect_string()), options)
            .await
            .unwrap(),
    );
    let cluster = MemoryCluster::new("bk-a");
    let factory = ManagedLedgerFactory::new(store.clone(), Arc::new(cluster.client()));
    let r = ready(&factory).await;
    let session = factory.metadata_session();

    zk.stop();
    wait_for("ConnectionLost", 30, || !session.is_available()).await;
    assert_deferred(&r, &session, &cluster).await;
    zk.start_again();
    wait_for("the session back", 60, || session.is_available()).await;
    assert_resumed(&r, &session, &cluster).await;
    assert_eq!(session.losses(), 1);
    store.close().await.unwrap();
}
