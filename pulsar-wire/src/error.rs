//! Why a frame could not be read or written.

use std::fmt;

/// A part of a frame, named in [`WireError::Overrun`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Section {
    /// The 4-byte command size after the total size.
    CommandSize,
    /// The `BaseCommand` protobuf.
    Command,
    /// The broker entry metadata (magic `0x0e02`, 4-byte size, protobuf).
    BrokerEntryMetadata,
    /// The checksum (magic `0x0e01`, 4-byte CRC32C).
    Checksum,
    /// The 4-byte metadata size and the `MessageMetadata` protobuf.
    Metadata,
}

impl fmt::Display for Section {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Section::CommandSize => "command size",
            Section::Command => "command",
            Section::BrokerEntryMetadata => "broker entry metadata",
            Section::Checksum => "checksum",
            Section::Metadata => "message metadata",
        })
    }
}

/// Why a frame could not be decoded or encoded.
///
/// Every malformed input maps to one of these; decoding never panics.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// The input ends before the frame does (a whole frame was expected).
    #[error("truncated frame: {needed} bytes needed, {available} available")]
    Truncated {
        /// The bytes the frame declares (its size field included).
        needed: usize,
        /// The bytes there are.
        available: usize,
    },
    /// The frame is larger than the limit (its 4-byte size field included,
    /// as Pulsar counts it).
    #[error("frame of {size} bytes exceeds the limit of {max} bytes")]
    TooLarge {
        /// The frame's size, its size field included.
        size: usize,
        /// The limit.
        max: usize,
    },
    /// A size inside the frame points past the frame's end.
    #[error("malformed frame: the {section} needs {needed} bytes but only {available} remain")]
    Overrun {
        /// Which part overran.
        section: Section,
        /// The bytes that part needs.
        needed: usize,
        /// The bytes left in the frame.
        available: usize,
    },
    /// The payload's CRC32C does not match its content.
    #[error("payload checksum mismatch: the frame says {expected:#010x}, the content has {computed:#010x}")]
    Checksum {
        /// The checksum written in the frame.
        expected: u32,
        /// The checksum of the bytes received.
        computed: u32,
    },
    /// The `BaseCommand` is not valid protobuf for its schema.
    #[error("undecodable command: {0}")]
    Command(#[source] prost::DecodeError),
    /// The `MessageMetadata` is not valid protobuf for its schema.
    #[error("undecodable message metadata: {0}")]
    Metadata(#[source] prost::DecodeError),
    /// The `BrokerEntryMetadata` is not valid protobuf for its schema.
    #[error("undecodable broker entry metadata: {0}")]
    BrokerEntryMetadata(#[source] prost::DecodeError),
    /// Bytes follow the frame where exactly one frame was expected.
    #[error("{0} bytes follow the frame")]
    TrailingBytes(usize),
    /// The transport failed (only from the [`PulsarCodec`](crate::PulsarCodec)
    /// inside a `Framed` stream).
    #[error("transport error: {0}")]
    Io(#[from] std::io::Error),
}

impl WireError {
    /// Whether the stream can go on after this error: the faulty frame was
    /// consumed whole, so the next frame starts at the right place (a bad
    /// checksum or an undecodable protobuf). After any other error the
    /// stream has lost its framing and must be closed.
    pub fn frame_skipped(&self) -> bool {
        matches!(
            self,
            WireError::Checksum { .. }
                | WireError::Command(_)
                | WireError::Metadata(_)
                | WireError::BrokerEntryMetadata(_)
                | WireError::Overrun { .. }
        )
    }
}
