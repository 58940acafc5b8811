//! A live connection's table of requests: submitting, completing, failing
//! and expiring them.

use super::*;

/// A request that could not be submitted, given back to be sent elsewhere.
pub(super) struct Rejected {
    pub(super) frame: Bytes,
    pub(super) completion: Completion,
}

impl Live {
    /// Registers the request and queues its frame; gives the request back when the
    /// connection is already closed.
    pub(super) fn submit(
        &self,
        key: Key,
        frame: Bytes,
        timeout: Duration,
        completion: Completion,
    ) -> Result<(), Rejected> {
        let mut pending = self.pending.lock();
        if pending.closed {
            return Err(Rejected { frame, completion });
        }
        pending.by_key.entry(key).or_default().push_back(Waiter {
            deadline: Instant::now() + timeout,
            completion,
        });
        // Queue the frame under the lock, so that frames of one key leave in the
        // order their waiters were registered; the writer task writes everything
        // queued by the time it runs in one write. Never waits for company: an
        // idle writer is woken at once, and requests queued while it writes go
        // out together in its next write (as Netty's channel does for the Java
        // client), so that a bookie reads many requests per wake-up.
        pending.out.push(frame);
        pending.queued_frames += 1;
        if key.0 == OP_ADD {
            pending.queued_adds += 1;
        }
        if !pending.flushing {
            if self.holds(&pending) {
                pending.held = true;
            } else {
                pending.flushing = true;
                self.wake_writer.notify_one();
            }
        }
        Ok(())
    }

    /// Whether what is queued waits for the bookie's next answer: with many
    /// adds unanswered, that answer is near, and the requests queued until
    /// then leave in one write and reach the bookie in one wake-up of its
    /// threads.
    pub(super) fn holds(&self, p: &PendingMap) -> bool {
        self.hold_adds > 0
            && !p.release
            && p.adds_on_wire >= self.hold_adds
            && (p.queued_frames as usize) < self.hold_adds
    }

    /// Lets held frames go: an answer came (or the sweeper ran).
    pub(super) fn release(&self) {
        let mut p = self.pending.lock();
        if p.held && !p.out.is_empty() && !p.closed {
            p.held = false;
            p.release = true;
            if !p.flushing {
                p.flushing = true;
                self.wake_writer.notify_one();
            }
        }
    }

    pub(super) fn complete(&self, response: Response) {
        let key = (response.op, response.ledger_id, response.entry_id);
        let waiter = {
            let mut pending = self.pending.lock();
            let Some(queue) = pending.by_key.get_mut(&key) else {
                return;
            };
            let waiter = queue.pop_front();
            if queue.is_empty() {
                pending.by_key.remove(&key);
            }
            if key.0 == OP_ADD {
                pending.adds_on_wire = pending.adds_on_wire.saturating_sub(1);
            }
            waiter
        };
        if let Some(w) = waiter {
            w.completion.complete(Ok(response));
        }
    }

    pub(super) fn fail_all(&self, bookie: &str, detail: &str) {
        let drained: Vec<Waiter> = {
            let mut pending = self.pending.lock();
            pending.closed = true;
            pending.out.clear();
            self.wake_writer.notify_one();
            pending.by_key.drain().flat_map(|(_, q)| q).collect()
        };
        for w in drained {
            w.completion.complete(Err(ConnError {
                kind: ConnErrorKind::Closed,
                bookie: bookie.to_owned(),
                detail: detail.to_owned(),
            }));
        }
    }

    pub(super) fn expire(&self, now: Instant, bookie: &str) {
        let expired: Vec<Waiter> = {
            let mut pending = self.pending.lock();
            let mut expired = Vec::new();
            let mut expired_adds = 0;
            pending.by_key.retain(|key, queue| {
                let before = expired.len();
                while queue.front().is_some_and(|w| w.deadline <= now) {
                    expired.extend(queue.pop_front());
                }
                // Later waiters of a key may have earlier deadlines (different
                // timeouts): check them all.
                let mut i = 0;
                while i < queue.len() {
                    if queue[i].deadline <= now {
                        expired.extend(queue.remove(i));
                    } else {
                        i += 1;
                    }
                }
                if key.0 == OP_ADD {
                    expired_adds += expired.len() - before;
                }
                !queue.is_empty()
            });
            pending.adds_on_wire = pending.adds_on_wire.saturating_sub(expired_adds);
            expired
        };
        for w in expired {
            w.completion.complete(Err(ConnError {
                kind: ConnErrorKind::Timeout,
                bookie: bookie.to_owned(),
                detail: "request timed out".to_owned(),
            }));
        }
    }
}
