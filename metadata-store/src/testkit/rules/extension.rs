//! The [`MetadataStoreExt`] helpers every store gets:
//! `delete_recursive`, `put_if_absent`, `update`.

use super::support::{close, namespace, ok, session, value};
use crate::store::{MetadataStore, MetadataStoreExt, Update};
use crate::testkit::env::MetadataStoreTestEnv;
use crate::types::{CreateMode, ExpectedVersion, GetResult};
use bkswitch_conformance::RuleResult;

/// `delete_recursive`, `put_if_absent` and `update` (compare-and-set loop, also
/// under contention).
pub async fn extension_helpers<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    assert!(ok("put_if_absent", a.put_if_absent("/h/x", b"1").await).is_some());
    assert!(ok("put_if_absent again", a.put_if_absent("/h/x", b"2").await).is_none());
    assert_eq!(value(&a, "/h/x").await.as_deref(), Some(&b"1"[..]));

    let increment = |cur: Option<&GetResult>| {
        let n: u64 = cur
            .map(|r| String::from_utf8_lossy(&r.value).parse().expect("a number"))
            .unwrap_or(0);
        Update::Write((n + 1).to_string().into_bytes())
    };
    let st = ok(
        "update missing",
        a.update("/h/counter", 10, increment).await,
    )
    .expect("written");
    assert_eq!(st.version, 0);
    assert!(ok(
        "update keep",
        a.update("/h/counter", 10, |_| Update::Keep).await
    )
    .is_none());
    tokio::join!(
        async {
            for _ in 0..10 {
                ok("update a", a.update("/h/counter", 100, increment).await);
            }
        },
        async {
            for _ in 0..10 {
                ok("update b", b.update("/h/counter", 100, increment).await);
            }
        },
    );
    let r = ok("get", a.get("/h/counter").await).expect("counter");
    assert_eq!(r.value, b"21");
    assert_eq!(r.stat.version, 20);

    for p in ["/h/t/a/1", "/h/t/a/2", "/h/t/b", "/h/t/c/d/e"] {
        ok("put", a.put(p, b"", ExpectedVersion::Any).await);
    }
    ok(
        "ephemeral in tree",
        b.create("/h/t/c/eph", b"", CreateMode::EPHEMERAL).await,
    );
    ok("delete_recursive", a.delete_recursive("/h/t").await);
    assert!(ok("exists", a.exists("/h/t").await).is_none());
    assert!(
        ok("exists", a.exists("/h/x").await).is_some(),
        "sibling kept"
    );
    ok(
        "delete_recursive missing",
        a.delete_recursive("/h/none").await,
    );
    ok("delete_recursive root", a.delete_recursive("/").await);
    assert!(ok("children /", a.children("/").await).is_empty());
    assert!(ok("root kept", a.exists("/").await).is_some());
    close(&[&a, &b]).await;
    Ok(())
}
