//! Clients of one cluster: shared ledgers, and a closed client.

use std::collections::HashSet;

use super::support::{append, check_entries, cleanup, create, open, Check};
use crate::api::{BookKeeper, ReadHandle};
use crate::error::BkErrorKind;
use crate::testkit::env::BookKeeperTestEnv;
use crate::types::LedgerState;
use bkswitch_conformance::RuleResult;

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
