//! Live traffic during a history: a producer and a consumer per topic, and
//! schema puts, on whichever node owns (or can take) the topic. Everything a
//! call acknowledged is recorded in the [`Model`] the checker compares with
//! what the stack holds in the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::Node;
use bkswitch_managed_ledger::{Entry, InitialPosition, ManagedCursor, ManagedLedger, Position};
use parking_lot::Mutex;

use crate::plan::{SCHEMAS, TOPICS};
use crate::violation::{Violation, ViolationKind};

/// The cursor every topic's consumer uses.
pub const CURSOR: &str = "sub";

/// What the traffic was told succeeded, what its consumers received, and
/// what it saw go wrong while the history ran.
#[derive(Debug, Default, Clone)]
pub struct Model {
    /// Per topic: every acknowledged publish (its position and sequence
    /// number), in the order of their sequence numbers.
    pub acked: BTreeMap<String, Vec<(Position, u64)>>,
    /// Per topic: the highest sequence number ever sent (acknowledged or
    /// not): a read of a higher one, or of another topic's, is wrong data.
    pub attempted: BTreeMap<String, u64>,
    /// Per topic: the highest acknowledged mark-delete of [`CURSOR`].
    pub mark_deleted: BTreeMap<String, Position>,
    /// Per topic: mark-deletes whose call failed or timed out (they may have
    /// been applied all the same).
    pub md_attempts: BTreeMap<String, Vec<Position>>,
    /// Per topic: how many times the consumer received each sequence number.
    pub delivered: BTreeMap<String, BTreeMap<u64, u32>>,
    /// Per topic: how many times the consumer's cursor was opened.
    pub opens: BTreeMap<String, u64>,
    /// Every acknowledged schema put: id, version, data.
    pub schemas: Vec<(String, i64, Vec<u8>)>,
    /// Calls that failed (not acknowledged), by kind.
    pub failures: BTreeMap<&'static str, u64>,
    /// Violations the traffic saw while the history ran (a cursor reopened
    /// behind or ahead of what was acknowledged, a consumer gap, wrong data).
    pub observed: Vec<Violation>,
    /// The errors of failed calls that name corrupt or undecodable metadata
    /// (the system refusing damaged metadata loudly), in order.
    pub refusals: Vec<String>,
}

impl Model {
    /// Acknowledged publishes over every topic.
    pub fn published(&self) -> usize {
        self.acked.values().map(Vec::len).sum()
    }

    /// Messages the consumers received more than once, over every topic.
    pub fn redelivered(&self) -> u64 {
        self.delivered
            .values()
            .flat_map(|m| m.values())
            .map(|c| u64::from(c.saturating_sub(1)))
            .sum()
    }

    fn fail(&mut self, kind: &'static str) {
        *self.failures.entry(kind).or_default() += 1;
    }

    /// A failed call, with its error: one naming corrupt metadata is kept.
    fn fail_with(&mut self, kind: &'static str, error: &dyn std::fmt::Display) {
        self.fail(kind);
        let text = error.to_string();
        if (text.contains("corrupt") || text.contains("decode")) && self.refusals.len() < 10_000 {
            self.refusals.push(text);
        }
    }

    fn observe(&mut self, kind: ViolationKind, message: String) {
        self.observed.push(Violation { kind, message });
    }

    /// The highest position the cursor of `topic` may durably be at: the
    /// acknowledged mark-delete or a later attempted one.
    pub fn highest_mark_delete(&self, topic: &str) -> Option<Position> {
        let md = self.mark_deleted.get(topic).copied();
        let attempts = self.md_attempts.get(topic).into_iter().flatten().copied();
        md.into_iter().chain(attempts).max()
    }

    /// Whether `pos` is a position the cursor of `topic` may durably be at
    /// after recovery: exactly the acknowledged mark-delete, or an attempted
    /// one after it (the call failed, perhaps after it applied).
    pub fn allowed_mark_delete(&self, topic: &str, pos: Position) -> bool {
        let md = self.mark_deleted.get(topic).copied();
        if md == Some(pos) {
            return true;
        }
        self.md_attempts
            .get(topic)
            .is_some_and(|a| a.contains(&pos) && md.is_none_or(|md| pos > md))
    }
}

/// The first wait before a failed topic open is tried again.
const OPEN_BACKOFF_MIN: Duration = Duration::from_millis(100);
/// The longest wait between failed topic opens.
const OPEN_BACKOFF_MAX: Duration = Duration::from_secs(10);

/// The batch a consumer reads at once: after a reopen it may receive again
/// at most this many messages it had received but not yet acknowledged.
pub const READ_BATCH: usize = 5;

/// The running nodes as the traffic sees them: `(node, generation)` per slot.
pub type Directory = Arc<Mutex<Vec<Option<(Node, u64)>>>>;

struct Handle {
    slot: usize,
    generation: u64,
    ml: ManagedLedger,
    cursor: ManagedCursor,
}

/// The traffic task's handle: stop it to get the model.
#[derive(Debug)]
pub struct Traffic {
    stop: Arc<AtomicBool>,
    model: Arc<Mutex<Model>>,
    task: tokio::task::JoinHandle<()>,
}

/// How long one traffic call may take (virtual time) before it counts as
/// failed.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

impl Traffic {
    /// Starts the traffic on the nodes of `directory`.
    pub fn start(directory: Directory) -> Traffic {
        let stop = Arc::new(AtomicBool::new(false));
        let model = Arc::new(Mutex::new(Model::default()));
        let task = tokio::spawn(run(directory, stop.clone(), model.clone()));
        Traffic { stop, model, task }
    }

    /// A copy of the model so far.
    pub fn model(&self) -> Model {
        self.model.lock().clone()
    }

    /// The model as it is being recorded.
    pub fn shared_model(&self) -> Arc<Mutex<Model>> {
        self.model.clone()
    }

    /// Stops the traffic (the round in progress finishes) and returns the
    /// model.
    pub async fn stop(self) -> Model {
        self.stop.store(true, Ordering::SeqCst);
        let _ = self.task.await;
        let m = self.model.lock().clone();
        m
    }
}

async fn run(directory: Directory, stop: Arc<AtomicBool>, model: Arc<Mutex<Model>>) {
    // Every topic's producer and consumer, and the schema puts, run at once:
    // several calls in flight in the stack, as a broker has them.
    let mut tasks: Vec<_> = TOPICS
        .iter()
        .enumerate()
        .map(|(k, topic)| {
            tokio::spawn(topic_traffic(
                k,
                topic,
                directory.clone(),
                stop.clone(),
                model.clone(),
            ))
        })
        .collect();
    tasks.push(tokio::spawn(schema_traffic(directory, stop, model)));
    for t in tasks {
        let _ = t.await;
    }
}

/// One topic's producer (two publishes in flight at once) and consumer.
async fn topic_traffic(
    k: usize,
    topic: &'static str,
    directory: Directory,
    stop: Arc<AtomicBool>,
    model: Arc<Mutex<Model>>,
) {
    let mut handle: Option<Handle> = None;
    let mut seq: u64 = 0;
    // The last sequence number the consumer received since it opened.
    let mut last_delivered: Option<u64> = None;
    // As a Pulsar client reconnects: 100 ms, doubling up to 10 s, reset once
    // the topic opened.
    let mut backoff = OPEN_BACKOFF_MIN;
    while !stop.load(Ordering::SeqCst) {
        let nodes = directory.lock().clone();
        // A handle of a node that crashed or restarted is dropped.
        if let Some(h) = &handle {
            let current = nodes.get(h.slot).and_then(|n| n.as_ref()).map(|n| n.1);
            if current != Some(h.generation) {
                handle = None;
            }
        }
        if handle.is_none() {
            handle = open(&nodes, k, topic, &model).await;
            last_delivered = None;
        }
        let Some(h) = &handle else {
            tokio::time::sleep(backoff).await;
            backoff = (backoff * 2).min(OPEN_BACKOFF_MAX);
            continue;
        };
        backoff = OPEN_BACKOFF_MIN;
        let broken = publish_pair(h, topic, &mut seq, &model).await
            || consume(h, topic, &mut last_delivered, &model).await;
        if broken {
            // Reopen from the metadata next round: the handle may be fenced
            // or hold a stale view.
            if let Some(h) = handle.take() {
                if let Some(Some((node, _))) = nodes.get(h.slot) {
                    let _ = tokio::time::timeout(CALL_TIMEOUT, node.unload_topic(topic)).await;
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Sends two messages at once; records those acknowledged. Returns whether
/// a publish failed.
async fn publish_pair(h: &Handle, topic: &str, seq: &mut u64, model: &Mutex<Model>) -> bool {
    let (a, b) = (*seq + 1, *seq + 2);
    *seq = b;
    model.lock().attempted.insert(topic.to_owned(), b);
    let send = |n: u64| {
        tokio::time::timeout(
            CALL_TIMEOUT,
            h.ml.append(format!("{topic}#{n}").into_bytes()),
        )
    };
    let (ra, rb) = tokio::join!(send(a), send(b));
    let mut failed = false;
    let mut m = model.lock();
    for (n, r) in [(a, ra), (b, rb)] {
        match r {
            Ok(Ok(pos)) => m.acked.entry(topic.to_owned()).or_default().push((pos, n)),
            Ok(Err(e)) => {
                m.fail_with("publish", &e);
                failed = true;
            }
            Err(_) => {
                m.fail("publish");
                failed = true;
            }
        }
    }
    failed
}

/// Reads a batch, checks it as it arrives, acknowledges its last message.
/// Returns whether a call failed.
async fn consume(
    h: &Handle,
    topic: &str,
    last_delivered: &mut Option<u64>,
    model: &Mutex<Model>,
) -> bool {
    let entries = match tokio::time::timeout(CALL_TIMEOUT, h.cursor.read_entries(READ_BATCH)).await
    {
        Ok(Ok(entries)) => entries,
        Ok(Err(e)) => {
            model.lock().fail_with("read", &e);
            return true;
        }
        Err(_) => {
            model.lock().fail("read");
            return true;
        }
    };
    let Some(last) = entries.last().map(|e| e.position) else {
        return false;
    };
    check_delivery(topic, &entries, last_delivered, &mut model.lock());
    match tokio::time::timeout(CALL_TIMEOUT, h.cursor.mark_delete(last)).await {
        Ok(Ok(())) => {
            let mut m = model.lock();
            let md = m.mark_deleted.entry(topic.to_owned()).or_insert(last);
            if last > *md {
                *md = last;
            }
            false
        }
        r => {
            let mut m = model.lock();
            match r {
                Ok(Err(e)) => m.fail_with("mark-delete", &e),
                _ => m.fail("mark-delete"),
            }
            m.md_attempts
                .entry(topic.to_owned())
                .or_default()
                .push(last);
            true
        }
    }
}

/// Checks a batch the consumer of `topic` received, as it arrives, and
/// records it: each message was sent to this topic (else
/// [`ViolationKind::WrongData`]: a read served from the wrong cluster, or
/// corrupt data), and none skips an acknowledged message after the one
/// received before it since the cursor opened (else
/// [`ViolationKind::ConsumerGap`]).
pub fn check_delivery(
    topic: &str,
    entries: &[Entry],
    last_delivered: &mut Option<u64>,
    m: &mut Model,
) {
    for e in entries {
        let n = parse_payload(topic, &e.data);
        let attempted = m.attempted.get(topic).copied().unwrap_or(0);
        let Some(n) = n.filter(|n| *n >= 1 && *n <= attempted) else {
            m.observe(
                ViolationKind::WrongData,
                format!(
                    "{topic}: the consumer read {:?} at {:?}, which was never sent to \
                     this topic",
                    String::from_utf8_lossy(&e.data),
                    e.position
                ),
            );
            continue;
        };
        if let Some(prev) = *last_delivered {
            let skipped: Vec<u64> = m
                .acked
                .get(topic)
                .into_iter()
                .flatten()
                .map(|(_, s)| *s)
                .filter(|s| *s > prev && *s < n)
                .collect();
            if n <= prev || !skipped.is_empty() {
                m.observe(
                    ViolationKind::ConsumerGap,
                    format!(
                        "{topic}: the consumer received #{n} right after #{prev} \
                         (acknowledged and skipped: {skipped:?})"
                    ),
                );
            }
        }
        *last_delivered = Some(n);
        *m.delivered
            .entry(topic.to_owned())
            .or_default()
            .entry(n)
            .or_default() += 1;
    }
}

/// The sequence number of a payload of `topic` (`None`: not one of its).
pub fn parse_payload(topic: &str, data: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(data).ok()?;
    let (t, n) = text.rsplit_once('#')?;
    (t == topic).then(|| n.parse().ok()).flatten()
}

/// Schema puts every 150 ms, on one node then the other.
async fn schema_traffic(directory: Directory, stop: Arc<AtomicBool>, model: Arc<Mutex<Model>>) {
    let mut round: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let id = SCHEMAS[round as usize % SCHEMAS.len()];
        let data = format!("schema of {id} at round {round}").into_bytes();
        let node = directory
            .lock()
            .iter()
            .flatten()
            .nth(round as usize % 2)
            .map(|(n, _)| n.clone());
        if let Some(node) = node {
            match tokio::time::timeout(CALL_TIMEOUT, node.schemas().put(id, &data, &data)).await {
                Ok(Ok(v)) => model.lock().schemas.push((id.to_owned(), v.0, data)),
                Ok(Err(e)) => model.lock().fail_with("schema put", &e),
                Err(_) => model.lock().fail("schema put"),
            }
        }
        tokio::time::sleep(Duration::from_millis(150)).await;
    }
}

/// Opens `topic` on a running node, starting with the one its index picks.
async fn open(
    nodes: &[Option<(Node, u64)>],
    k: usize,
    topic: &str,
    model: &Mutex<Model>,
) -> Option<Handle> {
    let n = nodes.len();
    for j in 0..n {
        let slot = (k + j) % n;
        let Some((node, generation)) = &nodes[slot] else {
            continue;
        };
        let opened = tokio::time::timeout(Duration::from_secs(15), node.open_topic(topic)).await;
        let ml = match opened {
            Ok(Ok(ml)) => ml,
            Ok(Err(e)) => {
                model.lock().fail_with("open topic", &e);
                continue;
            }
            Err(_) => {
                model.lock().fail("open topic");
                continue;
            }
        };
        let cursor = tokio::time::timeout(
            CALL_TIMEOUT,
            ml.open_cursor_at(CURSOR, InitialPosition::Earliest),
        )
        .await;
        match cursor {
            Ok(Ok(cursor)) => {
                check_reopened(topic, cursor.mark_delete_position(), model);
                return Some(Handle {
                    slot,
                    generation: *generation,
                    ml,
                    cursor,
                });
            }
            r => {
                match r {
                    Ok(Err(e)) => model.lock().fail_with("open cursor", &e),
                    _ => model.lock().fail("open cursor"),
                }
                let _ = tokio::time::timeout(CALL_TIMEOUT, node.unload_topic(topic)).await;
            }
        }
    }
    None
}

/// A cursor opened again from the metadata is exactly where the traffic
/// left it: never behind the acknowledged mark-delete (it moved back), never
/// ahead of every one it asked for.
fn check_reopened(topic: &str, at: Position, model: &Mutex<Model>) {
    let mut m = model.lock();
    *m.opens.entry(topic.to_owned()).or_default() += 1;
    let Some(md) = m.mark_deleted.get(topic).copied() else {
        return;
    };
    if at < md {
        m.observe(
            ViolationKind::CursorBehind,
            format!(
                "cursor {CURSOR} of {topic} reopened at {at:?}, behind its acknowledged \
                 mark-delete {md:?} (it moved back)"
            ),
        );
    } else if !m.allowed_mark_delete(topic, at) {
        let highest = m.highest_mark_delete(topic);
        m.observe(
            ViolationKind::CursorAhead,
            format!(
                "cursor {CURSOR} of {topic} reopened at {at:?}, ahead of every mark-delete \
                 asked for (acknowledged {md:?}, highest asked {highest:?})"
            ),
        );
    }
}
