//! Closing a write handle: sealing at the LAC, pending adds, repeated closes.

use futures::FutureExt;

use super::support::{
    append, check_entries, cleanup, create, create_adv, open, payload, payload_bytes, put, Check,
};
use crate::api::{ReadHandle, WriteHandle};
use crate::error::BkErrorKind;
use crate::testkit::env::BookKeeperTestEnv;
use crate::types::{LedgerState, NO_ENTRY};
use bkswitch_conformance::RuleResult;

/// close seals at the LAC; every opener sees CLOSED, lastEntryId = LAC and the length.
pub async fn close_seals_at_lac<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("close_seals_at_lac");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    append(&c, &w, 5).await?;
    c.ok("close", w.close().await)?;
    let expected_len = payload_bytes(w.id(), 0..=4);
    let m = w.metadata();
    c.eq("writer metadata state", m.state, LedgerState::Closed)?;
    c.eq("writer metadata lastEntryId", m.last_entry_id, 4)?;
    c.eq("writer metadata length", m.length, expected_len)?;
    c.eq("writer is_closed", w.is_closed(), true)?;
    c.eq("writer LAC", w.last_add_confirmed(), 4)?;
    for recovery in [false, true] {
        let r = open(&c, &b, &cfg, w.id(), recovery).await?;
        let what = |s: &str| format!("{s} (recovery open: {recovery})");
        c.eq(&what("reader LAC"), r.last_add_confirmed(), 4)?;
        c.eq(&what("reader length"), r.length(), expected_len)?;
        c.eq(&what("reader is_closed"), r.is_closed(), true)?;
        c.eq(&what("reader metadata"), r.metadata(), m.clone())?;
        let entries = c.ok(&what("read 0..=4"), r.read_entries(0, 4).await)?;
        check_entries(&c, &what("read 0..=4"), w.id(), &entries, 0, 4)?;
    }
    let empty = create(&c, &a, &cfg).await?;
    c.ok("close of an empty ledger", empty.close().await)?;
    let m = empty.metadata();
    c.eq("empty ledger lastEntryId", m.last_entry_id, NO_ENTRY)?;
    c.eq("empty ledger length", m.length, 0)?;
    c.eq("empty ledger state", m.state, LedgerState::Closed)?;
    cleanup(&a, [w.id(), empty.id()]).await;
    Ok(())
}

/// close fails pending adds with -11 and seals below them; a second close succeeds.
pub async fn close_fails_pending_adds_and_second_close_succeeds<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("close_fails_pending_adds_and_second_close_succeeds");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let w = create_adv(&c, &bk, &cfg).await?;
    let id = w.id();
    put(&c, &w, 0).await?;
    let mut pending = w.add_entry_at(2, payload(id, 2));
    c.that((&mut pending).now_or_never().is_none(), || {
        "entry 2 completed although entry 1 was never written".into()
    })?;
    c.ok("close with a pending add", w.close().await)?;
    c.err(
        "pending add after close",
        pending.await,
        BkErrorKind::LedgerClosed,
    )?;
    let m = w.metadata();
    c.eq("lastEntryId", m.last_entry_id, 0)?;
    c.eq("length", m.length, payload_bytes(id, 0..=0))?;
    c.ok("second close", w.close().await)?;
    c.ok("third close", w.close().await)?;
    c.eq("metadata after repeated closes", w.metadata(), m)?;
    cleanup(&bk, [id]).await;
    Ok(())
}
