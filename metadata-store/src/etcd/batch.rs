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

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use etcd_client::{Txn, TxnOp, TxnOpResponse, TxnResponse};
use tokio::sync::oneshot;

use super::Inner;
use crate::error::{MetadataError, Operation, Result};

/// Requests of one store in flight before writes queue for a batch.
pub(super) const MAX_IN_FLIGHT: usize = 2;
/// Writes per batch (etcd's default `--max-txn-ops` is 128 per level).
pub(super) const MAX_BATCH: usize = 64;
/// Value bytes per batch, well below etcd's default 1.5 MiB request limit;
/// a larger write goes alone.
pub(super) const MAX_BATCH_BYTES: usize = 512 * 1024;

/// One queued write.
struct Pending {
    op: Operation,
    path: String,
    txn: Txn,
    bytes: usize,
    reply: oneshot::Sender<Result<TxnResponse>>,
}

#[derive(Default)]
struct State {
    in_flight: usize,
    waiting: VecDeque<Pending>,
}

/// The queue of a store's writes (see the module documentation).
#[derive(Default)]
pub(super) struct Batcher {
    state: parking_lot::Mutex<State>,
    /// Requests that carried more than one write.
    batches: AtomicU64,
    /// Writes those requests carried.
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

impl Batcher {
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
        let mut kept = VecDeque::with_capacity(state.waiting.len());
        while let Some(p) = state.waiting.pop_front() {
            if p.reply.is_closed() {
                continue;
            }
            let fits = batch.len() < MAX_BATCH
                && (batch.is_empty() || bytes + p.bytes <= MAX_BATCH_BYTES)
                && !batch.iter().any(|b| b.path == p.path);
            if fits {
                bytes += p.bytes;
                batch.push(p);
            } else {
                kept.push_back(p);
            }
        }
        state.waiting = kept;
        batch
    }
}

/// Holds one of the store's request slots; when dropped (the request done,
/// or its caller gone) it hands the slot to the queued writes.
struct Slot(Arc<Inner>);

impl Drop for Slot {
    fn drop(&mut self) {
        release(&self.0);
    }
}

/// Gives a slot back, or sends the queued writes on it.
fn release(inner: &Arc<Inner>) {
    let batch = {
        let mut st = inner.batcher.state.lock();
        let batch = Batcher::take(&mut st);
        if batch.is_empty() {
            st.in_flight -= 1;
            return;
        }
        batch
    };
    match tokio::runtime::Handle::try_current() {
        Ok(rt) => {
            rt.spawn(drive(inner.clone(), batch));
        }
        Err(_) => {
            inner.batcher.state.lock().in_flight -= 1;
            for p in batch {
                let _ = p.reply.send(Err(MetadataError::Closed {
                    op: p.op,
                    path: p.path,
                }));
            }
        }
    }
}

/// Sends batches on a slot until the queue is empty.
async fn drive(inner: Arc<Inner>, batch: Vec<Pending>) {
    let _slot = Slot(inner.clone());
    send(&inner, batch).await;
    loop {
        let next = Batcher::take(&mut inner.batcher.state.lock());
        if next.is_empty() {
            return;
        }
        send(&inner, next).await;
    }
}

/// Sends one batch and answers each of its writes.
async fn send(inner: &Inner, batch: Vec<Pending>) {
    if batch.len() == 1 {
        let p = batch.into_iter().next().expect("one write");
        let r = tokio::time::timeout(
            inner.options.operation_timeout,
            inner.txn(p.op, &p.path, p.txn),
        )
        .await
        .unwrap_or_else(|_| Err(timed_out(inner, p.op, &p.path)));
        let _ = p.reply.send(r);
        return;
    }
    inner.batcher.batches.fetch_add(1, Ordering::Relaxed);
    inner
        .batcher
        .batched_writes
        .fetch_add(batch.len() as u64, Ordering::Relaxed);
    let nested: Vec<TxnOp> = batch.iter().map(|p| TxnOp::txn(p.txn.clone())).collect();
    let sent = tokio::time::timeout(
        inner.options.operation_timeout,
        inner.txn_raw(Txn::new().and_then(nested)),
    )
    .await;
    match sent {
        Ok(Ok(resp)) => {
            let mut answers = resp.op_responses().into_iter();
            for p in batch {
                let r = match answers.next() {
                    Some(TxnOpResponse::Txn(t)) => Ok(t),
                    other => Err(MetadataError::Internal {
                        op: p.op,
                        path: p.path.clone(),
                        reason: format!(
                            "etcd `{}` answered a batched write with {other:?}",
                            inner.hosts
                        ),
                    }),
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
        let mut txn = Some(txn);
        let queued = {
            let mut st = self.batcher.state.lock();
            if st.in_flight >= MAX_IN_FLIGHT {
                let (reply, answer) = oneshot::channel();
                st.waiting.push_back(Pending {
                    op,
                    path: path.to_owned(),
                    txn: txn.take().expect("not yet sent"),
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
        // A free slot: this write goes at once, from the caller's task.
        let _slot = Slot(self.clone());
        self.txn(op, path, txn.expect("not queued")).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(path: &str, bytes: usize) -> (Pending, oneshot::Receiver<Result<TxnResponse>>) {
        let (reply, rx) = oneshot::channel();
        (
            Pending {
                op: Operation::Put,
                path: path.to_owned(),
                txn: Txn::new(),
                bytes,
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
}
