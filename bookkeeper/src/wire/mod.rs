//! The bookie wire protocol: the version-2 codec ([`codec`]) and the pipelined
//! per-bookie connections that carry it.

pub mod codec;
pub(crate) mod conn;
