//! ZooKeeper-only behaviour, each test with its own server: lost connections,
//! expired sessions, operations while the server is down.

use std::time::{Duration, Instant};

use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataStore, Notification, SessionEvent, WatchStream,
    ZkStore, ZkStoreOptions,
};
use bkswitch_zk_harness::ZkServer;
use futures::StreamExt;

const WAIT: Duration = Duration::from_secs(30);

fn options(session_secs: u64, reconnect_delay_ms: u64) -> ZkStoreOptions {
    ZkStoreOptions {
        session_timeout: Duration::from_secs(session_secs),
        operation_timeout: Duration::from_secs(3),
        connect_timeout: Duration::from_secs(20),
        reconnect_delay: Duration::from_millis(reconnect_delay_ms),
        auth: None,
        tls: None,
    }
}

async fn connect(server: &ZkServer, opts: ZkStoreOptions) -> ZkStore {
    let url = format!("zk://{}/app", server.connect_string());
    ZkStore::connect(&url, opts).await.expect("connect")
}

/// Reads notifications until `wanted` arrives; returns everything read.
async fn wait_for(w: &mut WatchStream, wanted: &Notification) -> Vec<Notification> {
    let mut seen = Vec::new();
    let deadline = Instant::now() + WAIT;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, w.next()).await {
            Ok(Some(n)) => {
                let done = &n == wanted;
                seen.push(n);
                if done {
                    return seen;
                }
            }
            Ok(None) => panic!("stream ended waiting for {wanted:?}; saw {seen:?}"),
            Err(_) => panic!("no {wanted:?} within {WAIT:?}; saw {seen:?}"),
        }
    }
}

fn session(e: SessionEvent) -> Notification {
    Notification::Session(e)
}

fn position(seen: &[Notification], n: &Notification) -> usize {
    seen.iter()
        .position(|x| x == n)
        .unwrap_or_else(|| panic!("{n:?} missing from {seen:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_survives_a_server_restart_and_sees_writes_made_meanwhile() {
    let server = ZkServer::start();
    // A slow reconnect, so that the write below lands while A is disconnected.
    let a = connect(&server, options(15, 2_000)).await;
    a.create("/mine", b"", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    a.put("/x", b"0", ExpectedVersion::Any).await.expect("put");
    let mut w = a.watch("/x").await.expect("watch");

    server.stop();
    wait_for(&mut w, &session(SessionEvent::ConnectionLost)).await;
    assert!(!a.is_connected());
    server.start_again();

    let b = connect(&server, options(15, 100)).await;
    b.put("/x", b"1", ExpectedVersion::Exactly(0))
        .await
        .expect("write while A is away");

    let seen = wait_for(&mut w, &Notification::Modified { path: "/x".into() }).await;
    assert!(
        position(&seen, &session(SessionEvent::Reconnected))
            < position(&seen, &Notification::Modified { path: "/x".into() }),
        "{seen:?}"
    );
    assert!(
        !seen.contains(&session(SessionEvent::SessionExpired)),
        "{seen:?}"
    );
    assert_eq!(a.get("/x").await.expect("get").expect("/x").value, b"1");
    assert_eq!(a.session_generation(), 1, "same session");
    assert!(
        b.exists("/mine").await.expect("exists").is_some(),
        "A's ephemeral kept"
    );

    // The re-armed watch keeps delivering.
    b.put("/x", b"2", ExpectedVersion::Any).await.expect("put");
    wait_for(&mut w, &Notification::Modified { path: "/x".into() }).await;
    a.close().await.expect("close");
    assert!(b.exists("/mine").await.expect("exists").is_none());
    b.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_expiry_is_reported_and_the_store_recovers() {
    let server = ZkServer::start();
    let a = connect(&server, options(4, 100)).await;
    a.put("/w", b"0", ExpectedVersion::Any).await.expect("put");
    a.create("/eph", b"", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    let mut w = a.watch("/w").await.expect("watch");
    let mut w_missing = a.watch("/later").await.expect("watch");

    // A wiped server knows no session: A's is expired when it reconnects.
    server.restart_fresh();
    let seen = wait_for(&mut w, &session(SessionEvent::SessionReestablished)).await;
    assert!(
        position(&seen, &session(SessionEvent::SessionExpired))
            < position(&seen, &session(SessionEvent::SessionReestablished)),
        "{seen:?}"
    );
    wait_for(&mut w_missing, &session(SessionEvent::SessionReestablished)).await;
    assert_eq!(a.session_generation(), 2);
    assert!(a.is_connected());

    // The data is gone with the server's; the store (and its chroot) work.
    assert!(a.get("/w").await.expect("get").is_none());
    assert!(a.exists("/eph").await.expect("exists").is_none());
    wait_for(&mut w, &Notification::Deleted { path: "/w".into() }).await;
    a.put("/w", b"1", ExpectedVersion::NotExists)
        .await
        .expect("put");
    wait_for(&mut w, &Notification::Created { path: "/w".into() }).await;
    a.put("/later", b"", ExpectedVersion::Any)
        .await
        .expect("put");
    wait_for(
        &mut w_missing,
        &Notification::Created {
            path: "/later".into(),
        },
    )
    .await;

    // Ephemerals now belong to the new session.
    a.create("/eph2", b"", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    let b = connect(&server, options(10, 100)).await;
    assert!(
        b.exists("/eph2")
            .await
            .expect("exists")
            .expect("/eph2")
            .ephemeral
    );
    a.close().await.expect("close");
    assert!(b.exists("/eph2").await.expect("exists").is_none());
    b.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_session_loses_its_ephemerals_and_keeps_persistent_data() {
    let server = ZkServer::start();
    // A reconnects only 6 s after losing the server: far beyond its 2 s session.
    let a = connect(&server, options(2, 6_000)).await;
    let b = connect(&server, options(15, 100)).await;
    a.create("/lock", b"a", CreateMode::EPHEMERAL)
        .await
        .expect("ephemeral");
    a.put("/data", b"v", ExpectedVersion::Any)
        .await
        .expect("put");
    let mut wa = a.watch("/lock").await.expect("watch");
    let mut wb = b.watch("/lock").await.expect("watch");

    server.stop();
    server.start_again();

    // B keeps its session and sees A's lock go when A's session expires.
    let seen_b = wait_for(
        &mut wb,
        &Notification::Deleted {
            path: "/lock".into(),
        },
    )
    .await;
    assert!(
        seen_b.contains(&session(SessionEvent::Reconnected)),
        "{seen_b:?}"
    );
    assert!(
        !seen_b.contains(&session(SessionEvent::SessionExpired)),
        "{seen_b:?}"
    );

    // A learns of the expiry when it comes back, opens a new session, re-reads.
    let seen_a = wait_for(
        &mut wa,
        &Notification::Deleted {
            path: "/lock".into(),
        },
    )
    .await;
    let lost = position(&seen_a, &session(SessionEvent::ConnectionLost));
    let expired = position(&seen_a, &session(SessionEvent::SessionExpired));
    let back = position(&seen_a, &session(SessionEvent::SessionReestablished));
    assert!(lost < expired && expired < back, "{seen_a:?}");
    assert_eq!(a.session_generation(), 2);
    assert_eq!(
        a.get("/data").await.expect("get").expect("/data").value,
        b"v"
    );
    assert!(a.get("/lock").await.expect("get").is_none());
    a.create("/lock", b"a2", CreateMode::EPHEMERAL)
        .await
        .expect("take the lock again");
    wait_for(
        &mut wb,
        &Notification::Created {
            path: "/lock".into(),
        },
    )
    .await;
    a.close().await.expect("close");
    b.close().await.expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operations_fail_fast_while_the_server_is_down() {
    let server = ZkServer::start();
    let a = connect(
        &server,
        ZkStoreOptions {
            operation_timeout: Duration::from_secs(1),
            ..options(15, 100)
        },
    )
    .await;
    a.put("/k", b"v", ExpectedVersion::Any).await.expect("put");
    server.stop();
    // The store notices the lost connection at once (the server's socket
    // closes); from then on every operation waits for it, up to its timeout.
    let deadline = Instant::now() + WAIT;
    while a.is_connected() {
        assert!(
            Instant::now() < deadline,
            "the lost connection went unnoticed"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let bound = Duration::from_secs(1) + Duration::from_millis(1_500);
    let checks: Vec<(&str, ErrorKind, Duration, String)> = vec![
        timed("get", a.get("/k")).await,
        timed("exists", a.exists("/k")).await,
        timed("children", a.children("/")).await,
        timed("put", a.put("/k", b"w", ExpectedVersion::Exactly(0))).await,
        timed("create", a.create("/n", b"", CreateMode::PERSISTENT)).await,
        timed("delete", a.delete("/k", ExpectedVersion::Any)).await,
        timed("watch", a.watch("/k")).await,
    ];
    for (op, kind, took, message) in checks {
        assert_eq!(kind, ErrorKind::Unavailable, "{op}: {message}");
        assert!(took < bound, "{op} took {took:?}");
        assert!(message.contains("operation timeout"), "{op}: {message}");
        assert!(message.contains(op), "{op}: {message}");
    }

    server.start_again();
    let deadline = Instant::now() + WAIT;
    let value = loop {
        match a.get("/k").await {
            Ok(v) => break v,
            Err(e) if e.is_retryable() && Instant::now() < deadline => {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => panic!("the store did not come back: {e}"),
        }
    };
    assert_eq!(
        value.expect("/k").value,
        b"v",
        "no write was applied while down"
    );
    assert_eq!(a.session_generation(), 1);
    a.close().await.expect("close");
}

async fn timed<T: std::fmt::Debug>(
    op: &'static str,
    f: impl std::future::Future<Output = bkswitch_metadata_store::Result<T>>,
) -> (&'static str, ErrorKind, Duration, String) {
    let start = Instant::now();
    let err = f.await.expect_err(op);
    assert!(err.is_retryable(), "{op}: {err}");
    (op, err.kind(), start.elapsed(), err.to_string())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connecting_to_no_server_times_out() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("probe a port")
        .port();
    let start = Instant::now();
    let err = ZkStore::connect(
        &format!("zk://127.0.0.1:{port}"),
        ZkStoreOptions {
            connect_timeout: Duration::from_secs(1),
            ..options(10, 100)
        },
    )
    .await
    .expect_err("nobody listens");
    assert_eq!(err.kind(), ErrorKind::Unavailable, "{err}");
    assert!(err.is_retryable());
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert!(err.to_string().contains(&port.to_string()), "{err}");
}
