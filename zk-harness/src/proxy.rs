//! A fault-injecting TCP proxy: one link between a client (a `serve`
//! process) and a server (ZooKeeper, etcd), which a test partitions and
//! heals while both ends run.
//!
//! The proxy listens on a free `127.0.0.1` port and forwards every accepted
//! connection to its target. The test sets the link's [`LinkMode`]:
//!
//! - [`LinkMode::Forward`]: bytes flow both ways (the start, and
//!   [`FaultProxy::heal`]);
//! - [`LinkMode::Blackhole`]: connections stay open but no byte moves either
//!   way; new connections are accepted and held, not connected onward (a
//!   partition: the peers see silence, then their own timeouts). On heal the
//!   held bytes flow again and held connections are connected;
//! - [`LinkMode::Reset`]: every connection is dropped with a TCP reset, and
//!   new ones are reset as soon as they are accepted (a peer that refuses).
//!
//! The proxy runs on its own runtime thread, so it is driven the same way
//! from synchronous and asynchronous tests, and dropping it closes every
//! connection.

use std::io;
use std::net::{Ipv4Addr, SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

/// What a [`FaultProxy`] does with its connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LinkMode {
    /// Forward bytes both ways.
    Forward,
    /// Hold every connection, move no byte.
    Blackhole,
    /// Reset every connection, and every new one.
    Reset,
}

#[derive(Debug, Default)]
struct Counters {
    accepted: AtomicU64,
    reset: AtomicU64,
    bytes: AtomicU64,
}

/// One proxied link: it listens on a free `127.0.0.1` port and forwards each
/// connection to its target as its [`LinkMode`] says (forward, blackhole,
/// reset); [`heal`](FaultProxy::heal) forwards again.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    target: SocketAddr,
    mode: watch::Sender<LinkMode>,
    counters: Arc<Counters>,
    runtime: Option<tokio::runtime::Runtime>,
}

impl FaultProxy {
    /// Starts a proxy to `target` (`host:port`) in [`LinkMode::Forward`].
    ///
    /// # Errors
    ///
    /// When `target` does not resolve, or no port or runtime can be had.
    pub fn start(target: &str) -> io::Result<FaultProxy> {
        let target = target.to_socket_addrs()?.next().ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidInput, format!("{target}: no address"))
        })?;
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("fault-proxy")
            .enable_io()
            .enable_time()
            .build()?;
        let std_listener = std::net::TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        std_listener.set_nonblocking(true)?;
        let addr = std_listener.local_addr()?;
        let (mode, watching) = watch::channel(LinkMode::Forward);
        let counters = Arc::new(Counters::default());
        let listener = {
            let _entered = runtime.enter();
            TcpListener::from_std(std_listener)?
        };
        runtime.spawn(accept_loop(listener, target, watching, counters.clone()));
        Ok(FaultProxy {
            addr,
            target,
            mode,
            counters,
            runtime: Some(runtime),
        })
    }

    /// The address clients connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `127.0.0.1:<port>` of [`addr`](Self::addr), as connect strings want
    /// it.
    pub fn host_port(&self) -> String {
        format!("127.0.0.1:{}", self.addr.port())
    }

    /// Where the connections go.
    pub fn target(&self) -> SocketAddr {
        self.target
    }

    /// The current mode.
    pub fn mode(&self) -> LinkMode {
        *self.mode.borrow()
    }

    /// Sets the mode (takes effect at once on every connection).
    pub fn set(&self, mode: LinkMode) {
        self.mode.send_replace(mode);
    }

    /// [`LinkMode::Blackhole`].
    pub fn blackhole(&self) {
        self.set(LinkMode::Blackhole);
    }

    /// [`LinkMode::Reset`].
    pub fn reset(&self) {
        self.set(LinkMode::Reset);
    }

    /// Back to [`LinkMode::Forward`].
    pub fn heal(&self) {
        self.set(LinkMode::Forward);
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> u64 {
        self.counters.accepted.load(Ordering::Relaxed)
    }

    /// Connections reset so far (by [`LinkMode::Reset`]).
    pub fn resets(&self) -> u64 {
        self.counters.reset.load(Ordering::Relaxed)
    }

    /// Bytes forwarded so far, both ways.
    pub fn bytes(&self) -> u64 {
        self.counters.bytes.load(Ordering::Relaxed)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        if let Some(rt) = self.runtime.take() {
            // Never blocks, so a proxy may be dropped inside a runtime.
            rt.shutdown_background();
        }
    }
}

async fn accept_loop(
    listener: TcpListener,
    target: SocketAddr,
    mode: watch::Receiver<LinkMode>,
    counters: Arc<Counters>,
) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            continue;
        };
        counters.accepted.fetch_add(1, Ordering::Relaxed);
        if *mode.borrow() == LinkMode::Reset {
            abort(client, &counters);
            continue;
        }
        tokio::spawn(connect(client, target, mode.clone(), counters.clone()));
    }
}

/// Closes `stream` with a reset (`SO_LINGER` 0).
fn abort(stream: TcpStream, counters: &Counters) {
    counters.reset.fetch_add(1, Ordering::Relaxed);
    #[allow(
        deprecated,
        reason = "a zero linger never blocks on close: it is the reset wanted here"
    )]
    let _ = stream.set_linger(Some(std::time::Duration::ZERO));
    drop(stream);
}

/// Waits until the link forwards (`false`: it was reset meanwhile, or the
/// proxy is gone).
async fn until_forward(mode: &mut watch::Receiver<LinkMode>) -> bool {
    match mode.wait_for(|m| *m != LinkMode::Blackhole).await {
        Ok(m) => *m == LinkMode::Forward,
        Err(_) => false,
    }
}

async fn connect(
    client: TcpStream,
    target: SocketAddr,
    mut mode: watch::Receiver<LinkMode>,
    counters: Arc<Counters>,
) {
    // A connection accepted in a blackhole is held, not connected onward.
    if !until_forward(&mut mode).await {
        abort(client, &counters);
        return;
    }
    let server = match TcpStream::connect(target).await {
        Ok(s) => s,
        Err(_) => {
            abort(client, &counters);
            return;
        }
    };
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = tokio::spawn(pump(
        client_read,
        server_write,
        mode.clone(),
        counters.clone(),
    ));
    let down = tokio::spawn(pump(server_read, client_write, mode, counters.clone()));
    let (a, b) = tokio::join!(up, down);
    // A reset on either side resets both: the halves come back to be closed
    // with a zero linger.
    if let (Ok(Some((r1, w1))), Ok(Some((r2, w2)))) = (a, b) {
        for (r, w) in [(r1, w2), (r2, w1)] {
            if let Ok(stream) = r.reunite(w) {
                abort(stream, &counters);
            }
        }
    }
}

/// Forwards `from` to `to` while the link forwards; stops at the end of the
/// stream or an error (`None`), or when the link is reset (the halves are
/// returned, to be reset).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut mode: watch::Receiver<LinkMode>,
    counters: Arc<Counters>,
) -> Option<(OwnedReadHalf, OwnedWriteHalf)> {
    let mut buf = vec![0u8; 32 * 1024];
    loop {
        let current = *mode.borrow_and_update();
        match current {
            LinkMode::Reset => return Some((from, to)),
            LinkMode::Blackhole => {
                if mode.changed().await.is_err() {
                    return None;
                }
                continue;
            }
            LinkMode::Forward => {}
        }
        let n = tokio::select! {
            r = from.read(&mut buf) => match r {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return None;
                }
                Ok(n) => n,
            },
            changed = mode.changed() => {
                if changed.is_err() {
                    return None;
                }
                continue;
            }
        };
        // Bytes already taken are delivered (a blackhole set meanwhile holds
        // the next ones); only a reset stops the write.
        let mut resets = mode.clone();
        tokio::select! {
            r = to.write_all(&buf[..n]) => {
                if r.is_err() {
                    return None;
                }
                counters.bytes.fetch_add(n as u64, Ordering::Relaxed);
            }
            _ = resets.wait_for(|m| *m == LinkMode::Reset) => return Some((from, to)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::time::Duration;

    use super::*;

    /// An echo server on a free port.
    fn echo() -> SocketAddr {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        std::thread::spawn(move || {
            for s in listener.incoming() {
                let Ok(mut s) = s else { continue };
                std::thread::spawn(move || {
                    let mut buf = [0u8; 1024];
                    while let Ok(n) = s.read(&mut buf) {
                        if n == 0 || s.write_all(&buf[..n]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        addr
    }

    fn roundtrip(s: &mut std::net::TcpStream, msg: &[u8]) -> io::Result<Vec<u8>> {
        s.write_all(msg)?;
        let mut got = vec![0u8; msg.len()];
        s.read_exact(&mut got)?;
        Ok(got)
    }

    #[test]
    fn forwards_holds_resets_and_heals() {
        let proxy = FaultProxy::start(&echo().to_string()).unwrap();
        let mut a = std::net::TcpStream::connect(proxy.addr()).unwrap();
        a.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert_eq!(roundtrip(&mut a, b"one").unwrap(), b"one");

        // Blackhole: the connection stays, nothing comes back; a new one is
        // accepted and held.
        proxy.blackhole();
        std::thread::sleep(Duration::from_millis(50));
        assert!(roundtrip(&mut a, b"two").is_err());
        let mut b = std::net::TcpStream::connect(proxy.addr()).unwrap();
        b.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        assert!(roundtrip(&mut b, b"held").is_err());

        // Healed: what was held flows.
        proxy.heal();
        let mut got = [0u8; 3];
        a.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        a.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"two");
        b.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut got = [0u8; 4];
        b.read_exact(&mut got).unwrap();
        assert_eq!(&got, b"held");

        // Reset: open connections fail, new ones are reset.
        proxy.reset();
        std::thread::sleep(Duration::from_millis(100));
        assert!(roundtrip(&mut a, b"x").is_err());
        let mut c = std::net::TcpStream::connect(proxy.addr()).unwrap();
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert!(roundtrip(&mut c, b"y").is_err());
        assert!(proxy.resets() >= 2);

        proxy.heal();
        let mut d = std::net::TcpStream::connect(proxy.addr()).unwrap();
        d.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        assert_eq!(roundtrip(&mut d, b"back").unwrap(), b"back");
        assert!(proxy.bytes() > 0);
    }
}
