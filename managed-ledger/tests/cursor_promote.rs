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
    let env = Env::new();
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
    let t = two();
    let config = small_config().with_hooks(t.hooks.storage_hooks());
    let ml = t.env.factory().open(NAME, config.clone()).await.unwrap();
    let c = ml
        .open_cursor_at("sub", InitialPosition::Earliest)
        .await
        .unwrap();
    let ps = append_n(&ml, 0, 3).await;
    c.mark_delete(ps[0]).await.unwrap();
    c.mark_delete(ps[1]).await.unwrap();
    let ledger = c.cursor_ledger_id();
    assert!(t.env.cluster.contains_ledger(ledger));

    t.hooks.supplier.switch_to(t.b_client.clone());
    let copied = copy(ledger, t.env.client().as_ref(), t.b_client.as_ref()).await;
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
