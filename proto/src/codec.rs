//! The metadata-store value format of [`ml::ManagedLedgerInfo`] and
//! [`ml::ManagedCursorInfo`], with Pulsar's optional compression.
//!
//! A broker writes either the plain protobuf (the default) or, when metadata
//! compression is configured, a framed value:
//!
//! | bytes | content |
//! |---|---|
//! | 2 | magic [`MAGIC`] (`0x4778`), big-endian |
//! | 4 | size of the metadata that follows, big-endian |
//! | n | [`ml::ManagedLedgerInfoMetadata`] or [`ml::ManagedCursorInfoMetadata`]: `compressionType`, `uncompressedSize` |
//! | rest | the protobuf, compressed with `compressionType` |
//!
//! A value that does not start with the magic is a plain protobuf. A protobuf
//! never starts with byte `0x47` (it would be field 8 with the invalid wire
//! type 7), so the two forms cannot be confused.
//!
//! The codecs produce what Pulsar's `CompressionCodec` implementations produce:
//!
//! | type | payload |
//! |---|---|
//! | `LZ4` | a raw LZ4 block, no frame; its size comes from `uncompressedSize` |
//! | `ZLIB` | a zlib stream at the default level (header `78 9c`); Pulsar sync-flushes and never finishes it (no final block, no Adler-32 trailer), we write a finished stream; both forms decode |
//! | `ZSTD` | one zstd frame, level 3 |
//! | `SNAPPY` | raw snappy (not the framed snappy format) |
//! | `NONE` | the protobuf as is (only in a frame written by another tool; [`encode_managed_ledger_info`] with `NONE` writes the plain protobuf) |
//!
//! Compressed bytes need not be identical to Java's output (compressors may
//! choose different matches); every codec reads the other side's output.
//!
//! Decoding never panics on corrupt input and never allocates more than
//! [`MAX_UNCOMPRESSED_SIZE`] for a decompressed value.
//!
//! ```
//! use bkswitch_proto::codec::{decode_managed_cursor_info, encode_managed_cursor_info};
//! use bkswitch_proto::ml::{CompressionType, ManagedCursorInfo};
//!
//! let cursor = ManagedCursorInfo { cursors_ledger_id: 12, ..Default::default() };
//! let value = encode_managed_cursor_info(&cursor, CompressionType::Zstd)?;
//! assert_eq!(&value[..2], &[0x47, 0x78]);
//! assert_eq!(decode_managed_cursor_info(&value)?, cursor);
//! # Ok::<(), bkswitch_proto::CodecError>(())
//! ```

use std::fmt;
use std::io::{Read, Write};

use prost::Message;

use crate::ml::{self, CompressionType};

/// The magic number that starts a compressed metadata value.
pub const MAGIC: u16 = 0x4778;

/// The size of the fixed part of the frame: the magic (2 bytes) and the metadata
/// size (4 bytes).
pub const HEADER_LEN: usize = 6;

/// The largest `uncompressedSize` accepted (64 MiB).
///
/// Metadata values are far smaller in practice (ZooKeeper refuses values above
/// about 1 MiB by default). A larger declared size is treated as corruption so
/// that a damaged header cannot make the decoder allocate an absurd buffer, and
/// the encoders refuse to compress a message above it so that every value they
/// write can be read back.
pub const MAX_UNCOMPRESSED_SIZE: usize = 64 * 1024 * 1024;

/// Pulsar's zstd compression level for metadata.
const ZSTD_LEVEL: i32 = 3;

/// Which message a value holds; used in error messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MetadataKind {
    /// A [`ml::ManagedLedgerInfo`], stored at `/managed-ledgers/<topic>`.
    ManagedLedgerInfo,
    /// A [`ml::ManagedCursorInfo`], stored at `/managed-ledgers/<topic>/<cursor>`.
    ManagedCursorInfo,
}

impl fmt::Display for MetadataKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::ManagedLedgerInfo => "ManagedLedgerInfo",
            Self::ManagedCursorInfo => "ManagedCursorInfo",
        })
    }
}

/// The boxed cause of a compression or decompression failure.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Why a metadata value could not be decoded or encoded.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CodecError {
    /// The value starts with the magic but is shorter than the 6-byte header.
    #[error(
        "{kind} value starts with the compression magic 0x4778 but is only {len} bytes long, \
         shorter than the {HEADER_LEN}-byte frame header; the value is truncated or corrupt, \
         rewrite it from a good copy"
    )]
    TruncatedHeader {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The length of the whole value.
        len: usize,
    },

    /// The declared metadata size runs past the end of the value.
    #[error(
        "{kind} value declares {declared} bytes of compression metadata but only {available} \
         bytes follow the frame header; the value is truncated or corrupt, rewrite it from a \
         good copy"
    )]
    MetadataSizePastEnd {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The metadata size written in the header.
        declared: u32,
        /// The bytes left after the header.
        available: usize,
    },

    /// The compression metadata is not a valid `…InfoMetadata` protobuf.
    #[error(
        "{kind} value has undecodable compression metadata ({source}); the value is corrupt, \
         rewrite it from a good copy"
    )]
    InvalidMetadata {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The protobuf error.
        source: prost::DecodeError,
    },

    /// The compression metadata names a compression type this crate does not know.
    #[error(
        "{kind} value is compressed with unknown compression type {value} (known: NONE=0, \
         LZ4=1, ZLIB=2, ZSTD=3, SNAPPY=4); it was written by a newer or foreign writer or is \
         corrupt"
    )]
    UnknownCompressionType {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The numeric compression type found.
        value: i32,
    },

    /// The declared `uncompressedSize` is negative or above [`MAX_UNCOMPRESSED_SIZE`].
    #[error(
        "{kind} value declares uncompressedSize {declared}, outside 0..={limit}; the header is \
         corrupt (refusing to allocate), rewrite the value from a good copy"
    )]
    UncompressedSizeOutOfRange {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The size written in the metadata.
        declared: i32,
        /// [`MAX_UNCOMPRESSED_SIZE`].
        limit: usize,
    },

    /// The compressed payload could not be decompressed.
    #[error(
        "cannot decompress {kind} value with {codec}: {source}; the payload is corrupt, \
         rewrite the value from a good copy",
        codec = .compression.as_str_name()
    )]
    Decompress {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The codec named by the metadata.
        compression: CompressionType,
        /// The decompressor's error.
        source: BoxError,
    },

    /// The payload decompressed to fewer or more bytes than declared.
    #[error(
        "{kind} value compressed with {codec} decompressed to {found} but its header declares \
         uncompressedSize {declared}; the value is corrupt, rewrite it from a good copy",
        codec = .compression.as_str_name(),
        found = describe_size(*.actual, *.declared)
    )]
    SizeMismatch {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The codec named by the metadata.
        compression: CompressionType,
        /// The size written in the metadata.
        declared: usize,
        /// The decompressed size, or `None` when the payload holds more than
        /// `declared` bytes (decompression stops there).
        actual: Option<usize>,
    },

    /// The (decompressed) protobuf is truncated or not a message of this kind.
    #[error(
        "cannot decode {kind} protobuf ({form}): {source}; the value is truncated or not a \
         {kind}, check the path and rewrite the value from a good copy",
        form = describe_form(*.compression)
    )]
    InvalidProtobuf {
        /// The message the value should hold.
        kind: MetadataKind,
        /// The codec of a framed value, `None` for a plain value.
        compression: Option<CompressionType>,
        /// The protobuf error.
        source: prost::DecodeError,
    },

    /// The message is too large to be written in a compressed frame.
    #[error(
        "cannot compress {kind} of {size} bytes with {codec}: the frame allows at most \
         {limit} bytes; write it uncompressed (CompressionType::None) or shrink the metadata",
        codec = .compression.as_str_name()
    )]
    MessageTooLarge {
        /// The message being encoded.
        kind: MetadataKind,
        /// The codec requested.
        compression: CompressionType,
        /// The encoded protobuf size.
        size: usize,
        /// [`MAX_UNCOMPRESSED_SIZE`].
        limit: usize,
    },

    /// The compressor failed.
    #[error(
        "cannot compress {kind} with {codec}: {source}",
        codec = .compression.as_str_name()
    )]
    Compress {
        /// The message being encoded.
        kind: MetadataKind,
        /// The codec requested.
        compression: CompressionType,
        /// The compressor's error.
        source: BoxError,
    },
}

fn describe_size(actual: Option<usize>, declared: usize) -> String {
    match actual {
        Some(actual) => format!("{actual} bytes"),
        None => format!("more than {declared} bytes"),
    }
}

fn describe_form(compression: Option<CompressionType>) -> String {
    match compression {
        Some(compression) => format!("decompressed with {}", compression.as_str_name()),
        None => "plain value".to_owned(),
    }
}

/// Decodes a [`ml::ManagedLedgerInfo`] value as read from the metadata store,
/// plain or compressed.
///
/// # Errors
///
/// A [`CodecError`] naming what is wrong with the value: the frame (truncated
/// header, metadata past the end, undecodable metadata, unknown compression type,
/// declared size out of range), the payload (decompression failure, size
/// mismatch) or the protobuf itself.
pub fn decode_managed_ledger_info(bytes: &[u8]) -> Result<ml::ManagedLedgerInfo, CodecError> {
    decode(bytes, MetadataKind::ManagedLedgerInfo)
}

/// Decodes a [`ml::ManagedCursorInfo`] value as read from the metadata store,
/// plain or compressed.
///
/// # Errors
///
/// As [`decode_managed_ledger_info`].
pub fn decode_managed_cursor_info(bytes: &[u8]) -> Result<ml::ManagedCursorInfo, CodecError> {
    decode(bytes, MetadataKind::ManagedCursorInfo)
}

/// Encodes a [`ml::ManagedLedgerInfo`] value for the metadata store.
///
/// With [`CompressionType::None`] the result is exactly `info.encode_to_vec()`,
/// as Pulsar writes by default; any other type produces a framed value with a
/// [`ml::ManagedLedgerInfoMetadata`] header. (Pulsar skips compression for
/// messages below its configured threshold; this function compresses whenever
/// asked, which every reader accepts.)
///
/// # Errors
///
/// [`CodecError::MessageTooLarge`] when the protobuf exceeds
/// [`MAX_UNCOMPRESSED_SIZE`] and compression is requested;
/// [`CodecError::Compress`] when the compressor fails.
pub fn encode_managed_ledger_info(
    info: &ml::ManagedLedgerInfo,
    compression: CompressionType,
) -> Result<Vec<u8>, CodecError> {
    encode(info, compression, MetadataKind::ManagedLedgerInfo)
}

/// Encodes a [`ml::ManagedCursorInfo`] value for the metadata store.
///
/// With [`CompressionType::None`] the result is exactly `info.encode_to_vec()`;
/// any other type produces a framed value with a [`ml::ManagedCursorInfoMetadata`]
/// header.
///
/// # Errors
///
/// As [`encode_managed_ledger_info`].
pub fn encode_managed_cursor_info(
    info: &ml::ManagedCursorInfo,
    compression: CompressionType,
) -> Result<Vec<u8>, CodecError> {
    encode(info, compression, MetadataKind::ManagedCursorInfo)
}

/// A parsed frame header and the payload after it.
struct Frame<'a> {
    compression: CompressionType,
    uncompressed_size: usize,
    payload: &'a [u8],
}

/// Splits a framed value; `Ok(None)` for a plain protobuf.
fn parse_frame(bytes: &[u8], kind: MetadataKind) -> Result<Option<Frame<'_>>, CodecError> {
    let Some((magic, rest)) = bytes.split_first_chunk::<2>() else {
        return Ok(None);
    };
    if u16::from_be_bytes(*magic) != MAGIC {
        return Ok(None);
    }
    let Some((size, rest)) = rest.split_first_chunk::<4>() else {
        return Err(CodecError::TruncatedHeader {
            kind,
            len: bytes.len(),
        });
    };
    let declared = u32::from_be_bytes(*size);
    let past_end = || CodecError::MetadataSizePastEnd {
        kind,
        declared,
        available: rest.len(),
    };
    let metadata_len = usize::try_from(declared).map_err(|_| past_end())?;
    if metadata_len > rest.len() {
        return Err(past_end());
    }
    let (metadata, payload) = rest.split_at(metadata_len);
    let (compression_type, declared_size) = match kind {
        MetadataKind::ManagedLedgerInfo => ml::ManagedLedgerInfoMetadata::decode(metadata)
            .map(|m| (m.compression_type, m.uncompressed_size)),
        MetadataKind::ManagedCursorInfo => ml::ManagedCursorInfoMetadata::decode(metadata)
            .map(|m| (m.compression_type, m.uncompressed_size)),
    }
    .map_err(|source| CodecError::InvalidMetadata { kind, source })?;
    let compression = CompressionType::try_from(compression_type).map_err(|_| {
        CodecError::UnknownCompressionType {
            kind,
            value: compression_type,
        }
    })?;
    let uncompressed_size = usize::try_from(declared_size)
        .ok()
        .filter(|size| *size <= MAX_UNCOMPRESSED_SIZE)
        .ok_or(CodecError::UncompressedSizeOutOfRange {
            kind,
            declared: declared_size,
            limit: MAX_UNCOMPRESSED_SIZE,
        })?;
    Ok(Some(Frame {
        compression,
        uncompressed_size,
        payload,
    }))
}

fn decode<M: Message + Default>(bytes: &[u8], kind: MetadataKind) -> Result<M, CodecError> {
    match parse_frame(bytes, kind)? {
        None => M::decode(bytes).map_err(|source| CodecError::InvalidProtobuf {
            kind,
            compression: None,
            source,
        }),
        Some(frame) => {
            let plain = decompress(&frame, kind)?;
            M::decode(plain.as_slice()).map_err(|source| CodecError::InvalidProtobuf {
                kind,
                compression: Some(frame.compression),
                source,
            })
        }
    }
}

/// Decompresses a frame's payload to exactly its declared size.
fn decompress(frame: &Frame<'_>, kind: MetadataKind) -> Result<Vec<u8>, CodecError> {
    let declared = frame.uncompressed_size;
    let payload = frame.payload;
    let compression = frame.compression;
    let failed = |source: BoxError| CodecError::Decompress {
        kind,
        compression,
        source,
    };
    let mismatch = |actual: Option<usize>| CodecError::SizeMismatch {
        kind,
        compression,
        declared,
        actual,
    };
    let too_large = || mismatch(None);
    // Reads at most one byte past the declared size from a streaming decoder.
    let read_bounded = |reader: &mut dyn Read| -> Result<Vec<u8>, CodecError> {
        let mut out = Vec::with_capacity(declared);
        reader
            .take(declared as u64 + 1)
            .read_to_end(&mut out)
            .map_err(|err| failed(err.into()))?;
        Ok(out)
    };

    let out = match frame.compression {
        CompressionType::None => payload.to_vec(),
        CompressionType::Lz4 => {
            let mut out = vec![0; declared];
            match lz4_flex::block::decompress_into(payload, &mut out) {
                Ok(written) => out.truncate(written),
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) => {
                    return Err(too_large())
                }
                Err(err) => return Err(failed(err.into())),
            }
            out
        }
        CompressionType::Zlib => inflate(payload, declared).map_err(|err| failed(err.into()))?,
        CompressionType::Zstd => {
            let mut decoder = zstd::stream::read::Decoder::with_buffer(payload)
                .map_err(|err| failed(err.into()))?;
            read_bounded(&mut decoder)?
        }
        CompressionType::Snappy => {
            // The snappy preamble states the uncompressed length: check it before
            // allocating anything.
            let stated = snap::raw::decompress_len(payload).map_err(|err| failed(err.into()))?;
            if stated != declared {
                return Err(mismatch(Some(stated)));
            }
            let mut out = vec![0; declared];
            let written = snap::raw::Decoder::new()
                .decompress(payload, &mut out)
                .map_err(|err| failed(err.into()))?;
            out.truncate(written);
            out
        }
    };
    match out.len() {
        len if len == declared => Ok(out),
        len if len > declared => Err(too_large()),
        len => Err(mismatch(Some(len))),
    }
}

/// Inflates a zlib stream into at most `declared + 1` bytes.
///
/// Pulsar's ZLIB codec deflates with `SYNC_FLUSH` and never finishes the stream,
/// so the input may end without a final block or Adler-32 trailer: stop when the
/// input is used up, as `java.util.zip.Inflater` does. A finished stream has its
/// checksum verified.
fn inflate(payload: &[u8], declared: usize) -> Result<Vec<u8>, flate2::DecompressError> {
    let mut inflater = flate2::Decompress::new(true);
    let mut out = Vec::with_capacity(declared.saturating_add(1));
    loop {
        let (read, written) = (inflater.total_in(), inflater.total_out());
        let consumed = usize::try_from(read)
            .unwrap_or(payload.len())
            .min(payload.len());
        let status = inflater.decompress_vec(
            &payload[consumed..],
            &mut out,
            flate2::FlushDecompress::None,
        )?;
        let stalled = inflater.total_in() == read && inflater.total_out() == written;
        if status == flate2::Status::StreamEnd || out.len() == out.capacity() || stalled {
            return Ok(out);
        }
    }
}

fn encode<M: Message>(
    info: &M,
    compression: CompressionType,
    kind: MetadataKind,
) -> Result<Vec<u8>, CodecError> {
    let plain = info.encode_to_vec();
    if compression == CompressionType::None {
        return Ok(plain);
    }
    let uncompressed_size = i32::try_from(plain.len())
        .ok()
        .filter(|_| plain.len() <= MAX_UNCOMPRESSED_SIZE)
        .ok_or(CodecError::MessageTooLarge {
            kind,
            compression,
            size: plain.len(),
            limit: MAX_UNCOMPRESSED_SIZE,
        })?;
    let failed = |source: BoxError| CodecError::Compress {
        kind,
        compression,
        source,
    };
    let payload = match compression {
        CompressionType::None => plain,
        CompressionType::Lz4 => lz4_flex::block::compress(&plain),
        CompressionType::Zlib => {
            let mut encoder = flate2::write::ZlibEncoder::new(
                Vec::with_capacity(plain.len() / 2 + 16),
                flate2::Compression::default(),
            );
            encoder
                .write_all(&plain)
                .and_then(|()| encoder.finish())
                .map_err(|err| failed(err.into()))?
        }
        CompressionType::Zstd => {
            zstd::bulk::compress(&plain, ZSTD_LEVEL).map_err(|err| failed(err.into()))?
        }
        CompressionType::Snappy => snap::raw::Encoder::new()
            .compress_vec(&plain)
            .map_err(|err| failed(err.into()))?,
    };
    let compression_type = compression.into();
    let metadata = match kind {
        MetadataKind::ManagedLedgerInfo => ml::ManagedLedgerInfoMetadata {
            compression_type,
            uncompressed_size,
        }
        .encode_to_vec(),
        MetadataKind::ManagedCursorInfo => ml::ManagedCursorInfoMetadata {
            compression_type,
            uncompressed_size,
        }
        .encode_to_vec(),
    };
    let mut value = Vec::with_capacity(HEADER_LEN + metadata.len() + payload.len());
    value.extend_from_slice(&MAGIC.to_be_bytes());
    // The metadata is two small varint fields: at most 2 + 2 + 5 bytes.
    value.extend_from_slice(&(metadata.len() as u32).to_be_bytes());
    value.extend_from_slice(&metadata);
    value.extend_from_slice(&payload);
    Ok(value)
}
