//! Properties of the codec: encoding then decoding is the identity (both on
//! values and on bytes, one frame at a time and as a stream cut anywhere),
//! and corruption is an error, never a panic.

use bkswitch_pulsar_wire::proto::command_lookup_topic_response::LookupType;
use bkswitch_pulsar_wire::proto::{
    schema, BaseCommand, BrokerEntryMetadata, CommandMessage, CommandSend, FeatureFlags, KeyValue,
    MessageIdData, MessageMetadata, Schema, ServerError,
};
use bkswitch_pulsar_wire::{
    commands, CommandType, Frame, Payload, PulsarCodec, WireError, DEFAULT_MAX_FRAME_SIZE,
};
use bytes::BytesMut;
use proptest::prelude::*;
use tokio_util::codec::{Decoder, Encoder};

fn text() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9:/._é✓-]{0,40}"
}

fn server_error() -> impl Strategy<Value = ServerError> {
    (0_i32..=25).prop_map(|n| ServerError::try_from(n).expect("a known error"))
}

fn flags() -> impl Strategy<Value = Option<FeatureFlags>> {
    proptest::option::of(
        proptest::collection::vec(proptest::option::of(any::<bool>()), 9).prop_map(|f| {
            FeatureFlags {
                supports_auth_refresh: f[0],
                supports_broker_entry_metadata: f[1],
                supports_partial_producer: f[2],
                supports_topic_watchers: f[3],
                supports_get_partitioned_metadata_without_auto_creation: f[4],
                supports_repl_dedup_by_lid_and_eid: f[5],
                supports_topic_watcher_reconcile: f[6],
                supports_scalable_topics: f[7],
                supports_tc_metadata_discovery: f[8],
            }
        }),
    )
}

/// Commands without payload, through the builders.
fn simple_command() -> impl Strategy<Value = BaseCommand> {
    prop_oneof![
        (
            text(),
            0_i32..30,
            proptest::option::of((text(), proptest::collection::vec(any::<u8>(), 0..64))),
            flags()
        )
            .prop_map(|(v, p, auth, f)| commands::connect(
                &v,
                p,
                auth.as_ref().map(|(m, d)| (m.as_str(), d.as_slice())),
                f
            )),
        (
            text(),
            0_i32..30,
            proptest::option::of(any::<i32>()),
            flags()
        )
            .prop_map(|(v, p, m, f)| commands::connected(&v, p, m, f)),
        Just(commands::ping()),
        Just(commands::pong()),
        (text(), any::<u64>(), any::<bool>()).prop_map(|(t, r, a)| commands::lookup(&t, r, a)),
        (
            any::<u64>(),
            0_i32..2,
            text(),
            proptest::option::of(text()),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(|(r, k, u, tls, a, p)| {
                let kind = if k == 0 {
                    LookupType::Redirect
                } else {
                    LookupType::Connect
                };
                commands::lookup_response(r, kind, &u, tls.as_deref(), a, p)
            }),
        (any::<u64>(), server_error(), text())
            .prop_map(|(r, e, m)| commands::lookup_failed(r, e, &m)),
        (text(), any::<u64>()).prop_map(|(t, r)| commands::partitioned_metadata(&t, r)),
        (any::<u64>(), any::<u32>())
            .prop_map(|(r, p)| commands::partitioned_metadata_response(r, p)),
        (any::<u64>(), server_error(), text())
            .prop_map(|(r, e, m)| commands::partitioned_metadata_failed(r, e, &m)),
        (any::<u64>(), server_error(), text()).prop_map(|(r, e, m)| commands::error(r, e, &m)),
        (any::<u64>(), any::<u64>()).prop_map(|(p, r)| commands::close_producer(p, r)),
        (any::<u64>(), any::<u64>()).prop_map(|(c, r)| commands::close_consumer(c, r)),
        (
            any::<u64>(),
            text(),
            proptest::collection::vec(any::<u8>(), 0..128),
            0_i32..23,
            proptest::collection::vec(any::<u8>(), 0..9)
        )
            .prop_map(|(r, n, d, t, v)| {
                let schema = Schema {
                    name: n,
                    schema_data: d,
                    r#type: t,
                    properties: vec![],
                };
                commands::get_schema_response(r, schema, &v)
            }),
        (any::<u64>(), server_error(), text())
            .prop_map(|(r, e, m)| commands::get_schema_failed(r, e, &m)),
        (
            any::<u64>(),
            proptest::collection::vec(text(), 0..8),
            proptest::option::of(text()),
            any::<bool>(),
            any::<bool>()
        )
            .prop_map(
                |(r, t, h, f, c)| commands::get_topics_of_namespace_response(
                    r,
                    t,
                    h.as_deref(),
                    f,
                    c
                )
            ),
        any::<u64>().prop_map(commands::success),
    ]
}

fn metadata() -> impl Strategy<Value = MessageMetadata> {
    (
        text(),
        any::<u64>(),
        any::<u64>(),
        proptest::collection::vec((text(), text()), 0..4),
        proptest::option::of(text()),
        proptest::option::of(any::<i32>()),
        proptest::option::of(proptest::collection::vec(any::<u8>(), 0..16)),
        proptest::option::of(any::<i64>()),
    )
        .prop_map(
            |(producer, seq, time, props, key, batch, ordering, deliver)| MessageMetadata {
                producer_name: producer,
                sequence_id: seq,
                publish_time: time,
                properties: props
                    .into_iter()
                    .map(|(key, value)| KeyValue { key, value })
                    .collect(),
                partition_key: key,
                num_messages_in_batch: batch,
                ordering_key: ordering,
                deliver_at_time: deliver,
                ..MessageMetadata::default()
            },
        )
}

fn payload() -> impl Strategy<Value = Payload> {
    (
        proptest::option::of((
            proptest::option::of(any::<u64>()),
            proptest::option::of(any::<u64>()),
        )),
        any::<bool>(),
        metadata(),
        proptest::collection::vec(any::<u8>(), 0..2048),
    )
        .prop_map(|(bem, checksummed, metadata, data)| Payload {
            broker_entry_metadata: bem.map(|(broker_timestamp, index)| BrokerEntryMetadata {
                broker_timestamp,
                index,
            }),
            checksummed,
            metadata,
            data: data.into(),
        })
}

/// `SEND` and `MESSAGE` commands, with their payload.
fn payload_frame() -> impl Strategy<Value = Frame> {
    (
        any::<bool>(),
        any::<u64>(),
        any::<u64>(),
        any::<u64>(),
        payload(),
    )
        .prop_map(|(send, a, b, c, payload)| {
            let command = if send {
                BaseCommand {
                    send: Some(CommandSend {
                        producer_id: a,
                        sequence_id: b,
                        num_messages: Some(1),
                        ..CommandSend::default()
                    }),
                    ..commands::base(CommandType::Send)
                }
            } else {
                BaseCommand {
                    message: Some(CommandMessage {
                        consumer_id: a,
                        message_id: MessageIdData {
                            ledger_id: b,
                            entry_id: c,
                            ..MessageIdData::default()
                        },
                        ..CommandMessage::default()
                    }),
                    ..commands::base(CommandType::Message)
                }
            };
            Frame {
                command,
                payload: Some(payload),
            }
        })
}

fn frame() -> impl Strategy<Value = Frame> {
    prop_oneof![simple_command().prop_map(Frame::new), payload_frame()]
}

/// A checksummed payload frame and where its checksummed region starts.
fn checksummed_frame() -> impl Strategy<Value = (Vec<u8>, usize)> {
    payload_frame().prop_map(|mut f| {
        let p = f.payload.as_mut().expect("a payload");
        p.checksummed = true;
        let bem = p
            .broker_entry_metadata
            .as_ref()
            .map_or(0, |m| 6 + prost::Message::encoded_len(m));
        let command = prost::Message::encoded_len(&f.command);
        let bytes = f.to_bytes().expect("encodes").to_vec();
        (bytes, 8 + command + bem + 6)
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn decoding_what_was_encoded_gives_the_frame_and_the_bytes_back(f in frame()) {
        let bytes = f.to_bytes().expect("encodes");
        prop_assert_eq!(bytes.len(), f.encoded_len());
        let decoded = Frame::decode(&bytes).expect("decodes");
        prop_assert_eq!(&decoded, &f);
        prop_assert_eq!(decoded.to_bytes().expect("encodes"), bytes);
    }

    #[test]
    fn a_stream_cut_anywhere_decodes_to_the_same_frames(
        frames in proptest::collection::vec(frame(), 1..6),
        cuts in proptest::collection::vec(1_usize..512, 1..40),
    ) {
        let mut codec = PulsarCodec::new();
        let mut wire = BytesMut::new();
        for f in &frames {
            codec.encode(f, &mut wire).expect("encodes");
        }
        let mut input = BytesMut::new();
        let mut out = Vec::new();
        let mut rest = &wire[..];
        let mut cut = cuts.iter().cycle();
        while !rest.is_empty() {
            let n = (*cut.next().expect("cycles")).min(rest.len());
            input.extend_from_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(f) = codec.decode(&mut input).expect("decodes") {
                out.push(f);
            }
        }
        prop_assert!(codec.decode_eof(&mut input).expect("nothing left").is_none());
        prop_assert_eq!(out, frames);
    }

    #[test]
    fn a_truncated_frame_is_an_error(f in frame(), at in any::<prop::sample::Index>()) {
        let bytes = f.to_bytes().expect("encodes");
        let cut = at.index(bytes.len());
        let is_truncated = matches!(Frame::decode(&bytes[..cut]), Err(WireError::Truncated { .. }));
        prop_assert!(is_truncated);
        let mut codec = PulsarCodec::new();
        let mut input = BytesMut::from(&bytes[..cut]);
        prop_assert!(codec.decode(&mut input).expect("waits").is_none());
        let at_eof = codec.decode_eof(&mut input);
        let refused = matches!(at_eof, Err(WireError::Truncated { .. }));
        prop_assert!(cut == 0 || refused);
    }

    #[test]
    fn a_changed_size_field_is_an_error(f in frame(), byte in 0_usize..4, flip in 1_u8..=255) {
        let mut bytes = f.to_bytes().expect("encodes").to_vec();
        bytes[byte] ^= flip;
        prop_assert!(Frame::decode(&bytes).is_err());
    }

    #[test]
    fn any_change_to_a_checksummed_message_is_a_checksum_error(
        (bytes, start) in checksummed_frame(),
        at in any::<prop::sample::Index>(),
        flip in 1_u8..=255,
    ) {
        // From the CRC itself (4 bytes before `start`) to the end.
        let mut bytes = bytes;
        let i = start - 4 + at.index(bytes.len() - (start - 4));
        bytes[i] ^= flip;
        let is_checksum_error = matches!(Frame::decode(&bytes), Err(WireError::Checksum { .. }));
        prop_assert!(is_checksum_error, "byte {} changed", i);
    }

    #[test]
    fn corrupted_frames_never_panic(
        f in frame(),
        changes in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        extra in proptest::collection::vec(any::<u8>(), 0..16),
    ) {
        let mut bytes = f.to_bytes().expect("encodes").to_vec();
        for (at, value) in changes {
            let i = at.index(bytes.len());
            bytes[i] = value;
        }
        if let Ok(decoded) = Frame::decode(&bytes) {
            // Whatever decodes also encodes.
            let _ = decoded.to_bytes();
        }
        bytes.extend_from_slice(&extra);
        let mut codec = PulsarCodec::new();
        let mut input = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = codec.decode(&mut input) {}
        let _ = codec.decode_eof(&mut input);
    }

    #[test]
    fn random_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = Frame::decode(&bytes);
        let mut codec = PulsarCodec::with_max_frame_size(1024);
        let mut input = BytesMut::from(&bytes[..]);
        while let Ok(Some(_)) = codec.decode(&mut input) {}
        let _ = codec.decode_eof(&mut input);
    }
}

#[test]
fn frames_over_the_limit_are_refused_both_ways() {
    let metadata = MessageMetadata {
        producer_name: "p".to_owned(),
        ..MessageMetadata::default()
    };
    let frame = Frame::with_payload(
        commands::base(CommandType::Send),
        metadata,
        vec![0_u8; 2000],
    );
    let size = frame.encoded_len();
    let mut codec = PulsarCodec::with_max_frame_size(size - 1);
    let mut out = BytesMut::new();
    let refused = codec.encode(&frame, &mut out);
    assert!(
        matches!(refused, Err(WireError::TooLarge { size: s, max }) if s == size && max == size - 1)
    );
    assert!(out.is_empty(), "nothing written");

    // Refused from the size field alone, before the frame is buffered.
    let bytes = frame.to_bytes().expect("within the default limit");
    let mut input = BytesMut::from(&bytes[..4]);
    assert!(matches!(
        codec.decode(&mut input),
        Err(WireError::TooLarge { .. })
    ));
    codec.set_max_frame_size(size);
    let mut input = BytesMut::from(&bytes[..]);
    assert_eq!(
        codec.decode(&mut input).expect("fits").expect("whole"),
        frame
    );

    // Pulsar's default: 5 MiB of message plus 10 KiB.
    assert_eq!(DEFAULT_MAX_FRAME_SIZE, 5 * 1024 * 1024 + 10 * 1024);
    assert_eq!(
        PulsarCodec::for_max_message_size(1000).max_frame_size(),
        1000 + 10 * 1024
    );
    let header = u32::try_from(DEFAULT_MAX_FRAME_SIZE - 4 + 1)
        .unwrap()
        .to_be_bytes();
    assert!(matches!(
        Frame::decode(&header),
        Err(WireError::TooLarge { size, max: DEFAULT_MAX_FRAME_SIZE }) if size == DEFAULT_MAX_FRAME_SIZE + 1
    ));
    let mut just_fits = vec![0_u8; 4];
    just_fits.copy_from_slice(
        &u32::try_from(DEFAULT_MAX_FRAME_SIZE - 4)
            .unwrap()
            .to_be_bytes(),
    );
    assert!(matches!(
        Frame::decode(&just_fits),
        Err(WireError::Truncated { .. })
    ));
}

#[test]
fn sizes_pointing_past_the_frame_name_the_section() {
    // A command size larger than the frame.
    let bytes = [0, 0, 0, 6, 0, 0, 0, 9, 0x08, 0x12];
    assert!(matches!(
        Frame::decode(&bytes),
        Err(WireError::Overrun {
            section: bkswitch_pulsar_wire::Section::Command,
            needed: 9,
            available: 2
        })
    ));
    // A metadata size larger than what follows (no checksum).
    let ping = Frame::new(commands::ping()).to_bytes().unwrap().to_vec();
    let mut bytes = ping.clone();
    bytes.extend_from_slice(&[0, 0, 0, 50, 1, 2]);
    let total = u32::try_from(bytes.len() - 4).unwrap().to_be_bytes();
    bytes[..4].copy_from_slice(&total);
    assert!(matches!(
        Frame::decode(&bytes),
        Err(WireError::Overrun {
            section: bkswitch_pulsar_wire::Section::Metadata,
            needed: 50,
            available: 2
        })
    ));
    // Bytes that are not a BaseCommand.
    let bytes = [0, 0, 0, 6, 0, 0, 0, 2, 0xff, 0xff];
    let err = Frame::decode(&bytes).unwrap_err();
    assert!(matches!(err, WireError::Command(_)), "{err}");
    assert!(err.frame_skipped());
    // One frame expected, more given.
    let mut two = ping.clone();
    two.extend_from_slice(&ping);
    assert!(matches!(Frame::decode(&two), Err(WireError::TrailingBytes(n)) if n == ping.len()));
}

#[test]
fn a_bad_frame_in_a_stream_is_skipped_whole() {
    let send = Frame::with_payload(
        commands::base(CommandType::Send),
        MessageMetadata {
            producer_name: "p".to_owned(),
            ..MessageMetadata::default()
        },
        &b"data"[..],
    );
    let mut codec = PulsarCodec::new();
    let mut wire = BytesMut::new();
    codec.encode(&send, &mut wire).unwrap();
    let last = wire.len() - 1;
    wire[last] ^= 1;
    codec
        .encode(Frame::new(commands::ping()), &mut wire)
        .unwrap();
    let err = codec.decode(&mut wire).unwrap_err();
    assert!(err.frame_skipped(), "{err}");
    let next = codec.decode(&mut wire).unwrap().expect("the ping");
    assert_eq!(next.kind(), Some(CommandType::Ping));
}

#[test]
fn unknown_command_types_decode_to_their_number() {
    // Type 70 (a scalable-topic lookup, newer than this subset's bodies)
    // with a body in field 70 that this crate does not know.
    let command = [0x08, 70, 0xb2, 0x04, 0x02, 0x08, 0x01];
    let mut bytes = vec![0, 0, 0, 0, 0, 0, 0, 7];
    bytes.extend_from_slice(&command);
    let total = u32::try_from(bytes.len() - 4).unwrap().to_be_bytes();
    bytes[..4].copy_from_slice(&total);
    let frame = Frame::decode(&bytes).expect("decodes");
    assert_eq!(frame.command.r#type, 70);
    assert_eq!(frame.kind(), Some(CommandType::ScalableTopicLookup));
    let frame = Frame::new(BaseCommand {
        r#type: 99,
        ..BaseCommand::default()
    });
    let again = Frame::decode(&frame.to_bytes().unwrap()).unwrap();
    assert_eq!(again.kind(), None);
    let _ = schema::Type::Json;
}
