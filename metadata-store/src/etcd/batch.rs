//! Coalescing of concurrent writes into one etcd request.
//!
//! etcd applies its requests one at a time, and what a request costs it
//! (gRPC, a raft entry, a backend transaction, the watch bookkeeping) is paid
//! per request rather than per key. A write of a node's value is sent at once
//! while fewer than [`MAX_IN_FLIGHT`] requests of the store are in flight;
//! the writes that arrive meanwhile queue, and as soon as a request completes
//! the queued ones leave together, each as a nested transaction of one etcd
//! request (its own compares, its own outcome). A write is never held back
//! waiting for company: one in flight alone goes out alone, as the plain
//! transaction it is.
//!
//! etcd refuses a request that writes one key twice, so a batch holds at most
//! one write per node; a second write of the same node waits for the next
//! batch (which also keeps the writes of one node in their order). A caller
//! that stopped waiting (its operation timed out) is dropped from the queue
//! before its write is sent.
//!
//! Reads of nodes queue the same way, on slots of their own, and leave
//! together as one read-only transaction: their range reads side by side
//! (not nested, which etcd would treat as a write and send through raft), the
//! answers split back by position. A read-only transaction is served by one
//! linearizable read on etcd, however many nodes it reads.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use etcd_client::{Txn, TxnOp, TxnOpResponse, TxnResponse};
use tokio::sync::oneshot;

use super::Inner;
use crate::error::{MetadataError, Operation, Result};

/// Requests of one store in flight (writes and reads each) before the next
/// ones queue for a batch.
pub(super) const MAX_IN_FLIGHT: usize = 2;
/// Writes per batch (etcd's default `--max-txn-ops` is 128 per level).
pub(super) const MAX_BATCH: usize = 64;
/// Range reads per read batch, within etcd's default 128 operations.
pub(super) const MAX_READ_OPS: usize = 128;
/// Reads per read batch: the answer holds their values (each up to
/// [`MAX_VALUE_LEN`](crate::MAX_VALUE_LEN)), which the client decodes within
/// [`MAX_ANSWER_BYTES`].
pub(super) const MAX_READS: usize = 16;
/// The largest answer the store's etcd client decodes: a full read batch of
/// the largest values, with room to spare.
pub(super) const MAX_ANSWER_BYTES: usize = (MAX_READS + 4) * crate::MAX_VALUE_LEN;
/// Value bytes per batch, well below etcd's default 1.5 MiB request limit;
/// a larger write goes alone.
pub(super) const MAX_BATCH_BYTES: usize = 512 * 1024;

/// What a queued request sends.
enum Work {
    /// A write: its transaction, nested in a batch.
    Write(Txn),
    /// A read: its range reads, side by side with the batch's others.
    Read(Vec<TxnOp>),
}

/// What a queued request gets back.
pub(super) enum Answer {
    /// A write's transaction outcome.
    Write(TxnResponse),
    /// A read's answers, one per range read, in order.
    Read(Vec<TxnOpResponse>),
}

/// One queued request.
struct Pending {
    op: Operation,
    path: String,
    work: Work,
    bytes: usize,
    reply: oneshot::Sender<Result<Answer>>,
}

impl Pending {
    /// Range reads this request adds to a batch (a write: none).
    fn read_ops(&self) -> usize {
        match &self.work {
            Work::Read(ops) => ops.len(),
            Work::Write(_) => 0,
        }
    }
}

/// Which of the store's two queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lane {
    Writes,
    Reads,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    waiting: VecDeque<Pending>,
}

/// A queue of a store's writes or reads (see the module documentation).
#[derive(Default)]
pub(super) struct Batcher {
    state: parking_lot::Mutex<State>,
    /// Requests that carried more than one write (read).
    batches: AtomicU64,
    /// Writes (reads) those requests carried.
    batched_writes: AtomicU64,
}

/// How many of an [`EtcdStore`](super::EtcdStore)'s writes left in a shared
/// request (see [`EtcdStore::write_batches`](super::EtcdStore::write_batches)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WriteBatches {
    /// Requests that carried more than one write.
    pub requests: u64,
    /// Writes those requests carried.
    pub writes: u64,
}

/// How many of an [`EtcdStore`](super::EtcdStore)'s reads left in a shared
/// request (see [`EtcdStore::read_batches`](super::EtcdStore::read_batches)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReadBatches {
    /// Requests that carried more than one read.
    pub requests: u64,
    /// Reads those requests carried.
    pub reads: u64,
}

impl Batcher {
    pub(super) fn read_stats(&self) -> ReadBatches {
        ReadBatches {
            requests: self.batches.load(Ordering::Relaxed),
            reads: self.batched_writes.load(Ordering::Relaxed),
        }
    }

    pub(super) fn stats(&self) -> WriteBatches {
        WriteBatches {
            requests: self.batches.load(Ordering::Relaxed),
            writes: self.batched_writes.load(Ordering::Relaxed),
        }
    }
}

impl Batcher {
    /// Takes the next batch: the oldest waiting writes, one per node, within
    /// the limits. Writes whose caller stopped waiting are dropped.
    fn take(state: &mut State) -> Vec<Pending> {
        let mut batch: Vec<Pending> = Vec::new();
        let mut bytes = 0;
        let mut reads = 0;
        let mut kept = VecDeque::with_capacity(state.waiting.len());
        while let Some(p) = state.waiting.pop_front() {
            if p.reply.is_closed() {
                continue;
            }
            let fits = batch.is_empty()
                || match p.work {
                    Work::Write(_) => {
                        batch.len() < MAX_BATCH
                            && bytes + p.bytes <= MAX_BATCH_BYTES
                            && !batch.iter().any(|b| b.path == p.path)
                    }
                    Work::Read(_) => {
                        batch.len() < MAX_READS && reads + p.read_ops() <= MAX_READ_OPS
                    }
                };
            if fits {
                bytes += p.bytes;
                reads += p.read_ops();
                batch.push(p);
            } else {
                kept.push_back(p);
            }
        }
        state.waiting = kept;
        batch
    }
}

impl Inner {
    fn batcher(&self, lane: Lane) -> &Batcher {
        match lane {
            Lane::Writes => &self.batcher,
            Lane::Reads => &self.read_batcher,
        }
    }
}

/// Holds one of the store's request slots of a lane; when dropped (the
/// request done, or its caller gone) it hands the slot to the lane's queue.
struct Slot(Arc<Inner>, Lane);

impl Drop for Slot {
    fn drop(&mut self) {
        release(&self.0, self.1);
    }
}

/// Gives a slot back, or sends the lane's queued requests on it.
fn release(inner: &Arc<Inner>, lane: Lane) {
    let batch = {
        let mut st = inner.batcher(lane).state.lock();
        let batch = Batcher::take(&mut st);
        if batch.is_empty() {
            st.in_flight -= 1;
            return;
        }
        batch
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(drive(inner.clone(), lane, batch));
        }
        Err(_) => {
            inner.batcher(lane).state.lock().in_flight -= 1;
            for p in batch {
                let _ = p.reply.send(Err(MetadataError::Closed {
                    op: p.op,
                    path: p.path,
                }));
            }
        }
    }
}

/// Sends batches on a slot until the lane's queue is empty.
async fn drive(inner: Arc<Inner>, lane: Lane, batch: Vec<Pending>) {
    let _slot = Slot(inner.clone(), lane);
    send(&inner, lane, batch).await;
    loop {
        let next = Batcher::take(&mut inner.batcher(lane).state.lock());
        if next.is_empty() {
            return;
        }
        send(&inner, lane, next).await;
    }
}

/// The transaction of one request alone: a write's own, or a read's range
/// reads.
fn alone(work: Work) -> Txn {
    match work {
        Work::Write(txn) => txn,
        Work::Read(ops) => Txn::new().and_then(ops),
    }
}

/// Sends `txn` for the request `op` on `path` and shapes its answer.
async fn send_one(inner: &Inner, op: Operation, path: &str, work: Work) -> Result<Answer> {
    let read = matches!(work, Work::Read(_));
    let resp = inner.txn(op, path, alone(work)).await?;
    Ok(if read {
        Answer::Read(resp.op_responses())
    } else {
        Answer::Write(resp)
    })
}

/// Sends one batch and answers each of its requests.
async fn send(inner: &Inner, lane: Lane, batch: Vec<Pending>) {
    if batch.len() == 1 {
        let p = batch.into_iter().next().expect("one request");
        let r = tokio::time::timeout(
            inner.options.operation_timeout,
            send_one(inner, p.op, &p.path, p.work),
        )
        .await
        .unwrap_or_else(|_| Err(timed_out(inner, p.op, &p.path)));
        let _ = p.reply.send(r);
        return;
    }
    let batcher = inner.batcher(lane);
    batcher.batches.fetch_add(1, Ordering::Relaxed);
    batcher
        .batched_writes
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    let mut ops: Vec<TxnOp> = Vec::new();
    for p in &batch {
        match &p.work {
            Work::Write(txn) => ops.push(TxnOp::txn(txn.clone())),
            Work::Read(reads) => ops.extend(reads.iter().cloned()),
        }
    }
    let sent = tokio::time::timeout(
        inner.options.operation_timeout,
        inner.txn_raw(Txn::new().and_then(ops)),
    )
    .await;
    match sent {
        Ok(Ok(resp)) => {
            let mut answers = resp.op_responses().into_iter();
            for p in batch {
                let r = match &p.work {
                    Work::Read(reads) => {
                        let mine: Vec<TxnOpResponse> = answers.by_ref().take(reads.len()).collect();
                        if mine.len() == reads.len() {
                            Ok(Answer::Read(mine))
                        } else {
                            Err(short_answer(inner, &p, "read"))
                        }
                    }
                    Work::Write(_) => match answers.next() {
                        Some(TxnOpResponse::Txn(t)) => Ok(Answer::Write(t)),
                        _ => Err(short_answer(inner, &p, "write")),
                    },
                };
                let _ = p.reply.send(r);
            }
        }
        Ok(Err(e)) => {
            for p in batch {
                let _ = p.reply.send(Err(inner.map_err_ref(&e, p.op, &p.path)));
            }
        }
        Err(_) => {
            for p in batch {
                let _ = p.reply.send(Err(timed_out(inner, p.op, &p.path)));
            }
        }
    }
}

/// The error of a batched request whose part of the answer is missing.
fn short_answer(inner: &Inner, p: &Pending, what: &str) -> MetadataError {
    MetadataError::Internal {
        op: p.op,
        path: p.path.clone(),
        reason: format!(
            "etcd `{}` answered a batched {what} without its part",
            inner.hosts
        ),
    }
}

/// The error of a request that got no answer in time.
fn timed_out(inner: &Inner, op: Operation, path: &str) -> MetadataError {
    inner.unavailable(
        op,
        path,
        format!(
            "no answer from etcd `{}` within the {:?} operation timeout",
            inner.hosts, inner.options.operation_timeout
        ),
    )
}

impl Inner {
    /// Sends a write of `path` (a transaction that writes only `path`'s key
    /// and its side keys), alone or in a batch with the writes of other
    /// nodes queued meanwhile; `bytes` is the size of the value written.
    pub(super) async fn batched_txn(
        self: &Arc<Self>,
        op: Operation,
        path: &str,
        txn: Txn,
        bytes: usize,
    ) -> Result<TxnResponse> {
        match self
            .queued(Lane::Writes, op, path, Work::Write(txn), bytes)
            .await?
        {
            Answer::Write(resp) => Ok(resp),
            Answer::Read(_) => unreachable!("a write is answered as a write"),
        }
    }

    /// Sends the range reads `reads` of `path` (a read-only transaction),
    /// alone or side by side with the reads of other nodes queued meanwhile;
    /// their answers, in order.
    pub(super) async fn batched_reads(
        self: &Arc<Self>,
        op: Operation,
        path: &str,
        reads: Vec<TxnOp>,
    ) -> Result<Vec<TxnOpResponse>> {
        match self
            .queued(Lane::Reads, op, path, Work::Read(reads), 0)
            .await?
        {
            Answer::Read(rs) => Ok(rs),
            Answer::Write(_) => unreachable!("a read is answered as a read"),
        }
    }

    /// Sends `work` at once on a free slot of `lane`, or queues it for the
    /// next batch.
    async fn queued(
        self: &Arc<Self>,
        lane: Lane,
        op: Operation,
        path: &str,
        work: Work,
        bytes: usize,
    ) -> Result<Answer> {
        let mut work = Some(work);
        let queued = {
            let mut st = self.batcher(lane).state.lock();
            if st.in_flight >= MAX_IN_FLIGHT {
                let (reply, answer) = oneshot::channel();
                st.waiting.push_back(Pending {
                    op,
                    path: path.to_owned(),
                    work: work.take().expect("not yet sent"),
                    bytes,
                    reply,
                });
                Some(answer)
            } else {
                st.in_flight += 1;
                None
            }
        };
        if let Some(answer) = queued {
            return answer.await.unwrap_or_else(|_| {
                Err(MetadataError::Closed {
                    op,
                    path: path.to_owned(),
                })
            });
        }
        // A free slot: this request goes at once, from the caller's task.
        let _slot = Slot(self.clone(), lane);
        send_one(self, op, path, work.expect("not queued")).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(path: &str, bytes: usize) -> (Pending, oneshot::Receiver<Result<Answer>>) {
        let (reply, rx) = oneshot::channel();
        (
            Pending {
                op: Operation::Put,
                path: path.to_owned(),
                work: Work::Write(Txn::new()),
                bytes,
                reply,
            },
            rx,
        )
    }

    fn read(path: &str, ops: usize) -> (Pending, oneshot::Receiver<Result<Answer>>) {
        let (reply, rx) = oneshot::channel();
        (
            Pending {
                op: Operation::Get,
                path: path.to_owned(),
                work: Work::Read((0..ops).map(|_| TxnOp::get("k", None)).collect()),
                bytes: 0,
                reply,
            },
            rx,
        )
    }

    fn paths(batch: &[Pending]) -> Vec<&str> {
        batch.iter().map(|p| p.path.as_str()).collect()
    }

    #[test]
    fn a_batch_holds_one_write_per_node_in_order_and_drops_abandoned_writes() {
        let mut st = State::default();
        let mut keep = Vec::new();
        for (path, bytes) in [
            ("/a", 10),
            ("/b", 10),
            ("/a", 10),
            ("/c", 10),
            ("/gone", 10),
        ] {
            let (p, rx) = pending(path, bytes);
            st.waiting.push_back(p);
            keep.push(rx);
        }
        drop(keep.pop()); // the caller of "/gone" stopped waiting
        let first = Batcher::take(&mut st);
        assert_eq!(paths(&first), ["/a", "/b", "/c"]);
        let second = Batcher::take(&mut st);
        assert_eq!(
            paths(&second),
            ["/a"],
            "the second write of /a waits its turn"
        );
        assert!(Batcher::take(&mut st).is_empty());
    }

    #[test]
    fn a_batch_stays_within_its_limits_and_a_large_write_goes_alone() {
        let mut st = State::default();
        let mut keep = Vec::new();
        for i in 0..(MAX_BATCH + 3) {
            let (p, rx) = pending(&format!("/n{i}"), 1);
            st.waiting.push_back(p);
            keep.push(rx);
        }
        assert_eq!(Batcher::take(&mut st).len(), MAX_BATCH);
        assert_eq!(Batcher::take(&mut st).len(), 3);

        for (path, bytes) in [("/big", MAX_BATCH_BYTES + 1), ("/small", 1)] {
            let (p, rx) = pending(path, bytes);
            st.waiting.push_back(p);
            keep.push(rx);
        }
        assert_eq!(paths(&Batcher::take(&mut st)), ["/big"]);
        assert_eq!(paths(&Batcher::take(&mut st)), ["/small"]);
    }

    #[test]
    fn a_read_batch_stays_within_its_reads_and_operations() {
        let mut st = State::default();
        let mut keep = Vec::new();
        for i in 0..(MAX_READS + 2) {
            // Reads of one node may share a batch: only writes may not.
            let (p, rx) = read(if i % 2 == 0 { "/same" } else { "/other" }, 4);
            st.waiting.push_back(p);
            keep.push(rx);
        }
        assert_eq!(Batcher::take(&mut st).len(), MAX_READS);
        assert_eq!(Batcher::take(&mut st).len(), 2);

        for _ in 0..3 {
            let (p, rx) = read("/wide", MAX_READ_OPS / 2);
            st.waiting.push_back(p);
            keep.push(rx);
        }
        assert_eq!(
            Batcher::take(&mut st).len(),
            2,
            "at most {MAX_READ_OPS} range reads"
        );
        assert_eq!(Batcher::take(&mut st).len(), 1);
        let (p, rx) = read("/huge", MAX_READ_OPS + 1);
        st.waiting.push_back(p);
        keep.push(rx);
        assert_eq!(
            Batcher::take(&mut st).len(),
            1,
            "a read wider than a batch goes alone"
        );
    }
}
