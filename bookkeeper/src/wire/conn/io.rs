//! The tasks of a live connection: the writer, the reader and the sweeper
//! of timed-out requests.

use super::*;

/// Writes the frames queued on a connection: everything queued by the time it
/// runs goes out in one write, and what queues while that write is under way
/// goes out in the next.
pub(super) async fn writer(
    live: Weak<Live>,
    wake: Arc<Notify>,
    bookie: String,
    mut write: BoxWrite,
) {
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
                if l.holds(&p) {
                    p.flushing = false;
                    p.held = true;
                    break;
                }
                p.release = false;
                p.held = false;
                let adds = std::mem::take(&mut p.queued_adds);
                p.adds_on_wire += adds;
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
pub(super) const MAX_SLICES: usize = 256;

pub(super) async fn reader(conn: Weak<BookieConn>, live: Arc<Live>, mut read: BoxRead) {
    let mut buf = BytesMut::with_capacity(RECEIVE_CHUNK);
    let reason = 'read: loop {
        let mut answered = false;
        loop {
            match split_frame(&mut buf) {
                Ok(Some(frame)) => match decode_response(frame) {
                    Ok(response) => {
                        live.complete(response);
                        answered = true;
                    }
                    Err(e) => warn!(error = %e, "undecodable response from bookie; ignored"),
                },
                Ok(None) => break,
                Err(e) => break 'read format!("bad frame from the bookie: {e}"),
            }
        }
        if answered && live.hold_adds > 0 {
            live.release();
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
pub(super) const RECEIVE_CHUNK: usize = 256 * 1024;
/// Free room below which the reader takes a new buffer.
pub(super) const MIN_SPARE: usize = 16 * 1024;

/// The bytes still missing of the frame at the front of `buf`, once its
/// length is read; 0 before.
pub(super) fn frame_rest(buf: &[u8]) -> usize {
    match buf.get(..4) {
        Some(h) => {
            (4 + u32::from_be_bytes([h[0], h[1], h[2], h[3]]) as usize).saturating_sub(buf.len())
        }
        None => 0,
    }
}

pub(super) async fn sweeper(live: Weak<Live>, interval: Duration, bookie: String) {
    // The first sweep one interval after the connection opened (not at once:
    // nothing can be overdue yet).
    let mut tick = tokio::time::interval_at(Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(live) = live.upgrade() else { return };
        if live.pending.lock().closed {
            return;
        }
        live.expire(Instant::now(), &bookie);
        // However the answers go, nothing is held longer than a sweep.
        live.release();
    }
}
