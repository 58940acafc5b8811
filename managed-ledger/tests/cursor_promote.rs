//! The owner side of a cursor PROMOTE (`ManagedCursor::promote_cursor_ledger`):
//! flip when the copy is complete, roll over when the cursor is live and ahead
//! of the copy, refuse on a mismatch — and never lose a mark-delete.

mod common;

use std::sync::Arc;

use bkswitch_bk_client::{BookKeeper, LedgerConfig, MemoryCluster, ReadHandle};
use bkswitch_managed_ledger::{CursorPromotion, InitialPosition, ManagedLedgerErrorKind, Position};
use bkswitch_metadata_store::MetadataStore;
use bkswitch_proto::codec::decode_managed_cursor_info;
use bkswitch_proto::{Message, Stamped};
use common::*;

/// Copies ledger `id` from `src` to `dst` keeping ids (what BUILD does);
/// returns the copied last entry id.
async fn copy(id: i64, src: &dyn BookKeeper, dst: &dyn BookKeeper) -> i64 {
    let cfg = small_config();
    let h = src
        .open_ledger_no_recovery(id, cfg.digest_type, &cfg.password)
        .await
        .unwrap();
    let lac = h.last_add_confirmed();
    let w = dst
        .create_ledger_adv(id, &LedgerConfig::from_metadata(&h.metadata()))
        .await
        .unwrap();
    if lac >= 0 {
        for e in h.read_entries(0, lac).await.unwrap() {
            w.add_entry_at(e.entry_id, e.data).await.unwrap();
        }
    }
    w.close().await.unwrap();
    lac
}

struct Two {
    env: Env,
    b: MemoryCluster,
    b_client: Arc<dyn BookKeeper>,
    hooks: Hooks,
}

fn two() -> Two {
    two_on(Env::new())
}

fn two_on(env: Env) -> Two {
    let b = MemoryCluster::new("bk-b");
    b.advance_ledger_id_to(1000).unwrap();
    let b_client: Arc<dyn BookKeeper> = Arc::new(b.client());
    let hooks = Hooks::new(env.client());
    hooks.resolver.add_client(b_client.clone());
    Two {
        env,
        b,
        b_client,
        hooks,
    }
}

async fn append_n(
    ml: &bkswitch_managed_ledger::ManagedLedger,
    from: usize,
    n: usize,
) -> Vec<Position> {
    let mut out = Vec::new();
    for i in from..from + n {
        out.push(ml.append(format!("m{i:03}").into_bytes()).await.unwrap());
    }
    out
}

fn cursor_path() -> String {
    format!("{PATH}/sub")
}

#[tokio::test]
async fn complete_copy_flips_only_the_stamp_and_later_positions_go_to_the_new_cluster() {
    let (t, ml, c, ledger, copied, ps) = copied_to_b(Env::new()).await;
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    assert!(t.env.cluster.contains_ledger(ledger));
    let before = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();

    let outcome = c
        .promote_cursor_ledger(ledger, copied, "bk-b")
        .await
        .unwrap();
    assert!(
        matches!(outcome, CursorPromotion::Promoted { .. }),
        "{outcome:?}"
    );
    let after = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();
    let mut a = decode_managed_cursor_info(&before.value).unwrap();
    let mut b = decode_managed_cursor_info(&after.value).unwrap();
    assert_eq!(a.cluster_stamp().unwrap(), Some("bk-a"));
    assert_eq!(b.cluster_stamp().unwrap(), Some("bk-b"));
    a.cursor_properties.clear();
    b.cursor_properties.clear();
    assert_eq!(
        a.encode_to_vec(),
        b.encode_to_vec(),
        "only the stamp changes (docs/INVARIANTS.md I9)"
    );
    assert_eq!(c.cursor_ledger_id(), ledger);

    // Idempotent.
    assert_eq!(
        c.promote_cursor_ledger(ledger, copied, "bk-b")
            .await
            .unwrap(),
        CursorPromotion::AlreadyOnTarget
    );

    // The old cluster's ledger is sealed exactly at the copy: no position is
    // ever written to it again.
    let old = t
        .env
        .client()
        .open_ledger_no_recovery(ledger, config.digest_type, &config.password)
        .await
        .unwrap();
    assert!(old.is_closed());
    assert_eq!(old.last_add_confirmed(), copied);

    // The next mark-delete rolls onto a new ledger on the new cluster.
    c.mark_delete(ps[2]).await.unwrap();
    let next = c.cursor_ledger_id();
    assert_ne!(next, ledger);
    assert!(t.b.contains_ledger(next));
    let old_after = t
        .env
        .client()
        .open_ledger_no_recovery(ledger, config.digest_type, &config.password)
        .await
        .unwrap();
    assert_eq!(old_after.last_add_confirmed(), copied);
    drop((ml, c));

    let ml = t.env.factory().open(NAME, config).await.unwrap();
    assert_eq!(ml.cursor("sub").unwrap().mark_delete_position(), ps[2]);
}

#[tokio::test]
async fn live_cursor_ahead_of_the_copy_rolls_over_and_keeps_the_latest_position() {
    let t = two();
    let config = small_config()
        .with_cursor_rollover(1000, std::time::Duration::from_secs(3600))
        .with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 6).await;
    c.mark_delete(ps[0]).await.unwrap();
    let ledger = c.cursor_ledger_id();
    t.hooks.supplier.switch_to(t.b_client.clone());
    let copied = copy(ledger, t.env.client().as_ref(), t.b_client.as_ref()).await;
    // The cursor keeps acknowledging after the copy was taken.
    c.mark_delete(ps[3]).await.unwrap();
    c.delete(&[ps[5]]).await.unwrap();
    assert_eq!(
        c.cursor_ledger_id(),
        ledger,
        "still appending to the old ledger"
    );

    let outcome = c
        .promote_cursor_ledger(ledger, copied, "bk-b")
        .await
        .unwrap();
    let CursorPromotion::RolledOver { new_ledger_id } = outcome else {
        panic!("expected a rollover, got {outcome:?}");
    };
    assert_eq!(c.cursor_ledger_id(), new_ledger_id);
    assert!(t.b.contains_ledger(new_ledger_id));
    let (info, _) = c.metadata().await;
    assert_eq!(info.cluster_stamp().unwrap(), Some("bk-b"));
    assert!(
        !t.env.cluster.contains_ledger(ledger),
        "the old cursor ledger is deleted through its stamp (old cluster)"
    );
    drop((ml, c));

    // Crash and reopen: exactly the last acknowledged state.
    let ml = t.env.factory().open(NAME, config).await.unwrap();
    let c = ml.cursor("sub").unwrap();
    assert_eq!(c.mark_delete_position(), ps[3]);
    assert_eq!(
        c.individually_deleted_ranges(),
        vec![(Position::new(ps[5].ledger_id, ps[5].entry_id - 1), ps[5])]
    );
}

#[tokio::test]
async fn mismatch_and_unswitched_node_are_refused_without_writing() {
    let t = two();
    let config = small_config()
        .with_cursor_rollover(1000, std::time::Duration::from_secs(3600))
        .with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 3).await;
    c.mark_delete(ps[0]).await.unwrap();
    let ledger = c.cursor_ledger_id();
    let copied = copy(ledger, t.env.client().as_ref(), t.b_client.as_ref()).await;
    c.mark_delete(ps[1]).await.unwrap();
    let before = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();

    let err = c
        .promote_cursor_ledger(ledger + 7, copied, "bk-b")
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ManagedLedgerErrorKind::CursorRolledOver,
        "{err}"
    );

    // Ahead of the copy, but this node still creates ledgers on bk-a.
    let err = c
        .promote_cursor_ledger(ledger, copied, "bk-b")
        .await
        .unwrap_err();
    assert_eq!(
        err.kind(),
        ManagedLedgerErrorKind::NotOnActiveCluster,
        "{err}"
    );
    assert!(err.is_retryable());
    assert!(err.to_string().contains("bk-b"), "{err}");
    assert_eq!(
        t.env
            .inner_store
            .get(&cursor_path())
            .await
            .unwrap()
            .unwrap(),
        before
    );
    assert_eq!(c.cursor_ledger_id(), ledger);
}

#[tokio::test]
async fn owner_adopts_a_concurrent_stamp_only_promotion_but_not_other_changes() {
    use bkswitch_metadata_store::ExpectedVersion;
    use bkswitch_proto::codec::encode_managed_cursor_info;
    let t = two();
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 3).await;
    c.mark_delete(ps[0]).await.unwrap();
    let ledger = c.cursor_ledger_id();
    copy(ledger, t.env.client().as_ref(), t.b_client.as_ref()).await;

    // A coordinator flips only the stamp behind the owner's back.
    let r = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();
    let mut info = decode_managed_cursor_info(&r.value).unwrap();
    info.set_cluster_stamp("bk-b").unwrap();
    let bytes = encode_managed_cursor_info(&info, config.cursor_info_compression).unwrap();
    t.env
        .inner_store
        .put(
            &cursor_path(),
            &bytes,
            ExpectedVersion::Exactly(r.stat.version),
        )
        .await
        .unwrap();
    // The owner's next metadata write adopts it instead of fencing itself.
    t.hooks.supplier.switch_to(t.b_client.clone());
    c.roll_cursor_ledger().await.unwrap();
    assert!(t.b.contains_ledger(c.cursor_ledger_id()));
    assert!(
        !t.b.contains_ledger(ledger),
        "the superseded ledger is deleted where its (adopted) stamp says"
    );

    // Any other concurrent change still fences the owner.
    let r = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();
    let mut info = decode_managed_cursor_info(&r.value).unwrap();
    info.mark_delete_entry_id = Some(99);
    let bytes = encode_managed_cursor_info(&info, config.cursor_info_compression).unwrap();
    t.env
        .inner_store
        .put(
            &cursor_path(),
            &bytes,
            ExpectedVersion::Exactly(r.stat.version),
        )
        .await
        .unwrap();
    let err = c.roll_cursor_ledger().await.unwrap_err();
    assert_eq!(err.kind(), ManagedLedgerErrorKind::Fenced, "{err}");
}

#[tokio::test]
async fn a_closed_cursor_is_promoted_by_its_exact_copy_but_never_rolled_over() {
    let t = two();
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 3).await;
    c.mark_delete(ps[1]).await.unwrap();
    let ledger = c.cursor_ledger_id();
    // An idle subscription: its ledger handle closed, the cursor recorded.
    c.close().await;
    t.hooks.supplier.switch_to(t.b_client.clone());
    let copied = copy(ledger, t.env.client().as_ref(), t.b_client.as_ref()).await;

    // A stale copy would need a rollover, which writes a ledger: refused
    // (nothing written), not stalled on a retry that cannot succeed.
    let before = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();
    let e = c
        .promote_cursor_ledger(ledger, copied - 1, "bk-b")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::Closed, "{e}");
    let same = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(same, before);

    // The exact copy: one CAS flips the stamp.
    let outcome = c
        .promote_cursor_ledger(ledger, copied, "bk-b")
        .await
        .unwrap();
    assert!(
        matches!(outcome, CursorPromotion::Promoted { .. }),
        "{outcome:?}"
    );
    let after = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();
    let info = decode_managed_cursor_info(&after.value).unwrap();
    assert_eq!(info.cluster_stamp().unwrap(), Some("bk-b"));
    assert_eq!(info.cursors_ledger_id, ledger);
    drop((ml, c));

    // Reopened, the cursor recovers its position from the promoted copy.
    let ml = t.env.factory().open(NAME, config).await.unwrap();
    assert_eq!(ml.cursor("sub").unwrap().mark_delete_position(), ps[1]);
}

/// A cursor ledger on `bk-a` (three entries, two mark-deletes) copied to
/// `bk-b`, the node creating ledgers on `bk-b`, before PROMOTE, on `env`'s
/// store: (the test, the managed ledger, the cursor, the cursor ledger, the
/// copied last entry id, the positions).
async fn copied_to_b(
    env: Env,
) -> (
    Two,
    bkswitch_managed_ledger::ManagedLedger,
    bkswitch_managed_ledger::ManagedCursor,
    i64,
    i64,
    Vec<Position>,
) {
    let t = two_on(env);
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 3).await;
    c.mark_delete(ps[0]).await.unwrap();
    c.mark_delete(ps[1]).await.unwrap();
    let ledger = c.cursor_ledger_id();
    t.hooks.supplier.switch_to(t.b_client.clone());
    let copied = copy(ledger, t.env.client().as_ref(), t.b_client.as_ref()).await;
    (t, ml, c, ledger, copied, ps)
}

async fn stored_cursor(t: &Two) -> (bkswitch_proto::ml::ManagedCursorInfo, i64) {
    let r = t
        .env
        .inner_store
        .get(&cursor_path())
        .await
        .unwrap()
        .unwrap();
    (
        decode_managed_cursor_info(&r.value).unwrap(),
        r.stat.version,
    )
}

/// `bk-b` dies for good, the node creates ledgers on `bk-a` again, and the
/// owner is asked to flip the cursor back to `bk-a` (the rollback): it must,
/// within 5 s.
async fn roll_back_with_b_dead(
    t: &Two,
    c: &bkswitch_managed_ledger::ManagedCursor,
    ledger: i64,
    copied: i64,
) {
    t.b.set_unavailable(bkswitch_bk_client::UnavailableMode::FailFast);
    t.hooks.supplier.switch_to(t.env.client());
    let back = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        c.promote_cursor_ledger(ledger, copied, "bk-a"),
    )
    .await
    .expect("the rollback must not wait for the dead target")
    .unwrap();
    assert!(matches!(back, CursorPromotion::Promoted { .. }), "{back:?}");
}

/// The owner's stamp flip to `bk-b` is applied, its answer lost, and reading
/// it back fails; then the store answers again. Returns the flip's result.
async fn ambiguous_flip_to_b(
    t: &Two,
    c: &bkswitch_managed_ledger::ManagedCursor,
    ledger: i64,
    copied: i64,
) -> bkswitch_managed_ledger::Result<CursorPromotion> {
    use bkswitch_managed_ledger::testkit::InjectedFailure;
    t.env
        .store
        .fail_writes_matching(&cursor_path(), 1, InjectedFailure::AppliedThenUnavailable);
    t.env.store.fail_reads_matching(&cursor_path(), usize::MAX);
    let first = c.promote_cursor_ledger(ledger, copied, "bk-b").await;
    t.env.store.clear_faults();
    first
}

/// The rollback of a promoted cursor of an owned topic flips the stamp back
/// with the target cluster dead: the owner never reads the target's copy.
#[tokio::test]
async fn the_owner_rolls_a_promoted_cursor_back_with_the_target_dead() {
    let (t, ml, c, ledger, copied, ps) = copied_to_b(Env::new()).await;
    let promoted = c
        .promote_cursor_ledger(ledger, copied, "bk-b")
        .await
        .unwrap();
    assert!(matches!(promoted, CursorPromotion::Promoted { .. }));

    roll_back_with_b_dead(&t, &c, ledger, copied).await;
    let (info, _) = stored_cursor(&t).await;
    assert_eq!(info.cluster_stamp().unwrap(), Some("bk-a"));
    assert_eq!(info.cursors_ledger_id, ledger);

    // Later positions go to the source; a restart recovers them without the
    // target.
    c.mark_delete(ps[2]).await.unwrap();
    assert!(t.env.cluster.contains_ledger(c.cursor_ledger_id()));
    drop((ml, c));
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config).await.unwrap();
    assert_eq!(ml.cursor("sub").unwrap().mark_delete_position(), ps[2]);
}

/// The same when the topic moved to another owner after PROMOTE (it loaded the
/// cursor from the target's copy while the target was up).
#[tokio::test]
async fn a_new_owner_rolls_a_promoted_cursor_back_with_the_target_dead() {
    let (t, ml, c, ledger, copied, ps) = copied_to_b(Env::new()).await;
    c.promote_cursor_ledger(ledger, copied, "bk-b")
        .await
        .unwrap();
    drop((ml, c));
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml.cursor("sub").unwrap();
    assert_eq!(c.mark_delete_position(), ps[1]);

    roll_back_with_b_dead(&t, &c, ledger, copied).await;
    assert_eq!(
        stored_cursor(&t).await.0.cluster_stamp().unwrap(),
        Some("bk-a")
    );
    // A stale request (a copy shorter than what the cursor holds) is still
    // refused: only an exact copy is flipped.
    t.b.set_available();
    let e = c
        .promote_cursor_ledger(ledger, copied - 1, "bk-b")
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ManagedLedgerErrorKind::NotOnActiveCluster, "{e}");
}

/// An ambiguous stamp flip (applied, answer lost, read-back impossible): the
/// coordinator's next request converges, and the owner's memory matches the
/// store.
#[tokio::test]
async fn an_ambiguous_stamp_flip_converges_and_the_owner_matches_the_store() {
    ambiguous_flip_converges(Env::new()).await;
}

async fn ambiguous_flip_converges(env: Env) {
    let (t, _ml, c, ledger, copied, _ps) = copied_to_b(env).await;
    let first = ambiguous_flip_to_b(&t, &c, ledger, copied).await;
    if let Err(e) = &first {
        assert!(e.is_retryable(), "{e}");
    }
    assert_eq!(
        stored_cursor(&t).await.0.cluster_stamp().unwrap(),
        Some("bk-b"),
        "the flip was applied"
    );

    let again = c
        .promote_cursor_ledger(ledger, copied, "bk-b")
        .await
        .unwrap();
    assert!(
        matches!(
            again,
            CursorPromotion::AlreadyOnTarget | CursorPromotion::Promoted { .. }
        ),
        "{again:?}"
    );
    let (stored, version) = stored_cursor(&t).await;
    let (mine, my_version) = c.metadata().await;
    assert_eq!((mine, my_version), (stored, version));
    // The source ledger is sealed at the copy.
    let cfg = small_config();
    let old = t
        .env
        .client()
        .open_ledger_no_recovery(ledger, cfg.digest_type, &cfg.password)
        .await
        .unwrap();
    assert!(old.is_closed());
    assert_eq!(old.last_add_confirmed(), copied);
}

/// A mark-delete right after an ambiguous stamp flip, then a crash: the
/// cursor never goes back (the position is not written to the source ledger
/// whose stamp may already name the target).
#[tokio::test]
async fn a_mark_delete_after_an_ambiguous_stamp_flip_survives_a_crash() {
    mark_delete_after_ambiguous_flip(Env::new()).await;
}

async fn mark_delete_after_ambiguous_flip(env: Env) {
    let (t, ml, c, ledger, copied, ps) = copied_to_b(env).await;
    let _ = ambiguous_flip_to_b(&t, &c, ledger, copied).await;

    c.mark_delete(ps[2]).await.unwrap();
    drop((ml, c));
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config).await.unwrap();
    assert_eq!(
        ml.cursor("sub").unwrap().mark_delete_position(),
        ps[2],
        "the cursor moved back"
    );
}

/// Both ambiguous-flip scenarios on a real ZooKeeper server: ZooKeeper
/// applies the flip, the answer is reported lost.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_real_zookeeper_an_ambiguous_stamp_flip_converges_and_never_moves_the_cursor_back() {
    ambiguous_flip_converges(Env::on_zookeeper().await).await;
    mark_delete_after_ambiguous_flip(Env::on_zookeeper().await).await;
}
