//! The binary protocol listener: one task per client connection.
//!
//! After the handshake (`CONNECT` → `CONNECTED`, with the lower of the two
//! protocol versions and only the features the proxy implements) a client
//! gets:
//! - `LOOKUP` → `Redirect` to the service URL of the cluster the topic's
//!   route names, not authoritative (that cluster's own brokers then choose
//!   the owner), or a retryable `ServiceNotReady` while the proxy is closed;
//! - `PARTITIONED_METADATA` and `GET_SCHEMA` → forwarded to that cluster;
//! - `GET_TOPICS_OF_NAMESPACE` → forwarded to the namespace's cluster, or to
//!   each of its clusters and merged when its topics are split;
//! - `PING` → `PONG` (and the proxy pings an idle client, closing it when it
//!   does not answer);
//! - producers, consumers and relaying (`proxy_to_broker_url`): an error
//!   naming the command — a lookup proxy serves no topic itself.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bkswitch_pulsar_wire::proto::{
    command_lookup_topic_response::LookupType, BaseCommand, FeatureFlags, ServerError,
};
use bkswitch_pulsar_wire::{
    commands, CommandType, Frame, PulsarCodec, WireError, DEFAULT_MAX_MESSAGE_SIZE,
};
use futures::{FutureExt, SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::{mpsc, watch};
use tokio_util::codec::Framed;

use crate::metrics::{Listener, LookupResult};
use crate::route::{namespace_clusters, topic_cluster, Refusal};
use crate::upstream::{request_id, PROTOCOL_VERSION};
use crate::view::Serving;
use crate::Shared;

/// What the proxy calls itself in `CONNECTED`.
pub const SERVER_VERSION: &str = concat!("bkswitch-lookup-proxy-", env!("CARGO_PKG_VERSION"));

/// Time a client has to send `CONNECT`.
const HANDSHAKE: Duration = Duration::from_secs(30);
/// Silence after which the proxy pings a client, and closes it if the
/// silence lasts as long again (Pulsar's `keepAliveIntervalSeconds`).
const KEEP_ALIVE: Duration = Duration::from_secs(30);
/// Time allowed to write one answer to a client.
const WRITE: Duration = Duration::from_secs(5);

/// The features the proxy announces: the one it honours by forwarding
/// (partitioned metadata without auto-creation). Topic watchers, auth
/// refresh and the rest are not announced, so clients fall back to what
/// works through a lookup proxy (polling namespace listings, for one).
fn feature_flags() -> FeatureFlags {
    FeatureFlags {
        supports_get_partitioned_metadata_without_auto_creation: Some(true),
        ..FeatureFlags::default()
    }
}

fn command_name(cmd: &BaseCommand) -> String {
    CommandType::try_from(cmd.r#type)
        .map(|t| t.as_str_name().to_owned())
        .unwrap_or_else(|_| format!("type {}", cmd.r#type))
}

/// The request id of a command a lookup proxy refuses (so that the client's
/// pending request fails at once instead of timing out).
fn refused_request_id(cmd: &BaseCommand) -> Option<u64> {
    match CommandType::try_from(cmd.r#type).ok()? {
        CommandType::Producer => cmd.producer.as_ref().map(|c| c.request_id),
        CommandType::Subscribe => cmd.subscribe.as_ref().map(|c| c.request_id),
        _ => request_id(cmd),
    }
}

/// Serves one client connection until it closes, fails, or `stop` is set.
pub(crate) async fn serve<S>(
    stream: S,
    shared: Arc<Shared>,
    tls: bool,
    mut stop: watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    shared.metrics.connection_opened();
    let mut framed = Framed::new(stream, PulsarCodec::new());
    if handshake(&mut framed).await.is_some() {
        run(framed, &shared, tls, &mut stop).await;
    }
    shared.metrics.connection_closed();
}

/// Reads `CONNECT` and answers it; `None` when the connection must end.
async fn handshake<S>(framed: &mut Framed<S, PulsarCodec>) -> Option<()>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let first = tokio::time::timeout(HANDSHAKE, framed.next())
        .await
        .ok()??
        .ok()?;
    let is_connect = first.kind() == Some(CommandType::Connect);
    let Some(connect) = first.command.connect.filter(|_| is_connect) else {
        let _ = framed
            .send(Frame::new(commands::error(
                0,
                ServerError::NotAllowedError,
                "the first command of a connection must be CONNECT",
            )))
            .await;
        return None;
    };
    if let Some(broker) = &connect.proxy_to_broker_url {
        let _ = framed
            .send(Frame::new(commands::error(
                0,
                ServerError::NotAllowedError,
                &format!(
                    "this is a lookup proxy: it redirects lookups and does not relay connections (asked to relay to {broker})"
                ),
            )))
            .await;
        return None;
    }
    let version = connect.protocol_version().min(PROTOCOL_VERSION);
    framed
        .send(Frame::new(commands::connected(
            SERVER_VERSION,
            version,
            i32::try_from(DEFAULT_MAX_MESSAGE_SIZE).ok(),
            Some(feature_flags()),
        )))
        .await
        .ok()?;
    Some(())
}

/// What to do after a frame.
enum Next {
    Continue,
    Close,
}

/// Frames answered before their answers are written out together.
const BATCH: usize = 128;
/// Frames' room a connection keeps between batches when its last batch was
/// no larger.
const KEPT_ROOM: usize = 8;

async fn run<S>(
    mut framed: Framed<S, PulsarCodec>,
    shared: &Arc<Shared>,
    tls: bool,
    stop: &mut watch::Receiver<bool>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (tx, mut answers) = mpsc::unbounded_channel::<BaseCommand>();
    let mut last_heard = Instant::now();
    let mut pinged = false;
    let mut batch = Vec::new();
    let mut ticker = tokio::time::interval(KEEP_ALIVE);
    ticker.tick().await;
    loop {
        let frame = tokio::select! {
            () = crate::stopped(stop) => return,
            Some(answer) = answers.recv() => {
                if !(buffer(&mut framed, answer).await && flush(&mut framed).await) {
                    return;
                }
                continue;
            }
            _ = ticker.tick() => {
                if last_heard.elapsed() < KEEP_ALIVE {
                    continue;
                }
                if pinged || !(buffer(&mut framed, commands::ping()).await && flush(&mut framed).await) {
                    return;
                }
                pinged = true;
                continue;
            }
            frame = framed.next() => frame,
        };
        // This frame and the ones already received behind it are answered
        // into the write buffer, which is then written at once: one write
        // for a batch of pipelined lookups. Their answers come from one
        // table, held until they are written (the barrier). The batch's
        // topic routes are prefetched before the first is resolved, so that
        // with a large table the lookups wait for memory together.
        let ended = gather(&mut framed, frame, &mut batch);
        let mut serving = None;
        if !batch.is_empty() {
            last_heard = Instant::now();
            pinged = false;
            if batch.iter().any(|f| f.command.lookup_topic.is_some()) {
                let held = shared.view.serving().await;
                for lookup in batch.iter().filter_map(|f| f.command.lookup_topic.as_ref()) {
                    held.snapshot.index.prefetch(&lookup.topic);
                }
                serving = Some(held);
            }
        }
        let size = batch.len();
        for frame in batch.drain(..) {
            if let Next::Close = handle(&mut framed, shared, tls, &tx, &mut serving, frame).await {
                return;
            }
        }
        // A frame is a few kB: a connection that pipelines keeps its batch's
        // room, one that went quiet gives it back.
        if size <= KEPT_ROOM && batch.capacity() > KEPT_ROOM {
            batch = Vec::new();
        }
        if !flush(&mut framed).await || ended {
            return;
        }
        drop(serving);
    }
}

/// Puts `first` and the frames already received behind it, up to
/// [`BATCH`], in `batch`; `true` when the connection ended or failed after
/// them.
fn gather<S>(
    framed: &mut Framed<S, PulsarCodec>,
    first: Option<Result<Frame, WireError>>,
    batch: &mut Vec<Frame>,
) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut next = Some(first);
    while let Some(frame) = next.take() {
        match frame {
            None => return true,
            Some(Ok(f)) => batch.push(f),
            Some(Err(e)) if e.frame_skipped() => {
                tracing::debug!(error = %e, "skipped an unreadable frame");
                // `Framed` ends its stream once after any decoder error; the
                // framing is intact here, so that end is passed over.
                let _ = framed.next().now_or_never();
            }
            Some(Err(e)) => {
                tracing::debug!(error = %e, "client connection ended");
                return true;
            }
        }
        if batch.len() < BATCH {
            next = framed.next().now_or_never();
        }
    }
    false
}

/// Answers one frame into the write buffer (forwarded requests are answered
/// later, through `tx`).
async fn handle<S>(
    framed: &mut Framed<S, PulsarCodec>,
    shared: &Arc<Shared>,
    tls: bool,
    tx: &mpsc::UnboundedSender<BaseCommand>,
    serving: &mut Option<Serving>,
    frame: Frame,
) -> Next
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let answer = match frame.kind() {
        Some(CommandType::Ping) => commands::pong(),
        Some(CommandType::Pong | CommandType::AuthResponse) => return Next::Continue,
        Some(CommandType::Lookup) => {
            let Some(lookup) = frame.command.lookup_topic else {
                return Next::Close;
            };
            // The answer is written while the table it came from is held:
            // the proxy acknowledges a newer table only after.
            if serving.is_none() {
                *serving = Some(shared.view.serving().await);
            }
            let snapshot = &serving.as_ref().expect("taken above").snapshot;
            match topic_cluster(snapshot, &shared.home, &lookup.topic) {
                Ok(cluster) => {
                    shared
                        .metrics
                        .lookup(&cluster.name, Listener::Binary, LookupResult::Redirect);
                    commands::lookup_response(
                        lookup.request_id,
                        LookupType::Redirect,
                        &cluster.service_url,
                        cluster.service_url_tls.as_deref(),
                        false,
                        false,
                    )
                }
                Err(r) => {
                    count_refusal(shared, &r);
                    if tls {
                        tracing::debug!(topic = %lookup.topic, "lookup refused on the TLS listener");
                    }
                    commands::lookup_failed(lookup.request_id, r.error, &r.message)
                }
            }
        }
        Some(
            CommandType::PartitionedMetadata
            | CommandType::GetSchema
            | CommandType::GetTopicsOfNamespace,
        ) => {
            let shared = Arc::clone(shared);
            let tx = tx.clone();
            tokio::spawn(async move {
                let answer = forward(&shared, frame.command).await;
                let _ = tx.send(answer);
            });
            return Next::Continue;
        }
        _ => {
            let name = command_name(&frame.command);
            shared.metrics.refused(&name);
            let Some(id) = refused_request_id(&frame.command) else {
                return Next::Continue;
            };
            commands::error(
                id,
                ServerError::NotAllowedError,
                &format!(
                    "{name} is not served by a lookup proxy: look the topic up and connect to the broker it names"
                ),
            )
        }
    };
    if buffer(framed, answer).await {
        Next::Continue
    } else {
        Next::Close
    }
}

fn count_refusal(shared: &Shared, r: &Refusal) {
    let result = if r.error == ServerError::InvalidTopicName {
        LookupResult::Invalid
    } else {
        LookupResult::Unavailable
    };
    shared.metrics.lookup("", Listener::Binary, result);
}

/// Adds an answer to the write buffer (which is written out when it is
/// full, within [`WRITE`]).
async fn buffer<S>(framed: &mut Framed<S, PulsarCodec>, command: BaseCommand) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    matches!(
        tokio::time::timeout(WRITE, framed.feed(Frame::new(command))).await,
        Ok(Ok(()))
    )
}

/// Writes out the buffered answers, within [`WRITE`].
async fn flush<S>(framed: &mut Framed<S, PulsarCodec>) -> bool
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    matches!(
        tokio::time::timeout(WRITE, SinkExt::<Frame>::flush(framed)).await,
        Ok(Ok(()))
    )
}

/// A failed answer of the same kind as `request`.
fn failed(request: &BaseCommand, error: ServerError, message: &str) -> BaseCommand {
    let id = request_id(request).unwrap_or_default();
    match CommandType::try_from(request.r#type) {
        Ok(CommandType::PartitionedMetadata) => {
            commands::partitioned_metadata_failed(id, error, message)
        }
        Ok(CommandType::GetSchema) => commands::get_schema_failed(id, error, message),
        _ => commands::error(id, error, message),
    }
}

/// Forwards a request to the cluster(s) that answer it.
async fn forward(shared: &Shared, request: BaseCommand) -> BaseCommand {
    let snapshot = shared.view.snapshot();
    let kind = command_name(&request);
    let target = if let Some(ns) = &request.get_topics_of_namespace {
        namespace_clusters(&snapshot, &shared.home, &ns.namespace)
    } else {
        let topic = request
            .partition_metadata
            .as_ref()
            .map(|c| c.topic.as_str())
            .or_else(|| request.get_schema.as_ref().map(|c| c.topic.as_str()))
            .unwrap_or_default();
        topic_cluster(&snapshot, &shared.home, topic).map(|c| vec![c])
    };
    let clusters = match target {
        Ok(c) => c,
        Err(r) => return failed(&request, r.error, &r.message),
    };
    let mut answers = Vec::with_capacity(clusters.len());
    for cluster in &clusters {
        let started = Instant::now();
        let result = shared
            .upstreams
            .request(&cluster.service_url, request.clone())
            .await;
        shared.metrics.forwarded(
            &cluster.name,
            &kind,
            result.is_ok(),
            started.elapsed().as_secs_f64(),
        );
        match result {
            Ok(a) => answers.push(a),
            Err(e) => {
                return failed(
                    &request,
                    ServerError::ServiceNotReady,
                    &format!("cluster `{}` did not answer {kind}: {e}", cluster.name),
                )
            }
        }
    }
    if answers.len() == 1 {
        return answers.pop().unwrap_or_default();
    }
    merge_listings(&request, answers)
}

/// The union of several clusters' namespace listings (an error if any
/// failed).
fn merge_listings(request: &BaseCommand, answers: Vec<BaseCommand>) -> BaseCommand {
    let id = request_id(request).unwrap_or_default();
    let mut topics = std::collections::BTreeSet::new();
    let mut filtered = true;
    for a in answers {
        match a.get_topics_of_namespace_response {
            Some(r) => {
                filtered &= r.filtered.unwrap_or(false);
                topics.extend(r.topics);
            }
            None => return a,
        }
    }
    // No hash: the union is not any one cluster's list.
    commands::get_topics_of_namespace_response(
        id,
        topics.into_iter().collect(),
        None,
        filtered,
        true,
    )
}
