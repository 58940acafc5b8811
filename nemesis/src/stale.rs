//! Stale reads, as a ZooKeeper ensemble serves them: a session's reads are
//! answered by the follower it is connected to, which may be behind the
//! leader.
//!
//! ZooKeeper promises sequential consistency per session, not linearizable
//! reads: a session never sees an older state than one it has already seen
//! (or written), but it may see a state older than another session's
//! acknowledged write until it calls `sync()`. Writes, conditional or not,
//! go through the leader: a compare-and-set against a version a stale read
//! returned fails with `BadVersion`, and a session sees its own writes (and
//! the leader's answer to a failed one) in its next reads.
//!
//! The model: while stale reads are on, a [`Follower`] takes a snapshot of
//! the whole tree right after every write a session makes through it and
//! every [`SNAPSHOT_EVERY`] (virtual time, for the changes no session makes:
//! ephemeral nodes of an expired session, the nemesis's own writes), keeping
//! those of the last [`LAG`]. Each is taken at one instant (the in-memory
//! tree answers without yielding, and a history runs on a current-thread
//! runtime), so a snapshot is a state the leader was in. A session's
//! [`StaleReads`] layer stands for the follower the session is connected
//! to, behind the leader by a lag of its own (0 to 1.5 s, drawn per
//! session): it answers a `get`, `exists` or `children` from the newest
//! snapshot taken that long ago, or, when that one is older than the
//! session's *floor* — the newest state it has seen —, from the oldest
//! snapshot at or past the floor (from the leader when there is none):
//!
//! - a read from snapshot `k` raises the floor to `k`;
//! - a write (whatever it answered) raises it to the snapshot taken right
//!   after it: the session sees its own writes, and the leader's state at a
//!   failed compare-and-set;
//! - a watch notification raises it to a snapshot taken when it is
//!   delivered (a ZooKeeper client hears a notification from its follower
//!   after the follower applied the change, and a read that follows sees
//!   it);
//! - a read from the leader raises it past every snapshot taken so far.
//!
//! Only histories whose store stands for ZooKeeper have them: etcd serves
//! linearizable reads unless a client asks for serializable ones, which
//! bkswitch does not.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bkswitch_metadata_store::layer::{Call, Layer, Reply};
use bkswitch_metadata_store::{
    validate_path, GetResult, MemoryStore, MetadataStore, PathUse, Result, WatchStream,
};
use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::mpsc;

/// How often a follower snapshot is taken besides those after writes
/// (virtual time).
pub const SNAPSHOT_EVERY: Duration = Duration::from_millis(100);

/// How far behind the leader a follower may be (virtual time): older
/// snapshots are dropped.
pub const LAG: Duration = Duration::from_secs(2);

/// One node of a snapshot.
#[derive(Debug, Clone)]
struct Copy {
    got: GetResult,
    children: Vec<String>,
}

#[derive(Debug)]
struct Snapshot {
    epoch: u64,
    taken: tokio::time::Instant,
    nodes: HashMap<String, Copy>,
}

#[derive(Debug)]
struct State {
    snapshots: VecDeque<Snapshot>,
    /// The epoch the next snapshot gets.
    next_epoch: u64,
    /// Draws each session's lag.
    rng: fastrand::Rng,
}

/// The followers of one tree: its recent states, and whether stale reads
/// are on.
#[derive(Debug)]
pub struct Follower {
    tree: MemoryStore,
    on: AtomicBool,
    state: Mutex<State>,
    /// Reads answered with another state than the leader's.
    stale: AtomicU64,
}

impl Follower {
    /// The followers of `tree`'s tree (a session of its own), off; choices
    /// drawn from `seed`.
    pub fn new(tree: &MemoryStore, seed: u64) -> Arc<Follower> {
        Arc::new(Follower {
            tree: tree.new_session(),
            on: AtomicBool::new(false),
            state: Mutex::new(State {
                snapshots: VecDeque::new(),
                next_epoch: 1,
                rng: fastrand::Rng::with_seed(seed),
            }),
            stale: AtomicU64::new(0),
        })
    }

    /// Turns stale reads on and takes snapshots every [`SNAPSHOT_EVERY`]
    /// until [`stop`](Self::stop) (in a task of the current runtime).
    pub fn start(self: &Arc<Self>) {
        if self.on.swap(true, Ordering::SeqCst) {
            return;
        }
        let me = self.clone();
        tokio::spawn(async move {
            while me.on.load(Ordering::SeqCst) {
                let _ = me.snapshot().await;
                tokio::time::sleep(SNAPSHOT_EVERY).await;
            }
        });
    }

    /// Stale reads off: every read goes to the leader again.
    pub fn stop(&self) {
        self.on.store(false, Ordering::SeqCst);
        self.state.lock().snapshots.clear();
    }

    /// Whether stale reads are on.
    pub fn is_on(&self) -> bool {
        self.on.load(Ordering::SeqCst)
    }

    /// Reads answered with an older state than the leader's so far.
    pub fn stale_reads(&self) -> u64 {
        self.stale.load(Ordering::SeqCst)
    }

    /// The epoch of the next snapshot: a floor past every snapshot taken.
    fn past_every_snapshot(&self) -> u64 {
        self.state.lock().next_epoch
    }

    /// Takes a snapshot of the whole tree (no await of the in-memory store
    /// yields: nothing else runs meanwhile on a current-thread runtime);
    /// returns its epoch. Nothing while stale reads are off.
    pub async fn snapshot(&self) -> u64 {
        if !self.is_on() {
            // Off: reads go to the leader, no snapshot is kept.
            return self.past_every_snapshot();
        }
        let mut nodes = HashMap::new();
        let mut todo = vec!["/".to_owned()];
        while let Some(path) = todo.pop() {
            let (Ok(Some(got)), Ok(children)) =
                (self.tree.get(&path).await, self.tree.children(&path).await)
            else {
                continue;
            };
            for c in &children {
                todo.push(if path == "/" {
                    format!("/{c}")
                } else {
                    format!("{path}/{c}")
                });
            }
            nodes.insert(path, Copy { got, children });
        }
        let taken = tokio::time::Instant::now();
        let mut s = self.state.lock();
        let epoch = s.next_epoch;
        s.next_epoch += 1;
        s.snapshots.push_back(Snapshot {
            epoch,
            taken,
            nodes,
        });
        while s
            .snapshots
            .front()
            .is_some_and(|x| taken.duration_since(x.taken) > LAG)
        {
            s.snapshots.pop_front();
        }
        epoch
    }

    /// A lag for a new session's follower.
    fn draw_lag(&self) -> Duration {
        Duration::from_millis(self.state.lock().rng.u64(0..=1_500))
    }

    /// The snapshot a follower `lag` behind answers from, not older than
    /// `floor`, and what it holds at `path` (`None`: answer from the
    /// leader).
    fn pick(&self, floor: u64, lag: Duration, path: &str) -> Option<(u64, Option<Copy>)> {
        let s = self.state.lock();
        let now = tokio::time::Instant::now();
        let allowed = || s.snapshots.iter().filter(|x| x.epoch >= floor);
        let snap = allowed()
            .rfind(|x| now.duration_since(x.taken) >= lag)
            .or_else(|| allowed().next())?;
        Some((snap.epoch, snap.nodes.get(path).cloned()))
    }
}

/// A session's reads through a [`Follower`] (see the [module](self)).
#[derive(Debug)]
pub struct StaleReads {
    inner: Arc<dyn MetadataStore>,
    follower: Arc<Follower>,
    /// The oldest snapshot this session may still be answered from.
    floor: Arc<AtomicU64>,
    /// How far behind the leader its follower is.
    lag: Duration,
}

impl StaleReads {
    /// `inner` (a session on the follower's tree) read through `follower`.
    pub fn new(inner: Arc<dyn MetadataStore>, follower: Arc<Follower>) -> StaleReads {
        StaleReads {
            inner,
            lag: follower.draw_lag(),
            follower,
            floor: Arc::new(AtomicU64::new(0)),
        }
    }

    /// [`new`](Self::new) with a given lag (tests).
    pub fn with_lag(
        inner: Arc<dyn MetadataStore>,
        follower: Arc<Follower>,
        lag: Duration,
    ) -> StaleReads {
        StaleReads {
            inner,
            follower,
            floor: Arc::new(AtomicU64::new(0)),
            lag,
        }
    }

    fn saw_the_leader(&self) {
        self.floor
            .fetch_max(self.follower.past_every_snapshot(), Ordering::SeqCst);
    }

    /// ZooKeeper's `sync()`: the session's next reads see at least the
    /// leader's state now (what a checker reading through a node needs).
    pub fn sync(&self) {
        self.saw_the_leader();
    }

    /// After a write: the follower is at least where the leader is now.
    async fn wrote(&self) {
        let epoch = self.follower.snapshot().await;
        self.floor.fetch_max(epoch, Ordering::SeqCst);
    }

    /// Forwards `stream`'s notifications, raising the floor before each.
    fn watched(&self, path: &str, mut stream: WatchStream) -> WatchStream {
        let (tx, rx) = mpsc::unbounded_channel();
        let (floor, follower) = (self.floor.clone(), self.follower.clone());
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    n = stream.next() => {
                        let Some(n) = n else { break };
                        let epoch = follower.snapshot().await;
                        floor.fetch_max(epoch, Ordering::SeqCst);
                        if tx.send(n).is_err() {
                            break;
                        }
                    }
                    () = tx.closed() => break,
                }
            }
        });
        WatchStream::from_channel(path, rx, None)
    }
}

#[async_trait]
impl Layer for StaleReads {
    fn next(&self) -> Arc<dyn MetadataStore> {
        self.inner.clone()
    }

    async fn call(&self, call: Call<'_>) -> Result<Reply> {
        let on = self.follower.is_on();
        let read = matches!(
            call,
            Call::Get { .. } | Call::Exists { .. } | Call::Children { .. }
        );
        if !on || !read || validate_path(call.operation(), call.path(), PathUse::Read).is_err() {
            let r = call.run(self.inner.as_ref()).await;
            if on && call.is_write() {
                self.wrote().await;
            } else if call != Call::Close {
                self.saw_the_leader();
            }
            return match r {
                Ok(Reply::Watch(w)) if on => Ok(Reply::Watch(self.watched(call.path(), w))),
                r => r,
            };
        }
        let floor = self.floor.load(Ordering::SeqCst);
        let Some((epoch, copy)) = self.follower.pick(floor, self.lag, call.path()) else {
            let r = call.run(self.inner.as_ref()).await;
            self.saw_the_leader();
            return r;
        };
        self.floor.fetch_max(epoch, Ordering::SeqCst);
        let reply = match call {
            Call::Get { .. } => Reply::Get(copy.map(|c| c.got)),
            Call::Exists { .. } => Reply::Exists(copy.map(|c| c.got.stat)),
            _ => Reply::Children(copy.map(|c| c.children).unwrap_or_default()),
        };
        // Counted when the leader would have answered otherwise.
        if let Ok(latest) = call.run(self.inner.as_ref()).await {
            if !same(&reply, &latest) {
                self.follower.stale.fetch_add(1, Ordering::SeqCst);
            }
        }
        Ok(reply)
    }
}

fn same(a: &Reply, b: &Reply) -> bool {
    match (a, b) {
        (Reply::Get(x), Reply::Get(y)) => {
            x.as_ref().map(|g| (&g.value, g.stat.version))
                == y.as_ref().map(|g| (&g.value, g.stat.version))
        }
        (Reply::Exists(x), Reply::Exists(y)) => x.map(|s| s.version) == y.map(|s| s.version),
        (Reply::Children(x), Reply::Children(y)) => x == y,
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bkswitch_metadata_store::{ErrorKind, ExpectedVersion};

    async fn version(s: &dyn MetadataStore, path: &str) -> i64 {
        s.get(path).await.unwrap().map_or(-1, |g| g.stat.version)
    }

    #[tokio::test(start_paused = true)]
    async fn a_session_reads_behind_the_leader_never_goes_back_and_writes_at_the_leader() {
        let tree = MemoryStore::new();
        let follower = Follower::new(&tree, 7);
        follower.start();
        let writer = tree.new_session();
        let reader = StaleReads::with_lag(
            Arc::new(tree.new_session()),
            follower.clone(),
            Duration::from_secs(1),
        );
        let mut seen = -1;
        let mut behind = 0;
        for i in 0..40u8 {
            writer.put("/k", &[i], ExpectedVersion::Any).await.unwrap();
            tokio::time::sleep(Duration::from_millis(60)).await;
            let v = version(&reader, "/k").await;
            assert!(v >= seen, "went back from {seen} to {v}");
            behind += usize::from(v < i64::from(i));
            seen = v;
        }
        assert!(behind > 20, "{behind} of 40 reads behind");
        assert!(follower.stale_reads() > 20);
        // A compare-and-set on what it read fails at the leader; the session
        // then reads the leader's state.
        let latest = version(&writer, "/k").await;
        assert!(seen < latest);
        let e = reader
            .put("/k", b"x", ExpectedVersion::Exactly(seen))
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::BadVersion);
        assert!(version(&reader, "/k").await >= latest);
        // Its own writes are seen at once.
        reader
            .put("/own", b"1", ExpectedVersion::Any)
            .await
            .unwrap();
        assert_eq!(version(&reader, "/own").await, 0);
        // A sync: the next reads see the leader's state.
        tokio::time::sleep(Duration::from_millis(500)).await;
        writer.put("/k", b"y", ExpectedVersion::Any).await.unwrap();
        reader.sync();
        assert_eq!(version(&reader, "/k").await, version(&writer, "/k").await);
        // Off: every read is the leader's.
        follower.stop();
        writer.put("/k", b"z", ExpectedVersion::Any).await.unwrap();
        assert_eq!(version(&reader, "/k").await, version(&writer, "/k").await);
    }

    #[tokio::test(start_paused = true)]
    async fn a_notification_is_followed_by_reads_that_see_its_change() {
        let tree = MemoryStore::new();
        let follower = Follower::new(&tree, 1);
        follower.start();
        let writer = tree.new_session();
        writer.put("/w", b"0", ExpectedVersion::Any).await.unwrap();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let reader = StaleReads::with_lag(
            Arc::new(tree.new_session()),
            follower.clone(),
            Duration::from_millis(1_500),
        );
        let mut watch = reader.watch("/w").await.unwrap();
        for i in 1..10u8 {
            writer.put("/w", &[i], ExpectedVersion::Any).await.unwrap();
            let _ = tokio::time::timeout(Duration::from_secs(1), watch.next()).await;
            assert_eq!(version(&reader, "/w").await, i64::from(i));
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}
