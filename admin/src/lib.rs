//! Operator surface of bkswitch: the `bookie-clusters` REST API and CLI, and the
//! `bookie-switch` binary (`demo`, `serve`).
//!
#![doc = include_str!("../README.md")]

pub mod api;
pub mod cli;
pub mod client;
pub mod demo;
pub mod error;
pub mod node;
pub mod testing;
pub mod traffic;
