//! Connections from the proxy to the clusters' brokers, for the requests it
//! forwards (partitioned metadata, schemas, namespace listings).
//!
//! One connection per broker address, shared by every client connection and
//! opened on first use: the proxy's own `CONNECT`, then requests
//! multiplexed by request id (the proxy numbers them itself and gives the
//! client its own number back). A connection that fails fails its pending
//! requests and is opened again by the next request; the broker's pings are
//! answered.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bkswitch_pulsar_wire::proto::BaseCommand;
use bkswitch_pulsar_wire::{commands, CommandType, Frame, PulsarCodec};
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio_util::codec::Framed;

/// The protocol version the proxy speaks to brokers (Pulsar 4.x: v21).
pub const PROTOCOL_VERSION: i32 = 21;

/// Why a forwarded request got no answer from the cluster.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UpstreamError {
    /// No broker of the cluster could be reached or it refused the
    /// handshake.
    #[error("cannot reach a broker at {url}: {reason}")]
    Connect {
        /// The cluster's service URL.
        url: String,
        /// Why.
        reason: String,
    },
    /// The connection broke before the answer came.
    #[error("the connection to {addr} closed before it answered")]
    Closed {
        /// The broker address.
        addr: String,
    },
    /// The broker did not answer in time.
    #[error("{addr} did not answer within {timeout:?}")]
    Timeout {
        /// The broker address.
        addr: String,
        /// The time allowed.
        timeout: Duration,
    },
}

type Pending = Arc<Mutex<HashMap<u64, oneshot::Sender<BaseCommand>>>>;

#[derive(Debug)]
struct Conn {
    addr: String,
    out: mpsc::UnboundedSender<Frame>,
    pending: Pending,
    next_id: AtomicU64,
    alive: Arc<AtomicBool>,
}

impl Conn {
    fn is_open(&self) -> bool {
        self.alive.load(Ordering::Acquire) && !self.out.is_closed()
    }
}

/// The pool of broker connections.
#[derive(Debug, Clone)]
pub struct Upstreams {
    conns: Arc<Mutex<HashMap<String, Arc<Conn>>>>,
    next_host: Arc<AtomicUsize>,
    timeout: Duration,
    client_version: String,
}

/// The request id of a request or answer the proxy forwards.
pub(crate) fn request_id(cmd: &BaseCommand) -> Option<u64> {
    match CommandType::try_from(cmd.r#type).ok()? {
        CommandType::PartitionedMetadata => cmd.partition_metadata.as_ref().map(|c| c.request_id),
        CommandType::PartitionedMetadataResponse => cmd
            .partition_metadata_response
            .as_ref()
            .map(|c| c.request_id),
        CommandType::Lookup => cmd.lookup_topic.as_ref().map(|c| c.request_id),
        CommandType::LookupResponse => cmd.lookup_topic_response.as_ref().map(|c| c.request_id),
        CommandType::GetSchema => cmd.get_schema.as_ref().map(|c| c.request_id),
        CommandType::GetSchemaResponse => cmd.get_schema_response.as_ref().map(|c| c.request_id),
        CommandType::GetTopicsOfNamespace => {
            cmd.get_topics_of_namespace.as_ref().map(|c| c.request_id)
        }
        CommandType::GetTopicsOfNamespaceResponse => cmd
            .get_topics_of_namespace_response
            .as_ref()
            .map(|c| c.request_id),
        CommandType::Error => cmd.error.as_ref().map(|c| c.request_id),
        CommandType::Success => cmd.success.as_ref().map(|c| c.request_id),
        _ => None,
    }
}

/// Sets the request id of a command [`request_id`] knows; `false` for any
/// other.
pub(crate) fn set_request_id(cmd: &mut BaseCommand, id: u64) -> bool {
    let slot = match CommandType::try_from(cmd.r#type) {
        Ok(CommandType::PartitionedMetadata) => {
            cmd.partition_metadata.as_mut().map(|c| &mut c.request_id)
        }
        Ok(CommandType::PartitionedMetadataResponse) => cmd
            .partition_metadata_response
            .as_mut()
            .map(|c| &mut c.request_id),
        Ok(CommandType::Lookup) => cmd.lookup_topic.as_mut().map(|c| &mut c.request_id),
        Ok(CommandType::LookupResponse) => cmd
            .lookup_topic_response
            .as_mut()
            .map(|c| &mut c.request_id),
        Ok(CommandType::GetSchema) => cmd.get_schema.as_mut().map(|c| &mut c.request_id),
        Ok(CommandType::GetSchemaResponse) => {
            cmd.get_schema_response.as_mut().map(|c| &mut c.request_id)
        }
        Ok(CommandType::GetTopicsOfNamespace) => cmd
            .get_topics_of_namespace
            .as_mut()
            .map(|c| &mut c.request_id),
        Ok(CommandType::GetTopicsOfNamespaceResponse) => cmd
            .get_topics_of_namespace_response
            .as_mut()
            .map(|c| &mut c.request_id),
        Ok(CommandType::Error) => cmd.error.as_mut().map(|c| &mut c.request_id),
        Ok(CommandType::Success) => cmd.success.as_mut().map(|c| &mut c.request_id),
        _ => None,
    };
    match slot {
        Some(slot) => {
            *slot = id;
            true
        }
        None => false,
    }
}

/// The `host:port` addresses of a `pulsar://h1:p1,h2:p2` service URL.
pub(crate) fn hosts(service_url: &str) -> Vec<String> {
    let rest = service_url
        .strip_prefix("pulsar://")
        .or_else(|| service_url.strip_prefix("pulsar+ssl://"))
        .unwrap_or(service_url);
    rest.trim_end_matches('/')
        .split(',')
        .filter(|h| !h.is_empty())
        .map(str::to_owned)
        .collect()
}

impl Upstreams {
    /// A pool whose requests wait `timeout` for an answer; `client_version`
    /// is what the proxy says it is in its `CONNECT`.
    pub fn new(timeout: Duration, client_version: &str) -> Upstreams {
        Upstreams {
            conns: Arc::default(),
            next_host: Arc::default(),
            timeout,
            client_version: client_version.to_owned(),
        }
    }

    /// Sends `request` (its request id replaced by the proxy's own) to a
    /// broker of the cluster at `service_url` and returns the answer with
    /// the request id it had.
    ///
    /// # Errors
    /// [`UpstreamError`] when no broker answered.
    pub async fn request(
        &self,
        service_url: &str,
        mut request: BaseCommand,
    ) -> Result<BaseCommand, UpstreamError> {
        let client_id = request_id(&request).unwrap_or_default();
        let conn = self.connection(service_url).await?;
        let id = conn.next_id.fetch_add(1, Ordering::Relaxed);
        set_request_id(&mut request, id);
        let (tx, rx) = oneshot::channel();
        conn.pending.lock().insert(id, tx);
        if !conn.is_open() || conn.out.send(Frame::new(request)).is_err() {
            conn.pending.lock().remove(&id);
            return Err(UpstreamError::Closed {
                addr: conn.addr.clone(),
            });
        }
        match tokio::time::timeout(self.timeout, rx).await {
            Ok(Ok(mut answer)) => {
                set_request_id(&mut answer, client_id);
                Ok(answer)
            }
            Ok(Err(_)) => Err(UpstreamError::Closed {
                addr: conn.addr.clone(),
            }),
            Err(_) => {
                conn.pending.lock().remove(&id);
                Err(UpstreamError::Timeout {
                    addr: conn.addr.clone(),
                    timeout: self.timeout,
                })
            }
        }
    }

    async fn connection(&self, service_url: &str) -> Result<Arc<Conn>, UpstreamError> {
        let hosts = hosts(service_url);
        if hosts.is_empty() {
            return Err(UpstreamError::Connect {
                url: service_url.to_owned(),
                reason: "the URL names no host".to_owned(),
            });
        }
        {
            let conns = self.conns.lock();
            for h in &hosts {
                if let Some(c) = conns.get(h).filter(|c| c.is_open()) {
                    return Ok(Arc::clone(c));
                }
            }
        }
        let start = self.next_host.fetch_add(1, Ordering::Relaxed);
        let mut last = String::new();
        for i in 0..hosts.len() {
            let addr = &hosts[(start + i) % hosts.len()];
            match self.open(addr).await {
                Ok(conn) => {
                    let conn = Arc::new(conn);
                    self.conns.lock().insert(addr.clone(), Arc::clone(&conn));
                    return Ok(conn);
                }
                Err(e) => last = e,
            }
        }
        Err(UpstreamError::Connect {
            url: service_url.to_owned(),
            reason: last,
        })
    }

    async fn open(&self, addr: &str) -> Result<Conn, String> {
        let stream = tokio::time::timeout(self.timeout, TcpStream::connect(addr))
            .await
            .map_err(|_| format!("connecting to {addr} timed out"))?
            .map_err(|e| format!("connecting to {addr}: {e}"))?;
        let _ = stream.set_nodelay(true);
        let mut framed = Framed::new(stream, PulsarCodec::new());
        framed
            .send(Frame::new(commands::connect(
                &self.client_version,
                PROTOCOL_VERSION,
                None,
                None,
            )))
            .await
            .map_err(|e| format!("writing CONNECT to {addr}: {e}"))?;
        let answer = tokio::time::timeout(self.timeout, framed.next())
            .await
            .map_err(|_| format!("{addr} did not answer CONNECT in time"))?;
        match answer {
            Some(Ok(f)) if f.kind() == Some(CommandType::Connected) => {}
            Some(Ok(f)) => {
                let kind = f.kind();
                let why = f
                    .command
                    .error
                    .map_or_else(|| format!("{kind:?}"), |e| e.message);
                return Err(format!("{addr} refused CONNECT: {why}"));
            }
            Some(Err(e)) => return Err(format!("reading CONNECTED from {addr}: {e}")),
            None => return Err(format!("{addr} closed the connection during CONNECT")),
        }
        let (mut sink, mut stream) = framed.split();
        let (out, mut rx) = mpsc::unbounded_channel::<Frame>();
        let pending: Pending = Arc::default();
        let reader_pending = Arc::clone(&pending);
        let alive = Arc::new(AtomicBool::new(true));
        let (writer_alive, reader_alive) = (Arc::clone(&alive), Arc::clone(&alive));
        let pong = out.clone();
        let name = addr.to_owned();
        tokio::spawn(async move {
            while let Some(frame) = rx.recv().await {
                if let Err(e) = sink.send(frame).await {
                    tracing::debug!(broker = %name, error = %e, "broker connection write failed");
                    break;
                }
                if !writer_alive.load(Ordering::Acquire) {
                    break;
                }
            }
            writer_alive.store(false, Ordering::Release);
        });
        let name = addr.to_owned();
        tokio::spawn(async move {
            // `Framed` ends its stream once after any decoder error; after a
            // frame that was skipped whole, that end is passed over.
            let mut skipped = false;
            loop {
                let frame = match stream.next().await {
                    None if std::mem::take(&mut skipped) => continue,
                    None => break,
                    Some(frame) => frame,
                };
                skipped = false;
                let frame = match frame {
                    Ok(f) => f,
                    Err(e) if e.frame_skipped() => {
                        tracing::debug!(broker = %name, error = %e, "skipped an unreadable frame");
                        skipped = true;
                        continue;
                    }
                    Err(e) => {
                        tracing::debug!(broker = %name, error = %e, "broker connection read failed");
                        break;
                    }
                };
                match frame.kind() {
                    Some(CommandType::Ping) => {
                        let _ = pong.send(Frame::new(commands::pong()));
                    }
                    _ => {
                        if let Some(id) = request_id(&frame.command) {
                            if let Some(tx) = reader_pending.lock().remove(&id) {
                                let _ = tx.send(frame.command);
                            }
                        }
                    }
                }
            }
            // Fail every pending request; the next request opens a new
            // connection (the writer ends with its next frame).
            reader_alive.store(false, Ordering::Release);
            reader_pending.lock().clear();
            drop(pong);
        });
        Ok(Conn {
            addr: addr.to_owned(),
            out,
            pending,
            next_id: AtomicU64::new(1),
            alive,
        })
    }
}
