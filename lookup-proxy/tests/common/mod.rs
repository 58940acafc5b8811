//! A stand-in broker and a raw protocol client for the proxy's tests.
#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;

use bkswitch_pulsar_wire::proto::{
    command_lookup_topic_response::LookupType, BaseCommand, ServerError,
};
use bkswitch_pulsar_wire::{commands, CommandType, Frame, PulsarCodec};
use futures::{SinkExt, StreamExt};
use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::codec::Framed;

/// A broker that answers what a lookup proxy forwards, from fixed data,
/// and records what it was asked. Asked for the partitions of a topic whose
/// name has `garbled` in it, it first writes a frame that cannot be read.
#[derive(Clone)]
pub(crate) struct FakeBroker {
    pub(crate) url: String,
    pub(crate) partitions: Arc<Mutex<HashMap<String, u32>>>,
    pub(crate) topics: Arc<Mutex<Vec<String>>>,
    pub(crate) asked: Arc<Mutex<Vec<(String, u64)>>>,
    task: Arc<tokio::task::JoinHandle<()>>,
}

impl FakeBroker {
    pub(crate) async fn start() -> FakeBroker {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("pulsar://{}", listener.local_addr().unwrap());
        let partitions: Arc<Mutex<HashMap<String, u32>>> = Arc::default();
        let topics: Arc<Mutex<Vec<String>>> = Arc::default();
        let asked: Arc<Mutex<Vec<(String, u64)>>> = Arc::default();
        let (p, t, a, u) = (
            Arc::clone(&partitions),
            Arc::clone(&topics),
            Arc::clone(&asked),
            url.clone(),
        );
        let task = tokio::spawn(async move {
            loop {
                let Ok((s, _)) = listener.accept().await else {
                    return;
                };
                let (p, t, a, u) = (Arc::clone(&p), Arc::clone(&t), Arc::clone(&a), u.clone());
                tokio::spawn(async move {
                    let mut f = Framed::new(s, PulsarCodec::new());
                    while let Some(Ok(frame)) = f.next().await {
                        let c = frame.command;
                        let answer = match CommandType::try_from(c.r#type).unwrap() {
                            CommandType::Connect => {
                                Some(commands::connected("fake-broker", 21, None, None))
                            }
                            CommandType::Ping => Some(commands::pong()),
                            CommandType::PartitionedMetadata => {
                                let m = c.partition_metadata.unwrap();
                                a.lock().push(("partitioned".into(), m.request_id));
                                let n = p.lock().get(&m.topic).copied().unwrap_or(0);
                                if m.topic.contains("garbled") {
                                    // A whole frame that is not protobuf first.
                                    let garbage = [0, 0, 0, 7, 0, 0, 0, 3, 0xff, 0xff, 0xff];
                                    if f.get_mut().write_all(&garbage).await.is_err() {
                                        return;
                                    }
                                }
                                Some(commands::partitioned_metadata_response(m.request_id, n))
                            }
                            CommandType::GetSchema => {
                                let m = c.get_schema.unwrap();
                                a.lock().push(("schema".into(), m.request_id));
                                Some(commands::get_schema_failed(
                                    m.request_id,
                                    ServerError::TopicNotFound,
                                    &format!("no schema for {} at {u}", m.topic),
                                ))
                            }
                            CommandType::GetTopicsOfNamespace => {
                                let m = c.get_topics_of_namespace.unwrap();
                                a.lock().push(("topics".into(), m.request_id));
                                Some(commands::get_topics_of_namespace_response(
                                    m.request_id,
                                    t.lock().clone(),
                                    Some("hash"),
                                    false,
                                    true,
                                ))
                            }
                            CommandType::Lookup => {
                                let m = c.lookup_topic.unwrap();
                                Some(commands::lookup_response(
                                    m.request_id,
                                    LookupType::Connect,
                                    &u,
                                    None,
                                    true,
                                    false,
                                ))
                            }
                            _ => None,
                        };
                        if let Some(answer) = answer {
                            if f.send(Frame::new(answer)).await.is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        FakeBroker {
            url,
            partitions,
            topics,
            asked,
            task: Arc::new(task),
        }
    }

    pub(crate) fn stop(&self) {
        self.task.abort();
    }
}

/// A raw protocol client.
pub(crate) struct Client<S> {
    pub(crate) framed: Framed<S, PulsarCodec>,
}

impl Client<TcpStream> {
    pub(crate) async fn connect(addr: std::net::SocketAddr) -> Client<TcpStream> {
        let s = TcpStream::connect(addr).await.unwrap();
        Client {
            framed: Framed::new(s, PulsarCodec::new()),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin> Client<S> {
    pub(crate) fn over(stream: S) -> Client<S> {
        Client {
            framed: Framed::new(stream, PulsarCodec::new()),
        }
    }

    pub(crate) async fn send(&mut self, c: BaseCommand) {
        self.framed.send(Frame::new(c)).await.unwrap();
    }

    /// The next frame, `None` when the connection closed.
    pub(crate) async fn recv(&mut self) -> Option<BaseCommand> {
        match tokio::time::timeout(std::time::Duration::from_secs(10), self.framed.next()).await {
            Ok(Some(Ok(f))) => Some(f.command),
            Ok(_) => None,
            Err(_) => panic!("no answer within 10 s"),
        }
    }

    pub(crate) async fn call(&mut self, c: BaseCommand) -> BaseCommand {
        self.send(c).await;
        self.recv().await.expect("an answer")
    }

    /// CONNECT with `version`; returns CONNECTED.
    pub(crate) async fn handshake(&mut self, version: i32) -> BaseCommand {
        self.call(commands::connect("test-client", version, None, None))
            .await
    }
}

/// A `GET` over HTTP/1.1: status, headers (lower-case names), body.
pub(crate) async fn http_get(
    addr: std::net::SocketAddr,
    path: &str,
) -> (u16, HashMap<String, String>, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n").as_bytes(),
    )
    .await
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).await.unwrap();
    let (head, body) = out.split_once("\r\n\r\n").unwrap_or((&out, ""));
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|c| c.parse().ok())
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, body.to_owned())
}
