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

use super::codec::{decode_response, split_frame, Response};

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
}

/// A live connection: its socket's write side, its pending requests and its
/// writer task's wake-up.
struct Live {
    id: u64,
    wake_writer: Arc<Notify>,
    stats: Arc<WireStats>,
    pending: Mutex<PendingMap>,
    reader: Mutex<Option<tokio::task::AbortHandle>>,
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
        })
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
                let queued = {
                    let mut state = self.state.lock();
                    let queued = match std::mem::replace(&mut *state, State::Ready(live.clone())) {
                        State::Connecting(queue) => queue,
                        _ => Vec::new(),
                    };
                    if self.shut.load(Ordering::Acquire) {
                        *state = State::Idle;
                    }
                    queued
                };
                for (key, frame, timeout, completion) in queued {
                    if let Err(c) = live.submit(key, frame, timeout, completion) {
                        c.completion.complete(Err(self.error(
                            ConnErrorKind::Closed,
                            "connection closed right after it opened",
                        )));
                    }
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

/// A request that could not be submitted, given back to be sent elsewhere.
struct Rejected {
    frame: Bytes,
    completion: Completion,
}

impl Live {
    /// Registers the request and queues its frame; gives the request back when the
    /// connection is already closed.
    fn submit(
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
        if !pending.flushing {
            pending.flushing = true;
            self.wake_writer.notify_one();
        }
        Ok(())
    }

    fn complete(&self, response: Response) {
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
            waiter
        };
        if let Some(w) = waiter {
            w.completion.complete(Ok(response));
        }
    }

    fn fail_all(&self, bookie: &str, detail: &str) {
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

    fn expire(&self, now: Instant, bookie: &str) {
        let expired: Vec<Waiter> = {
            let mut pending = self.pending.lock();
            let mut expired = Vec::new();
            pending.by_key.retain(|_, queue| {
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
                !queue.is_empty()
            });
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

/// Writes the frames queued on a connection: everything queued by the time it
/// runs goes out in one write, and what queues while that write is under way
/// goes out in the next.
async fn writer(live: Weak<Live>, wake: Arc<Notify>, bookie: String, mut write: BoxWrite) {
    loop {
        wake.notified().await;
        loop {
            let Some(l) = live.upgrade() else { return };
            let (chunks, frames) = {
                let mut p = l.pending.lock();
                if p.closed {
                    return;
                }
                if p.out.is_empty() {
                    p.flushing = false;
                    break;
                }
                let frames = std::mem::take(&mut p.queued_frames);
                (std::mem::take(&mut p.out), frames)
            };
            let total: usize = chunks.iter().map(Bytes::len).sum();
            l.stats.frames.fetch_add(frames, Ordering::Relaxed);
            l.stats.bytes.fetch_add(total as u64, Ordering::Relaxed);
            // Gathered writes of the frames as they are (no copy), at most
            // `MAX_SLICES` per system call.
            let mut at = 0; // first frame not fully written
            let mut offset = 0; // bytes of it already written
            while at < chunks.len() {
                let slices: Vec<std::io::IoSlice<'_>> = chunks[at..]
                    .iter()
                    .take(MAX_SLICES)
                    .enumerate()
                    .map(|(i, c)| std::io::IoSlice::new(if i == 0 { &c[offset..] } else { c }))
                    .collect();
                // A plain socket is written at once when it can take the
                // bytes (nearly always) and waited for only when it is full.
                let result = write.write_vectored(&slices).await;
                drop(slices);
                match result {
                    Ok(0) => {
                        l.fail_all(&bookie, "write failed: the connection takes no more bytes");
                        return;
                    }
                    Ok(mut n) => {
                        l.stats.writes.fetch_add(1, Ordering::Relaxed);
                        while n > 0 && at < chunks.len() {
                            let left = chunks[at].len() - offset;
                            if n >= left {
                                n -= left;
                                at += 1;
                                offset = 0;
                            } else {
                                offset += n;
                                n = 0;
                            }
                        }
                    }
                    Err(e) => {
                        debug!(%bookie, error = %e, "write to bookie failed");
                        l.fail_all(&bookie, &format!("write failed: {e}"));
                        return;
                    }
                }
            }
            // TLS keeps records it could not write yet: push them out.
            if let Err(e) = write.flush().await {
                debug!(%bookie, error = %e, "write to bookie failed");
                l.fail_all(&bookie, &format!("write failed: {e}"));
                return;
            }
        }
    }
}

/// Frames written per system call at most (below every system's `IOV_MAX`).
const MAX_SLICES: usize = 256;

async fn reader(conn: Weak<BookieConn>, live: Arc<Live>, mut read: BoxRead) {
    let mut buf = BytesMut::with_capacity(RECEIVE_CHUNK);
    let reason = 'read: loop {
        loop {
            match split_frame(&mut buf) {
                Ok(Some(frame)) => match decode_response(frame) {
                    Ok(response) => live.complete(response),
                    Err(e) => warn!(error = %e, "undecodable response from bookie; ignored"),
                },
                Ok(None) => break,
                Err(e) => break 'read format!("bad frame from the bookie: {e}"),
            }
        }
        // Room for the rest of the frame under way (its header is read) and
        // then some: a large entry arrives in few reads, and a new buffer is
        // taken once per several frames rather than once per frame (frames
        // split off keep the old one alive until their callers drop them).
        let rest = frame_rest(&buf);
        if buf.capacity() - buf.len() < rest.max(MIN_SPARE) {
            buf.reserve(rest.max(RECEIVE_CHUNK));
        }
        match read.read_buf(&mut buf).await {
            Ok(0) => break 'read "the bookie closed the connection".to_owned(),
            Ok(_) => {}
            Err(e) => break 'read format!("read failed: {e}"),
        }
    };
    let bookie = conn
        .upgrade()
        .map(|c| {
            c.forget(live.id);
            c.bookie.clone()
        })
        .unwrap_or_default();
    debug!(%bookie, %reason, "bookie connection ended");
    live.fail_all(&bookie, &reason);
}

/// Bytes a connection's reader asks the socket for at a time, at most.
const RECEIVE_CHUNK: usize = 256 * 1024;
/// Free room below which the reader takes a new buffer.
const MIN_SPARE: usize = 16 * 1024;

/// The bytes still missing of the frame at the front of `buf`, once its
/// length is read; 0 before.
fn frame_rest(buf: &[u8]) -> usize {
    match buf.get(..4) {
        Some(h) => {
            (4 + u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize).saturating_sub(buf.len())
        }
        None => 0,
    }
}

async fn sweeper(live: Weak<Live>, interval: Duration, bookie: String) {
    let mut tick = tokio::time::interval(interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(live) = live.upgrade() else { return };
        if live.pending.lock().closed {
            return;
        }
        live.expire(Instant::now(), &bookie);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::codec::{encode_read, header_word, rc, OP_READ};
    use bytes::{Buf, BufMut};
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    /// A fake bookie that collects `batch` READ requests, then answers them in
    /// reverse order, each answer carrying the request's entry id in its body.
    async fn fake_bookie(listener: TcpListener, batch: usize) {
        let (mut socket, _) = listener.accept().await.unwrap();
        let mut buf = BytesMut::new();
        loop {
            let mut requests = Vec::new();
            while requests.len() < batch {
                while let Some(mut frame) = split_frame(&mut buf).unwrap() {
                    let _header = frame.get_u32();
                    requests.push((frame.get_i64(), frame.get_i64()));
                }
                if requests.len() >= batch {
                    break;
                }
                if socket.read_buf(&mut buf).await.unwrap() == 0 {
                    return;
                }
            }
            let mut out = BytesMut::new();
            for (ledger, entry) in requests.into_iter().rev() {
                out.put_u32(24 + 8);
                out.put_u32(header_word(OP_READ, 0));
                out.put_i32(rc::EOK);
                out.put_i64(ledger);
                out.put_i64(entry);
                out.put_i64(entry * 1000);
            }
            socket.write_all(&out).await.unwrap();
        }
    }

    fn conn_to(addr: SocketAddr, timeout: Duration) -> Arc<BookieConn> {
        conn_with_stats(addr, timeout, Arc::default())
    }

    fn conn_with_stats(
        addr: SocketAddr,
        timeout: Duration,
        stats: Arc<WireStats>,
    ) -> Arc<BookieConn> {
        let resolver: Resolver = Arc::new(move |_| Box::pin(async move { Ok(addr) }));
        BookieConn::new(
            "fake:1".to_owned(),
            ConnSettings {
                connect_timeout: timeout,
                sweep_interval: Duration::from_millis(10),
                stats,
                tls: None,
            },
            resolver,
            Handle::current(),
        )
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn answers_out_of_order_reach_their_own_requests() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(fake_bookie(listener, 64));
        let conn = conn_to(addr, Duration::from_secs(5));
        let mut waits = Vec::new();
        // 64 requests, some of them for the same key, sent concurrently.
        for i in 0..64i64 {
            let (tx, rx) = oneshot::channel();
            let entry = i % 40;
            conn.send(
                (OP_READ, 7, entry),
                encode_read(7, entry, 0, None),
                Duration::from_secs(5),
                Completion::Channel(tx),
            );
            waits.push((entry, rx));
        }
        for (entry, rx) in waits {
            let r = rx.await.unwrap().unwrap();
            assert_eq!((r.ledger_id, r.entry_id), (7, entry));
            assert_eq!(r.body.clone().get_i64(), entry * 1000);
        }
    }

    #[test]
    fn the_reader_knows_what_is_missing_of_a_frame_once_its_length_is_read() {
        assert_eq!(frame_rest(&[]), 0);
        assert_eq!(frame_rest(&[0, 0, 1]), 0);
        // A 65,560-byte frame of which 100 bytes (header included) arrived.
        let mut head = 65_560u32.to_be_bytes().to_vec();
        head.resize(100, 0);
        assert_eq!(frame_rest(&head), 4 + 65_560 - 100);
        // Complete, or followed by the next frame: nothing missing.
        let mut whole = 8u32.to_be_bytes().to_vec();
        whole.resize(4 + 8 + 3, 0);
        assert_eq!(frame_rest(&whole), 0);
    }

    /// Requests sent together leave in a few writes, not one each; a request
    /// sent alone leaves at once (nothing waits for company).
    ///
    /// One thread: the burst is queued before the writer can run, so the
    /// count of writes does not depend on how busy the machine is (with
    /// two threads a loaded machine let the writer wake mid-burst).
    #[tokio::test(flavor = "current_thread")]
    async fn requests_sent_together_share_writes_and_a_lone_one_is_not_held() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(fake_bookie(listener, 1));
        let stats = Arc::new(WireStats::default());
        let conn = conn_with_stats(addr, Duration::from_secs(5), stats.clone());
        // Connected and idle first.
        let (tx, rx) = oneshot::channel();
        conn.send(
            (OP_READ, 3, 0),
            encode_read(3, 0, 0, None),
            Duration::from_secs(5),
            Completion::Channel(tx),
        );
        rx.await.unwrap().unwrap();
        let before = stats.snapshot();
        // 200 requests in one burst from this task.
        let mut waits = Vec::new();
        for entry in 1..=200i64 {
            let (tx, rx) = oneshot::channel();
            conn.send(
                (OP_READ, 3, entry),
                encode_read(3, entry, 0, None),
                Duration::from_secs(5),
                Completion::Channel(tx),
            );
            waits.push(rx);
        }
        for rx in waits {
            rx.await.unwrap().unwrap();
        }
        let burst = stats.snapshot();
        assert_eq!(burst.frames - before.frames, 200);
        assert!(
            burst.writes - before.writes <= 2,
            "200 requests sent together took {} writes",
            burst.writes - before.writes
        );
        // A lone request goes out in a write of its own, without waiting.
        let (tx, rx) = oneshot::channel();
        let started = Instant::now();
        conn.send(
            (OP_READ, 3, 999),
            encode_read(3, 999, 0, None),
            Duration::from_secs(5),
            Completion::Channel(tx),
        );
        rx.await.unwrap().unwrap();
        assert!(started.elapsed() < Duration::from_millis(500));
        // The writer counts its write once the call returns, which may be
        // after the answer arrived: give the count a moment.
        let mut lone = stats.snapshot();
        for _ in 0..100 {
            if lone.writes > burst.writes {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
            lone = stats.snapshot();
        }
        assert_eq!(
            (lone.frames - burst.frames, lone.writes - burst.writes),
            (1, 1)
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn unanswered_requests_time_out_and_a_dead_bookie_fails_fast() {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // Answers only after 1,000 requests: never, here.
        tokio::spawn(fake_bookie(listener, 1000));
        let conn = conn_to(addr, Duration::from_secs(5));
        let (tx, rx) = oneshot::channel();
        let started = Instant::now();
        conn.send(
            (OP_READ, 1, 1),
            encode_read(1, 1, 0, None),
            Duration::from_millis(200),
            Completion::Channel(tx),
        );
        let e = rx.await.unwrap().unwrap_err();
        assert_eq!(e.kind, ConnErrorKind::Timeout);
        assert!(started.elapsed() < Duration::from_secs(2));

        // Nothing listens: the connect error comes back at once.
        let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let dead = closed.local_addr().unwrap();
        drop(closed);
        let conn = conn_to(dead, Duration::from_secs(5));
        let (tx, rx) = oneshot::channel();
        conn.send(
            (OP_READ, 1, 1),
            encode_read(1, 1, 0, None),
            Duration::from_secs(5),
            Completion::Channel(tx),
        );
        let e = rx.await.unwrap().unwrap_err();
        assert_eq!(e.kind, ConnErrorKind::Connect);
        assert!(e.to_string().contains("fake:1"), "{e}");
    }
}
