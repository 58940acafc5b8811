//! Watches: what a watch reports, coalescing without losing the last change,
//! independent streams.

use super::support::{
    children_changed, close, created, deleted, expect_next, modified, namespace, next_node_event,
    ok, session, value,
};
use crate::store::MetadataStore;
use crate::testkit::env::MetadataStoreTestEnv;
use crate::types::{CreateMode, ExpectedVersion};
use bkswitch_conformance::RuleResult;

/// A watch reports creation, writes and deletion of its node, by this session
/// or another one.
pub async fn notify_created_modified_deleted<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w = ok("watch", a.watch("/n").await);
    assert_eq!(w.path(), "/n");
    ok("put", b.put("/n", b"1", ExpectedVersion::Any).await);
    expect_next(&mut w, created("/n")).await;
    ok("put", b.put("/n", b"2", ExpectedVersion::Exactly(0)).await);
    expect_next(&mut w, modified("/n")).await;
    ok("delete", b.delete("/n", ExpectedVersion::Any).await);
    expect_next(&mut w, deleted("/n")).await;
    ok("own put", a.put("/n", b"3", ExpectedVersion::Any).await);
    expect_next(&mut w, created("/n")).await;
    ok("own put", a.put("/n", b"4", ExpectedVersion::Any).await);
    expect_next(&mut w, modified("/n")).await;
    ok("own delete", a.delete("/n", ExpectedVersion::Any).await);
    expect_next(&mut w, deleted("/n")).await;
    // An ephemeral node ends with its session: a deletion too.
    ok(
        "ephemeral",
        b.create("/n", b"", CreateMode::EPHEMERAL).await,
    );
    expect_next(&mut w, created("/n")).await;
    ok("close b", b.close().await);
    expect_next(&mut w, deleted("/n")).await;
    close(&[&a]).await;
    Ok(())
}

/// A watch reports creations and deletions of direct children only.
pub async fn notify_children_changed<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    ok("put parent", b.put("/par", b"", ExpectedVersion::Any).await);
    let mut w = ok("watch", a.watch("/par").await);
    ok(
        "put child",
        b.put("/par/c1", b"", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, children_changed("/par")).await;
    // Not children changes of /par: a child's value, a grandchild.
    ok(
        "write child",
        b.put("/par/c1", b"x", ExpectedVersion::Any).await,
    );
    ok(
        "put grandchild",
        b.put("/par/c1/g", b"", ExpectedVersion::Any).await,
    );
    ok(
        "write parent",
        b.put("/par", b"p", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, modified("/par")).await;
    ok(
        "delete grandchild",
        b.delete("/par/c1/g", ExpectedVersion::Any).await,
    );
    ok(
        "delete child",
        b.delete("/par/c1", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, children_changed("/par")).await;
    ok(
        "sequential child",
        b.create("/par/s-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await,
    );
    expect_next(&mut w, children_changed("/par")).await;
    ok("close b", b.close().await);
    expect_next(&mut w, children_changed("/par")).await;
    ok(
        "delete parent",
        a.delete("/par", ExpectedVersion::Any).await,
    );
    expect_next(&mut w, deleted("/par")).await;
    close(&[&a]).await;
    Ok(())
}

/// Rapid writes may coalesce, but a consumer that re-reads on every
/// notification always ends up seeing the last value, and the watch is still
/// armed afterwards.
pub async fn notify_latest_value_is_never_lost<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w = ok("watch", a.watch("/fast").await);
    let reader = a.clone();
    let consumer = tokio::spawn(async move {
        let mut events = 0usize;
        loop {
            next_node_event(&mut w, "the last value").await;
            events += 1;
            if value(&reader, "/fast").await.as_deref() == Some(b"99") {
                return (w, events);
            }
        }
    });
    for i in 0..100 {
        ok(
            "put",
            b.put("/fast", i.to_string().as_bytes(), ExpectedVersion::Any)
                .await,
        );
    }
    let (mut w, events) = consumer.await.expect("consumer panicked");
    assert!(
        (1..=100).contains(&events),
        "{events} notifications for 100 writes"
    );
    ok(
        "put after burst",
        b.put("/fast", b"100", ExpectedVersion::Any).await,
    );
    loop {
        next_node_event(&mut w, "the write after the burst").await;
        if value(&a, "/fast").await.as_deref() == Some(b"100") {
            break;
        }
    }
    close(&[&a, &b]).await;
    Ok(())
}

/// Several streams on one path each get every change; dropping one does not
/// disturb the others.
pub async fn watch_streams_are_independent<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    let mut w1 = ok("watch", a.watch("/i").await);
    let mut w2 = ok("watch", a.watch("/i").await);
    let mut w3 = ok("watch", b.watch("/i").await);
    ok("put", b.put("/i", b"1", ExpectedVersion::Any).await);
    for w in [&mut w1, &mut w2, &mut w3] {
        expect_next(w, created("/i")).await;
    }
    drop(w1);
    ok("put", a.put("/i", b"2", ExpectedVersion::Any).await);
    for w in [&mut w2, &mut w3] {
        expect_next(w, modified("/i")).await;
    }
    close(&[&a, &b]).await;
    Ok(())
}
