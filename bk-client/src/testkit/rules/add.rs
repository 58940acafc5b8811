//! Adding entries: adds on a closed handle, out-of-order Adv adds and the LAC,
//! completion order, the writer's length, and mixing the two add styles.

use std::sync::Arc;

use bytes::Bytes;
use futures::stream::{FuturesUnordered, StreamExt};
use futures::FutureExt;

use super::support::{
    append, check_entries, cleanup, create, create_adv, open, payload, put, Check,
};
use crate::api::{ReadHandle, WriteHandle};
use crate::error::{BkErrorKind, Result};
use crate::testkit::env::BookKeeperTestEnv;
use crate::types::{EntryId, NO_ENTRY};
use bkswitch_conformance::RuleResult;

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
