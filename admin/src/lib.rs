//! Operator surface of bkswitch, as a library a broker embeds: the node, the
//! `bookie-clusters` REST API, its wire types and client, and the metrics.
//!
#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod client;
mod http;
pub mod metrics;
mod node;
mod start;
pub mod testkit;
pub mod wire;

pub use client::{AdminClient, ClientError};
pub use http::exposition;
pub use http::router as rest_router;
pub use node::{
    standard_client_factory, standard_idgen_source, Node, NodeConfig, NodeError, Ownership,
    WeakNode, DEFAULT_NODES_ROOT, DEFAULT_OWNERS_ROOT, PROBE_TIMEOUT,
};
