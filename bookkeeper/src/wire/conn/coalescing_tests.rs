//! Add coalescing (`ConnSettings::hold_adds`) against a fake bookie that
//! answers only when told: what waits, what lets it go, and that a lone
//! request never waits.

use super::*;
use crate::wire::codec::{header_word, rc};
use bytes::{Buf, BufMut};
use std::collections::VecDeque;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A fake bookie that reports the entry id of every request it reads on
/// `seen` and answers the oldest unanswered ones, `n` of them, when `n`
/// arrives on `answer`.
async fn bookie_on_command(
    listener: TcpListener,
    seen: mpsc::UnboundedSender<i64>,
    mut answer: mpsc::UnboundedReceiver<usize>,
) {
    let (socket, _) = listener.accept().await.unwrap();
    let (mut rd, mut wr) = socket.into_split();
    let mut buf = BytesMut::new();
    let mut unanswered = VecDeque::new();
    loop {
        tokio::select! {
            n = rd.read_buf(&mut buf) => {
                if n.unwrap() == 0 {
                    return;
                }
                while let Some(mut frame) = split_frame(&mut buf).unwrap() {
                    let _header = frame.get_u32();
                    let (ledger, entry) = (frame.get_i64(), frame.get_i64());
                    let _ = seen.send(entry);
                    unanswered.push_back((ledger, entry));
                }
            }
            n = answer.recv() => {
                let Some(n) = n else { return };
                let mut out = BytesMut::new();
                for (ledger, entry) in unanswered.drain(..n.min(unanswered.len())) {
                    out.put_u32(24);
                    out.put_u32(header_word(OP_ADD, 0));
                    out.put_i32(rc::EOK);
                    out.put_i64(ledger);
                    out.put_i64(entry);
                }
                wr.write_all(&out).await.unwrap();
            }
        }
    }
}

struct Rig {
    conn: Arc<BookieConn>,
    seen: mpsc::UnboundedReceiver<i64>,
    answer: mpsc::UnboundedSender<usize>,
}

async fn rig(hold_adds: usize, sweep_interval: Duration) -> Rig {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let (seen_tx, seen) = mpsc::unbounded_channel();
    let (answer, answer_rx) = mpsc::unbounded_channel();
    tokio::spawn(bookie_on_command(listener, seen_tx, answer_rx));
    let resolver: Resolver = Arc::new(move |_| Box::pin(async move { Ok(addr) }));
    let conn = BookieConn::new(
        "fake:1".to_owned(),
        ConnSettings {
            connect_timeout: Duration::from_secs(5),
            sweep_interval,
            stats: Arc::default(),
            tls: None,
            hold_adds,
        },
        resolver,
        Handle::current(),
    );
    Rig { conn, seen, answer }
}

type Answer = oneshot::Receiver<Result<Response, ConnError>>;

/// Sends an add of `entry` to ledger 7 (a frame the fake bookie reads: its
/// header, ledger and entry).
fn add(conn: &Arc<BookieConn>, entry: i64) -> Answer {
    let mut frame = BytesMut::new();
    frame.put_u32(20);
    frame.put_u32(header_word(OP_ADD, 0));
    frame.put_i64(7);
    frame.put_i64(entry);
    let (tx, rx) = oneshot::channel();
    conn.send(
        (OP_ADD, 7, entry),
        frame.freeze(),
        Duration::from_secs(60),
        Completion::Channel(tx),
    );
    rx
}

/// The entries the bookie reads within `window` of now.
async fn seen_within(seen: &mut mpsc::UnboundedReceiver<i64>, window: Duration) -> Vec<i64> {
    let until = Instant::now() + window;
    let mut got = Vec::new();
    while let Ok(Some(e)) = tokio::time::timeout_at(until, seen.recv()).await {
        got.push(e);
    }
    got
}

/// Waits until the bookie has read exactly `want`.
async fn seen_exactly(seen: &mut mpsc::UnboundedReceiver<i64>, want: &[i64]) {
    let mut got = Vec::new();
    while got.len() < want.len() {
        match tokio::time::timeout(Duration::from_secs(5), seen.recv()).await {
            Ok(Some(e)) => got.push(e),
            _ => panic!("the bookie read {got:?}, expected {want:?}"),
        }
    }
    assert_eq!(got, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_wait_for_the_next_answer_only_while_many_adds_are_unanswered() {
    // A sweep far away: only answers and a full batch let held requests go.
    let mut r = rig(4, Duration::from_secs(3600)).await;
    // Fewer than 4 unanswered: every add leaves at once.
    let first: Vec<Answer> = (0..4).map(|e| add(&r.conn, e)).collect();
    seen_exactly(&mut r.seen, &[0, 1, 2, 3]).await;
    // 4 unanswered: the next ones wait for an answer.
    let held: Vec<Answer> = (4..6).map(|e| add(&r.conn, e)).collect();
    assert_eq!(
        seen_within(&mut r.seen, Duration::from_millis(300)).await,
        Vec::<i64>::new()
    );
    r.answer.send(1).unwrap();
    seen_exactly(&mut r.seen, &[4, 5]).await;
    // 5 unanswered now; held requests also go once 4 of them are queued.
    let more: Vec<Answer> = (6..9).map(|e| add(&r.conn, e)).collect();
    assert_eq!(
        seen_within(&mut r.seen, Duration::from_millis(300)).await,
        Vec::<i64>::new()
    );
    let fourth = add(&r.conn, 9);
    seen_exactly(&mut r.seen, &[6, 7, 8, 9]).await;
    // Every add is answered, in order, with its own entry id.
    r.answer.send(9).unwrap();
    for (entry, rx) in (0..).zip(first.into_iter().chain(held).chain(more).chain([fourth])) {
        let response = rx.await.unwrap().unwrap();
        assert_eq!(
            (response.op, response.entry_id, response.rc),
            (OP_ADD, entry, rc::EOK)
        );
    }
    // Nothing unanswered: a lone add leaves at once.
    let lone = add(&r.conn, 10);
    seen_exactly(&mut r.seen, &[10]).await;
    r.answer.send(1).unwrap();
    assert_eq!(lone.await.unwrap().unwrap().entry_id, 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bookie_that_does_not_answer_holds_requests_no_longer_than_a_sweep() {
    let mut r = rig(4, Duration::from_millis(50)).await;
    let _first: Vec<Answer> = (0..4).map(|e| add(&r.conn, e)).collect();
    seen_exactly(&mut r.seen, &[0, 1, 2, 3]).await;
    let started = Instant::now();
    let _held = add(&r.conn, 4);
    seen_exactly(&mut r.seen, &[4]).await;
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "held {:?} with no answer",
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn off_by_default_nothing_waits_and_requests_leave_in_call_order() {
    // (The first requests wait for the connection; those sent once it is up
    // must still leave after them.)
    let mut r = rig(0, Duration::from_secs(3600)).await;
    let _first: Vec<Answer> = (0..64).map(|e| add(&r.conn, e)).collect();
    seen_exactly(&mut r.seen, &(0..64).collect::<Vec<_>>()).await;
    let _next = add(&r.conn, 64);
    seen_exactly(&mut r.seen, &[64]).await;
}
