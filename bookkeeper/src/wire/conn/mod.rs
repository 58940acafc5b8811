//! One TCP connection per bookie, speaking protocol version 2, with pipelined
//! requests.
//!
//! - **Sending** is coalesced: a request is registered as pending and its frame
//!   appended to the connection's output under one lock; the connection's
//!   writer task, woken when it was idle, writes everything queued by the time
//!   it runs in one system call, and what queued meanwhile in the next. Nothing
//!   waits for company (an idle writer is woken at once), and when requests come
//!   in bursts a bookie reads many of them per wake-up, as it does from the Java
//!   client, whose Netty channel batches the writes of its event loop. Before
//!   the connection is up, requests wait in a queue and are flushed in order
//!   once it is.
//! - **Matching.** Version 2 carries no request id: the reader task matches a
//!   response to the oldest pending request with the same `(opcode, ledger,
//!   entry)`, as BookKeeper's `PerChannelBookieClient` does (a FIFO per key).
//!   Requests with the same key on one connection are answered in the order they
//!   were sent, or carry the same answer (two reads of one entry).
//! - **Timeouts.** Every request has a deadline; a sweeper fails the overdue
//!   ones with [`ConnErrorKind::Timeout`]. A late answer to a request that timed
//!   out is dropped.
//! - **Failures.** When the connection breaks, every pending request fails with
//!   [`ConnErrorKind::Closed`] and the next request opens a new connection.

use std::collections::{HashMap, VecDeque};
use std::fmt;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio::sync::{oneshot, Notify};
use tokio::time::Instant;
use tracing::{debug, warn};

use super::codec::{decode_response, split_frame, Response, OP_ADD};

#[cfg(test)]
mod coalescing_tests;
mod io;
mod live;
#[cfg(test)]
mod tests;

use io::{reader, sweeper, writer};
use live::Rejected;

/// How a request is matched to its response: `(opcode, ledger id, entry id)`.
pub(crate) type Key = (u8, i64, i64);

/// Resolves a bookie id to the address to connect to.
pub(crate) type Resolver = Arc<
    dyn Fn(String) -> Pin<Box<dyn Future<Output = Result<SocketAddr, String>> + Send>>
        + Send
        + Sync,
>;

/// What went wrong with a request at the connection level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ConnErrorKind {
    /// The bookie could not be reached (address or connect).
    Connect,
    /// The connection broke before the answer came.
    Closed,
    /// No answer before the deadline.
    Timeout,
}

/// A connection-level failure of one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ConnError {
    pub(crate) kind: ConnErrorKind,
    pub(crate) bookie: String,
    pub(crate) detail: String,
}

impl fmt::Display for ConnError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.kind {
            ConnErrorKind::Connect => "cannot connect to bookie",
            ConnErrorKind::Closed => "connection lost to bookie",
            ConnErrorKind::Timeout => "no answer in time from bookie",
        };
        write!(f, "{what} {}: {}", self.bookie, self.detail)
    }
}

/// What to do with the answer.
pub(crate) enum Completion {
    /// Send it on a channel (reads).
    Channel(oneshot::Sender<Result<Response, ConnError>>),
    /// Call this, on the connection's reader task or the sender's thread (adds).
    /// It must be quick and must not block.
    Callback(Box<dyn FnOnce(Result<Response, ConnError>) + Send>),
}

impl Completion {
    fn complete(self, result: Result<Response, ConnError>) {
        match self {
            Completion::Channel(tx) => {
                let _ = tx.send(result);
            }
            Completion::Callback(f) => f(result),
        }
    }
}

struct Waiter {
    deadline: Instant,
    completion: Completion,
}

/// Requests waiting for an answer on one live connection, and the bytes
/// waiting to be written (one lock, so that frames leave in the order their
/// waiters were registered).
#[derive(Default)]
struct PendingMap {
    by_key: HashMap<Key, VecDeque<Waiter>>,
    closed: bool,
    /// Frames the writer task still has to write (shared with the caller, not
    /// copied: a frame sent to several bookies is one buffer).
    out: Vec<Bytes>,
    /// Frames in `out` (counted for the statistics of writes).
    queued_frames: u64,
    /// Whether the writer task has been woken and not yet found `out` empty.
    flushing: bool,
    /// Adds in `out`.
    queued_adds: usize,
    /// Adds written and not yet answered, failed or expired (at most: an add
    /// that expired before it was written is taken off too).
    adds_on_wire: usize,
    /// Whether frames in `out` wait for the next answer (see
    /// [`ConnSettings::hold_adds`]).
    held: bool,
    /// Whether the writer writes what is queued even if it would hold it.
    release: bool,
}

/// A live connection: its socket's write side, its pending requests and its
/// writer task's wake-up.
struct Live {
    id: u64,
    wake_writer: Arc<Notify>,
    stats: Arc<WireStats>,
    pending: Mutex<PendingMap>,
    reader: Mutex<Option<tokio::task::AbortHandle>>,
    /// [`ConnSettings::hold_adds`].
    hold_adds: usize,
}

enum State {
    Idle,
    Connecting(Vec<(Key, Bytes, Duration, Completion)>),
    Ready(Arc<Live>),
}

/// Settings of bookie connections.
#[derive(Debug, Clone)]
pub(crate) struct ConnSettings {
    pub(crate) connect_timeout: Duration,
    pub(crate) sweep_interval: Duration,
    /// Where the connections count what they write.
    pub(crate) stats: Arc<WireStats>,
    /// TLS (started with `START_TLS` on every new connection), when set.
    pub(crate) tls: Option<super::tls::Tls>,
    /// With at least this many adds written and unanswered on a connection,
    /// new frames wait for the bookie's next answer (or for `hold_adds` of
    /// them to queue) and leave together; 0: never.
    pub(crate) hold_adds: usize,
}

type BoxRead = Box<dyn AsyncRead + Send + Unpin>;
type BoxWrite = Box<dyn AsyncWrite + Send + Unpin>;

/// What a client's bookie connections have written, counted since it started:
/// requests (frames), write system calls and bytes. Frames per write tells how
/// well requests are coalesced (each write is at least one TCP segment, and one
/// wake-up of the bookie's reader).
#[derive(Debug, Default)]
pub struct WireStats {
    frames: AtomicU64,
    writes: AtomicU64,
    bytes: AtomicU64,
}

/// A snapshot of [`WireStats`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireCounts {
    /// Requests written.
    pub frames: u64,
    /// Write system calls that wrote them.
    pub writes: u64,
    /// Bytes written.
    pub bytes: u64,
}

impl WireStats {
    /// The counts so far.
    pub fn snapshot(&self) -> WireCounts {
        WireCounts {
            frames: self.frames.load(Ordering::Relaxed),
            writes: self.writes.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}

/// The connection to one bookie (reconnected on demand).
pub(crate) struct BookieConn {
    bookie: String,
    settings: ConnSettings,
    resolver: Resolver,
    runtime: Handle,
    state: Mutex<State>,
    next_id: AtomicU64,
    shut: AtomicBool,
    /// Requests sent to this bookie so far.
    sent: AtomicU64,
    /// Whether batched reads are no longer sent to this bookie: a bookie
    /// older than 4.17 closes the connection on one.
    batch_refused: AtomicBool,
}

impl fmt::Debug for BookieConn {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BookieConn")
            .field("bookie", &self.bookie)
            .finish()
    }
}

impl BookieConn {
    pub(crate) fn new(
        bookie: String,
        settings: ConnSettings,
        resolver: Resolver,
        runtime: Handle,
    ) -> Arc<BookieConn> {
        Arc::new(BookieConn {
            bookie,
            settings,
            resolver,
            runtime,
            state: Mutex::new(State::Idle),
            next_id: AtomicU64::new(1),
            shut: AtomicBool::new(false),
            sent: AtomicU64::new(0),
            batch_refused: AtomicBool::new(false),
        })
    }

    /// Whether batched reads may be sent to this bookie.
    pub(crate) fn batch_reads_allowed(&self) -> bool {
        !self.batch_refused.load(Ordering::Relaxed)
    }

    /// Reads this bookie entry by entry from now on: the connection was lost
    /// while a batched read was pending, as a bookie older than 4.17 does
    /// when it receives one. For good (this client's life), not for a while:
    /// trying again would close the connection again, failing whatever else
    /// was pending on it (adds, which would change the ensemble).
    pub(crate) fn refuse_batch_reads(&self) {
        if !self.batch_refused.swap(true, Ordering::Relaxed) {
            warn!(
                bookie = %self.bookie,
                "connection lost over a batched read; reading this bookie entry by entry from \
                 now on (bookies before BookKeeper 4.17 do not know batched reads)"
            );
        }
    }

    fn error(&self, kind: ConnErrorKind, detail: impl Into<String>) -> ConnError {
        ConnError {
            kind,
            bookie: self.bookie.clone(),
            detail: detail.into(),
        }
    }

    /// Sends `frame`, expecting one answer keyed `key` within `timeout`.
    pub(crate) fn send(
        self: &Arc<Self>,
        key: Key,
        frame: Bytes,
        timeout: Duration,
        completion: Completion,
    ) {
        if self.shut.load(Ordering::Acquire) {
            completion.complete(Err(self.error(ConnErrorKind::Closed, "client closed")));
            return;
        }
        self.sent.fetch_add(1, Ordering::Relaxed);
        let mut state = self.state.lock();
        match &mut *state {
            State::Ready(live) => {
                let live = live.clone();
                drop(state);
                if let Err(rejected) = live.submit(key, frame, timeout, completion) {
                    // The connection died between the lock and the submit: forget it
                    // and send on a new one.
                    self.forget(live.id);
                    self.send(key, rejected.frame, timeout, rejected.completion);
                }
            }
            State::Connecting(queue) => queue.push((key, frame, timeout, completion)),
            State::Idle => {
                *state = State::Connecting(vec![(key, frame, timeout, completion)]);
                drop(state);
                let this = self.clone();
                self.runtime.spawn(async move { this.connect().await });
            }
        }
    }

    async fn connect(self: Arc<Self>) {
        let result = tokio::time::timeout(self.settings.connect_timeout, async {
            let addr = (self.resolver)(self.bookie.clone()).await?;
            let stream = TcpStream::connect(addr)
                .await
                .map_err(|e| format!("connect to {addr}: {e}"))?;
            let _ = stream.set_nodelay(true);
            let halves: (BoxRead, BoxWrite) = match &self.settings.tls {
                None => {
                    let (read, write) = stream.into_split();
                    (Box::new(read), Box::new(write))
                }
                Some(tls) => {
                    let (read, write) = tokio::io::split(tls.start(stream, addr).await?);
                    (Box::new(read), Box::new(write))
                }
            };
            Ok::<_, String>((addr, halves))
        })
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no connection within {:?}",
                self.settings.connect_timeout
            ))
        });
        match result {
            Ok((addr, (read, write))) => {
                debug!(bookie = %self.bookie, %addr, tls = self.settings.tls.is_some(), "connected to bookie");
                let wake_writer = Arc::new(Notify::new());
                let live = Arc::new(Live {
                    id: self.next_id.fetch_add(1, Ordering::Relaxed),
                    wake_writer: wake_writer.clone(),
                    stats: self.settings.stats.clone(),
                    pending: Mutex::new(PendingMap::default()),
                    reader: Mutex::new(None),
                    hold_adds: self.settings.hold_adds,
                });
                self.runtime.spawn(writer(
                    Arc::downgrade(&live),
                    wake_writer,
                    self.bookie.clone(),
                    write,
                ));
                let reader_task =
                    self.runtime
                        .spawn(reader(Arc::downgrade(&self), live.clone(), read));
                *live.reader.lock() = Some(reader_task.abort_handle());
                self.runtime.spawn(sweeper(
                    Arc::downgrade(&live),
                    self.settings.sweep_interval,
                    self.bookie.clone(),
                ));
                // The requests that waited for the connection are queued on it
                // under the state lock, so that a request sent once it is ready
                // (which takes that lock) leaves after them, in call order.
                let rejected: Vec<Rejected> = {
                    let mut state = self.state.lock();
                    let queued = match std::mem::replace(&mut *state, State::Ready(live.clone())) {
                        State::Connecting(queue) => queue,
                        _ => Vec::new(),
                    };
                    if self.shut.load(Ordering::Acquire) {
                        *state = State::Idle;
                    }
                    queued
                        .into_iter()
                        .filter_map(|(key, frame, timeout, completion)| {
                            live.submit(key, frame, timeout, completion).err()
                        })
                        .collect()
                };
                // Completed outside the lock: a completion may send again.
                for c in rejected {
                    c.completion.complete(Err(self.error(
                        ConnErrorKind::Closed,
                        "connection closed right after it opened",
                    )));
                }
                if self.shut.load(Ordering::Acquire) {
                    live.fail_all(&self.bookie, "client closed");
                    if let Some(reader) = live.reader.lock().take() {
                        reader.abort();
                    }
                }
            }
            Err(detail) => {
                debug!(bookie = %self.bookie, %detail, "cannot connect to bookie");
                let queued = {
                    let mut state = self.state.lock();
                    match std::mem::replace(&mut *state, State::Idle) {
                        State::Connecting(queue) => queue,
                        _ => Vec::new(),
                    }
                };
                for (_, _, _, completion) in queued {
                    completion.complete(Err(self.error(ConnErrorKind::Connect, detail.clone())));
                }
            }
        }
    }

    /// Drops the connection if it is `live_id` (called by its reader when it ends).
    fn forget(&self, live_id: u64) {
        let mut state = self.state.lock();
        if matches!(&*state, State::Ready(l) if l.id == live_id) {
            *state = State::Idle;
        }
    }

    /// Requests sent to this bookie so far (retries on a new connection count
    /// once more).
    pub(crate) fn requests_sent(&self) -> u64 {
        self.sent.load(Ordering::Relaxed)
    }

    /// Closes the connection and fails every pending request; later sends fail.
    pub(crate) fn shutdown(&self) {
        self.shut.store(true, Ordering::Release);
        let previous = std::mem::replace(&mut *self.state.lock(), State::Idle);
        match previous {
            State::Ready(live) => {
                live.fail_all(&self.bookie, "client closed");
                if let Some(reader) = live.reader.lock().take() {
                    reader.abort();
                }
            }
            State::Connecting(queue) => {
                for (_, _, _, c) in queue {
                    c.complete(Err(self.error(ConnErrorKind::Closed, "client closed")));
                }
            }
            State::Idle => {}
        }
    }
}
