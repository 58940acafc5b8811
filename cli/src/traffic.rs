//! Live traffic for the demo and the end-to-end tests: one producer and one
//! acknowledging consumer per topic, with per-phase publish latencies and
//! consumer gap/duplicate detection.
//!
//! Every payload carries its producer's **incarnation** (a number drawn when
//! the [`Traffic`] starts, different after each restart) and its topic-local
//! sequence number within that incarnation. A consumer follows the sequence of
//! each incarnation separately: within one, a higher number than the next
//! expected is a **gap** (a lost acknowledged entry), a lower or equal one a
//! **duplicate** (at-least-once redelivery). Entries of an earlier
//! incarnation (the backlog a restarted consumer resumes) are counted as
//! **resumed backlog**; their sequence starts wherever the previous run's
//! acknowledgements stopped, and gaps after that are gaps. Publishes are
//! retried on retryable errors and every failed attempt is counted.
//!
//! With an [`AckLog`], every acknowledged publish is appended to it (topic,
//! ledger, entry, incarnation, sequence, size) before it is counted: a
//! checker reads each one back after the process is gone, killed or not.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_managed_ledger::{ManagedCursor, ManagedLedger, Position};
use bytes::Bytes;
use parking_lot::Mutex;
use serde::Serialize;
use tokio::task::JoinSet;

use crate::ack_log::{AckLog, AckRecord};

/// Phase of the run a publish latency is attributed to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum TrafficPhase {
    /// Before the switch directive.
    Before,
    /// From the directive until the switch reached SWITCHED.
    During,
    /// After the switch.
    After,
}

impl TrafficPhase {
    fn from_u8(v: u8) -> TrafficPhase {
        match v {
            0 => TrafficPhase::Before,
            1 => TrafficPhase::During,
            _ => TrafficPhase::After,
        }
    }
}

/// Publish statistics of one phase.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PhaseStats {
    /// Acknowledged publishes.
    pub published: u64,
    /// Acknowledged publishes per second over the phase.
    pub throughput_per_sec: f64,
    /// Median publish latency, microseconds.
    pub p50_us: u64,
    /// 99th percentile publish latency, microseconds.
    pub p99_us: u64,
    /// Phase length, milliseconds.
    pub duration_ms: u64,
}

/// What a [`Traffic`] run observed.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct TrafficReport {
    /// Acknowledged publishes.
    pub published: u64,
    /// Entries of this run's producers delivered to consumers (first
    /// deliveries only).
    pub consumed: u64,
    /// Entries of an earlier incarnation's producers (published before a
    /// restart, not acknowledged then) delivered to this run's consumers
    /// (first deliveries only).
    pub resumed_backlog: u64,
    /// This run's producer incarnation.
    pub incarnation: u64,
    /// Failed publish attempts (each retried).
    pub publish_failures: u64,
    /// Sequence numbers a consumer never saw although a later one of the same
    /// incarnation arrived.
    pub consumer_gaps: u64,
    /// Redelivered entries (at-least-once duplicates).
    pub consumer_duplicates: u64,
    /// Failed consumer reads or acknowledgements (each retried).
    pub consumer_errors: u64,
    /// Per-phase publish statistics.
    pub phases: BTreeMap<String, PhaseStats>,
    /// First publish error seen, if any.
    pub first_publish_error: Option<String>,
    /// First consumer error seen, if any.
    pub first_consumer_error: Option<String>,
    /// The last mark-delete position each consumer persisted successfully.
    #[serde(skip)]
    pub acknowledged: BTreeMap<String, Position>,
}

/// One topic under traffic.
#[derive(Debug, Clone)]
pub struct TopicHandle {
    /// The topic's managed ledger.
    pub ledger: ManagedLedger,
    /// The consumer's cursor.
    pub cursor: ManagedCursor,
}

#[derive(Default)]
struct Shared {
    incarnation: u64,
    published: AtomicU64,
    consumed: AtomicU64,
    resumed_backlog: AtomicU64,
    publish_failures: AtomicU64,
    gaps: AtomicU64,
    duplicates: AtomicU64,
    consumer_errors: AtomicU64,
    phase: AtomicU8,
    stop_producers: AtomicBool,
    stop_consumers: AtomicBool,
    latencies: Mutex<[Vec<u32>; 3]>,
    phase_started: Mutex<[Option<Instant>; 4]>,
    first_publish_error: Mutex<Option<String>>,
    first_consumer_error: Mutex<Option<String>>,
    /// Last acknowledged mark-delete position per topic.
    acked: Mutex<BTreeMap<String, Position>>,
    /// Highest sequence published per topic.
    last_published: Mutex<BTreeMap<String, u64>>,
    /// Highest sequence consumed per topic.
    last_consumed: Mutex<BTreeMap<String, u64>>,
    /// Where acknowledged publishes are logged, if anywhere.
    ack_log: Option<Arc<AckLog>>,
    /// Whether consumers trim the ledgers they consumed.
    trim: bool,
}

/// Options of [`Traffic::start_with`].
#[derive(Debug, Clone, Default)]
pub struct TrafficOptions {
    /// Append every acknowledged publish here before counting it.
    pub ack_log: Option<Arc<AckLog>>,
    /// After a mark-delete that reached a later ledger, trim the ledgers
    /// every cursor has consumed (as a broker does after a rollover), so
    /// that consumed ledgers leave the managed ledger and are deleted.
    pub trim_consumed_ledgers: bool,
}

/// Producers and consumers running on a set of topics.
pub struct Traffic {
    shared: Arc<Shared>,
    producers: JoinSet<()>,
    consumers: JoinSet<()>,
}

impl std::fmt::Debug for Traffic {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Traffic")
            .field("published", &self.shared.published.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

/// A traffic payload of `size` bytes (at least 16): the sequence number
/// `seq`, then the producer `incarnation`, both big-endian, then zeros.
pub fn encode_payload(incarnation: u64, seq: u64, size: usize) -> Bytes {
    let mut v = vec![0u8; size.max(16)];
    v[..8].copy_from_slice(&seq.to_be_bytes());
    v[8..16].copy_from_slice(&incarnation.to_be_bytes());
    Bytes::from(v)
}

/// `(incarnation, seq)` of a payload; payloads shorter than 16 bytes have
/// incarnation 0.
fn decode(data: &[u8]) -> Option<(u64, u64)> {
    let word = |r: std::ops::Range<usize>| {
        data.get(r)
            .and_then(|b| b.try_into().ok())
            .map(u64::from_be_bytes)
    };
    Some((word(8..16).unwrap_or(0), word(0..8)?))
}

/// A fresh producer incarnation: the start time in nanoseconds (never 0).
fn new_incarnation() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1)
        .max(1)
}

impl Traffic {
    /// Starts one producer (`rate_per_topic` publishes per second, payloads of
    /// `payload_size` bytes) and one consumer per topic, with a new producer
    /// incarnation. Sequence numbers start at 1.
    pub fn start(topics: &[TopicHandle], rate_per_topic: u32, payload_size: usize) -> Traffic {
        Traffic::start_with(
            topics,
            rate_per_topic,
            payload_size,
            TrafficOptions::default(),
        )
    }

    /// [`start`](Traffic::start) with `options`: every acknowledged publish
    /// appended to the ack log before it is counted (a producer whose line
    /// cannot be written stops, its publish counted as failed: it could not
    /// say what it was told), consumed ledgers trimmed.
    pub fn start_with(
        topics: &[TopicHandle],
        rate_per_topic: u32,
        payload_size: usize,
        options: TrafficOptions,
    ) -> Traffic {
        let shared = Arc::new(Shared {
            incarnation: new_incarnation(),
            ack_log: options.ack_log,
            trim: options.trim_consumed_ledgers,
            ..Shared::default()
        });
        shared.phase_started.lock()[0] = Some(Instant::now());
        let mut producers = JoinSet::new();
        let mut consumers = JoinSet::new();
        let interval = Duration::from_secs_f64(1.0 / f64::from(rate_per_topic.max(1)));
        for t in topics {
            let s = shared.clone();
            let ml = t.ledger.clone();
            producers.spawn(async move { produce(s, ml, interval, payload_size).await });
            let s = shared.clone();
            let cursor = t.cursor.clone();
            let ml = t.ledger.clone();
            consumers.spawn(async move { consume(s, ml, cursor).await });
        }
        Traffic {
            shared,
            producers,
            consumers,
        }
    }

    /// Attributes the following publishes to `phase`.
    pub fn set_phase(&self, phase: TrafficPhase) {
        let i = phase as usize;
        self.shared.phase.store(i as u8, Ordering::Release);
        self.shared.phase_started.lock()[i] = Some(Instant::now());
    }

    /// Acknowledged publishes so far.
    pub fn published(&self) -> u64 {
        self.shared.published.load(Ordering::Relaxed)
    }

    /// Entries delivered to consumers so far (first deliveries).
    pub fn consumed(&self) -> u64 {
        self.shared.consumed.load(Ordering::Relaxed)
    }

    /// The last mark-delete position each consumer acknowledged successfully.
    pub fn acknowledged(&self) -> BTreeMap<String, Position> {
        self.shared.acked.lock().clone()
    }

    /// Stops the producers, lets the consumers drain everything published
    /// (up to `drain_timeout`), stops them and reports.
    pub async fn stop(mut self, drain_timeout: Duration) -> TrafficReport {
        self.shared.stop_producers.store(true, Ordering::Release);
        while self.producers.join_next().await.is_some() {}
        let end = Instant::now();
        let deadline = Instant::now() + drain_timeout;
        loop {
            let done = {
                let p = self.shared.last_published.lock();
                let c = self.shared.last_consumed.lock();
                p.iter().all(|(k, v)| c.get(k).copied().unwrap_or(0) >= *v)
            };
            if done || Instant::now() > deadline {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.shared.stop_consumers.store(true, Ordering::Release);
        while self.consumers.join_next().await.is_some() {}
        self.report(end)
    }

    fn report(&self, end: Instant) -> TrafficReport {
        let s = &self.shared;
        let starts = *s.phase_started.lock();
        let lat = s.latencies.lock();
        let mut phases = BTreeMap::new();
        for (i, name) in ["before", "during", "after"].iter().enumerate() {
            let Some(start) = starts[i] else { continue };
            let stop = starts[i + 1..]
                .iter()
                .flatten()
                .next()
                .copied()
                .unwrap_or(end);
            let mut v = lat[i].clone();
            v.sort_unstable();
            let pct = |q: f64| -> u64 {
                if v.is_empty() {
                    0
                } else {
                    u64::from(v[((v.len() - 1) as f64 * q).round() as usize])
                }
            };
            let duration = stop.saturating_duration_since(start);
            phases.insert(
                (*name).to_owned(),
                PhaseStats {
                    published: v.len() as u64,
                    throughput_per_sec: v.len() as f64 / duration.as_secs_f64().max(1e-3),
                    p50_us: pct(0.50),
                    p99_us: pct(0.99),
                    duration_ms: duration.as_millis() as u64,
                },
            );
        }
        TrafficReport {
            published: s.published.load(Ordering::Relaxed),
            consumed: s.consumed.load(Ordering::Relaxed),
            resumed_backlog: s.resumed_backlog.load(Ordering::Relaxed),
            incarnation: s.incarnation,
            publish_failures: s.publish_failures.load(Ordering::Relaxed),
            consumer_gaps: s.gaps.load(Ordering::Relaxed),
            consumer_duplicates: s.duplicates.load(Ordering::Relaxed),
            consumer_errors: s.consumer_errors.load(Ordering::Relaxed),
            phases,
            first_publish_error: s.first_publish_error.lock().clone(),
            first_consumer_error: s.first_consumer_error.lock().clone(),
            acknowledged: s.acked.lock().clone(),
        }
    }
}

async fn produce(s: Arc<Shared>, ml: ManagedLedger, interval: Duration, size: usize) {
    let name = ml.name().to_owned();
    let mut seq = 1u64;
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    while !s.stop_producers.load(Ordering::Acquire) {
        tick.tick().await;
        let started = Instant::now();
        let position = loop {
            match ml.append(encode_payload(s.incarnation, seq, size)).await {
                Ok(position) => break position,
                Err(e) => {
                    s.publish_failures.fetch_add(1, Ordering::Relaxed);
                    s.first_publish_error
                        .lock()
                        .get_or_insert_with(|| format!("{name}: {e}"));
                    if !e.is_retryable() || s.stop_producers.load(Ordering::Acquire) {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        };
        if let Some(log) = &s.ack_log {
            let record = AckRecord {
                topic: name.clone(),
                ledger_id: position.ledger_id,
                entry_id: position.entry_id,
                incarnation: s.incarnation,
                seq,
                size: size.max(16),
            };
            if let Err(e) = log.record(&record) {
                s.publish_failures.fetch_add(1, Ordering::Relaxed);
                s.first_publish_error.lock().get_or_insert_with(|| {
                    format!("{name}: ack log {}: {e}", log.path().display())
                });
                return;
            }
        }
        let micros = started.elapsed().as_micros().min(u128::from(u32::MAX)) as u32;
        let phase = TrafficPhase::from_u8(s.phase.load(Ordering::Acquire)) as usize;
        s.latencies.lock()[phase].push(micros);
        s.published.fetch_add(1, Ordering::Relaxed);
        s.last_published.lock().insert(name.clone(), seq);
        seq += 1;
    }
}

async fn consume(s: Arc<Shared>, ml: ManagedLedger, cursor: ManagedCursor) {
    let name = ml.name().to_owned();
    // The next sequence expected per incarnation: this run's starts at 1, an
    // earlier one's wherever its first resumed entry is.
    let mut expected: BTreeMap<u64, u64> = BTreeMap::from([(s.incarnation, 1)]);
    while !s.stop_consumers.load(Ordering::Acquire) {
        let entries = match cursor.read_entries(64).await {
            Ok(e) => e,
            Err(e) => {
                s.consumer_errors.fetch_add(1, Ordering::Relaxed);
                s.first_consumer_error
                    .lock()
                    .get_or_insert_with(|| format!("{name}: {e}"));
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
        };
        let Some(last) = entries.last().map(|e| e.position) else {
            tokio::time::sleep(Duration::from_millis(5)).await;
            continue;
        };
        for e in &entries {
            let Some((incarnation, seq)) = decode(&e.data) else {
                s.duplicates.fetch_add(1, Ordering::Relaxed);
                continue;
            };
            let first = if incarnation == s.incarnation {
                &s.consumed
            } else {
                &s.resumed_backlog
            };
            let next = expected.entry(incarnation).or_insert(seq);
            if seq < *next {
                s.duplicates.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            s.gaps.fetch_add(seq - *next, Ordering::Relaxed);
            first.fetch_add(1, Ordering::Relaxed);
            *next = seq + 1;
        }
        let own = expected.get(&s.incarnation).copied().unwrap_or(1);
        s.last_consumed.lock().insert(name.clone(), own - 1);
        loop {
            match cursor.mark_delete(last).await {
                Ok(()) => {
                    let previous = s.acked.lock().insert(name.clone(), last);
                    if s.trim && previous.is_some_and(|p| p.ledger_id < last.ledger_id) {
                        // Best effort, as a broker's background trim: a
                        // failure leaves the ledgers for the next one.
                        let _ = ml.trim_consumed_ledgers().await;
                    }
                    break;
                }
                Err(e) => {
                    s.consumer_errors.fetch_add(1, Ordering::Relaxed);
                    s.first_consumer_error
                        .lock()
                        .get_or_insert_with(|| format!("{name}: mark-delete: {e}"));
                    if !e.is_retryable() || s.stop_consumers.load(Ordering::Acquire) {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }
}
