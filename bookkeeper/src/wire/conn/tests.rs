//! The connection against a fake bookie.

use super::io::frame_rest;
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

fn conn_with_stats(addr: SocketAddr, timeout: Duration, stats: Arc<WireStats>) -> Arc<BookieConn> {
    let resolver: Resolver = Arc::new(move |_| Box::pin(async move { Ok(addr) }));
    BookieConn::new(
        "fake:1".to_owned(),
        ConnSettings {
            connect_timeout: timeout,
            sweep_interval: Duration::from_millis(10),
            stats,
            tls: None,
            hold_adds: 0,
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
