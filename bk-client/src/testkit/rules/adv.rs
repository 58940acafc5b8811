//! `create_ledger_adv`: the caller's id, the untouched id generator, existing
//! and negative ids, custom metadata, and duplicate entry ids on Adv handles.

use std::collections::BTreeMap;

use futures::FutureExt;

use super::support::{append, cleanup, create, create_adv, open, payload, put, Check};
use crate::api::{BookKeeper, ReadHandle, WriteHandle};
use crate::error::BkErrorKind;
use crate::testkit::env::BookKeeperTestEnv;
use crate::types::{LedgerId, LedgerState};
use bkswitch_conformance::RuleResult;

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
