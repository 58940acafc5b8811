//! Opening ledgers: recovery opens (fencing, sealing at the last recoverable
//! entry), no-recovery opens (no fencing, LAC snapshots and refreshes), opens of
//! closed and missing ledgers, and the password check.

use futures::FutureExt;

use super::support::{
    append, append_sequentially, check_entries, cleanup, create, create_adv, open, payload,
    payload_bytes, put, unused_far_id, Check,
};
use crate::api::{BookKeeper, ReadHandle, WriteHandle};
use crate::error::BkErrorKind;
use crate::testkit::env::BookKeeperTestEnv;
use crate::types::{LedgerState, NO_ENTRY};
use bkswitch_conformance::RuleResult;

/// A recovery open by another client fences the writer (-101) and seals the ledger at
/// the writer's LAC; the writer's close then succeeds.
pub async fn recovery_open_fences_writer<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("recovery_open_fences_writer");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let id = w.id();
    append(&c, &w, 3).await?;
    let r = open(&c, &b, &cfg, id, true).await?;
    c.eq("recovered handle is_closed", r.is_closed(), true)?;
    c.eq("recovered LAC", r.last_add_confirmed(), 2)?;
    c.eq("recovered length", r.length(), payload_bytes(id, 0..=2))?;
    let m = r.metadata();
    c.eq("recovered state", m.state, LedgerState::Closed)?;
    c.eq("recovered lastEntryId", m.last_entry_id, 2)?;
    c.eq(
        "recovered metadata length",
        m.length,
        payload_bytes(id, 0..=2),
    )?;
    c.err(
        "writer's next add after the recovery open",
        w.add_entry(payload(id, 3)).await,
        BkErrorKind::LedgerFenced,
    )?;
    let entries = c.ok("read of the recovered ledger", r.read_entries(0, 2).await)?;
    check_entries(&c, "read of the recovered ledger", id, &entries, 0, 2)?;
    c.ok(
        "writer close after recovery at its own LAC",
        w.close().await,
    )?;
    let again = open(&c, &a, &cfg, id, false).await?;
    c.eq(
        "lastEntryId after the writer's close",
        again.metadata().last_entry_id,
        2,
    )?;
    cleanup(&a, [id]).await;
    Ok(())
}

/// Recovery closes at the last recoverable entry (below a gap); the writer's pending
/// and next adds fail with -101.
pub async fn recovery_closes_at_last_recoverable_entry<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("recovery_closes_at_last_recoverable_entry");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create_adv(&c, &a, &cfg).await?;
    let id = w.id();
    put(&c, &w, 0).await?;
    put(&c, &w, 1).await?;
    let mut pending = w.add_entry_at(3, payload(id, 3));
    c.that((&mut pending).now_or_never().is_none(), || {
        "entry 3 completed although entry 2 was never written".into()
    })?;
    let r = open(&c, &b, &cfg, id, true).await?;
    let m = r.metadata();
    c.eq("recovered lastEntryId", m.last_entry_id, 1)?;
    c.eq("recovered length", m.length, payload_bytes(id, 0..=1))?;
    c.eq("recovered LAC", r.last_add_confirmed(), 1)?;
    c.err(
        "writer's next add (entry 2) after recovery",
        w.add_entry_at(2, payload(id, 2)).await,
        BkErrorKind::LedgerFenced,
    )?;
    c.err(
        "writer's pending add (entry 3) after recovery",
        pending.await,
        BkErrorKind::LedgerFenced,
    )?;
    c.err(
        "read beyond the recovered end",
        r.read_entries(0, 2).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    let entries = c.ok("read 0..=1", r.read_entries(0, 1).await)?;
    check_entries(&c, "read 0..=1", id, &entries, 0, 1)?;
    cleanup(&a, [id]).await;
    Ok(())
}

/// Recovering an empty ledger closes it at -1 with length 0 and fences the writer.
pub async fn recovery_of_empty_ledger<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("recovery_of_empty_ledger");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let r = open(&c, &b, &cfg, w.id(), true).await?;
    c.eq("recovered is_closed", r.is_closed(), true)?;
    c.eq("recovered LAC", r.last_add_confirmed(), NO_ENTRY)?;
    c.eq("recovered length", r.length(), 0)?;
    c.eq(
        "recovered lastEntryId",
        r.metadata().last_entry_id,
        NO_ENTRY,
    )?;
    c.err(
        "read of the recovered empty ledger",
        r.read_entries(0, 0).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    c.err(
        "writer's add after recovery",
        w.add_entry(payload(w.id(), 0)).await,
        BkErrorKind::LedgerFenced,
    )?;
    cleanup(&a, [w.id()]).await;
    Ok(())
}

/// A no-recovery open does not fence: the writer continues, the reader has a LAC
/// snapshot (a real cluster may lag the writer by one entry: the entries are
/// written one at a time, see `append_sequentially`) and sees the ledger open.
pub async fn no_recovery_open_does_not_fence<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("no_recovery_open_does_not_fence");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let id = w.id();
    append_sequentially(&c, &w, 3).await?;
    let r = open(&c, &b, &cfg, id, false).await?;
    let snapshot = r.last_add_confirmed();
    c.that((1..=2).contains(&snapshot), || {
        format!("no-recovery LAC snapshot {snapshot} with the writer at 2")
    })?;
    c.eq("no-recovery is_closed", r.is_closed(), false)?;
    c.eq(
        "no-recovery metadata state",
        r.metadata().state,
        LedgerState::Open,
    )?;
    append(&c, &w, 2).await?;
    c.eq("writer LAC after more adds", w.last_add_confirmed(), 4)?;
    c.eq(
        "cached LAC of the no-recovery handle",
        r.last_add_confirmed(),
        snapshot,
    )?;
    c.err(
        "read beyond the snapshot",
        r.read_entries(0, 4).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    let entries = c.ok("read up to the snapshot", r.read_entries(0, snapshot).await)?;
    check_entries(&c, "read up to the snapshot", id, &entries, 0, snapshot)?;
    c.ok("reader close", r.close().await)?;
    append(&c, &w, 1).await?;
    c.ok("writer close", w.close().await)?;
    c.eq(
        "lastEntryId sealed by the writer",
        w.metadata().last_entry_id,
        5,
    )?;
    cleanup(&a, [id]).await;
    Ok(())
}

/// `read_last_add_confirmed` refreshes a no-recovery handle: never backwards, at most
/// one entry behind a writer that adds one entry at a time, and reads up to it
/// succeed.
pub async fn no_recovery_lac_refresh<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("no_recovery_lac_refresh");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let id = w.id();
    let r = open(&c, &b, &cfg, id, false).await?;
    c.eq(
        "LAC of a no-recovery handle of an empty ledger",
        r.last_add_confirmed(),
        NO_ENTRY,
    )?;
    append_sequentially(&c, &w, 5).await?;
    let refreshed = c.ok("read_last_add_confirmed", r.read_last_add_confirmed().await)?;
    c.that((3..=4).contains(&refreshed), || {
        format!("refreshed LAC {refreshed} with the writer at 4")
    })?;
    c.eq(
        "cached LAC after refresh",
        r.last_add_confirmed(),
        refreshed,
    )?;
    let entries = c.ok(
        "read up to the refreshed LAC",
        r.read_entries(0, refreshed).await,
    )?;
    check_entries(
        &c,
        "read up to the refreshed LAC",
        id,
        &entries,
        0,
        refreshed,
    )?;
    append_sequentially(&c, &w, 3).await?;
    let again = c.ok(
        "second read_last_add_confirmed",
        r.read_last_add_confirmed().await,
    )?;
    c.that((refreshed..=7).contains(&again) && again >= 6, || {
        format!("second refresh gave {again} (previous {refreshed}, writer at 7)")
    })?;
    c.eq(
        "the writer was not fenced",
        w.metadata().state,
        LedgerState::Open,
    )?;
    append(&c, &w, 1).await?;
    cleanup(&a, [id]).await;
    Ok(())
}

/// Opening a CLOSED ledger (either mode) gives LAC = lastEntryId and the metadata
/// length, and changes nothing.
pub async fn open_closed_ledger_reports_sealed_state<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("open_closed_ledger_reports_sealed_state");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let id = w.id();
    append(&c, &w, 4).await?;
    c.ok("close", w.close().await)?;
    let sealed = w.metadata();
    for recovery in [true, false, true] {
        let r = open(&c, &b, &cfg, id, recovery).await?;
        let what = |s: &str| format!("{s} (recovery open: {recovery})");
        c.eq(&what("LAC"), r.last_add_confirmed(), sealed.last_entry_id)?;
        c.eq(&what("length"), r.length(), sealed.length)?;
        c.eq(&what("is_closed"), r.is_closed(), true)?;
        c.eq(&what("metadata"), r.metadata(), sealed.clone())?;
        c.eq(
            &what("refreshed LAC"),
            c.ok("read_last_add_confirmed", r.read_last_add_confirmed().await)?,
            3,
        )?;
    }
    cleanup(&a, [id]).await;
    Ok(())
}

/// Opening a missing ledger (never created, deleted, or negative id) → -25, both modes.
pub async fn open_missing_ledger_is_no_such_ledger_on_metadata_server<
    E: BookKeeperTestEnv + ?Sized,
>(
    env: &E,
) -> RuleResult {
    let c = Check::new("open_missing_ledger_is_no_such_ledger_on_metadata_server");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let never = unused_far_id(&c, &bk, &cfg).await?;
    let w = create(&c, &bk, &cfg).await?;
    append(&c, &w, 1).await?;
    c.ok("close", w.close().await)?;
    c.ok("delete", bk.delete_ledger(w.id()).await)?;
    for (what, id) in [
        ("never created", never),
        ("deleted", w.id()),
        ("negative id", -5),
    ] {
        c.err(
            &format!("recovery open of a {what} ledger"),
            bk.open_ledger(id, cfg.digest_type, &cfg.password).await,
            BkErrorKind::NoSuchLedgerOnMetadataServer,
        )?;
        c.err(
            &format!("no-recovery open of a {what} ledger"),
            bk.open_ledger_no_recovery(id, cfg.digest_type, &cfg.password)
                .await,
            BkErrorKind::NoSuchLedgerOnMetadataServer,
        )?;
    }
    Ok(())
}

/// Opening with the wrong password → -102 in both modes, without fencing.
pub async fn password_mismatch_is_unauthorized<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("password_mismatch_is_unauthorized");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config().with_password(b"right".to_vec());
    let w = create(&c, &a, &cfg).await?;
    append(&c, &w, 1).await?;
    for wrong in [&b"wrong"[..], &b""[..], &b"righ"[..]] {
        c.err(
            "recovery open with a wrong password",
            b.open_ledger(w.id(), cfg.digest_type, wrong).await,
            BkErrorKind::UnauthorizedAccess,
        )?;
        c.err(
            "no-recovery open with a wrong password",
            b.open_ledger_no_recovery(w.id(), cfg.digest_type, wrong)
                .await,
            BkErrorKind::UnauthorizedAccess,
        )?;
    }
    append(&c, &w, 1).await?;
    c.eq(
        "writer still open after refused opens",
        w.metadata().state,
        LedgerState::Open,
    )?;
    let r = open(&c, &b, &cfg, w.id(), true).await?;
    c.eq("LAC with the right password", r.last_add_confirmed(), 1)?;
    cleanup(&a, [w.id()]).await;
    Ok(())
}
