//! Deleting ledgers: missing ledgers as the implementation declares, and what
//! a deletion removes.

use super::support::{append, cleanup, create, create_adv, put, unused_far_id, Check};
use crate::api::{BookKeeper, ReadHandle};
use crate::error::{BkErrorKind, Result};
use crate::testkit::env::BookKeeperTestEnv;
use crate::types::DeleteMissing;
use bkswitch_conformance::RuleResult;

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
