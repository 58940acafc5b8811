//! The end-to-end switch demo (`bookie-switch demo`): several nodes, live
//! traffic, schemas, and an operator switching the bookie cluster mid-traffic
//! through the REST API, then cleaning up (or rolling back), with every
//! invariant the demo can observe checked at the end.
//!
//! Embedded default: one in-memory metadata store (each node has its own
//! session) and two in-memory BookKeeper clusters, `old` and `new`.
//! `--metadata zk://…` puts the metadata on a real ZooKeeper instead (under a
//! fresh chroot), `--metadata etcd://…` on a real etcd (under a fresh key
//! prefix; a build with the `etcd` feature): the registry, the election,
//! topic ownership and the switch's records then live there, while the
//! bookie clusters keep their own metadata service.
//! `--bookkeeper real` runs on two real BookKeeper clusters started on this
//! machine (bookie JVMs, `--bookies` each, metadata on a real ZooKeeper), and
//! shows the operator's id-generator step before the switch.
//!
//! [`run_demo`] reads as the run's timeline; the steps live in `setup.rs`
//! (clusters, nodes, topics), `phases.rs` (the operator's switch, cleanup or
//! rollback), `checks.rs` (the invariants) and `render.rs` (the human report).

mod bookies;
mod checks;
mod error;
mod options;
mod phases;
mod render;
mod report;
mod setup;

use std::time::Duration;

pub use bookies::DemoBookKeeper;
pub use error::DemoError;
pub use options::{DemoOptions, Say};
pub use render::render;
pub use report::{DemoReport, InvariantCheck};

use checks::{snapshot_tree, Checks};
use error::step_err;
use phases::{ms, LedgerCounts, Timings};
use setup::{Stack, ADMIN_TOKEN};

use crate::traffic::{Traffic, TrafficPhase, TrafficReport};
use bkswitch_admin::AdminClient;

/// Runs the demo; `say` receives human progress lines.
///
/// # Errors
///
/// [`DemoError`] when a step cannot run at all (a broken invariant is
/// reported in [`DemoReport::invariants`], not as an error).
pub async fn run_demo(opts: &DemoOptions, say: Say<'_>) -> Result<DemoReport, DemoError> {
    opts.check()?;
    if let DemoBookKeeper::Real { bookies } = opts.bookkeeper {
        say(&format!(
            "starting two real BookKeeper clusters 'old' and 'new' ({bookies} bookies each)"
        ));
    }
    let stack = Stack::start(opts).await?;
    say(&format!(
        "starting {} nodes on {} metadata, {} bookie clusters 'old' (active) and 'new'",
        opts.nodes,
        stack.metadata_kind(),
        stack.bookies.describe(),
    ));
    let metadata_before = snapshot_tree(stack.store().as_ref()).await;

    say(&format!(
        "traffic: {} topics x {} msg/s for {:.0} s",
        opts.topics,
        opts.rate,
        opts.duration.as_secs_f64()
    ));
    let traffic = Traffic::start(&stack.topics, opts.rate, 256);
    let third = opts.duration / 3;
    tokio::time::sleep(third).await;

    // The operator, through the REST API of node-1.
    let admin =
        AdminClient::new(stack.nodes[0].url(), ADMIN_TOKEN).map_err(step_err("REST client"))?;
    let t0 = phases::request_switch(
        &admin,
        &stack,
        || traffic.set_phase(TrafficPhase::During),
        say,
    )
    .await?;
    let late_schema = phases::write_late_schema(&stack.nodes[0]).await;
    let timings = phases::await_switch(&stack, &admin, t0, opts.progress).await;
    traffic.set_phase(TrafficPhase::After);
    say(&format!(
        "switch visible on every node after {} ms ({} ms from the directive's write to the \
         last node's swap); every topic writing to 'new' after {} ms; \
         BUILD+PROMOTE done after {} ms",
        ms(timings.switch_visible),
        ms(timings.directive_visible),
        ms(timings.writes_moved),
        ms(timings.switched)
    ));
    let ledgers = phases::ledger_counts(&stack.nodes[0]).await?;

    tokio::time::sleep(opts.duration.saturating_sub(third * 2)).await;
    let outcome = if opts.rollback {
        phases::roll_back(&admin, &stack, say).await?
    } else {
        phases::clean_up(&admin, say).await?
    };
    tokio::time::sleep(third.min(Duration::from_secs(2))).await;
    let traffic = traffic.stop(Duration::from_secs(10)).await;

    let mut checks = Checks::default();
    checks.traffic(&traffic);
    checks.switch_applied(&timings, &late_schema);
    let expected_active = if opts.rollback { "old" } else { "new" };
    checks.registry(&stack.nodes[0], expected_active).await?;
    let store = stack.store();
    checks.placement(store.as_ref(), &stack.bookies).await;
    if opts.rollback {
        checks
            .rollback_restored(&metadata_before, store.as_ref())
            .await;
    }
    // Crash and reopen every topic on a fresh node: cursors recover exactly
    // the last acknowledged position.
    stack.stop_nodes().await;
    let verifier = stack.start_verifier().await?;
    checks
        .cursor_recovery(&verifier, &traffic.acknowledged)
        .await;
    verifier.stop().await;

    Ok(report(
        opts, &stack, traffic, ledgers, &timings, outcome, checks,
    ))
}

/// Puts the run's observations together.
fn report(
    opts: &DemoOptions,
    stack: &Stack,
    traffic: TrafficReport,
    ledgers: LedgerCounts,
    timings: &Timings,
    outcome: String,
    checks: Checks,
) -> DemoReport {
    let invariants = checks.into_vec();
    DemoReport {
        topics: opts.topics,
        nodes: opts.nodes,
        metadata_store: stack.metadata_store(),
        bookkeeper: stack.bookies.describe(),
        published: traffic.published,
        consumed: traffic.consumed,
        publish_failures: traffic.publish_failures,
        consumer_gaps: traffic.consumer_gaps,
        consumer_duplicates: traffic.consumer_duplicates,
        schemas_promoted: ledgers.schemas_promoted,
        cursors_promoted: ledgers.cursors_promoted,
        failed_ledgers: ledgers.failed,
        rollover_fallbacks: ledgers.rollover_fallbacks,
        ledgers_copied: ledgers.copied,
        switch_visible_ms: ms(timings.switch_visible),
        directive_visible_ms: ms(timings.directive_visible),
        all_writes_moved_ms: ms(timings.writes_moved),
        build_promote_ms: ms(timings.switched),
        outcome,
        invariants_ok: invariants.iter().all(|c| c.ok),
        invariants,
        traffic,
    }
}
