//! The source side of a copy: reads of a quarter of the window, several in
//! flight, answered in entry-id order.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::pin;
use std::task::Poll;

use bkswitch_bk_client::{BkError, EntryId, LedgerEntry, ReadHandle};
use futures::future::BoxFuture;
use futures::stream::FuturesOrdered;
use futures::{FutureExt, StreamExt};

use crate::batch::read_batch;

/// Entries per source read: a quarter of the window, so that several reads
/// are in flight at once and a read is issued as soon as a quarter of the
/// window is acknowledged.
pub(crate) fn read_batch_size(window: usize) -> usize {
    window.div_ceil(4).max(1)
}

type Batch = Result<Vec<LedgerEntry>, BkError>;

/// The reads of `0..=lac` of one source ledger: issued whenever the window
/// has room for one, answered in order.
pub(crate) struct SourceReads<'a> {
    source: &'a dyn ReadHandle,
    lac: EntryId,
    window: usize,
    batch: u64,
    /// The next entry to ask for.
    next: EntryId,
    /// Entries asked for and not yet taken by [`next`](Self::next).
    requested: usize,
    in_flight: FuturesOrdered<BoxFuture<'a, Batch>>,
    /// Reads answered while the caller was awaiting something else.
    answered: VecDeque<Batch>,
}

impl<'a> SourceReads<'a> {
    pub(crate) fn new(source: &'a dyn ReadHandle, lac: EntryId, window: usize) -> Self {
        SourceReads {
            source,
            lac,
            window,
            batch: read_batch_size(window) as u64,
            next: 0,
            requested: 0,
            in_flight: FuturesOrdered::new(),
            answered: VecDeque::new(),
        }
    }

    /// Issues every read the window has room for, `others` entries of it being
    /// taken already (handed to the destination, not yet acknowledged).
    pub(crate) fn fill(&mut self, others: usize) {
        while self.next <= self.lac {
            let n = self.batch.min((self.lac - self.next + 1) as u64) as usize;
            if others + self.requested + n > self.window {
                break;
            }
            let last = self.next + n as EntryId - 1;
            self.in_flight
                .push_back(read_batch(self.source, self.next, last).boxed());
            self.requested += n;
            self.next = last + 1;
        }
    }

    /// Whether every read issued has been taken.
    pub(crate) fn is_empty(&self) -> bool {
        self.in_flight.is_empty() && self.answered.is_empty()
    }

    /// The oldest read's answer, when ready (registers `cx` otherwise).
    pub(crate) fn poll_next(&mut self, cx: &mut std::task::Context<'_>) -> Poll<Option<Batch>> {
        let answer = match self.answered.pop_front() {
            Some(a) => a,
            None => match self.in_flight.poll_next_unpin(cx) {
                Poll::Ready(Some(a)) => a,
                Poll::Ready(None) => return Poll::Ready(None),
                Poll::Pending => return Poll::Pending,
            },
        };
        if let Ok(entries) = &answer {
            self.requested -= entries.len();
        }
        Poll::Ready(Some(answer))
    }

    /// Awaits `work` (creating the destination, say) while the reads already
    /// issued proceed; their answers wait for [`poll_next`](Self::poll_next).
    pub(crate) async fn meanwhile<T>(&mut self, work: impl Future<Output = T>) -> T {
        let mut work = pin!(work);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(out) = work.as_mut().poll(cx) {
                return Poll::Ready(out);
            }
            while let Poll::Ready(Some(a)) = self.in_flight.poll_next_unpin(cx) {
                self.answered.push_back(a);
            }
            Poll::Pending
        })
        .await
    }
}
