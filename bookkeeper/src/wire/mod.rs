//! The bookie wire protocol: the version-2 codec ([`codec`]) and the pipelined
//! per-bookie connections that carry it.

pub(crate) mod codec;
pub(crate) mod conn;
pub(crate) mod tls;
