//! What the rules share: the [`Check`] that names the rule in every failure,
//! deterministic payloads, and helpers that create, write, open and clean up
//! ledgers through any [`BookKeeper`].

use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;

use crate::api::{BookKeeper, ReadHandle, WriteHandle};
use crate::error::{BkError, BkErrorKind, Result};
use crate::testkit::SUITE;
use crate::types::{EntryId, LedgerConfig, LedgerEntry, LedgerId};
use bkswitch_conformance::{ConformanceFailure, RuleResult};

/// Ids used with `create_ledger_adv` are `FAR_BASE + <a freshly generated id>`, far
/// from anything an id generator hands out.
pub const FAR_BASE: LedgerId = 1 << 40;

/// Checks of one rule; every failure carries the rule name.
pub(super) struct Check {
    rule: &'static str,
}

impl Check {
    pub(super) fn new(rule: &'static str) -> Check {
        Check { rule }
    }

    pub(super) fn fail(&self, detail: impl Into<String>) -> ConformanceFailure {
        ConformanceFailure::new(SUITE, self.rule, detail)
    }

    pub(super) fn ok<T>(
        &self,
        what: &str,
        r: Result<T>,
    ) -> std::result::Result<T, ConformanceFailure> {
        r.map_err(|e| self.fail(format!("{what}: expected success, got error: {e}")))
    }

    pub(super) fn err<T: Debug>(
        &self,
        what: &str,
        r: Result<T>,
        kind: BkErrorKind,
    ) -> std::result::Result<BkError, ConformanceFailure> {
        match r {
            Ok(v) => Err(self.fail(format!(
                "{what}: expected {kind:?} (code {}), got success: {v:?}",
                kind.code()
            ))),
            Err(e) if e.kind() == kind && e.code() == kind.code() => Ok(e),
            Err(e) => Err(self.fail(format!(
                "{what}: expected {kind:?} (code {}), got {:?} (code {}): {e}",
                kind.code(),
                e.kind(),
                e.code()
            ))),
        }
    }

    pub(super) fn that(&self, cond: bool, detail: impl FnOnce() -> String) -> RuleResult {
        if cond {
            Ok(())
        } else {
            Err(self.fail(detail()))
        }
    }

    pub(super) fn eq<T: PartialEq + Debug>(
        &self,
        what: &str,
        actual: T,
        expected: T,
    ) -> RuleResult {
        self.that(actual == expected, || {
            format!("{what}: expected {expected:?}, got {actual:?}")
        })
    }
}

/// Deterministic payload of entry `entry` in ledger `ledger`, sizes varying 1..=64.
pub(super) fn payload(ledger: LedgerId, entry: EntryId) -> Bytes {
    let len = 1 + (entry.unsigned_abs() as usize * 7 + ledger.unsigned_abs() as usize) % 64;
    let seed = (ledger as u8).wrapping_mul(31).wrapping_add(entry as u8);
    Bytes::from(
        (0..len)
            .map(|i| seed.wrapping_add(i as u8))
            .collect::<Vec<u8>>(),
    )
}

pub(super) fn payload_bytes(ledger: LedgerId, entries: std::ops::RangeInclusive<EntryId>) -> u64 {
    entries.map(|e| payload(ledger, e).len() as u64).sum()
}

pub(super) async fn create(
    c: &Check,
    bk: &impl BookKeeper,
    cfg: &LedgerConfig,
) -> std::result::Result<Arc<dyn WriteHandle>, ConformanceFailure> {
    c.ok("create_ledger", bk.create_ledger(cfg).await)
}

/// Append `count` payloads with `add_entry` and wait for all.
pub(super) async fn append(c: &Check, w: &Arc<dyn WriteHandle>, count: i64) -> RuleResult {
    let start = w.last_add_confirmed() + 1;
    let futures: Vec<_> = (start..start + count)
        .map(|e| w.add_entry(payload(w.id(), e)))
        .collect();
    for (f, expected) in futures.into_iter().zip(start..) {
        let got = c.ok(&format!("add_entry (entry {expected})"), f.await)?;
        c.eq("entry id returned by add_entry", got, expected)?;
    }
    Ok(())
}

/// Append `count` payloads with `add_entry`, each waited for before the next.
///
/// Readers learn the last add confirmed from the header of the last stored
/// entry, which carries the writer's LAC *when that entry was sent*. With
/// pipelined adds every entry in flight carries the same old LAC, so a reader
/// of a real cluster may lag by the whole pipeline; rules that check how far a
/// no-recovery reader lags write one entry at a time, which bounds the lag to
/// one entry on BookKeeper and on the in-memory cluster alike.
pub(super) async fn append_sequentially(
    c: &Check,
    w: &Arc<dyn WriteHandle>,
    count: i64,
) -> RuleResult {
    let start = w.last_add_confirmed() + 1;
    for expected in start..start + count {
        let got = c.ok(
            &format!("add_entry (entry {expected})"),
            w.add_entry(payload(w.id(), expected)).await,
        )?;
        c.eq("entry id returned by add_entry", got, expected)?;
    }
    Ok(())
}

/// Write `entry` with `add_entry_at` and wait for it.
pub(super) async fn put(c: &Check, w: &Arc<dyn WriteHandle>, entry: EntryId) -> RuleResult {
    let got = c.ok(
        &format!("add_entry_at({entry})"),
        w.add_entry_at(entry, payload(w.id(), entry)).await,
    )?;
    c.eq("entry id returned by add_entry_at", got, entry)
}

/// Check that `entries` are exactly `first..=last` of ledger `ledger`.
pub(super) fn check_entries(
    c: &Check,
    what: &str,
    ledger: LedgerId,
    entries: &[LedgerEntry],
    first: EntryId,
    last: EntryId,
) -> RuleResult {
    let ids: Vec<_> = entries.iter().map(|e| e.entry_id).collect();
    c.eq(&format!("{what}: entry ids"), ids, (first..=last).collect())?;
    for e in entries {
        c.that(e.data == payload(ledger, e.entry_id), || {
            format!(
                "{what}: payload of entry {} differs from what was written",
                e.entry_id
            )
        })?;
    }
    Ok(())
}

/// A fresh id from the id generator (the throwaway ledger is deleted).
async fn generated_id(
    c: &Check,
    bk: &impl BookKeeper,
    cfg: &LedgerConfig,
) -> std::result::Result<LedgerId, ConformanceFailure> {
    let w = create(c, bk, cfg).await?;
    let id = w.id();
    c.ok("close of a throwaway ledger", w.close().await)?;
    let _ = bk.delete_ledger(id).await;
    Ok(id)
}

/// An id nobody uses: `FAR_BASE +` a freshly generated id, checked to be missing.
pub(super) async fn unused_far_id(
    c: &Check,
    bk: &impl BookKeeper,
    cfg: &LedgerConfig,
) -> std::result::Result<LedgerId, ConformanceFailure> {
    for _ in 0..8 {
        let id = FAR_BASE + generated_id(c, bk, cfg).await?;
        match bk
            .open_ledger_no_recovery(id, cfg.digest_type, &cfg.password)
            .await
        {
            Err(e) if e.kind() == BkErrorKind::NoSuchLedgerOnMetadataServer => return Ok(id),
            Err(e) => {
                return Err(c.fail(format!(
                    "probing unused ledger id {id}: unexpected error: {e}"
                )))
            }
            Ok(_) => continue,
        }
    }
    Err(c.fail("could not find an unused ledger id above 2^40 in 8 attempts"))
}

/// A new Adv ledger at a far, unused id.
pub(super) async fn create_adv(
    c: &Check,
    bk: &impl BookKeeper,
    cfg: &LedgerConfig,
) -> std::result::Result<Arc<dyn WriteHandle>, ConformanceFailure> {
    for _ in 0..8 {
        let id = unused_far_id(c, bk, cfg).await?;
        match bk.create_ledger_adv(id, cfg).await {
            Ok(w) => {
                c.eq("id of the handle from create_ledger_adv", w.id(), id)?;
                return Ok(w);
            }
            Err(e) if e.kind() == BkErrorKind::LedgerExists => continue,
            Err(e) => return Err(c.fail(format!("create_ledger_adv({id}): unexpected error: {e}"))),
        }
    }
    Err(c.fail("could not create an Adv ledger at an unused id in 8 attempts"))
}

pub(super) async fn open(
    c: &Check,
    bk: &impl BookKeeper,
    cfg: &LedgerConfig,
    id: LedgerId,
    recovery: bool,
) -> std::result::Result<Arc<dyn ReadHandle>, ConformanceFailure> {
    let r = if recovery {
        bk.open_ledger(id, cfg.digest_type, &cfg.password).await
    } else {
        bk.open_ledger_no_recovery(id, cfg.digest_type, &cfg.password)
            .await
    };
    c.ok(&format!("open of ledger {id} (recovery: {recovery})"), r)
}

/// Best-effort removal of what a rule created.
pub(super) async fn cleanup(bk: &impl BookKeeper, ids: impl IntoIterator<Item = LedgerId>) {
    for id in ids {
        let _ = bk.delete_ledger(id).await;
    }
}
