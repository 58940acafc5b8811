//! Input validation: invalid paths and oversized values are rejected and change
//! nothing.

use super::support::{close, dump, expect_kind, namespace, ok, session, value};
use crate::error::ErrorKind;
use crate::path::MAX_VALUE_LEN;
use crate::store::MetadataStore;
use crate::testkit::env::MetadataStoreTestEnv;
use crate::types::{CreateMode, ExpectedVersion};
use bkswitch_conformance::RuleResult;

/// Every operation rejects invalid paths with InvalidPath naming the path, and
/// none of them changes anything.
pub async fn invalid_paths_change_nothing<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    ok("put", s.put("/keep/a", b"1", ExpectedVersion::Any).await);
    let before = dump(&s).await;
    let bad = [
        "",
        "keep",
        "/keep/",
        "//keep",
        "/keep//a",
        "/keep/./a",
        "/keep/..",
        "/a\0b",
        "/a\nb",
        "/a\u{7f}",
        "/a\u{E000}",
    ];
    for p in bad {
        let what = |op: &str| format!("{op} {p:?}");
        for (op, r) in [
            ("get", s.get(p).await.map(|_| ())),
            ("exists", s.exists(p).await.map(|_| ())),
            ("children", s.children(p).await.map(|_| ())),
            ("watch", s.watch(p).await.map(|_| ())),
            (
                "put",
                s.put(p, b"x", ExpectedVersion::Any).await.map(|_| ()),
            ),
            (
                "put NotExists",
                s.put(p, b"x", ExpectedVersion::NotExists).await.map(|_| ()),
            ),
            (
                "create",
                s.create(p, b"x", CreateMode::PERSISTENT).await.map(|_| ()),
            ),
            (
                "create seq",
                s.create(p, b"x", CreateMode::EPHEMERAL_SEQUENTIAL)
                    .await
                    .map(|_| ()),
            ),
            ("delete", s.delete(p, ExpectedVersion::Any).await),
        ] {
            let e = expect_kind(&what(op), r, ErrorKind::InvalidPath);
            assert_eq!(e.path(), p, "{}", what(op));
        }
    }
    for p in ["/zookeeper", "/zookeeper/x"] {
        expect_kind(
            "put reserved",
            s.put(p, b"", ExpectedVersion::Any).await,
            ErrorKind::InvalidPath,
        );
        expect_kind(
            "create reserved",
            s.create(p, b"", CreateMode::PERSISTENT).await,
            ErrorKind::InvalidPath,
        );
        expect_kind(
            "delete reserved",
            s.delete(p, ExpectedVersion::Any).await,
            ErrorKind::InvalidPath,
        );
    }
    expect_kind(
        "sequential prefix /",
        s.create("/", b"", CreateMode::PERSISTENT_SEQUENTIAL).await,
        ErrorKind::InvalidPath,
    );
    assert_eq!(dump(&s).await, before, "an invalid call changed the store");
    close(&[&s]).await;
    Ok(())
}

/// Values up to [`MAX_VALUE_LEN`] are stored; longer ones are rejected alike by
/// every backend.
pub async fn oversized_values_are_rejected<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    let big = vec![7u8; MAX_VALUE_LEN];
    ok("put max", s.put("/big", &big, ExpectedVersion::Any).await);
    assert_eq!(
        value(&s, "/big").await.map(|v| v.len()),
        Some(MAX_VALUE_LEN)
    );
    let too_big = vec![7u8; MAX_VALUE_LEN + 1];
    let e = expect_kind(
        "put too big",
        s.put("/big", &too_big, ExpectedVersion::Any).await,
        ErrorKind::InvalidArgument,
    );
    assert!(e.to_string().contains("limit"), "{e}");
    expect_kind(
        "create too big",
        s.create("/big2", &too_big, CreateMode::PERSISTENT).await,
        ErrorKind::InvalidArgument,
    );
    assert!(ok("exists", s.exists("/big2").await).is_none());
    assert_eq!(
        ok("exists", s.exists("/big").await).expect("/big").version,
        0
    );
    close(&[&s]).await;
    Ok(())
}
