//! The two phases that wait on the clusters: the eviction (unloads until no
//! client is left where the clients leave) and the settling (replication
//! drained, both sides' stats recorded).

use std::time::{Duration, Instant};

use super::{evidence, sides, Result, TopicSwitcher, UNLOAD_AGAIN};
use crate::record::{now_ms, Batch, Evidence};

impl TopicSwitcher {
    /// Unloads the batch's topics where they were (or, rolling back, where
    /// they went) until no client but the replicators is left there.
    pub(super) async fn evict(
        &self,
        batch: &mut Batch,
        back: bool,
        to: &str,
        timeout: Duration,
    ) -> Result<std::result::Result<(), String>> {
        let started = Instant::now();
        let mut unloads = 0usize;
        let topics = sides(batch, back, to);
        // Load each topic where its clients are going before they go: an
        // admin read loads a topic that exists, so that the clients do not
        // wait for the topic to load there (a managed ledger to open, the
        // replicators to start) once they arrive.
        for (topic, m) in &batch.topics {
            let dest = if back { m.from.clone() } else { to.to_owned() };
            if let Ok(admin) = self.admin_of(&dest).await {
                if let Err(e) = admin.stats(topic, m.partitions).await {
                    tracing::debug!(%topic, cluster = %dest, error = %e, "cannot load the topic ahead of its clients");
                }
            }
        }
        let mut last_unload: std::collections::HashMap<String, Instant> = Default::default();
        loop {
            let mut left = Vec::new();
            for (topic, side, _, partitions) in &topics {
                let admin = self.admin_of(side).await?;
                let stats = match admin.stats(topic, *partitions).await {
                    Ok(s) => s.unwrap_or_default(),
                    Err(e) => {
                        left.push(format!("{topic} on {side}: {e}"));
                        continue;
                    }
                };
                if !stats.has_clients() {
                    continue;
                }
                left.push(format!(
                    "{topic} on {side}: {} producers, {} consumers",
                    stats.producers,
                    stats.consumers()
                ));
                let due = last_unload
                    .get(topic)
                    .is_none_or(|t| t.elapsed() >= UNLOAD_AGAIN);
                if due {
                    if let Err(e) = admin.unload(topic).await {
                        tracing::warn!(%topic, error = %e, "unload failed; retrying");
                    }
                    unloads += 1;
                    last_unload.insert(topic.clone(), Instant::now());
                }
            }
            if left.is_empty() {
                let phase = batch.phase;
                evidence(
                    batch,
                    phase,
                    format!(
                        "no client left on the {} cluster after {unloads} unloads in {} ms",
                        if back { "new" } else { "old" },
                        started.elapsed().as_millis()
                    ),
                );
                return Ok(Ok(()));
            }
            if started.elapsed() >= timeout {
                return Ok(Err(format!(
                    "clients still attached after {} ms: {}",
                    timeout.as_millis(),
                    left.join("; ")
                )));
            }
            tokio::time::sleep(self.poll).await;
        }
    }

    /// Waits until replication away from the side the clients left has
    /// nothing left to send, and records both sides' stats.
    pub(super) async fn settle(
        &self,
        batch: &mut Batch,
        back: bool,
        to: &str,
        timeout: Duration,
    ) -> Result<std::result::Result<(), String>> {
        let started = Instant::now();
        loop {
            let mut left = Vec::new();
            let mut seen = serde_json::Map::new();
            for (topic, m) in &batch.topics {
                let (src, dst) = if back {
                    (to.to_owned(), m.from.clone())
                } else {
                    (m.from.clone(), to.to_owned())
                };
                let stats = self.admin_of(&src).await?.stats(topic, m.partitions).await;
                match stats {
                    Ok(Some(s)) => {
                        // Drained means a replicator that runs and has
                        // nothing left: a topic just loaded again on the
                        // side its clients left (the unload closed it) has
                        // no replicator yet, and what it did not send before
                        // the unload is still there to send.
                        match s.replication.get(&dst) {
                            Some(r) if r.connected && r.backlog == 0 => {}
                            Some(r) if r.backlog > 0 => left.push(format!(
                                "{topic}: {} messages to replicate from {src} to {dst}",
                                r.backlog
                            )),
                            Some(_) => left.push(format!(
                                "{topic}: the replicator from {src} to {dst} is not connected"
                            )),
                            None => left.push(format!(
                                "{topic}: no replicator from {src} to {dst} is running yet"
                            )),
                        }
                        let arrived = self.admin_of(&dst).await?.stats(topic, m.partitions).await;
                        seen.insert(
                            topic.clone(),
                            serde_json::json!({ "left": s, "arrived": arrived.ok().flatten() }),
                        );
                    }
                    Ok(None) => left.push(format!("{topic}: not found on {src}")),
                    Err(e) => left.push(e.to_string()),
                }
            }
            if left.is_empty() {
                let phase = batch.phase;
                batch.evidence.push(Evidence {
                    at_ms: now_ms(),
                    phase,
                    note: format!(
                        "replication drained in {} ms",
                        started.elapsed().as_millis()
                    ),
                    data: serde_json::Value::Object(seen),
                });
                return Ok(Ok(()));
            }
            if started.elapsed() >= timeout {
                return Ok(Err(format!(
                    "replication did not drain within {} ms: {}",
                    timeout.as_millis(),
                    left.join("; ")
                )));
            }
            tokio::time::sleep(self.poll).await;
        }
    }
}
