//! Deleting nodes: versions, missing nodes, non-empty nodes, the root.

use super::support::{close, expect_kind, namespace, ok, session};
use crate::error::ErrorKind;
use crate::store::MetadataStore;
use crate::testkit::env::MetadataStoreTestEnv;
use crate::types::ExpectedVersion;
use bkswitch_conformance::RuleResult;

/// Delete: wrong version → BadVersion (untouched); missing → NotFound; with
/// children → NotEmpty; `NotExists` → invalid; `/` → invalid path.
pub async fn delete_versions_and_errors<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    ok("put", s.put("/d", b"x", ExpectedVersion::Any).await);
    ok("put", s.put("/d", b"y", ExpectedVersion::Any).await);
    let e = expect_kind(
        "delete stale version",
        s.delete("/d", ExpectedVersion::Exactly(0)).await,
        ErrorKind::BadVersion,
    );
    assert_eq!(e.path(), "/d");
    let r = ok("get", s.get("/d").await).expect("/d untouched");
    assert_eq!((r.value.as_slice(), r.stat.version), (&b"y"[..], 1));
    expect_kind(
        "delete NotExists",
        s.delete("/d", ExpectedVersion::NotExists).await,
        ErrorKind::InvalidArgument,
    );
    expect_kind(
        "delete negative version",
        s.delete("/d", ExpectedVersion::Exactly(-2)).await,
        ErrorKind::InvalidArgument,
    );
    ok("delete", s.delete("/d", ExpectedVersion::Exactly(1)).await);
    assert!(ok("exists", s.exists("/d").await).is_none());
    expect_kind(
        "delete missing",
        s.delete("/d", ExpectedVersion::Any).await,
        ErrorKind::NotFound,
    );
    expect_kind(
        "delete missing with version",
        s.delete("/d", ExpectedVersion::Exactly(0)).await,
        ErrorKind::NotFound,
    );
    ok("put child", s.put("/d2/c", b"", ExpectedVersion::Any).await);
    let e = expect_kind(
        "delete non-empty",
        s.delete("/d2", ExpectedVersion::Any).await,
        ErrorKind::NotEmpty,
    );
    assert_eq!(e.path(), "/d2");
    assert!(ok("exists", s.exists("/d2/c").await).is_some());
    expect_kind(
        "delete root",
        s.delete("/", ExpectedVersion::Any).await,
        ErrorKind::InvalidPath,
    );
    ok(
        "delete child",
        s.delete("/d2/c", ExpectedVersion::Any).await,
    );
    ok(
        "delete parent",
        s.delete("/d2", ExpectedVersion::Exactly(0)).await,
    );
    close(&[&s]).await;
    Ok(())
}
