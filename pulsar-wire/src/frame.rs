//! Frames: `[totalSize][commandSize][BaseCommand]`, and for messages
//! `… [magic 0x0e01][CRC32C][metadataSize][MessageMetadata][payload]`.
//!
//! All integers are big-endian `u32` (the magics are `u16`). `totalSize`
//! counts everything after itself. The CRC32C (Castagnoli) covers everything
//! after itself: the metadata size, the metadata and the payload. Pulsar
//! clients before protocol v6 send payload frames without the magic and the
//! checksum; brokers may put broker entry metadata
//! (`[magic 0x0e02][size][BrokerEntryMetadata]`) in front of the checksum when
//! a client supports it. Both forms are read and written here.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use prost::Message as _;

use crate::error::{Section, WireError};
use crate::proto::{base_command, BaseCommand, BrokerEntryMetadata, MessageMetadata};

/// Pulsar's default maximum message size (`maxMessageSize`, 5 MiB).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 5 * 1024 * 1024;

/// The room Pulsar allows a frame beyond the maximum message size, for the
/// command and the metadata (10 KiB).
pub const FRAME_PADDING: usize = 10 * 1024;

/// The largest frame Pulsar accepts by default, its size field included:
/// [`DEFAULT_MAX_MESSAGE_SIZE`] + [`FRAME_PADDING`].
pub const DEFAULT_MAX_FRAME_SIZE: usize = DEFAULT_MAX_MESSAGE_SIZE + FRAME_PADDING;

/// The magic in front of a payload's CRC32C.
pub const MAGIC_CRC32C: u16 = 0x0e01;

/// The magic in front of broker entry metadata.
pub const MAGIC_BROKER_ENTRY_METADATA: u16 = 0x0e02;

/// The fixed part of every frame: total size and command size.
const HEADER: usize = 8;

/// One frame of Pulsar's binary protocol.
#[derive(Debug, Clone, PartialEq)]
pub struct Frame {
    /// The command.
    pub command: BaseCommand,
    /// The message, for payload frames (`SEND` and `MESSAGE`).
    pub payload: Option<Payload>,
}

/// The message part of a payload frame.
#[derive(Debug, Clone, PartialEq)]
pub struct Payload {
    /// The broker entry metadata a broker puts in front of an entry, when
    /// the client announced `supports_broker_entry_metadata`.
    pub broker_entry_metadata: Option<BrokerEntryMetadata>,
    /// Whether the frame carries the magic and the CRC32C (every client since
    /// protocol v6 writes it). On decode a present checksum has been verified.
    pub checksummed: bool,
    /// The message metadata.
    pub metadata: MessageMetadata,
    /// The message (or batch) bytes, as the producer sent them.
    pub data: Bytes,
}

impl Payload {
    /// A checksummed payload without broker entry metadata, as clients send.
    pub fn new(metadata: MessageMetadata, data: impl Into<Bytes>) -> Payload {
        Payload {
            broker_entry_metadata: None,
            checksummed: true,
            metadata,
            data: data.into(),
        }
    }

    fn encoded_len(&self) -> usize {
        self.broker_entry_metadata
            .as_ref()
            .map_or(0, |m| 2 + 4 + m.encoded_len())
            + if self.checksummed { 2 + 4 } else { 0 }
            + 4
            + self.metadata.encoded_len()
            + self.data.len()
    }

    fn encode(&self, dst: &mut BytesMut) -> Result<(), WireError> {
        if let Some(bem) = &self.broker_entry_metadata {
            dst.put_u16(MAGIC_BROKER_ENTRY_METADATA);
            dst.put_u32(to_u32(bem.encoded_len())?);
            bem.encode_raw(dst);
        }
        let crc_at = if self.checksummed {
            dst.put_u16(MAGIC_CRC32C);
            dst.put_u32(0);
            Some(dst.len())
        } else {
            None
        };
        dst.put_u32(to_u32(self.metadata.encoded_len())?);
        self.metadata.encode_raw(dst);
        dst.put_slice(&self.data);
        if let Some(start) = crc_at {
            let crc = crc32c::crc32c(&dst[start..]);
            dst[start - 4..start].copy_from_slice(&crc.to_be_bytes());
        }
        Ok(())
    }
}

fn to_u32(n: usize) -> Result<u32, WireError> {
    u32::try_from(n).map_err(|_| WireError::TooLarge {
        size: n,
        max: u32::MAX as usize,
    })
}

impl Frame {
    /// A simple frame (a command without payload).
    pub fn new(command: BaseCommand) -> Frame {
        Frame {
            command,
            payload: None,
        }
    }

    /// A payload frame: `command` (`SEND` or `MESSAGE`) with a checksummed
    /// message.
    pub fn with_payload(
        command: BaseCommand,
        metadata: MessageMetadata,
        data: impl Into<Bytes>,
    ) -> Frame {
        Frame {
            command,
            payload: Some(Payload::new(metadata, data)),
        }
    }

    /// The command's type, or `None` when the number is not one this crate
    /// knows (a newer protocol).
    pub fn kind(&self) -> Option<base_command::Type> {
        base_command::Type::try_from(self.command.r#type).ok()
    }

    /// The encoded size of the frame, its size field included.
    pub fn encoded_len(&self) -> usize {
        HEADER + self.command.encoded_len() + self.payload.as_ref().map_or(0, Payload::encoded_len)
    }

    /// Appends the frame to `dst`.
    ///
    /// # Errors
    /// [`WireError::TooLarge`] when the frame exceeds `max_frame_size` (its
    /// size field included); nothing is written then.
    pub fn encode(&self, dst: &mut BytesMut, max_frame_size: usize) -> Result<(), WireError> {
        let size = self.encoded_len();
        if size > max_frame_size || size - 4 > u32::MAX as usize {
            return Err(WireError::TooLarge {
                size,
                max: max_frame_size.min(u32::MAX as usize + 4),
            });
        }
        dst.reserve(size);
        let start = dst.len();
        dst.put_u32(to_u32(size - 4)?);
        dst.put_u32(to_u32(self.command.encoded_len())?);
        self.command.encode_raw(dst);
        if let Some(payload) = &self.payload {
            if let Err(e) = payload.encode(dst) {
                dst.truncate(start);
                return Err(e);
            }
        }
        debug_assert_eq!(dst.len() - start, size);
        Ok(())
    }

    /// The frame's bytes, within [`DEFAULT_MAX_FRAME_SIZE`].
    ///
    /// # Errors
    /// [`WireError::TooLarge`] when the frame exceeds the default limit.
    pub fn to_bytes(&self) -> Result<Bytes, WireError> {
        let mut dst = BytesMut::with_capacity(self.encoded_len());
        self.encode(&mut dst, DEFAULT_MAX_FRAME_SIZE)?;
        Ok(dst.freeze())
    }

    /// Reads exactly one frame from `bytes`, within [`DEFAULT_MAX_FRAME_SIZE`].
    ///
    /// # Errors
    /// Any [`WireError`] but `Io`: a short input is
    /// [`Truncated`](WireError::Truncated), extra bytes after the frame are
    /// [`TrailingBytes`](WireError::TrailingBytes).
    pub fn decode(bytes: &[u8]) -> Result<Frame, WireError> {
        Frame::decode_with_limit(bytes, DEFAULT_MAX_FRAME_SIZE)
    }

    /// [`Frame::decode`] with another size limit (a broker's
    /// `maxMessageSize` + [`FRAME_PADDING`]).
    ///
    /// # Errors
    /// As [`Frame::decode`].
    pub fn decode_with_limit(bytes: &[u8], max_frame_size: usize) -> Result<Frame, WireError> {
        match frame_len(bytes, max_frame_size)? {
            None => Err(WireError::Truncated {
                needed: 4,
                available: bytes.len(),
            }),
            Some(len) if len > bytes.len() => Err(WireError::Truncated {
                needed: len,
                available: bytes.len(),
            }),
            Some(len) if len < bytes.len() => Err(WireError::TrailingBytes(bytes.len() - len)),
            Some(_) => parse_body(Bytes::copy_from_slice(&bytes[4..])),
        }
    }
}

/// The length of the frame starting `bytes` (its size field included), or
/// `None` when fewer than 4 bytes are there.
pub(crate) fn frame_len(bytes: &[u8], max_frame_size: usize) -> Result<Option<usize>, WireError> {
    let Some(size) = bytes.get(..4) else {
        return Ok(None);
    };
    let total = u32::from_be_bytes([size[0], size[1], size[2], size[3]]) as usize + 4;
    if total > max_frame_size {
        return Err(WireError::TooLarge {
            size: total,
            max: max_frame_size,
        });
    }
    Ok(Some(total))
}

/// Takes `n` bytes from `body` for `section`, or says it overran.
fn take(body: &mut Bytes, n: usize, section: Section) -> Result<Bytes, WireError> {
    if n > body.len() {
        return Err(WireError::Overrun {
            section,
            needed: n,
            available: body.len(),
        });
    }
    Ok(body.split_to(n))
}

fn take_u32(body: &mut Bytes, section: Section) -> Result<usize, WireError> {
    Ok(take(body, 4, section)?.get_u32() as usize)
}

fn starts_with_magic(body: &Bytes, magic: u16) -> bool {
    body.len() >= 2 && u16::from_be_bytes([body[0], body[1]]) == magic
}

/// Parses a frame's bytes after its total size.
pub(crate) fn parse_body(mut body: Bytes) -> Result<Frame, WireError> {
    let command_size = take_u32(&mut body, Section::CommandSize)?;
    let command = take(&mut body, command_size, Section::Command)?;
    let command = BaseCommand::decode(command).map_err(WireError::Command)?;
    if body.is_empty() {
        return Ok(Frame::new(command));
    }
    let broker_entry_metadata = if starts_with_magic(&body, MAGIC_BROKER_ENTRY_METADATA) {
        body.advance(2);
        let size = take_u32(&mut body, Section::BrokerEntryMetadata)?;
        let bytes = take(&mut body, size, Section::BrokerEntryMetadata)?;
        Some(BrokerEntryMetadata::decode(bytes).map_err(WireError::BrokerEntryMetadata)?)
    } else {
        None
    };
    let checksummed = starts_with_magic(&body, MAGIC_CRC32C);
    if checksummed {
        body.advance(2);
        let expected = take_u32(&mut body, Section::Checksum)? as u32;
        let computed = crc32c::crc32c(&body);
        if expected != computed {
            return Err(WireError::Checksum { expected, computed });
        }
    }
    let metadata_size = take_u32(&mut body, Section::Metadata)?;
    let metadata = take(&mut body, metadata_size, Section::Metadata)?;
    let metadata = MessageMetadata::decode(metadata).map_err(WireError::Metadata)?;
    Ok(Frame {
        command,
        payload: Some(Payload {
            broker_entry_metadata,
            checksummed,
            metadata,
            data: body,
        }),
    })
}
