//! Live traffic during a history: a producer and a consumer per topic, and
//! schema puts, on whichever node owns (or can take) the topic. Everything a
//! call acknowledged is recorded in the [`Model`] the checker compares with
//! what the stack holds in the end.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_admin::Node;
use bkswitch_managed_ledger::{InitialPosition, ManagedCursor, ManagedLedger, Position};
use parking_lot::Mutex;

use crate::plan::{SCHEMAS, TOPICS};

/// The cursor every topic's consumer uses.
pub const CURSOR: &str = "sub";

/// What the traffic was told succeeded.
#[derive(Debug, Default, Clone)]
pub struct Model {
    /// Per topic: every acknowledged publish (its position and sequence
    /// number), in the order acknowledged.
    pub acked: BTreeMap<String, Vec<(Position, u64)>>,
    /// Per topic: the highest acknowledged mark-delete of [`CURSOR`].
    pub mark_deleted: BTreeMap<String, Position>,
    /// Every acknowledged schema put: id, version, data.
    pub schemas: Vec<(String, i64, Vec<u8>)>,
    /// Calls that failed (not acknowledged), by kind.
    pub failures: BTreeMap<&'static str, u64>,
}

impl Model {
    /// Acknowledged publishes over every topic.
    pub fn published(&self) -> usize {
        self.acked.values().map(Vec::len).sum()
    }

    fn fail(&mut self, kind: &'static str) {
        *self.failures.entry(kind).or_default() += 1;
    }
}

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
    let mut handles: Vec<Option<Handle>> = TOPICS.iter().map(|_| None).collect();
    let mut seq: Vec<u64> = vec![0; TOPICS.len()];
    let mut round: u64 = 0;
    while !stop.load(Ordering::SeqCst) {
        round += 1;
        let nodes = directory.lock().clone();
        for (k, topic) in TOPICS.iter().enumerate() {
            // A handle of a node that crashed or restarted is dropped.
            if let Some(h) = &handles[k] {
                let current = nodes.get(h.slot).and_then(|n| n.as_ref()).map(|n| n.1);
                if current != Some(h.generation) {
                    handles[k] = None;
                }
            }
            if handles[k].is_none() {
                handles[k] = open(&nodes, k, topic, &model).await;
            }
            let Some(h) = &handles[k] else { continue };
            let mut broken = false;
            for _ in 0..2 {
                seq[k] += 1;
                let payload = format!("{topic}#{}", seq[k]);
                match tokio::time::timeout(CALL_TIMEOUT, h.ml.append(payload.into_bytes())).await {
                    Ok(Ok(pos)) => model
                        .lock()
                        .acked
                        .entry((*topic).to_owned())
                        .or_default()
                        .push((pos, seq[k])),
                    _ => {
                        model.lock().fail("publish");
                        broken = true;
                        break;
                    }
                }
            }
            if !broken {
                match tokio::time::timeout(CALL_TIMEOUT, h.cursor.read_entries(5)).await {
                    Ok(Ok(entries)) => {
                        if let Some(last) = entries.last() {
                            let pos = last.position;
                            match tokio::time::timeout(CALL_TIMEOUT, h.cursor.mark_delete(pos))
                                .await
                            {
                                Ok(Ok(())) => {
                                    let mut m = model.lock();
                                    let md =
                                        m.mark_deleted.entry((*topic).to_owned()).or_insert(pos);
                                    if pos > *md {
                                        *md = pos;
                                    }
                                }
                                _ => {
                                    model.lock().fail("mark-delete");
                                    broken = true;
                                }
                            }
                        }
                    }
                    _ => {
                        model.lock().fail("read");
                        broken = true;
                    }
                }
            }
            if broken {
                // Reopen from the metadata next round: the handle may be
                // fenced or hold a stale view.
                if let Some(h) = handles[k].take() {
                    if let Some(Some((node, _))) = nodes.get(h.slot) {
                        let _ = tokio::time::timeout(CALL_TIMEOUT, node.unload_topic(topic)).await;
                    }
                }
            }
        }
        if round % 3 == 0 {
            let id = SCHEMAS[(round / 3) as usize % SCHEMAS.len()];
            let data = format!("schema of {id} at round {round}").into_bytes();
            if let Some((node, _)) = nodes.iter().flatten().nth(round as usize % 2) {
                match tokio::time::timeout(CALL_TIMEOUT, node.schemas().put(id, &data, &data)).await
                {
                    Ok(Ok(v)) => model.lock().schemas.push((id.to_owned(), v.0, data)),
                    _ => model.lock().fail("schema put"),
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
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
        let Ok(Ok(ml)) = opened else {
            model.lock().fail("open topic");
            continue;
        };
        let cursor = tokio::time::timeout(
            CALL_TIMEOUT,
            ml.open_cursor_at(CURSOR, InitialPosition::Earliest),
        )
        .await;
        match cursor {
            Ok(Ok(cursor)) => {
                return Some(Handle {
                    slot,
                    generation: *generation,
                    ml,
                    cursor,
                })
            }
            _ => {
                model.lock().fail("open cursor");
                let _ = tokio::time::timeout(CALL_TIMEOUT, node.unload_topic(topic)).await;
            }
        }
    }
    None
}
