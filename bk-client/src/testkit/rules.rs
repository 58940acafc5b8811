//! One public async function per rule of BookKeeper's ledger API semantics.
//!
//! Each takes the [`BookKeeperTestEnv`] and returns a [`RuleResult`] whose failure
//! names the rule and the check. They are independent and may run concurrently on
//! one cluster.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Debug;
use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use super::{BookKeeperTestEnv, ConformanceFailure, RuleResult};
use crate::api::{BookKeeper, ReadHandle, WriteHandle};
use crate::error::{BkError, BkErrorKind, Result};
use crate::types::{DeleteMissing, EntryId, LedgerConfig, LedgerId, LedgerState, NO_ENTRY};

/// Ids used with `create_ledger_adv` are `FAR_BASE + <a freshly generated id>`, far
/// from anything an id generator hands out.
pub const FAR_BASE: LedgerId = 1 << 40;

/// Checks of one rule; every failure carries the rule name.
struct Check {
    rule: &'static str,
}

impl Check {
    fn new(rule: &'static str) -> Check {
        Check { rule }
    }

    fn fail(&self, detail: impl Into<String>) -> ConformanceFailure {
        ConformanceFailure {
            rule: self.rule,
            detail: detail.into(),
        }
    }

    fn ok<T>(&self, what: &str, r: Result<T>) -> std::result::Result<T, ConformanceFailure> {
        r.map_err(|e| self.fail(format!("{what}: expected success, got error: {e}")))
    }

    fn err<T: Debug>(
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

    fn that(&self, cond: bool, detail: impl FnOnce() -> String) -> RuleResult {
        if cond {
            Ok(())
        } else {
            Err(self.fail(detail()))
        }
    }

    fn eq<T: PartialEq + Debug>(&self, what: &str, actual: T, expected: T) -> RuleResult {
        self.that(actual == expected, || {
            format!("{what}: expected {expected:?}, got {actual:?}")
        })
    }
}

/// Deterministic payload of entry `entry` in ledger `ledger`, sizes varying 1..=64.
fn payload(ledger: LedgerId, entry: EntryId) -> Bytes {
    let len = 1 + (entry.unsigned_abs() as usize * 7 + ledger.unsigned_abs() as usize) % 64;
    let seed = (ledger as u8).wrapping_mul(31).wrapping_add(entry as u8);
    Bytes::from(
        (0..len)
            .map(|i| seed.wrapping_add(i as u8))
            .collect::<Vec<u8>>(),
    )
}

fn payload_bytes(ledger: LedgerId, entries: std::ops::RangeInclusive<EntryId>) -> u64 {
    entries.map(|e| payload(ledger, e).len() as u64).sum()
}

async fn create(
    c: &Check,
    bk: &impl BookKeeper,
    cfg: &LedgerConfig,
) -> std::result::Result<Arc<dyn WriteHandle>, ConformanceFailure> {
    c.ok("create_ledger", bk.create_ledger(cfg).await)
}

/// Append `count` payloads with `add_entry` and wait for all.
async fn append(c: &Check, w: &Arc<dyn WriteHandle>, count: i64) -> RuleResult {
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
async fn append_sequentially(c: &Check, w: &Arc<dyn WriteHandle>, count: i64) -> RuleResult {
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
async fn put(c: &Check, w: &Arc<dyn WriteHandle>, entry: EntryId) -> RuleResult {
    let got = c.ok(
        &format!("add_entry_at({entry})"),
        w.add_entry_at(entry, payload(w.id(), entry)).await,
    )?;
    c.eq("entry id returned by add_entry_at", got, entry)
}

/// Check that `entries` are exactly `first..=last` of ledger `ledger`.
fn check_entries(
    c: &Check,
    what: &str,
    ledger: LedgerId,
    entries: &[crate::types::LedgerEntry],
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
async fn unused_far_id(
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
async fn create_adv(
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

async fn open(
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
async fn cleanup(bk: &impl BookKeeper, ids: impl IntoIterator<Item = LedgerId>) {
    for id in ids {
        let _ = bk.delete_ledger(id).await;
    }
}

/// Invalid quorums fail with -14 for both create calls and nothing is created.
pub async fn create_rejects_invalid_quorums<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("create_rejects_invalid_quorums");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let (e, w, a) = (
        cfg.ensemble_size,
        cfg.write_quorum_size,
        cfg.ack_quorum_size,
    );
    let invalid = [
        (
            "ack quorum > write quorum",
            cfg.clone().with_quorums(e, w, w + 1),
        ),
        (
            "write quorum > ensemble",
            cfg.clone().with_quorums(e, e + 1, a.min(e + 1)),
        ),
        ("ack quorum 0", cfg.clone().with_quorums(e, w, 0)),
    ];
    let far = unused_far_id(&c, &bk, &cfg).await?;
    for (why, bad) in &invalid {
        c.err(
            &format!("create_ledger with {why}"),
            bk.create_ledger(bad).await,
            BkErrorKind::InvalidArgument,
        )?;
        c.err(
            &format!("create_ledger_adv with {why}"),
            bk.create_ledger_adv(far, bad).await,
            BkErrorKind::InvalidArgument,
        )?;
    }
    c.err(
        "no-recovery open of the id create_ledger_adv refused",
        bk.open_ledger_no_recovery(far, cfg.digest_type, &cfg.password)
            .await,
        BkErrorKind::NoSuchLedgerOnMetadataServer,
    )?;
    let ok = create(&c, &bk, &cfg).await?;
    c.that(ok.id() >= 0, || {
        format!("valid create after invalid ones gave id {}", ok.id())
    })?;
    cleanup(&bk, [ok.id()]).await;
    Ok(())
}

/// `create_ledger` hands out distinct, increasing, non-negative ids, also across clients.
pub async fn create_allocates_distinct_increasing_ids<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("create_allocates_distinct_increasing_ids");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let mut ids = Vec::new();
    for i in 0..6 {
        let w = if i % 2 == 0 {
            create(&c, &a, &cfg).await?
        } else {
            create(&c, &b, &cfg).await?
        };
        ids.push(w.id());
    }
    c.that(ids.iter().all(|&id| id >= 0), || {
        format!("negative generated id in {ids:?}")
    })?;
    c.that(ids.windows(2).all(|p| p[0] < p[1]), || {
        format!("ids of sequential creates are not strictly increasing: {ids:?}")
    })?;
    cleanup(&a, ids).await;
    Ok(())
}

/// A new handle (normal or Adv) is OPEN, LAC -1, length 0, and its metadata holds
/// the configuration; another client sees the same.
pub async fn new_ledger_is_open_and_empty<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("new_ledger_is_open_and_empty");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env
        .ledger_config()
        .with_custom_metadata("bkswitch.conformance", b"new-ledger".to_vec());
    let normal = create(&c, &a, &cfg).await?;
    let adv = create_adv(&c, &a, &cfg).await?;
    for (kind, w) in [("create_ledger", &normal), ("create_ledger_adv", &adv)] {
        let what = |s: &str| format!("{kind}: {s}");
        c.eq(
            &what("last_add_confirmed"),
            w.last_add_confirmed(),
            NO_ENTRY,
        )?;
        c.eq(&what("length"), w.length(), 0)?;
        c.eq(&what("is_closed"), w.is_closed(), false)?;
        let m = w.metadata();
        c.eq(&what("metadata ledger id"), m.ledger_id, w.id())?;
        c.eq(&what("metadata state"), m.state, LedgerState::Open)?;
        c.eq(&what("metadata last_entry_id"), m.last_entry_id, NO_ENTRY)?;
        c.eq(&what("metadata length"), m.length, 0)?;
        c.eq(
            &what("metadata ensemble size"),
            m.ensemble_size,
            cfg.ensemble_size,
        )?;
        c.eq(
            &what("metadata ensemble members"),
            m.first_ensemble().len(),
            cfg.ensemble_size as usize,
        )?;
        c.eq(
            &what("metadata write quorum"),
            m.write_quorum_size,
            cfg.write_quorum_size,
        )?;
        c.eq(
            &what("metadata ack quorum"),
            m.ack_quorum_size,
            cfg.ack_quorum_size,
        )?;
        c.eq(
            &what("metadata digest type"),
            m.digest_type,
            cfg.digest_type,
        )?;
        c.eq(
            &what("metadata custom metadata"),
            &m.custom_metadata,
            &cfg.custom_metadata,
        )?;
        let r = open(&c, &b, &cfg, w.id(), false).await?;
        c.eq(
            &what("other client's LAC"),
            r.last_add_confirmed(),
            NO_ENTRY,
        )?;
        c.eq(&what("other client's is_closed"), r.is_closed(), false)?;
        c.eq(
            &what("other client's metadata state"),
            r.metadata().state,
            LedgerState::Open,
        )?;
    }
    cleanup(&a, [normal.id(), adv.id()]).await;
    Ok(())
}

/// When the id generator reaches ids created by `create_ledger_adv`, `create_ledger`
/// skips them and never touches the existing ledgers.
pub async fn create_skips_ids_taken_by_adv<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("create_skips_ids_taken_by_adv");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let marked = cfg
        .clone()
        .with_custom_metadata("bkswitch.conformance", b"adv".to_vec());
    let first = create(&c, &bk, &cfg).await?;
    let base = first.id();
    let mut taken = vec![base];
    let mut adv_ids = Vec::new();
    for id in base + 1..=base + 4 {
        match bk.create_ledger_adv(id, &marked).await {
            Ok(w) => {
                put(&c, &w, 0).await?;
                adv_ids.push(id);
                taken.push(id);
            }
            // Another writer of the id generator took it first.
            Err(e) if e.kind() == BkErrorKind::LedgerExists => taken.push(id),
            Err(e) => return Err(c.fail(format!("create_ledger_adv({id}): unexpected error: {e}"))),
        }
    }
    let next = create(&c, &bk, &cfg).await?;
    c.that(next.id() > base && !taken.contains(&next.id()), || {
        format!(
            "create_ledger returned {} although ids {taken:?} were taken",
            next.id()
        )
    })?;
    c.eq(
        "LAC of the ledger create_ledger returned",
        next.last_add_confirmed(),
        NO_ENTRY,
    )?;
    c.that(
        !next
            .metadata()
            .custom_metadata
            .contains_key("bkswitch.conformance"),
        || "create_ledger returned a ledger carrying the Adv ledger's custom metadata".into(),
    )?;
    for &id in &adv_ids {
        let r = open(&c, &bk, &cfg, id, false).await?;
        c.eq(
            &format!("custom metadata of Adv ledger {id}"),
            &r.metadata().custom_metadata,
            &marked.custom_metadata,
        )?;
        c.that(r.last_add_confirmed() <= 0, || {
            format!("Adv ledger {id} changed")
        })?;
    }
    cleanup(&bk, adv_ids.into_iter().chain([base, next.id()])).await;
    Ok(())
}

/// `create_ledger_adv` at a far id does not move the id generator there.
pub async fn adv_does_not_touch_id_generator<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("adv_does_not_touch_id_generator");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let before = create(&c, &bk, &cfg).await?;
    let adv = create_adv(&c, &bk, &cfg).await?;
    let after = create(&c, &bk, &cfg).await?;
    c.that(before.id() < after.id() && after.id() < adv.id(), || {
        format!(
            "create_ledger gave {} then {} around create_ledger_adv({}): the generator must keep its own sequence",
            before.id(),
            after.id(),
            adv.id()
        )
    })?;
    cleanup(&bk, [before.id(), adv.id(), after.id()]).await;
    Ok(())
}

/// An existing id (from either create call) → -20; the existing ledger is untouched.
pub async fn adv_existing_id_is_ledger_exists<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("adv_existing_id_is_ledger_exists");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let adv = create_adv(&c, &a, &cfg).await?;
    put(&c, &adv, 0).await?;
    let other = cfg
        .clone()
        .with_custom_metadata("bkswitch.conformance", b"second".to_vec());
    for client in [&a, &b] {
        c.err(
            "create_ledger_adv of an existing Adv ledger id",
            client.create_ledger_adv(adv.id(), &other).await,
            BkErrorKind::LedgerExists,
        )?;
    }
    // Final: the same call fails the same way again.
    c.err(
        "repeated create_ledger_adv of an existing id",
        b.create_ledger_adv(adv.id(), &other).await,
        BkErrorKind::LedgerExists,
    )?;
    c.eq(
        "state of the existing ledger",
        adv.metadata().state,
        LedgerState::Open,
    )?;
    c.eq(
        "custom metadata of the existing ledger",
        &adv.metadata().custom_metadata,
        &cfg.custom_metadata,
    )?;
    put(&c, &adv, 1).await?;
    c.eq(
        "LAC of the existing ledger's writer",
        adv.last_add_confirmed(),
        1,
    )?;

    let normal = create(&c, &a, &cfg).await?;
    c.err(
        "create_ledger_adv of an id from create_ledger",
        b.create_ledger_adv(normal.id(), &cfg).await,
        BkErrorKind::LedgerExists,
    )?;
    append(&c, &normal, 1).await?;
    cleanup(&a, [adv.id(), normal.id()]).await;
    Ok(())
}

/// `create_ledger_adv` with a negative id → -14.
pub async fn adv_negative_id_is_invalid<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("adv_negative_id_is_invalid");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    for id in [-1, -2, LedgerId::MIN] {
        c.err(
            &format!("create_ledger_adv({id})"),
            bk.create_ledger_adv(id, &cfg).await,
            BkErrorKind::InvalidArgument,
        )?;
    }
    Ok(())
}

/// Custom metadata (including binary and empty values, or none) is stored as given.
pub async fn adv_stores_custom_metadata_as_given<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("adv_stores_custom_metadata_as_given");
    let (a, b) = (env.client().await, env.client().await);
    let base = env
        .ledger_config()
        .with_custom_metadata_map(BTreeMap::new());
    let mut map = BTreeMap::new();
    map.insert("binary".to_string(), vec![0u8, 1, 2, 255]);
    map.insert("empty".to_string(), Vec::new());
    map.insert(
        "_pulsar.bookieClusterName".to_string(),
        b"cluster-a".to_vec(),
    );
    let with = base.clone().with_custom_metadata_map(map.clone());
    let mut ids = Vec::new();
    for (what, cfg) in [
        ("given custom metadata", &with),
        ("no custom metadata", &base),
    ] {
        let w = create_adv(&c, &a, cfg).await?;
        ids.push(w.id());
        c.eq(
            &format!("writer metadata with {what}"),
            &w.metadata().custom_metadata,
            &cfg.custom_metadata,
        )?;
        put(&c, &w, 0).await?;
        c.ok("close", w.close().await)?;
        let r = open(&c, &b, cfg, w.id(), false).await?;
        c.eq(
            &format!("metadata seen by another client with {what}"),
            &r.metadata().custom_metadata,
            &cfg.custom_metadata,
        )?;
    }
    let normal = create(&c, &a, &with).await?;
    ids.push(normal.id());
    let r = open(&c, &b, &with, normal.id(), false).await?;
    c.eq(
        "custom metadata of a create_ledger ledger",
        &r.metadata().custom_metadata,
        &map,
    )?;
    cleanup(&a, ids).await;
    Ok(())
}

/// Adv adds: `entry_id <= LAC` or pending → -22, checked before "closed"; on a closed
/// handle, `entry_id > LAC` → -11.
pub async fn adv_duplicate_entry_checked_before_closed<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("adv_duplicate_entry_checked_before_closed");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let w = create_adv(&c, &bk, &cfg).await?;
    let id = w.id();
    put(&c, &w, 0).await?;
    put(&c, &w, 1).await?;
    for e in [0, 1, -1] {
        c.err(
            &format!("re-add of entry {e} (LAC 1)"),
            w.add_entry_at(e, payload(id, e)).await,
            BkErrorKind::DuplicateEntryId,
        )?;
    }
    let mut pending = w.add_entry_at(3, payload(id, 3));
    c.that((&mut pending).now_or_never().is_none(), || {
        "entry 3 completed although entry 2 was never written".into()
    })?;
    c.err(
        "second add of pending entry 3",
        w.add_entry_at(3, payload(id, 3)).await,
        BkErrorKind::DuplicateEntryId,
    )?;
    c.ok("close", w.close().await)?;
    c.err(
        "pending entry 3 after close",
        pending.await,
        BkErrorKind::LedgerClosed,
    )?;
    c.err(
        "add of entry 1 (<= LAC) on a closed handle",
        w.add_entry_at(1, payload(id, 1)).await,
        BkErrorKind::DuplicateEntryId,
    )?;
    c.err(
        "add of entry 2 (> LAC) on a closed handle",
        w.add_entry_at(2, payload(id, 2)).await,
        BkErrorKind::LedgerClosed,
    )?;
    c.err(
        "add of entry 9 (> LAC) on a closed handle",
        w.add_entry_at(9, payload(id, 9)).await,
        BkErrorKind::LedgerClosed,
    )?;
    c.eq("lastEntryId after close", w.metadata().last_entry_id, 1)?;
    cleanup(&bk, [id]).await;
    Ok(())
}

/// Adds on a closed normal handle → -11, and nothing is written.
pub async fn add_on_closed_handle_is_ledger_closed<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("add_on_closed_handle_is_ledger_closed");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let w = create(&c, &bk, &cfg).await?;
    append(&c, &w, 2).await?;
    c.ok("close", w.close().await)?;
    c.eq("is_closed after close", w.is_closed(), true)?;
    for _ in 0..2 {
        c.err(
            "add_entry on a closed handle",
            w.add_entry(payload(w.id(), 2)).await,
            BkErrorKind::LedgerClosed,
        )?;
    }
    c.eq("LAC after refused adds", w.last_add_confirmed(), 1)?;
    let r = open(&c, &bk, &cfg, w.id(), false).await?;
    c.eq(
        "lastEntryId seen by a reader",
        r.metadata().last_entry_id,
        1,
    )?;
    cleanup(&bk, [w.id()]).await;
    Ok(())
}

/// Out-of-order Adv adds: futures above a gap stay pending and the LAC only advances
/// over contiguous entries.
pub async fn adv_out_of_order_lac_advances_contiguously<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("adv_out_of_order_lac_advances_contiguously");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let w = create_adv(&c, &bk, &cfg).await?;
    let id = w.id();
    let mut f2 = w.add_entry_at(2, payload(id, 2));
    let mut f1 = w.add_entry_at(1, payload(id, 1));
    c.that((&mut f2).now_or_never().is_none(), || {
        "entry 2 completed before entry 0 was written".into()
    })?;
    c.that((&mut f1).now_or_never().is_none(), || {
        "entry 1 completed before entry 0 was written".into()
    })?;
    c.eq(
        "LAC with entries 1 and 2 written but not 0",
        w.last_add_confirmed(),
        NO_ENTRY,
    )?;
    put(&c, &w, 0).await?;
    c.eq("entry 1 once 0 is written", c.ok("entry 1", f1.await)?, 1)?;
    c.eq("entry 2 once 0 is written", c.ok("entry 2", f2.await)?, 2)?;
    c.eq("LAC after filling the gap", w.last_add_confirmed(), 2)?;
    let mut f5 = w.add_entry_at(5, payload(id, 5));
    let mut f4 = w.add_entry_at(4, payload(id, 4));
    c.that(
        (&mut f5).now_or_never().is_none() && (&mut f4).now_or_never().is_none(),
        || "entries 4/5 completed before entry 3 was written".into(),
    )?;
    c.eq("LAC with a gap at 3", w.last_add_confirmed(), 2)?;
    put(&c, &w, 3).await?;
    c.ok("entry 4", f4.await)?;
    c.ok("entry 5", f5.await)?;
    c.eq(
        "LAC after filling the second gap",
        w.last_add_confirmed(),
        5,
    )?;
    let entries = c.ok("read 0..=5", w.read_entries(0, 5).await)?;
    check_entries(&c, "read 0..=5", id, &entries, 0, 5)?;
    cleanup(&bk, [id]).await;
    Ok(())
}

/// Completions arrive in entry-id order: when entry `k` completes, the LAC is `>= k`.
pub async fn completions_in_entry_id_order<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("completions_in_entry_id_order");
    let bk = env.client().await;
    let cfg = env.ledger_config();

    async fn drain(
        c: &Check,
        w: &Arc<dyn WriteHandle>,
        futures: Vec<(
            EntryId,
            futures::future::BoxFuture<'static, Result<EntryId>>,
        )>,
    ) -> RuleResult {
        let mut unordered: FuturesUnordered<_> = futures
            .into_iter()
            .map(|(k, f)| {
                let w = w.clone();
                async move {
                    let r = f.await;
                    (k, r, w.last_add_confirmed())
                }
            })
            .collect();
        while let Some((k, r, lac)) = unordered.next().await {
            c.eq(
                &format!("result of entry {k}"),
                c.ok(&format!("entry {k}"), r)?,
                k,
            )?;
            c.that(lac >= k, || format!("entry {k} completed while the LAC was {lac}: a lower entry was not yet acknowledged"))?;
        }
        Ok(())
    }

    let normal = create(&c, &bk, &cfg).await?;
    let futures = (0..32)
        .map(|k| (k, normal.add_entry(payload(normal.id(), k))))
        .collect();
    drain(&c, &normal, futures).await?;
    c.eq(
        "LAC after 32 pipelined adds",
        normal.last_add_confirmed(),
        31,
    )?;

    let adv = create_adv(&c, &bk, &cfg).await?;
    let mut futures: Vec<_> = (1..16)
        .rev()
        .map(|k| (k, adv.add_entry_at(k, payload(adv.id(), k))))
        .collect();
    for (k, f) in futures.iter_mut() {
        c.that(f.now_or_never().is_none(), || {
            format!("entry {k} completed before entry 0 was written")
        })?;
    }
    futures.push((0, adv.add_entry_at(0, payload(adv.id(), 0))));
    drain(&c, &adv, futures).await?;
    c.eq("LAC after reverse-order adds", adv.last_add_confirmed(), 15)?;
    cleanup(&bk, [normal.id(), adv.id()]).await;
    Ok(())
}

/// The writer's length is the payload bytes of its confirmed entries (checked when no
/// add is pending), including empty payloads.
pub async fn length_counts_confirmed_payload_bytes<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("length_counts_confirmed_payload_bytes");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let w = create(&c, &bk, &cfg).await?;
    let mut total = 0u64;
    for size in [0usize, 1, 10, 100, 1000, 0, 4096] {
        c.ok("add_entry", w.add_entry(Bytes::from(vec![7u8; size])).await)?;
        total += size as u64;
        c.eq(
            &format!("length after an add of {size} bytes"),
            w.length(),
            total,
        )?;
    }
    let adv = create_adv(&c, &bk, &cfg).await?;
    let mut pending = adv.add_entry_at(1, Bytes::from_static(b"xyz"));
    c.that((&mut pending).now_or_never().is_none(), || {
        "entry 1 completed before entry 0".into()
    })?;
    c.ok(
        "add_entry_at(0)",
        adv.add_entry_at(0, Bytes::from_static(b"hello")).await,
    )?;
    c.ok("entry 1", pending.await)?;
    c.eq("Adv length after entries of 5 and 3 bytes", adv.length(), 8)?;
    c.ok("close", w.close().await)?;
    c.eq("length after close", w.length(), total)?;
    cleanup(&bk, [w.id(), adv.id()]).await;
    Ok(())
}

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

/// `first < 0 || first > last` → -14 for both reads, on write and read handles, before
/// the LAC check.
pub async fn read_rejects_bad_ranges<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("read_rejects_bad_ranges");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let w = create(&c, &bk, &cfg).await?;
    append(&c, &w, 3).await?;
    let r = open(&c, &bk, &cfg, w.id(), false).await?;
    let handles: [(&str, Arc<dyn ReadHandle>); 2] =
        [("write handle", w.clone()), ("read handle", r)];
    for (kind, h) in &handles {
        for (first, last) in [(-1, 0), (-1, -1), (2, 1), (9, 4), (i64::MIN, 0)] {
            c.err(
                &format!("{kind}: read_entries({first}, {last})"),
                h.read_entries(first, last).await,
                BkErrorKind::InvalidArgument,
            )?;
            c.err(
                &format!("{kind}: read_unconfirmed({first}, {last})"),
                h.read_unconfirmed(first, last).await,
                BkErrorKind::InvalidArgument,
            )?;
        }
    }
    cleanup(&bk, [w.id()]).await;
    Ok(())
}

/// `last > LAC` → -1: any read of an empty ledger, and past the end of a written one.
pub async fn read_beyond_lac_is_read_exception<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("read_beyond_lac_is_read_exception");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let id = w.id();
    c.err(
        "read(0, 0) of an empty ledger (writer)",
        w.read_entries(0, 0).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    let empty_reader = open(&c, &b, &cfg, id, false).await?;
    c.err(
        "read(0, 0) of an empty ledger (reader)",
        empty_reader.read_entries(0, 0).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    append(&c, &w, 3).await?;
    for (first, last) in [(0, 3), (3, 3), (2, 100), (0, i64::MAX)] {
        c.err(
            &format!("read({first}, {last}) with LAC 2"),
            w.read_entries(first, last).await,
            BkErrorKind::ReadBeyondLac,
        )?;
    }
    let entries = c.ok("read(0, 2)", w.read_entries(0, 2).await)?;
    check_entries(&c, "read(0, 2)", id, &entries, 0, 2)?;
    let one = c.ok("read(1, 1)", w.read_entries(1, 1).await)?;
    check_entries(&c, "read(1, 1)", id, &one, 1, 1)?;
    c.ok("close", w.close().await)?;
    let closed = open(&c, &b, &cfg, id, true).await?;
    c.err(
        "read(0, 3) of a ledger closed at 2",
        closed.read_entries(0, 3).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    let empty = create(&c, &a, &cfg).await?;
    c.ok("close of an empty ledger", empty.close().await)?;
    let empty_closed = open(&c, &b, &cfg, empty.id(), false).await?;
    c.err(
        "read(0, 0) of a closed empty ledger",
        empty_closed.read_entries(0, 0).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    cleanup(&a, [id, empty.id()]).await;
    Ok(())
}

/// `read_unconfirmed` reads past the handle's LAC; a missing entry → -13.
pub async fn read_unconfirmed_skips_lac_check<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("read_unconfirmed_skips_lac_check");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let id = w.id();
    append(&c, &w, 3).await?;
    let r = open(&c, &b, &cfg, id, false).await?;
    append(&c, &w, 2).await?;
    c.err(
        "read_entries(0, 4) past the reader's LAC",
        r.read_entries(0, 4).await,
        BkErrorKind::ReadBeyondLac,
    )?;
    let entries = c.ok("read_unconfirmed(0, 4)", r.read_unconfirmed(0, 4).await)?;
    check_entries(&c, "read_unconfirmed(0, 4)", id, &entries, 0, 4)?;
    c.that(r.last_add_confirmed() <= 2, || {
        "read_unconfirmed must not move the cached LAC".into()
    })?;
    c.err(
        "read_unconfirmed(3, 10) past the last written entry",
        r.read_unconfirmed(3, 10).await,
        BkErrorKind::NoSuchEntry,
    )?;
    c.err(
        "read_unconfirmed(7, 7) of an unwritten entry",
        r.read_unconfirmed(7, 7).await,
        BkErrorKind::NoSuchEntry,
    )?;
    let tail = c.ok(
        "writer read_unconfirmed(4, 4)",
        w.read_unconfirmed(4, 4).await,
    )?;
    check_entries(&c, "writer read_unconfirmed(4, 4)", id, &tail, 4, 4)?;
    cleanup(&a, [id]).await;
    Ok(())
}

fn check_delete_missing(
    c: &Check,
    what: &str,
    declared: DeleteMissing,
    r: Result<()>,
) -> RuleResult {
    match declared {
        DeleteMissing::Succeed => c.ok(what, r),
        DeleteMissing::NoSuchLedger => {
            let e = c.err(what, r, BkErrorKind::NoSuchLedger)?;
            c.that(e.is_already_deleted(), || {
                format!("{what}: is_already_deleted() false for {e}")
            })
        }
        DeleteMissing::NoSuchLedgerOnMetadataServer => {
            let e = c.err(what, r, BkErrorKind::NoSuchLedgerOnMetadataServer)?;
            c.that(e.is_already_deleted(), || {
                format!("{what}: is_already_deleted() false for {e}")
            })
        }
    }
}

/// Deleting a missing ledger behaves as the implementation declares; a negative id → -14.
pub async fn delete_missing_ledger_as_declared<E: BookKeeperTestEnv + ?Sized>(
    env: &E,
) -> RuleResult {
    let c = Check::new("delete_missing_ledger_as_declared");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let declared = env.delete_missing();
    let never = unused_far_id(&c, &bk, &cfg).await?;
    check_delete_missing(
        &c,
        "delete of a never-created ledger",
        declared,
        bk.delete_ledger(never).await,
    )?;
    let w = create(&c, &bk, &cfg).await?;
    c.ok("close", w.close().await)?;
    c.ok("first delete", bk.delete_ledger(w.id()).await)?;
    check_delete_missing(
        &c,
        "second delete of the same ledger",
        declared,
        bk.delete_ledger(w.id()).await,
    )?;
    c.err(
        "delete of a negative id",
        bk.delete_ledger(-1).await,
        BkErrorKind::InvalidArgument,
    )?;
    Ok(())
}

/// A deleted ledger is gone for every client, and its id is never handed out again.
pub async fn delete_removes_ledger<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("delete_removes_ledger");
    let (a, b) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &a, &cfg).await?;
    let id = w.id();
    append(&c, &w, 2).await?;
    c.ok("close", w.close().await)?;
    let adv = create_adv(&c, &a, &cfg).await?;
    put(&c, &adv, 0).await?;
    c.ok("close of the Adv ledger", adv.close().await)?;
    for gone in [id, adv.id()] {
        c.ok(
            &format!("delete of ledger {gone}"),
            b.delete_ledger(gone).await,
        )?;
        c.err(
            &format!("open of deleted ledger {gone}"),
            a.open_ledger_no_recovery(gone, cfg.digest_type, &cfg.password)
                .await,
            BkErrorKind::NoSuchLedgerOnMetadataServer,
        )?;
    }
    let next = create(&c, &a, &cfg).await?;
    c.that(next.id() != id, || {
        format!("create_ledger reused the deleted id {id}")
    })?;
    cleanup(&a, [next.id()]).await;
    Ok(())
}

/// `add_entry` on an Adv handle and `add_entry_at` on a normal handle → -100; both
/// handles stay usable.
pub async fn illegal_op_mixing_add_styles<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("illegal_op_mixing_add_styles");
    let bk = env.client().await;
    let cfg = env.ledger_config();
    let adv = create_adv(&c, &bk, &cfg).await?;
    let normal = create(&c, &bk, &cfg).await?;
    c.err(
        "add_entry on an Adv handle",
        adv.add_entry(payload(adv.id(), 0)).await,
        BkErrorKind::IllegalOp,
    )?;
    for e in [0, 5] {
        c.err(
            &format!("add_entry_at({e}) on a normal handle"),
            normal.add_entry_at(e, payload(normal.id(), e)).await,
            BkErrorKind::IllegalOp,
        )?;
    }
    put(&c, &adv, 0).await?;
    append(&c, &normal, 1).await?;
    c.eq("normal handle LAC", normal.last_add_confirmed(), 0)?;
    c.eq("Adv handle LAC", adv.last_add_confirmed(), 0)?;
    cleanup(&bk, [adv.id(), normal.id()]).await;
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

/// Two clients of one cluster see each other's ledgers and entries.
pub async fn clients_share_the_cluster<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("clients_share_the_cluster");
    let (a, b) = (env.client().await, env.client().await);
    c.eq(
        "both clients name the same cluster",
        a.cluster_name(),
        b.cluster_name(),
    )?;
    let cfg = env.ledger_config();
    let wa = create(&c, &a, &cfg).await?;
    let wb = create(&c, &b, &cfg).await?;
    c.that(wa.id() != wb.id(), || {
        format!("two clients got the same ledger id {}", wa.id())
    })?;
    append(&c, &wa, 2).await?;
    append(&c, &wb, 3).await?;
    c.ok("close", wa.close().await)?;
    c.ok("close", wb.close().await)?;
    let ra = open(&c, &b, &cfg, wa.id(), false).await?;
    let rb = open(&c, &a, &cfg, wb.id(), false).await?;
    let ea = c.ok("read of A's ledger through B", ra.read_entries(0, 1).await)?;
    check_entries(&c, "read of A's ledger through B", wa.id(), &ea, 0, 1)?;
    let eb = c.ok("read of B's ledger through A", rb.read_entries(0, 2).await)?;
    check_entries(&c, "read of B's ledger through A", wb.id(), &eb, 0, 2)?;
    let ids: HashSet<_> = [wa.id(), wb.id()].into();
    cleanup(&a, ids).await;
    Ok(())
}

/// After `close()` a client refuses operations with -19 (closing again is fine);
/// other clients of the cluster keep working.
pub async fn client_close_rejects_operations<E: BookKeeperTestEnv + ?Sized>(env: &E) -> RuleResult {
    let c = Check::new("client_close_rejects_operations");
    let (closing, other) = (env.client().await, env.client().await);
    let cfg = env.ledger_config();
    let w = create(&c, &other, &cfg).await?;
    append(&c, &w, 1).await?;
    c.ok("close of the client", closing.close().await)?;
    c.ok("second close of the client", closing.close().await)?;
    c.err(
        "create_ledger on a closed client",
        closing.create_ledger(&cfg).await,
        BkErrorKind::ClientClosed,
    )?;
    c.err(
        "open_ledger_no_recovery on a closed client",
        closing
            .open_ledger_no_recovery(w.id(), cfg.digest_type, &cfg.password)
            .await,
        BkErrorKind::ClientClosed,
    )?;
    c.err(
        "open_ledger on a closed client",
        closing
            .open_ledger(w.id(), cfg.digest_type, &cfg.password)
            .await,
        BkErrorKind::ClientClosed,
    )?;
    c.eq(
        "the ledger was not fenced by the refused open",
        w.metadata().state,
        LedgerState::Open,
    )?;
    append(&c, &w, 1).await?;
    c.ok("close", w.close().await)?;
    cleanup(&other, [w.id()]).await;
    Ok(())
}
