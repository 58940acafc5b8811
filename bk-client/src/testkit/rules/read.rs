//! Reading entries: invalid ranges, the last-add-confirmed check, and
//! `read_unconfirmed`.

use std::sync::Arc;

use super::support::{append, check_entries, cleanup, create, open, Check};
use crate::api::ReadHandle;
use crate::error::BkErrorKind;
use crate::testkit::env::BookKeeperTestEnv;
use bkswitch_conformance::RuleResult;

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
