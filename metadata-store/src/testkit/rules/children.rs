//! Children and sequential names: sorted children, ZooKeeper's sequential
//! suffixes, `cversion`, and the root node.

use super::support::{children_changed, close, expect_kind, expect_next, namespace, ok, session};
use crate::error::ErrorKind;
use crate::store::MetadataStore;
use crate::testkit::env::MetadataStoreTestEnv;
use crate::types::{CreateMode, ExpectedVersion, Stat};
use bkswitch_conformance::RuleResult;

/// Children are names, sorted; a missing node has none.
pub async fn children_sorted_and_missing_is_empty<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    for name in ["b", "a", "c10", "c2", "A", "z-1"] {
        ok(
            "put",
            s.put(&format!("/k/{name}"), b"", ExpectedVersion::Any)
                .await,
        );
    }
    ok(
        "put grandchild",
        s.put("/k/a/deep", b"", ExpectedVersion::Any).await,
    );
    assert_eq!(
        ok("children", s.children("/k").await),
        ["A", "a", "b", "c10", "c2", "z-1"]
    );
    assert!(ok("children missing", s.children("/nope").await).is_empty());
    assert!(ok("children leaf", s.children("/k/b").await).is_empty());
    assert_eq!(ok("children /", s.children("/").await), ["k"]);
    close(&[&s]).await;
    Ok(())
}

/// Sequential names are the prefix plus the parent's count of child creations
/// as `%010d` (ZooKeeper's stored cversion): equal to the reported `cversion`
/// until a child is deleted, `(cversion + num_children) / 2` in general.
pub async fn sequential_names_follow_cversion<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    let mut names = Vec::new();
    for i in 0..3 {
        let (actual, st) = ok(
            "create sequential",
            s.create("/seq/id-", b"v", CreateMode::PERSISTENT_SEQUENTIAL)
                .await,
        );
        assert_eq!(actual, format!("/seq/id-{i:010}"));
        assert_eq!(st.version, 0);
        assert!(!st.ephemeral);
        names.push(actual);
    }
    ok(
        "put plain child",
        s.put("/seq/plain", b"", ExpectedVersion::Any).await,
    );
    let (actual, _) = ok(
        "create sequential",
        s.create("/seq/id-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
            .await,
    );
    assert_eq!(actual, "/seq/id-0000000004");
    ok(
        "delete plain child",
        s.delete("/seq/plain", ExpectedVersion::Any).await,
    );
    let parent = ok("exists", s.exists("/seq").await).expect("/seq");
    // 5 creations, 1 deletion: reported cversion 6, next suffix 5.
    assert_eq!((parent.cversion, parent.num_children), (6, 4));
    assert_eq!(parent.next_sequential_suffix(), 5);
    let (actual, st) = ok(
        "create ephemeral sequential",
        s.create("/seq/id-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
            .await,
    );
    assert_eq!(actual, "/seq/id-0000000005");
    assert!(st.ephemeral);
    // BookKeeper's id generator: create and delete at once.
    for expected in 6..9 {
        let (id, _) = ok(
            "create idgen node",
            s.create("/seq/id-", b"", CreateMode::EPHEMERAL_SEQUENTIAL)
                .await,
        );
        assert_eq!(id, format!("/seq/id-{expected:010}"));
        ok(
            "delete idgen node",
            s.delete(&id, ExpectedVersion::Any).await,
        );
    }
    let parent = ok("exists", s.exists("/seq").await).expect("/seq");
    assert_eq!((parent.cversion, parent.num_children), (13, 5));
    assert_eq!(parent.next_sequential_suffix(), 9);
    let (actual, _) = ok(
        "create sequential in a new parent",
        s.create("/fresh/x/n-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
            .await,
    );
    assert_eq!(actual, "/fresh/x/n-0000000000");
    let (actual, _) = ok(
        "create sequential without a name prefix",
        s.create(
            "/fresh/x/n-0000000001-",
            b"",
            CreateMode::PERSISTENT_SEQUENTIAL,
        )
        .await,
    );
    assert_eq!(actual, "/fresh/x/n-0000000001-0000000001");
    let children = ok("children", s.children("/seq").await);
    let mut sorted = children.clone();
    sorted.sort();
    assert_eq!(children, sorted);
    close(&[&s]).await;
    Ok(())
}

/// `cversion` counts creations and deletions of direct children only.
pub async fn cversion_counts_child_creations_and_deletions<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    let stat = |st: Option<Stat>| st.expect("/cv exists");
    ok("put", s.put("/cv", b"", ExpectedVersion::Any).await);
    assert_eq!(stat(ok("exists", s.exists("/cv").await)).cversion, 0);
    ok(
        "put child",
        s.put("/cv/a", b"1", ExpectedVersion::Any).await,
    );
    assert_eq!(stat(ok("exists", s.exists("/cv").await)).cversion, 1);
    ok(
        "write child",
        s.put("/cv/a", b"2", ExpectedVersion::Any).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!(
        (st.cversion, st.version),
        (1, 0),
        "writing a child is not a children change"
    );
    ok(
        "write parent",
        s.put("/cv", b"data", ExpectedVersion::Any).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!((st.cversion, st.version), (1, 1));
    ok(
        "delete child",
        s.delete("/cv/a", ExpectedVersion::Any).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!((st.cversion, st.num_children), (2, 0));
    ok(
        "put grandchild",
        s.put("/cv/b/c", b"", ExpectedVersion::Any).await,
    );
    assert_eq!(stat(ok("exists", s.exists("/cv").await)).cversion, 3);
    assert_eq!(stat(ok("exists", s.exists("/cv/b").await)).cversion, 1);
    ok(
        "create ephemeral child",
        s.create("/cv/e", b"", CreateMode::EPHEMERAL).await,
    );
    let st = stat(ok("exists", s.exists("/cv").await));
    assert_eq!((st.cversion, st.num_children), (4, 2));
    close(&[&s]).await;
    Ok(())
}

/// `/` always exists, lists the top-level nodes and cannot be deleted or
/// created.
pub async fn root_node<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    assert!(ok("get /", s.get("/").await).is_some());
    assert!(ok("exists /", s.exists("/").await).is_some());
    assert!(ok("children /", s.children("/").await).is_empty());
    let mut w = ok("watch /", s.watch("/").await);
    ok("put", s.put("/top", b"", ExpectedVersion::Any).await);
    expect_next(&mut w, children_changed("/")).await;
    assert_eq!(ok("children /", s.children("/").await), ["top"]);
    expect_kind(
        "create /",
        s.create("/", b"", CreateMode::PERSISTENT).await,
        ErrorKind::AlreadyExists,
    );
    expect_kind(
        "delete /",
        s.delete("/", ExpectedVersion::Any).await,
        ErrorKind::InvalidPath,
    );
    close(&[&s]).await;
    Ok(())
}
