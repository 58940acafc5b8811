//! Operator surface of bkswitch, as a library a broker embeds: the node, the
//! `bookie-clusters` REST API, its wire types and client, and the metrics.
//!
#![doc = include_str!("../README.md")]
#![deny(missing_docs)]
// The README (the crate's documentation) links the test kit, which exists only
// with the `testkit` feature.
#![cfg_attr(not(feature = "testkit"), allow(rustdoc::broken_intra_doc_links))]

pub mod auth;
mod client;
mod http;
pub mod metrics;
mod node;
mod operator;
mod start;
#[cfg(any(test, feature = "testkit"))]
pub mod testkit;
pub mod tls;
pub mod wire;

pub use client::{AdminClient, ClientError};
pub use http::exposition;
pub use http::router as rest_router;
pub use node::{
    standard_client_factory, standard_idgen_source, MigrationHandle, Node, NodeConfig, NodeError,
    Ownership, Switches, WeakNode, DEFAULT_NODES_ROOT, DEFAULT_OWNERS_ROOT, PROBE_TIMEOUT,
    START_LOCK_PATH,
};
pub use operator::{Operator, OperatorError};
