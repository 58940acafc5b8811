//! Builders of the commands a lookup proxy reads and writes, each a complete
//! [`BaseCommand`] (type set, body filled) with the fields Pulsar's own
//! broker sets for it, so that what the proxy writes is what a broker would.
//!
//! ```
//! use bkswitch_pulsar_wire::commands;
//! use bkswitch_pulsar_wire::proto::command_lookup_topic_response::LookupType;
//! use bkswitch_pulsar_wire::{CommandType, Frame};
//!
//! let answer = commands::lookup_response(7, LookupType::Redirect, "pulsar://b:6650", None, true, false);
//! let frame = Frame::new(answer);
//! assert_eq!(frame.kind(), Some(CommandType::LookupResponse));
//! let bytes = frame.to_bytes()?;
//! assert_eq!(Frame::decode(&bytes)?, frame);
//! # Ok::<(), bkswitch_pulsar_wire::WireError>(())
//! ```

use crate::proto::{
    base_command::Type, command_lookup_topic_response, command_partitioned_topic_metadata_response,
    BaseCommand, CommandCloseConsumer, CommandCloseProducer, CommandConnect, CommandConnected,
    CommandError, CommandGetSchemaResponse, CommandGetTopicsOfNamespaceResponse,
    CommandLookupTopic, CommandLookupTopicResponse, CommandPartitionedTopicMetadata,
    CommandPartitionedTopicMetadataResponse, CommandPing, CommandPong, CommandSuccess,
    FeatureFlags, Schema, ServerError,
};

/// A command of type `kind` with no body yet.
pub fn base(kind: Type) -> BaseCommand {
    BaseCommand {
        r#type: kind as i32,
        ..BaseCommand::default()
    }
}

/// `CONNECT`: the client's version, its protocol version, its credentials
/// (`(method name, data)`) and feature flags.
pub fn connect(
    client_version: &str,
    protocol_version: i32,
    auth: Option<(&str, &[u8])>,
    feature_flags: Option<FeatureFlags>,
) -> BaseCommand {
    let (method, data) = auth.map_or((None, None), |(m, d)| {
        (Some(m.to_owned()), Some(d.to_vec()))
    });
    BaseCommand {
        connect: Some(CommandConnect {
            client_version: client_version.to_owned(),
            auth_method_name: method,
            auth_data: data,
            protocol_version: Some(protocol_version),
            feature_flags,
            ..CommandConnect::default()
        }),
        ..base(Type::Connect)
    }
}

/// `CONNECTED`: the server's version, the protocol version agreed (the lower
/// of the client's and the server's), the largest message accepted and the
/// features the server implements.
pub fn connected(
    server_version: &str,
    protocol_version: i32,
    max_message_size: Option<i32>,
    feature_flags: Option<FeatureFlags>,
) -> BaseCommand {
    BaseCommand {
        connected: Some(CommandConnected {
            server_version: server_version.to_owned(),
            protocol_version: Some(protocol_version),
            max_message_size,
            feature_flags,
        }),
        ..base(Type::Connected)
    }
}

/// `PING` (keep-alive probe).
pub fn ping() -> BaseCommand {
    BaseCommand {
        ping: Some(CommandPing {}),
        ..base(Type::Ping)
    }
}

/// `PONG` (the answer to a ping).
pub fn pong() -> BaseCommand {
    BaseCommand {
        pong: Some(CommandPong {}),
        ..base(Type::Pong)
    }
}

/// `LOOKUP`: which broker serves `topic`.
pub fn lookup(topic: &str, request_id: u64, authoritative: bool) -> BaseCommand {
    BaseCommand {
        lookup_topic: Some(CommandLookupTopic {
            topic: topic.to_owned(),
            request_id,
            authoritative: Some(authoritative),
            ..CommandLookupTopic::default()
        }),
        ..base(Type::Lookup)
    }
}

/// `LOOKUP_RESPONSE` with a broker: `Redirect` (look up again there) or
/// `Connect` (the topic is served there). With `proxy_through_service_url`
/// the client keeps connecting through its service URL.
pub fn lookup_response(
    request_id: u64,
    response: command_lookup_topic_response::LookupType,
    broker_service_url: &str,
    broker_service_url_tls: Option<&str>,
    authoritative: bool,
    proxy_through_service_url: bool,
) -> BaseCommand {
    BaseCommand {
        lookup_topic_response: Some(CommandLookupTopicResponse {
            broker_service_url: Some(broker_service_url.to_owned()),
            broker_service_url_tls: broker_service_url_tls.map(str::to_owned),
            response: Some(response as i32),
            request_id,
            authoritative: Some(authoritative),
            proxy_through_service_url: Some(proxy_through_service_url),
            ..CommandLookupTopicResponse::default()
        }),
        ..base(Type::LookupResponse)
    }
}

/// `LOOKUP_RESPONSE` `Failed`, with the error and its message.
pub fn lookup_failed(request_id: u64, error: ServerError, message: &str) -> BaseCommand {
    BaseCommand {
        lookup_topic_response: Some(CommandLookupTopicResponse {
            response: Some(command_lookup_topic_response::LookupType::Failed as i32),
            request_id,
            error: Some(error as i32),
            message: Some(message.to_owned()),
            ..CommandLookupTopicResponse::default()
        }),
        ..base(Type::LookupResponse)
    }
}

/// `PARTITIONED_METADATA`: how many partitions `topic` has.
pub fn partitioned_metadata(topic: &str, request_id: u64) -> BaseCommand {
    BaseCommand {
        partition_metadata: Some(CommandPartitionedTopicMetadata {
            topic: topic.to_owned(),
            request_id,
            ..CommandPartitionedTopicMetadata::default()
        }),
        ..base(Type::PartitionedMetadata)
    }
}

/// `PARTITIONED_METADATA_RESPONSE` `Success` (0 partitions: not partitioned).
pub fn partitioned_metadata_response(request_id: u64, partitions: u32) -> BaseCommand {
    BaseCommand {
        partition_metadata_response: Some(CommandPartitionedTopicMetadataResponse {
            partitions: Some(partitions),
            request_id,
            response: Some(command_partitioned_topic_metadata_response::LookupType::Success as i32),
            ..CommandPartitionedTopicMetadataResponse::default()
        }),
        ..base(Type::PartitionedMetadataResponse)
    }
}

/// `PARTITIONED_METADATA_RESPONSE` `Failed`, with the error and its message.
pub fn partitioned_metadata_failed(
    request_id: u64,
    error: ServerError,
    message: &str,
) -> BaseCommand {
    BaseCommand {
        partition_metadata_response: Some(CommandPartitionedTopicMetadataResponse {
            request_id,
            response: Some(command_partitioned_topic_metadata_response::LookupType::Failed as i32),
            error: Some(error as i32),
            message: Some(message.to_owned()),
            ..CommandPartitionedTopicMetadataResponse::default()
        }),
        ..base(Type::PartitionedMetadataResponse)
    }
}

/// `ERROR`: a request failed.
pub fn error(request_id: u64, error: ServerError, message: &str) -> BaseCommand {
    BaseCommand {
        error: Some(CommandError {
            request_id,
            error: error as i32,
            message: message.to_owned(),
        }),
        ..base(Type::Error)
    }
}

/// `CLOSE_PRODUCER` from the server, without an assigned broker: the client
/// looks the topic up again from its service URL.
pub fn close_producer(producer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        close_producer: Some(CommandCloseProducer {
            producer_id,
            request_id,
            ..CommandCloseProducer::default()
        }),
        ..base(Type::CloseProducer)
    }
}

/// `CLOSE_CONSUMER` from the server, without an assigned broker.
pub fn close_consumer(consumer_id: u64, request_id: u64) -> BaseCommand {
    BaseCommand {
        close_consumer: Some(CommandCloseConsumer {
            consumer_id,
            request_id,
            ..CommandCloseConsumer::default()
        }),
        ..base(Type::CloseConsumer)
    }
}

/// `GET_SCHEMA_RESPONSE` with a schema and its version.
pub fn get_schema_response(request_id: u64, schema: Schema, schema_version: &[u8]) -> BaseCommand {
    BaseCommand {
        get_schema_response: Some(CommandGetSchemaResponse {
            request_id,
            schema: Some(schema),
            schema_version: Some(schema_version.to_vec()),
            ..CommandGetSchemaResponse::default()
        }),
        ..base(Type::GetSchemaResponse)
    }
}

/// `GET_SCHEMA_RESPONSE` with an error (`TopicNotFound` when the topic has
/// no schema).
pub fn get_schema_failed(request_id: u64, error: ServerError, message: &str) -> BaseCommand {
    BaseCommand {
        get_schema_response: Some(CommandGetSchemaResponse {
            request_id,
            error_code: Some(error as i32),
            error_message: Some(message.to_owned()),
            ..CommandGetSchemaResponse::default()
        }),
        ..base(Type::GetSchemaResponse)
    }
}

/// `GET_TOPICS_OF_NAMESPACE_RESPONSE`: the topics, their hash when the
/// server computed one, whether the server filtered them by the request's
/// pattern and whether they changed since the hash the client sent.
pub fn get_topics_of_namespace_response(
    request_id: u64,
    topics: Vec<String>,
    topics_hash: Option<&str>,
    filtered: bool,
    changed: bool,
) -> BaseCommand {
    BaseCommand {
        get_topics_of_namespace_response: Some(CommandGetTopicsOfNamespaceResponse {
            request_id,
            topics,
            filtered: Some(filtered),
            topics_hash: topics_hash.map(str::to_owned),
            changed: Some(changed),
        }),
        ..base(Type::GetTopicsOfNamespaceResponse)
    }
}

/// `SUCCESS`: a request without other answer succeeded.
pub fn success(request_id: u64) -> BaseCommand {
    BaseCommand {
        success: Some(CommandSuccess {
            request_id,
            schema: None,
        }),
        ..base(Type::Success)
    }
}
