//! The codec on a real byte stream (`tokio_util::codec::Framed`): a client
//! and a proxy exchange the lookup handshake over an in-memory pipe.

use bkswitch_pulsar_wire::proto::command_lookup_topic_response::LookupType;
use bkswitch_pulsar_wire::proto::ServerError;
use bkswitch_pulsar_wire::{commands, CommandType, Frame, PulsarCodec, WireError};
use futures::{SinkExt, StreamExt};
use tokio::io::AsyncWriteExt;
use tokio_util::codec::Framed;

#[tokio::test]
async fn a_client_and_a_proxy_talk_through_framed_streams() {
    let (client, proxy) = tokio::io::duplex(64);
    let mut client = Framed::new(client, PulsarCodec::new());
    let mut proxy = Framed::new(proxy, PulsarCodec::new());

    let server = tokio::spawn(async move {
        while let Some(frame) = proxy.next().await {
            let frame = frame.expect("a frame");
            let answer = match frame.kind() {
                Some(CommandType::Connect) => commands::connected("proxy", 21, Some(5 << 20), None),
                Some(CommandType::Ping) => commands::pong(),
                Some(CommandType::Lookup) => {
                    let lookup = frame.command.lookup_topic.expect("a body");
                    if lookup.topic.ends_with("/unrouted") {
                        commands::lookup_failed(
                            lookup.request_id,
                            ServerError::ServiceNotReady,
                            "no route",
                        )
                    } else {
                        commands::lookup_response(
                            lookup.request_id,
                            LookupType::Redirect,
                            "pulsar://b:6650",
                            None,
                            false,
                            false,
                        )
                    }
                }
                other => panic!("unexpected {other:?}"),
            };
            proxy.send(Frame::new(answer)).await.expect("sent");
        }
    });

    let requests = [
        commands::connect("test-client", 21, None, None),
        commands::ping(),
        commands::lookup("persistent://t/ns/orders", 1, false),
        commands::lookup("persistent://t/ns/unrouted", 2, false),
    ];
    let mut answers = Vec::new();
    for request in requests {
        client.send(Frame::new(request)).await.expect("sent");
        answers.push(client.next().await.expect("an answer").expect("a frame"));
    }
    assert_eq!(answers[0].kind(), Some(CommandType::Connected));
    assert_eq!(answers[1].kind(), Some(CommandType::Pong));
    let redirect = answers[2]
        .command
        .lookup_topic_response
        .as_ref()
        .expect("a body");
    assert_eq!(
        redirect.broker_service_url.as_deref(),
        Some("pulsar://b:6650")
    );
    let failed = answers[3]
        .command
        .lookup_topic_response
        .as_ref()
        .expect("a body");
    assert_eq!(failed.error, Some(ServerError::ServiceNotReady as i32));
    drop(client);
    server.await.expect("the proxy ends with the stream");
}

#[tokio::test]
async fn a_stream_ending_inside_a_frame_is_truncated() {
    let (mut writer, reader) = tokio::io::duplex(64);
    let bytes = Frame::new(commands::ping()).to_bytes().expect("encodes");
    writer
        .write_all(&bytes[..bytes.len() - 1])
        .await
        .expect("written");
    drop(writer);
    let mut reader = Framed::new(reader, PulsarCodec::new());
    let end = reader.next().await.expect("an item");
    assert!(matches!(end, Err(WireError::Truncated { .. })), "{end:?}");
}
