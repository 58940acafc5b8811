//! Creating ledgers with `create_ledger`: quorum validation, ids from the id
//! generator (skipping ids taken by `create_ledger_adv`) and the state of a new
//! handle.

use super::support::{cleanup, create, create_adv, open, put, unused_far_id, Check};
use crate::api::{BookKeeper, ReadHandle};
use crate::error::BkErrorKind;
use crate::testkit::env::BookKeeperTestEnv;
use crate::types::{LedgerState, NO_ENTRY};
use bkswitch_conformance::RuleResult;

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
