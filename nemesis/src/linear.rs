//! Linearizability of [`MetadataStore`] histories (issue #36, item 6).
//!
//! Several clients run random conditional writes, deletes and reads on a few
//! keys at once, each through a store of its own (its own session, its own
//! wrappers); every call's invocation and return are recorded in the order
//! they happened, and the history is checked against a sequential model of a
//! versioned key-value tree with stateright's [`LinearizabilityTester`] (a
//! maintained checker: it searches the orders the history allows, the way
//! Knossos and Porcupine do, for histories of this size).
//!
//! What a call's answer means for the model:
//! - a definite answer (a value, a version, a condition that did not hold)
//!   is checked;
//! - a refusal that writes nothing by contract (`WritesPaused`, `Closed`,
//!   `InvalidArgument`) and any failed read have no effect;
//! - an ambiguous failure of a write (`Unavailable`, `SessionExpired`,
//!   `Internal`: it may or may not have been applied) leaves the call open
//!   for ever: the tester may then place it anywhere after its invocation, or
//!   nowhere; the client goes on as a new thread (it cannot tell either).

use std::fmt;
use std::sync::Arc;

use bkswitch_metadata_store::{ErrorKind, ExpectedVersion, MetadataError, MetadataStore};
use parking_lot::Mutex;
use stateright::semantics::{ConsistencyTester, LinearizabilityTester, SequentialSpec};

/// The keys a history writes (few, so that calls collide).
pub const KEYS: usize = 2;

/// The condition of a write, as the model sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Cond {
    /// No condition.
    Any,
    /// The key must not exist.
    Absent,
    /// The key must exist at this version.
    Version(i64),
}

impl Cond {
    fn expected(self) -> ExpectedVersion {
        match self {
            Cond::Any => ExpectedVersion::Any,
            Cond::Absent => ExpectedVersion::NotExists,
            Cond::Version(v) => ExpectedVersion::Exactly(v),
        }
    }
}

/// One call of a history.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `get` of a key.
    Get(usize),
    /// `put` of a value under a condition.
    Put(usize, u8, Cond),
    /// `delete` under a condition (`Absent` is never drawn for deletes).
    Delete(usize, Cond),
}

/// What a call answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Ret {
    /// A read's value and version (`None`: no such key).
    Got(Option<(u8, i64)>),
    /// A put's new version.
    Written(i64),
    /// A delete that deleted.
    Deleted,
    /// The condition did not hold (`BadVersion`, `AlreadyExists`,
    /// `NotFound`): nothing written.
    Mismatch,
    /// Refused before anything was written, or a read that failed: no
    /// effect, whatever the model holds.
    NoEffect,
}

/// The sequential model: each key absent or holding a value at a version
/// (a new key is at version 0, every write adds one).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Tree {
    keys: [Option<(u8, i64)>; KEYS],
}

impl SequentialSpec for Tree {
    type Op = Op;
    type Ret = Ret;

    fn invoke(&mut self, op: &Op) -> Ret {
        match *op {
            Op::Get(k) => Ret::Got(self.keys[k]),
            Op::Put(k, value, cond) => {
                let now = self.keys[k];
                let holds = match (cond, now) {
                    (Cond::Any, _) | (Cond::Absent, None) => true,
                    (Cond::Version(v), Some((_, at))) => v == at,
                    _ => false,
                };
                if !holds {
                    return Ret::Mismatch;
                }
                let version = now.map_or(0, |(_, at)| at + 1);
                self.keys[k] = Some((value, version));
                Ret::Written(version)
            }
            Op::Delete(k, cond) => match (cond, self.keys[k]) {
                (_, None) => Ret::Mismatch,
                (Cond::Version(v), Some((_, at))) if v != at => Ret::Mismatch,
                _ => {
                    self.keys[k] = None;
                    Ret::Deleted
                }
            },
        }
    }

    fn is_valid_step(&mut self, op: &Op, ret: &Ret) -> bool {
        *ret == Ret::NoEffect || self.invoke(op) == *ret
    }
}

/// A call's outcome: an answer for the model, or open for ever.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Checked against the model.
    Answer(Ret),
    /// An ambiguous write: may or may not have been applied.
    Unknown,
}

/// Classifies a store error for `op`.
pub fn classify_error(op: &Op, e: &MetadataError) -> Outcome {
    match e.kind() {
        ErrorKind::BadVersion | ErrorKind::AlreadyExists | ErrorKind::NotFound => {
            Outcome::Answer(Ret::Mismatch)
        }
        _ if matches!(op, Op::Get(_)) => Outcome::Answer(Ret::NoEffect),
        ErrorKind::WritesPaused | ErrorKind::Closed | ErrorKind::InvalidArgument => {
            Outcome::Answer(Ret::NoEffect)
        }
        _ => Outcome::Unknown,
    }
}

/// Runs `op` on `store` with the keys under `root`.
pub async fn run_op(store: &dyn MetadataStore, root: &str, op: Op) -> Outcome {
    let key = |k: usize| format!("{root}/k{k}");
    let r = match op {
        Op::Get(k) => store
            .get(&key(k))
            .await
            .map(|g| Ret::Got(g.map(|g| (g.value.first().copied().unwrap_or(0), g.stat.version)))),
        Op::Put(k, value, cond) => store
            .put(&key(k), &[value], cond.expected())
            .await
            .map(|s| Ret::Written(s.version)),
        Op::Delete(k, cond) => store
            .delete(&key(k), cond.expected())
            .await
            .map(|()| Ret::Deleted),
    };
    match r {
        Ok(ret) => Outcome::Answer(ret),
        Err(e) => classify_error(&op, &e),
    }
}

/// A history being recorded: invocations and returns in the order they
/// happened, across every client.
#[derive(Clone)]
pub struct Recorder {
    inner: Arc<Mutex<RecorderInner>>,
}

struct RecorderInner {
    tester: LinearizabilityTester<usize, Tree>,
    next_thread: usize,
    calls: usize,
    unknown: usize,
    no_effect: usize,
    log: Vec<String>,
}

impl fmt::Debug for Recorder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = self.inner.lock();
        f.debug_struct("Recorder")
            .field("calls", &i.calls)
            .field("unknown", &i.unknown)
            .finish()
    }
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder::new()
    }
}

/// What a checked history held.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LinearFigures {
    /// Calls made.
    pub calls: usize,
    /// Writes whose outcome stayed unknown.
    pub unknown: usize,
    /// Calls refused without effect (paused writes, failed reads).
    pub no_effect: usize,
}

impl Recorder {
    /// An empty history of an empty tree.
    pub fn new() -> Recorder {
        Recorder {
            inner: Arc::new(Mutex::new(RecorderInner {
                tester: LinearizabilityTester::new(Tree::default()),
                next_thread: 0,
                calls: 0,
                unknown: 0,
                no_effect: 0,
                log: Vec::new(),
            })),
        }
    }

    /// A new thread id (a client, or a client again after an unknown
    /// outcome).
    pub fn thread(&self) -> usize {
        let mut i = self.inner.lock();
        i.next_thread += 1;
        i.next_thread
    }

    /// Runs `op` on `store` as `thread`, recording it; returns the thread
    /// the client goes on as.
    pub async fn call(
        &self,
        thread: usize,
        store: &dyn MetadataStore,
        root: &str,
        op: Op,
    ) -> usize {
        {
            let mut i = self.inner.lock();
            i.calls += 1;
            i.log.push(format!("t{thread} invoke {op:?}"));
            if let Err(e) = i.tester.on_invoke(thread, op) {
                i.log.push(format!("invalid history: {e}"));
            }
        }
        let outcome = run_op(store, root, op).await;
        let mut i = self.inner.lock();
        match outcome {
            Outcome::Answer(ret) => {
                if ret == Ret::NoEffect {
                    i.no_effect += 1;
                }
                i.log.push(format!("t{thread} return {ret:?}"));
                if let Err(e) = i.tester.on_return(thread, ret) {
                    i.log.push(format!("invalid history: {e}"));
                }
                thread
            }
            Outcome::Unknown => {
                i.log.push(format!("t{thread} unknown"));
                i.unknown += 1;
                i.next_thread += 1;
                i.next_thread
            }
        }
    }

    /// A history read back from the text [`check`](Self::check) reports
    /// (one `t<thread> invoke <op>` / `return <answer>` / `unknown` per
    /// line; a first line that is not an event is skipped): a kept history
    /// is checked again as it was recorded.
    ///
    /// # Errors
    ///
    /// The line that is not an event of a history.
    pub fn replay(text: &str) -> Result<Recorder, String> {
        let r = Recorder::new();
        {
            let mut i = r.inner.lock();
            for (n, line) in text.lines().enumerate() {
                let bad = || format!("line {}: not an event of a history: {line:?}", n + 1);
                let Some((thread, event)) = line.strip_prefix('t').and_then(|l| l.split_once(' '))
                else {
                    if n == 0 {
                        continue;
                    }
                    return Err(bad());
                };
                let thread: usize = thread.parse().map_err(|_| bad())?;
                i.log.push(line.to_owned());
                i.next_thread = i.next_thread.max(thread);
                if let Some(op) = event.strip_prefix("invoke ") {
                    i.calls += 1;
                    let op = parse_op(op).ok_or_else(bad)?;
                    i.tester
                        .on_invoke(thread, op)
                        .map_err(|e| format!("{}: {e}", bad()))?;
                } else if let Some(ret) = event.strip_prefix("return ") {
                    let ret = parse_ret(ret).ok_or_else(bad)?;
                    if ret == Ret::NoEffect {
                        i.no_effect += 1;
                    }
                    i.tester
                        .on_return(thread, ret)
                        .map_err(|e| format!("{}: {e}", bad()))?;
                } else if event == "unknown" {
                    i.unknown += 1;
                } else {
                    return Err(bad());
                }
            }
        }
        Ok(r)
    }

    /// Checks the history: its figures, or the history as recorded.
    ///
    /// # Errors
    ///
    /// The recorded history, one call per line, when no order of it is
    /// allowed by the model.
    pub fn check(&self) -> Result<LinearFigures, String> {
        let i = self.inner.lock();
        let figures = LinearFigures {
            calls: i.calls,
            unknown: i.unknown,
            no_effect: i.no_effect,
        };
        if i.tester.is_consistent() {
            Ok(figures)
        } else {
            Err(format!(
                "not linearizable ({} calls):\n{}",
                i.calls,
                i.log.join("\n")
            ))
        }
    }
}

/// Draws one call for a client.
pub fn draw(rng: &mut fastrand::Rng, value: u8) -> Op {
    let k = rng.usize(..KEYS);
    let cond = match rng.u8(..4) {
        0 => Cond::Any,
        1 => Cond::Absent,
        _ => Cond::Version(rng.i64(0..3)),
    };
    match rng.u8(..10) {
        0..=3 => Op::Get(k),
        4..=7 => Op::Put(k, value, cond),
        _ => Op::Delete(
            k,
            if cond == Cond::Absent {
                Cond::Any
            } else {
                cond
            },
        ),
    }
}

/// Runs one client: `calls` random calls on `store`, each with a value of
/// its own (`client * 40 + i`, so that a stale read shows), waiting up to
/// `gap` between calls (zero: only yields).
pub async fn client(
    recorder: Recorder,
    store: Arc<dyn MetadataStore>,
    root: String,
    client: u8,
    calls: u8,
    seed: u64,
    gap: std::time::Duration,
) {
    let mut rng = fastrand::Rng::with_seed(seed);
    let mut thread = recorder.thread();
    for i in 0..calls {
        let op = draw(&mut rng, client.wrapping_mul(40).wrapping_add(i));
        thread = recorder.call(thread, store.as_ref(), &root, op).await;
        if !gap.is_zero() {
            tokio::time::sleep(gap.mul_f64(rng.f64())).await;
        } else if rng.bool() {
            tokio::task::yield_now().await;
        }
    }
}

/// `Get(0)`, `Put(1, 40, Version(2))`, `Delete(0, Any)`: an [`Op`] as its
/// `Debug` form writes it.
fn parse_op(s: &str) -> Option<Op> {
    let (name, args) = s.strip_suffix(')')?.split_once('(')?;
    let mut parts = args.splitn(3, ", ");
    let key: usize = parts.next()?.parse().ok().filter(|k| *k < KEYS)?;
    match name {
        "Get" => Some(Op::Get(key)),
        "Put" => {
            let value = parts.next()?.parse().ok()?;
            Some(Op::Put(key, value, parse_cond(parts.next()?)?))
        }
        "Delete" => Some(Op::Delete(key, parse_cond(parts.next()?)?)),
        _ => None,
    }
}

fn parse_cond(s: &str) -> Option<Cond> {
    match s {
        "Any" => Some(Cond::Any),
        "Absent" => Some(Cond::Absent),
        _ => s
            .strip_prefix("Version(")?
            .strip_suffix(')')?
            .parse()
            .ok()
            .map(Cond::Version),
    }
}

/// `Got(Some((3, 0)))`, `Written(1)`, `Deleted`, `Mismatch`, `NoEffect`: a
/// [`Ret`] as its `Debug` form writes it.
fn parse_ret(s: &str) -> Option<Ret> {
    match s {
        "Deleted" => return Some(Ret::Deleted),
        "Mismatch" => return Some(Ret::Mismatch),
        "NoEffect" => return Some(Ret::NoEffect),
        "Got(None)" => return Some(Ret::Got(None)),
        _ => {}
    }
    if let Some(v) = s.strip_prefix("Written(") {
        return v.strip_suffix(')')?.parse().ok().map(Ret::Written);
    }
    let (value, version) = s
        .strip_prefix("Got(Some((")?
        .strip_suffix(")))")?
        .split_once(", ")?;
    Some(Ret::Got(Some((value.parse().ok()?, version.parse().ok()?))))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_model_is_a_versioned_tree() {
        let mut t = Tree::default();
        assert_eq!(t.invoke(&Op::Put(0, 1, Cond::Version(0))), Ret::Mismatch);
        assert_eq!(t.invoke(&Op::Put(0, 1, Cond::Absent)), Ret::Written(0));
        assert_eq!(t.invoke(&Op::Put(0, 2, Cond::Absent)), Ret::Mismatch);
        assert_eq!(t.invoke(&Op::Put(0, 2, Cond::Version(0))), Ret::Written(1));
        assert_eq!(t.invoke(&Op::Get(0)), Ret::Got(Some((2, 1))));
        assert_eq!(t.invoke(&Op::Delete(0, Cond::Version(0))), Ret::Mismatch);
        assert_eq!(t.invoke(&Op::Delete(0, Cond::Any)), Ret::Deleted);
        assert_eq!(t.invoke(&Op::Delete(0, Cond::Any)), Ret::Mismatch);
        assert_eq!(t.invoke(&Op::Put(0, 3, Cond::Any)), Ret::Written(0));
    }

    #[test]
    fn a_stale_read_is_not_linearizable_and_an_unknown_write_may_land() {
        // t1 writes and returns; then t2 reads the old (absent) value.
        let mut stale = LinearizabilityTester::new(Tree::default());
        stale.on_invoke(1, Op::Put(0, 7, Cond::Any)).unwrap();
        stale.on_return(1, Ret::Written(0)).unwrap();
        stale.on_invoke(2, Op::Get(0)).unwrap();
        stale.on_return(2, Ret::Got(None)).unwrap();
        assert!(!stale.is_consistent());
        // An unknown write (never returns) may be seen, or not.
        for seen in [Some((7, 0)), None] {
            let mut t = LinearizabilityTester::new(Tree::default());
            t.on_invoke(1, Op::Put(0, 7, Cond::Any)).unwrap();
            t.on_invoke(2, Op::Get(0)).unwrap();
            t.on_return(2, Ret::Got(seen)).unwrap();
            assert!(t.is_consistent(), "{seen:?}");
        }
        // A lost acknowledged write is caught even after an unknown one.
        let mut lost = LinearizabilityTester::new(Tree::default());
        lost.on_invoke(1, Op::Put(0, 7, Cond::Any)).unwrap();
        lost.on_return(1, Ret::Written(0)).unwrap();
        lost.on_invoke(3, Op::Put(1, 9, Cond::Any)).unwrap();
        lost.on_invoke(2, Op::Get(0)).unwrap();
        lost.on_return(2, Ret::Got(None)).unwrap();
        assert!(!lost.is_consistent());
    }
}
