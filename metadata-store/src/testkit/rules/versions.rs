//! Versions and compare-and-set: versions from 0, parents created by writes,
//! `NotExists` / `Exactly` / stale versions, and races where exactly one writer
//! wins.

use super::support::{close, expect_kind, namespace, ok, session, value};
use crate::error::ErrorKind;
use crate::store::MetadataStore;
use crate::testkit::env::MetadataStoreTestEnv;
use crate::types::{CreateMode, ExpectedVersion};
use bkswitch_conformance::RuleResult;

/// Versions start at 0 and grow by one per write; get/exists agree.
pub async fn get_put_versions<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    assert!(ok("get missing", s.get("/a").await).is_none());
    assert!(ok("exists missing", s.exists("/a").await).is_none());
    let st = ok("put create", s.put("/a", b"1", ExpectedVersion::Any).await);
    assert_eq!(
        (st.version, st.cversion, st.ephemeral, st.num_children),
        (0, 0, false, 0)
    );
    assert!(
        st.created_ms > 0 && st.modified_ms >= st.created_ms,
        "{st:?}"
    );
    let r = ok("get", s.get("/a").await).expect("/a exists");
    assert_eq!(r.value, b"1");
    assert_eq!(r.stat, st);
    let st1 = ok("put any", s.put("/a", b"2", ExpectedVersion::Any).await);
    assert_eq!(st1.version, 1);
    assert_eq!(st1.created_ms, st.created_ms);
    let st2 = ok(
        "put exactly",
        s.put("/a", b"3", ExpectedVersion::Exactly(1)).await,
    );
    assert_eq!(st2.version, 2);
    assert!(st2.modified_ms >= st1.modified_ms);
    let r = ok("get", s.get("/a").await).expect("/a exists");
    assert_eq!((r.value.as_slice(), r.stat), (&b"3"[..], st2));
    assert_eq!(ok("exists", s.exists("/a").await), Some(st2));
    let st = ok(
        "put empty",
        s.put("/empty", b"", ExpectedVersion::NotExists).await,
    );
    assert_eq!(st.version, 0);
    assert_eq!(value(&s, "/empty").await, Some(Vec::new()));
    close(&[&s]).await;
    Ok(())
}

/// `put` and `create` create missing parents (persistent, empty, version 0).
pub async fn put_creates_parents<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    ok(
        "put deep",
        s.put("/p/q/r", b"x", ExpectedVersion::Any).await,
    );
    for parent in ["/p", "/p/q"] {
        let r = ok("get parent", s.get(parent).await).unwrap_or_else(|| panic!("{parent} missing"));
        assert_eq!(r.value, b"", "{parent}");
        assert_eq!(r.stat.version, 0, "{parent}");
        assert!(!r.stat.ephemeral, "{parent}");
    }
    assert_eq!(ok("children", s.children("/p").await), ["q"]);
    assert_eq!(value(&s, "/p/q/r").await.as_deref(), Some(&b"x"[..]));
    ok(
        "put not-exists deep",
        s.put("/p2/a/b", b"y", ExpectedVersion::NotExists).await,
    );
    assert!(ok("exists", s.exists("/p2/a").await).is_some());
    let (actual, _) = ok(
        "create deep",
        s.create("/p3/x/y", b"z", CreateMode::PERSISTENT).await,
    );
    assert_eq!(actual, "/p3/x/y");
    assert!(ok("exists", s.exists("/p3/x").await).is_some());
    let (actual, st) = ok(
        "create ephemeral deep",
        s.create("/p4/e", b"", CreateMode::EPHEMERAL).await,
    );
    assert_eq!(actual, "/p4/e");
    assert!(st.ephemeral);
    assert!(
        !ok("exists", s.exists("/p4").await).expect("/p4").ephemeral,
        "parents are persistent"
    );
    close(&[&s]).await;
    Ok(())
}

/// `put` expecting `NotExists` on an existing node: AlreadyExists, nothing written.
pub async fn put_not_exists_on_existing_fails<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    ok("put", s.put("/a", b"1", ExpectedVersion::Any).await);
    let e = expect_kind(
        "put NotExists on existing",
        s.put("/a", b"2", ExpectedVersion::NotExists).await,
        ErrorKind::AlreadyExists,
    );
    assert!(e.is_conflict() && !e.is_retryable());
    assert_eq!(e.path(), "/a");
    assert!(e.to_string().contains("/a"), "{e}");
    let r = ok("get", s.get("/a").await).expect("/a");
    assert_eq!((r.value.as_slice(), r.stat.version), (&b"1"[..], 0));
    expect_kind(
        "create existing",
        s.create("/a", b"3", CreateMode::PERSISTENT).await,
        ErrorKind::AlreadyExists,
    );
    assert_eq!(value(&s, "/a").await.as_deref(), Some(&b"1"[..]));
    close(&[&s]).await;
    Ok(())
}

/// `put` expecting a version of a missing node: NotFound (ZooKeeper's NoNode),
/// nothing created.
pub async fn put_exactly_on_missing_is_not_found<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    for v in [0, 5] {
        let e = expect_kind(
            "put Exactly on missing",
            s.put("/m/x", b"1", ExpectedVersion::Exactly(v)).await,
            ErrorKind::NotFound,
        );
        assert!(e.is_conflict());
        assert_eq!(e.path(), "/m/x");
    }
    assert!(ok("exists", s.exists("/m/x").await).is_none());
    assert!(
        ok("exists parent", s.exists("/m").await).is_none(),
        "no parent created"
    );
    close(&[&s]).await;
    Ok(())
}

/// `put` with a stale version: BadVersion, nothing written; a negative version is
/// an invalid argument.
pub async fn put_wrong_version_is_bad_version<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    ok("put", s.put("/a", b"1", ExpectedVersion::Any).await);
    ok("put", s.put("/a", b"2", ExpectedVersion::Any).await);
    for v in [0, 3, i64::from(i32::MAX) + 1] {
        let e = expect_kind(
            "put stale version",
            s.put("/a", b"x", ExpectedVersion::Exactly(v)).await,
            ErrorKind::BadVersion,
        );
        assert!(e.is_conflict());
        assert!(e.to_string().contains("version"), "{e}");
    }
    expect_kind(
        "put negative version",
        s.put("/a", b"x", ExpectedVersion::Exactly(-1)).await,
        ErrorKind::InvalidArgument,
    );
    let r = ok("get", s.get("/a").await).expect("/a");
    assert_eq!((r.value.as_slice(), r.stat.version), (&b"2"[..], 1));
    close(&[&s]).await;
    Ok(())
}

/// Two sessions compare-and-set the same version at once: exactly one wins and
/// the version grows by exactly one.
pub async fn cas_race_exactly_one_writer_wins<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    ok("put", a.put("/cas", b"start", ExpectedVersion::Any).await);
    for round in 0..20 {
        let v = ok("get", a.get("/cas").await).expect("/cas").stat.version;
        let va = format!("a{round}");
        let vb = format!("b{round}");
        let (ra, rb) = tokio::join!(
            a.put("/cas", va.as_bytes(), ExpectedVersion::Exactly(v)),
            b.put("/cas", vb.as_bytes(), ExpectedVersion::Exactly(v)),
        );
        let winner = match (ra, rb) {
            (Ok(st), Err(e)) => {
                assert_eq!(e.kind(), ErrorKind::BadVersion, "round {round}: {e}");
                assert_eq!(st.version, v + 1);
                va
            }
            (Err(e), Ok(st)) => {
                assert_eq!(e.kind(), ErrorKind::BadVersion, "round {round}: {e}");
                assert_eq!(st.version, v + 1);
                vb
            }
            other => panic!("round {round}: exactly one writer must win, got {other:?}"),
        };
        let r = ok("get", b.get("/cas").await).expect("/cas");
        assert_eq!(r.stat.version, v + 1, "round {round}");
        assert_eq!(r.value, winner.as_bytes(), "round {round}");
    }
    close(&[&a, &b]).await;
    Ok(())
}

/// Two sessions create the same node at once (put NotExists, create): exactly
/// one succeeds.
pub async fn create_if_absent_race_exactly_one_wins<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let a = session(&*ns).await;
    let b = session(&*ns).await;
    for round in 0..10 {
        let p = format!("/race/put-{round}");
        let (ra, rb) = tokio::join!(
            a.put(&p, b"a", ExpectedVersion::NotExists),
            b.put(&p, b"b", ExpectedVersion::NotExists),
        );
        let winner: &[u8] = match (ra, rb) {
            (Ok(st), Err(e)) | (Err(e), Ok(st)) if e.kind() == ErrorKind::AlreadyExists => {
                assert_eq!(st.version, 0);
                if value(&a, &p).await.as_deref() == Some(b"a") {
                    b"a"
                } else {
                    b"b"
                }
            }
            other => panic!("{p}: exactly one creator must win, got {other:?}"),
        };
        let r = ok("get", a.get(&p).await).expect("created");
        assert_eq!((r.value.as_slice(), r.stat.version), (winner, 0));

        let p = format!("/race/create-{round}");
        let (ra, rb) = tokio::join!(
            a.create(&p, b"a", CreateMode::PERSISTENT),
            b.create(&p, b"b", CreateMode::EPHEMERAL),
        );
        match (ra, rb) {
            (Ok(_), Err(e)) | (Err(e), Ok(_)) if e.kind() == ErrorKind::AlreadyExists => {}
            other => panic!("{p}: exactly one creator must win, got {other:?}"),
        }
    }
    close(&[&a, &b]).await;
    Ok(())
}

/// A store that offers version import creates the node with the given
/// version, and a holder of that version writes it conditionally; a store that
/// does not refuses with `InvalidArgument` and writes nothing.
pub async fn version_import_when_offered<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    if !s.can_import_versions() {
        let e = s
            .import_version("/imp/x", b"v", 5)
            .await
            .expect_err("a store without version import must refuse it");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
        assert!(e.to_string().contains("cannot import versions"), "{e}");
        assert!(
            ok("get", s.get("/imp/x").await).is_none(),
            "nothing written"
        );
        assert!(
            ok("get", s.get("/imp").await).is_none(),
            "no parent written"
        );
        close(&[&s]).await;
        return Ok(());
    }
    let other = session(&*ns).await;
    let st = ok("import", s.import_version("/imp/x", b"v7", 7).await);
    assert_eq!(st.version, 7);
    let got = ok("get", other.get("/imp/x").await).expect("imported node");
    assert_eq!((got.value.as_slice(), got.stat.version), (&b"v7"[..], 7));
    assert!(ok("parent", other.exists("/imp").await).is_some());
    expect_kind(
        "import over an existing node",
        s.import_version("/imp/x", b"other", 1).await,
        ErrorKind::AlreadyExists,
    );
    expect_kind(
        "negative version",
        s.import_version("/imp/y", b"", -1).await,
        ErrorKind::InvalidArgument,
    );
    assert!(ok("get", s.get("/imp/y").await).is_none());
    expect_kind(
        "stale version",
        other
            .put("/imp/x", b"old", ExpectedVersion::Exactly(6))
            .await,
        ErrorKind::BadVersion,
    );
    let st = ok(
        "cas on the imported version",
        other
            .put("/imp/x", b"v8", ExpectedVersion::Exactly(7))
            .await,
    );
    assert_eq!(st.version, 8);
    let got = ok("get", s.get("/imp/x").await).expect("node");
    assert_eq!((got.value.as_slice(), got.stat.version), (&b"v8"[..], 8));
    ok(
        "delete at the version",
        s.delete("/imp/x", ExpectedVersion::Exactly(8)).await,
    );
    close(&[&s, &other]).await;
    Ok(())
}

/// `import_sequential_counter` raises a parent's counter (never lowers it) so
/// that the next sequential child of any session takes the imported suffix;
/// it leaves no child behind, refuses bad input without writing, and a store
/// that does not offer it refuses it.
pub async fn sequential_counter_import<E: MetadataStoreTestEnv + ?Sized>(env: &E) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    let other = session(&*ns).await;
    for _ in 0..2 {
        ok(
            "sequential child",
            s.create("/cnt/q-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
                .await,
        );
    }
    match s.import_sequential_counter("/cnt", 100).await {
        Err(e)
            if e.kind() == ErrorKind::InvalidArgument
                && e.to_string().contains("cannot import sequential counters") =>
        {
            let st = ok("exists", s.exists("/cnt").await).expect("parent");
            assert_eq!(st.next_sequential_suffix(), 2, "nothing written");
            close(&[&s, &other]).await;
            return Ok(());
        }
        r => {
            let st = ok("import the counter", r);
            assert_eq!(st.next_sequential_suffix(), 100, "{st:?}");
            assert_eq!(st.num_children, 2, "{st:?}");
        }
    }
    let (made, _) = ok(
        "sequential child after the import",
        other
            .create("/cnt/q-", b"", CreateMode::PERSISTENT_SEQUENTIAL)
            .await,
    );
    assert_eq!(made, "/cnt/q-0000000100");
    let st = ok(
        "a lower counter",
        s.import_sequential_counter("/cnt", 50).await,
    );
    assert_eq!(st.next_sequential_suffix(), 101, "never lowered: {st:?}");
    assert_eq!(
        ok("children", other.children("/cnt").await),
        ["q-0000000000", "q-0000000001", "q-0000000100"],
        "no helper child left behind"
    );
    let st = ok("stat", other.exists("/cnt").await).expect("parent");
    assert_eq!(st.next_sequential_suffix(), 101);
    expect_kind(
        "a missing node",
        s.import_sequential_counter("/cnt-missing", 3).await,
        ErrorKind::NotFound,
    );
    assert!(
        ok("get", s.get("/cnt-missing").await).is_none(),
        "nothing created"
    );
    expect_kind(
        "a negative counter",
        s.import_sequential_counter("/cnt", -1).await,
        ErrorKind::InvalidArgument,
    );
    ok(
        "ephemeral",
        s.create("/cnt-e", b"", CreateMode::EPHEMERAL).await,
    );
    expect_kind(
        "an ephemeral node",
        s.import_sequential_counter("/cnt-e", 3).await,
        ErrorKind::InvalidArgument,
    );
    let st = ok("stat", s.exists("/cnt").await).expect("parent");
    assert_eq!(
        st.next_sequential_suffix(),
        101,
        "bad input changed nothing"
    );
    close(&[&s, &other]).await;
    Ok(())
}

/// `put_version` writes as `put` does and answers the new version: the value,
/// the creation time, the children and the ephemeral flag stay what `put`
/// would leave; a stale version, a missing node or an existing one (for
/// `NotExists`) is refused with nothing written; an imported version is
/// honoured where imports are offered.
pub async fn put_version_writes_as_put_does<E: MetadataStoreTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let ns = namespace(env).await;
    let s = session(&*ns).await;
    let other = session(&*ns).await;
    assert_eq!(
        ok(
            "put_version creating",
            s.put_version("/pv", b"0", ExpectedVersion::NotExists).await
        ),
        0
    );
    ok(
        "child",
        s.create("/pv/c", b"", CreateMode::PERSISTENT).await,
    );
    let before = ok("exists", s.exists("/pv").await).expect("/pv");
    for v in 0..3 {
        let value = format!("v{}", v + 1);
        assert_eq!(
            ok(
                "put_version at the version",
                other
                    .put_version("/pv", value.as_bytes(), ExpectedVersion::Exactly(v))
                    .await
            ),
            v + 1
        );
    }
    let got = ok("get", s.get("/pv").await).expect("/pv");
    assert_eq!(got.value, b"v3");
    assert_eq!(got.stat.version, 3);
    assert_eq!(got.stat.created_ms, before.created_ms);
    assert_eq!(got.stat.num_children, 1);
    assert_eq!(got.stat.cversion, before.cversion);
    assert!(!got.stat.ephemeral);
    assert!(got.stat.modified_ms >= before.modified_ms, "{:?}", got.stat);
    assert_eq!(
        ok(
            "put_version any",
            s.put_version("/pv", b"v4", ExpectedVersion::Any).await
        ),
        4
    );
    expect_kind(
        "put_version at a stale version",
        s.put_version("/pv", b"stale", ExpectedVersion::Exactly(2))
            .await,
        ErrorKind::BadVersion,
    );
    expect_kind(
        "put_version NotExists on an existing node",
        s.put_version("/pv", b"again", ExpectedVersion::NotExists)
            .await,
        ErrorKind::AlreadyExists,
    );
    expect_kind(
        "put_version of a missing node",
        s.put_version("/pv-missing", b"x", ExpectedVersion::Exactly(0))
            .await,
        ErrorKind::NotFound,
    );
    expect_kind(
        "put_version with a negative version",
        s.put_version("/pv", b"neg", ExpectedVersion::Exactly(-1))
            .await,
        ErrorKind::InvalidArgument,
    );
    let got = ok("get", other.get("/pv").await).expect("/pv");
    assert_eq!(
        (got.value.as_slice(), got.stat.version),
        (&b"v4"[..], 4),
        "refused writes changed nothing"
    );
    assert!(
        ok("get", s.get("/pv-missing").await).is_none(),
        "nothing created"
    );
    ok(
        "ephemeral",
        s.create("/pv-e", b"e0", CreateMode::EPHEMERAL).await,
    );
    assert_eq!(
        ok(
            "put_version of an ephemeral node",
            other
                .put_version("/pv-e", b"e1", ExpectedVersion::Exactly(0))
                .await
        ),
        1
    );
    let st = ok("exists", other.exists("/pv-e").await).expect("/pv-e");
    assert!(st.ephemeral, "still ephemeral: {st:?}");
    if s.can_import_versions() {
        ok("import", s.import_version("/pv-imp", b"i7", 7).await);
        expect_kind(
            "put_version below the imported version",
            other
                .put_version("/pv-imp", b"x", ExpectedVersion::Exactly(0))
                .await,
            ErrorKind::BadVersion,
        );
        assert_eq!(
            ok(
                "put_version on the imported version",
                other
                    .put_version("/pv-imp", b"i8", ExpectedVersion::Exactly(7))
                    .await
            ),
            8
        );
        let got = ok("get", s.get("/pv-imp").await).expect("/pv-imp");
        assert_eq!((got.value.as_slice(), got.stat.version), (&b"i8"[..], 8));
    }
    close(&[&s, &other]).await;
    Ok(())
}
