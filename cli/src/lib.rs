//! The bkswitch product: the `bookie-switch` binary (`demo`, `serve`,
//! `coordinator`, `idgen`) and the `bookie-clusters` CLI, with what only they
//! use — the demo, the traffic generator, the progress display and the
//! `serve --config` settings file — on top of the library crates
//! (`bkswitch-admin` for the node, its REST API and client).
//!
#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

mod ack_log;
pub mod cli;
pub mod demo;
mod progress;
pub mod pulsar;
pub mod security;
pub mod settings;
pub mod store_security;
mod traffic;

pub use ack_log::{AckLog, AckLogContents, AckRecord};
pub use traffic::{
    encode_payload, PhaseStats, TopicHandle, Traffic, TrafficOptions, TrafficPhase, TrafficReport,
};
