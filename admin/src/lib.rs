//! Operator surface of bkswitch: the `bookie-clusters` REST API and CLI, and the
//! `bookie-switch` binary (`demo`, `serve`).
//!
#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

pub mod cli;
// `client`, `node` and `traffic` are public only so that the paths
// `bkswitch_admin::{client, node, traffic}::…` that bkswitch-hardening uses
// keep working; their items are documented at the crate root.
#[doc(hidden)]
pub mod client;
pub mod demo;
mod http;
#[doc(hidden)]
pub mod node;
mod progress;
pub mod testkit;
#[doc(hidden)]
pub mod traffic;
pub mod wire;

pub use client::{AdminClient, ClientError};
pub use node::{Node, NodeConfig, NodeError, Ownership, WeakNode, DEFAULT_OWNERS_ROOT};
pub use traffic::{PhaseStats, TopicHandle, Traffic, TrafficPhase, TrafficReport};

/// The old name of [`testkit`], still used by bkswitch-hardening.
#[doc(hidden)]
pub use testkit as testing;
