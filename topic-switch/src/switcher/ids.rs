//! Keeping the two clusters' message ids apart across a move.
//!
//! A Pulsar message id is a position in the cluster that stored it (ledger,
//! entry), and two clusters number their ledgers independently: the same id
//! names different messages on each. Pulsar's clients keep the ids they saw
//! when they reconnect to another cluster. A consumer's acknowledgement
//! tracker drops an arriving message whose id it acknowledged lately (or at
//! or below its last cumulative acknowledgement) as a duplicate, and sends the
//! acknowledgements it had not flushed yet to the cluster it reconnects to,
//! where they acknowledge whatever sits at those positions there. When the
//! topic's ledger on the cluster the clients go to has the same id as one on
//! the cluster they leave — two fresh clusters number alike — a message that
//! was never delivered can be dropped or acknowledged: lost.
//!
//! So before clients move from one cluster to the other, the topic's ledger
//! on the destination must be numbered above every ledger of the topic on the
//! source, and no subscription on the destination may have messages left in
//! a ledger numbered at or below those: then every id a client carries is
//! below every message still to be delivered to it, and a stale
//! acknowledgement falls on what was consumed already. The move rolls the
//! destination's ledger (an unload: the topic opens a new ledger when it
//! loads again, numbered by that cluster's next id) while nobody is attached
//! there, and waits for the replicated subscriptions to leave the old
//! ledgers. When the destination's ids cannot get there in time (its
//! BookKeeper numbers far below the source's), the move is refused before
//! anybody moved.

use std::time::{Duration, Instant};

use super::{evidence, sides, Result, TopicSwitcher};
use crate::admin::ManagedLedgerIds;
use crate::record::Batch;

/// How many unloads the destination gets to number its ledger above the
/// source's before the move gives up.
pub(super) const MAX_ROLLS: usize = 20;
/// How long a roll that did not show (the topic not loaded again on a new
/// ledger) is waited for before the next.
const ROLL_AGAIN: Duration = Duration::from_secs(2);

/// Why clients carrying `from`'s message ids could lose a message on `to`
/// (one partition), `None` when they cannot.
pub fn ids_clash(
    from_name: &str,
    from: &ManagedLedgerIds,
    to_name: &str,
    to: &ManagedLedgerIds,
) -> Option<Clash> {
    let top = from.ledgers.iter().map(|l| l.id).max()?;
    let Some(current) = to.ledgers.last() else {
        return Some(Clash::Roll(format!("it has no ledger on `{to_name}` yet")));
    };
    if current.id <= top {
        return Some(Clash::Roll(format!(
            "its ledger {} on `{to_name}` is not numbered above ledger {top} on `{from_name}`",
            current.id
        )));
    }
    for (sub, &(ml, me)) in &to.cursors {
        let left = to
            .ledgers
            .iter()
            .filter(|l| l.id <= top)
            .any(|l| (l.id > ml && l.entries > 0) || (l.id == ml && me + 1 < l.entries as i64));
        if left {
            return Some(Clash::Wait(format!(
                "subscription `{sub}` on `{to_name}` has messages left in ledgers numbered up to \
                 {top}, ids that clients from `{from_name}` carry (mark-delete {ml}:{me})"
            )));
        }
    }
    None
}

/// What keeps two clusters' message ids from being apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Clash {
    /// The destination's ledger must be rolled (unloaded) to a higher id.
    Roll(String),
    /// A subscription there still has to move past the old ledgers (its
    /// replicated state follows the source's within a snapshot interval).
    Wait(String),
}

impl Clash {
    fn why(&self) -> &str {
        match self {
            Clash::Roll(w) | Clash::Wait(w) => w,
        }
    }
}

impl TopicSwitcher {
    /// Makes the message ids of the batch's topics apart on the cluster the
    /// clients go to (see the [module documentation](self)). `back`: the
    /// clients go back to where they came from. A topic whose clients are
    /// not on the side they leave is skipped (nobody carries its ids).
    pub(super) async fn separate_ids(
        &self,
        batch: &mut Batch,
        back: bool,
        to: &str,
        timeout: Duration,
    ) -> Result<std::result::Result<(), String>> {
        let started = Instant::now();
        let mut rolls = 0usize;
        let mut notes = Vec::new();
        let topics = sides(batch, back, to);
        for (topic, src, dst, partitions) in &topics {
            let source = self.admin_of(src).await?;
            let dest = self.admin_of(dst).await?;
            if back {
                match source.stats(topic, *partitions).await {
                    Ok(Some(s)) if s.has_clients() => {}
                    Ok(_) => continue,
                    Err(e) => return Ok(Err(e.to_string())),
                }
            }
            let mut last_roll: Option<(Option<u64>, Instant)> = None;
            loop {
                let (a, b) = (
                    source.ledgers(topic, *partitions).await,
                    dest.ledgers(topic, *partitions).await,
                );
                let now_at = b.as_ref().ok().and_then(|b| {
                    b.iter()
                        .filter_map(|m| m.ledgers.last())
                        .map(|l| l.id)
                        .max()
                });
                let clash = match (a, b) {
                    (Ok(a), Ok(b)) if a.len() == b.len() => a
                        .iter()
                        .zip(&b)
                        .find_map(|(a, b)| ids_clash(src, a, dst, b)),
                    (Ok(a), Ok(b)) => Some(Clash::Wait(format!(
                        "{} managed ledgers on `{src}`, {} on `{dst}`",
                        a.len(),
                        b.len()
                    ))),
                    // Loading again after an unload, or not reachable: tried
                    // again until the deadline.
                    (Err(e), _) | (_, Err(e)) => Some(Clash::Wait(e.to_string())),
                };
                let Some(clash) = clash else {
                    notes.push(topic.clone());
                    break;
                };
                if started.elapsed() >= timeout {
                    return Ok(Err(format!(
                        "the message ids of `{topic}` on `{src}` and `{dst}` are not apart after \
                         {rolls} rolls in {} ms: {}; clients moving now could lose a message \
                         (Pulsar clients keep message ids across clusters). Advance `{dst}`'s \
                         ledger ids past `{src}`'s, or let its subscriptions catch up, then try \
                         again",
                        timeout.as_millis(),
                        clash.why()
                    )));
                }
                // Roll again once the last roll took effect (the topic
                // loaded again on a new ledger), or when it seems lost.
                let due = match last_roll {
                    None => true,
                    Some((at, when)) => now_at != at || when.elapsed() >= ROLL_AGAIN,
                };
                if matches!(clash, Clash::Roll(_)) && due {
                    if rolls >= MAX_ROLLS * topics.len() {
                        return Ok(Err(format!(
                            "the message ids of `{topic}` on `{dst}` stay below `{src}`'s after \
                             {rolls} rolls: {}; clients moving now could lose a message. Advance \
                             `{dst}`'s ledger ids past `{src}`'s, then try again",
                            clash.why()
                        )));
                    }
                    // Nobody but the replicators is attached there yet: the
                    // topic loads again at its next read, on a new ledger.
                    if let Err(e) = dest.unload(topic).await {
                        tracing::debug!(%topic, cluster = %dst, error = %e, "roll failed; retrying");
                    }
                    rolls += 1;
                    last_roll = Some((now_at, Instant::now()));
                }
                tokio::time::sleep(self.poll).await;
            }
        }
        let phase = batch.phase;
        evidence(
            batch,
            phase,
            format!(
                "message ids apart for {} topics ({rolls} ledger rolls) in {} ms",
                notes.len(),
                started.elapsed().as_millis()
            ),
        );
        Ok(Ok(()))
    }
}
