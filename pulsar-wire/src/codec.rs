//! The frame codec for `tokio_util::codec::Framed` streams.

use bytes::{Buf, BytesMut};
use tokio_util::codec::{Decoder, Encoder};

use crate::error::WireError;
use crate::frame::{frame_len, parse_body, Frame, DEFAULT_MAX_FRAME_SIZE, FRAME_PADDING};

/// Reads and writes [`Frame`]s on a byte stream (`tokio_util::codec`).
///
/// A frame larger than the limit is refused as soon as its size field is
/// read ([`WireError::TooLarge`]), before it is buffered. A frame with a bad
/// checksum or an undecodable protobuf is consumed whole before the error is
/// returned, so that the caller may answer it and read on (see
/// [`WireError::frame_skipped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PulsarCodec {
    max_frame_size: usize,
}

impl Default for PulsarCodec {
    fn default() -> Self {
        PulsarCodec::new()
    }
}

impl PulsarCodec {
    /// A codec with Pulsar's default limit ([`DEFAULT_MAX_FRAME_SIZE`]).
    pub fn new() -> PulsarCodec {
        PulsarCodec {
            max_frame_size: DEFAULT_MAX_FRAME_SIZE,
        }
    }

    /// A codec whose frames may be `max_frame_size` bytes, their size field
    /// included.
    pub fn with_max_frame_size(max_frame_size: usize) -> PulsarCodec {
        PulsarCodec { max_frame_size }
    }

    /// A codec sized for a broker's `maxMessageSize` (as a client does once
    /// `CommandConnected.max_message_size` is known): the message size plus
    /// [`FRAME_PADDING`].
    pub fn for_max_message_size(max_message_size: usize) -> PulsarCodec {
        PulsarCodec::with_max_frame_size(max_message_size.saturating_add(FRAME_PADDING))
    }

    /// The frame size limit, size field included.
    pub fn max_frame_size(&self) -> usize {
        self.max_frame_size
    }

    /// Changes the limit (for the frames not read yet).
    pub fn set_max_frame_size(&mut self, max_frame_size: usize) {
        self.max_frame_size = max_frame_size;
    }
}

impl Decoder for PulsarCodec {
    type Item = Frame;
    type Error = WireError;

    fn decode(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        let Some(len) = frame_len(src, self.max_frame_size)? else {
            return Ok(None);
        };
        if src.len() < len {
            src.reserve(len - src.len());
            return Ok(None);
        }
        let mut frame = src.split_to(len).freeze();
        frame.advance(4);
        parse_body(frame).map(Some)
    }

    fn decode_eof(&mut self, src: &mut BytesMut) -> Result<Option<Frame>, WireError> {
        match self.decode(src)? {
            Some(frame) => Ok(Some(frame)),
            None if src.is_empty() => Ok(None),
            None => {
                let needed = frame_len(src, self.max_frame_size)?.unwrap_or(4);
                let available = src.len();
                src.clear();
                Err(WireError::Truncated { needed, available })
            }
        }
    }
}

impl Encoder<&Frame> for PulsarCodec {
    type Error = WireError;

    fn encode(&mut self, frame: &Frame, dst: &mut BytesMut) -> Result<(), WireError> {
        frame.encode(dst, self.max_frame_size)
    }
}

impl Encoder<Frame> for PulsarCodec {
    type Error = WireError;

    fn encode(&mut self, frame: Frame, dst: &mut BytesMut) -> Result<(), WireError> {
        frame.encode(dst, self.max_frame_size)
    }
}
