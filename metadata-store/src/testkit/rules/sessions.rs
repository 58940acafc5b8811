//! Sessions and ephemeral nodes: ephemeral nodes end with their session, and a
//! closed store fails every call and ends its watch streams.

use futures::StreamExt;

use super::support::{
    close, created, expect_kind, expect_next, namespace, ok, session, EVENT_TIMEOUT,
};
use crate::error::ErrorKind;
use crate::store::MetadataStore;
use crate::testkit::env::MetadataStoreTestEnv;
use crate::types::{CreateMode, ExpectedVersion, Notification};
use bkswitch_conformance::RuleResult;

/// Ephemeral nodes belong to their session, cannot have children, and vanish
/// when the session is closed; a closed session fails with Closed.
pub async fn ephemeral_nodes_end_with_their_session<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let (p, st) = ok(
        "create ephemeral",
        b.create("/e/x", b"v", CreateMode::EPHEMERAL).await,
    );
    assert_eq!(p, "/e/x");
    assert!(st.ephemeral);
    assert!(
        ok("exists", a.exists("/e/x").await)
            .expect("visible to others")
            .ephemeral
    );
    assert!(!ok("exists", a.exists("/e").await).expect("/e").ephemeral);
    expect_kind(
        "create under ephemeral",
        b.create("/e/x/child", b"", CreateMode::PERSISTENT).await,
        ErrorKind::InvalidArgument,
    );
    expect_kind(
        "put under ephemeral",
        a.put("/e/x/child", b"", ExpectedVersion::Any).await,
        ErrorKind::InvalidArgument,
    );
    let (p2, _) = ok(
        "create ephemeral sequential",
        b.create("/e/s-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await,
    );
    // Writing an ephemeral node keeps it ephemeral.
    let st = ok(
        "write ephemeral",
        a.put("/e/x", b"w", ExpectedVersion::Exactly(0)).await,
    );
    assert!(st.ephemeral && st.version == 1);
    ok("close b", b.close().await);
    assert!(
        ok("exists", a.exists("/e/x").await).is_none(),
        "ephemeral survived close"
    );
    assert!(
        ok("exists", a.exists(&p2).await).is_none(),
        "ephemeral survived close"
    );
    assert!(
        ok("exists", a.exists("/e").await).is_some(),
        "persistent parent kept"
    );
    expect_kind("get after close", b.get("/e").await, ErrorKind::Closed);
    expect_kind(
        "create after close",
        b.create("/e/y", b"", CreateMode::EPHEMERAL).await,
        ErrorKind::Closed,
    );
    ok("second close", b.close().await);
    close(&[&a]).await;
    Ok(())
}

/// Closing a store ends its watch streams; every later call fails with Closed.
pub async fn closed_store_fails_and_ends_streams<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w = ok("watch", a.watch("/z").await);
    let mut wb = ok("watch", b.watch("/z").await);
    ok("close", a.close().await);
    loop {
        match tokio::time::timeout(EVENT_TIMEOUT, w.next()).await {
            Ok(None) => break,
            Ok(Some(Notification::Session(_))) => continue,
            Ok(Some(n)) => panic!("unexpected notification after close: {n:?}"),
            Err(_) => panic!("watch stream did not end within {EVENT_TIMEOUT:?} of close"),
        }
    }
    expect_kind("get", a.get("/z").await, ErrorKind::Closed);
    expect_kind("exists", a.exists("/z").await, ErrorKind::Closed);
    expect_kind("children", a.children("/z").await, ErrorKind::Closed);
    expect_kind(
        "put",
        a.put("/z", b"", ExpectedVersion::Any).await,
        ErrorKind::Closed,
    );
    expect_kind(
        "delete",
        a.delete("/z", ExpectedVersion::Any).await,
        ErrorKind::Closed,
    );
    expect_kind("watch", a.watch("/z").await, ErrorKind::Closed);
    let e = expect_kind(
        "create",
        a.create("/z", b"", CreateMode::PERSISTENT).await,
        ErrorKind::Closed,
    );
    assert!(!e.is_retryable());
    ok("close again", a.close().await);
    // Other sessions are not affected.
    ok("put by b", b.put("/z", b"1", ExpectedVersion::Any).await);
    expect_next(&mut wb, created("/z")).await;
    close(&[&b]).await;
    Ok(())
}
