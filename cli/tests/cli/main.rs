//! The `bookie-clusters` CLI and [`AdminClient`] against a stub of the REST
//! API (an in-memory fake on 127.0.0.1) that records every request.
//!
//! One test binary, by concern: `clusters.rs` (list, get, register,
//! unregister, precheck), `switching.rs` (switch, status, read mode, cleanup,
//! rollback), `transport.rs` (tokens, errors, timeouts, URLs, request bodies,
//! the binary's exit codes); `stub.rs` is the stub.

mod clusters;
mod stub;
mod switching;
mod transport;

use std::time::Duration;

use axum::Router;
use bkswitch_admin::wire::{
    CleanupRequest, CleanupTargets, Phase, PromoteCursorRequest, PromoteCursorResponse,
    PromoteOutcome, ReadModeRequest, RegisterRequest, RollbackRequest, SwitchRequest,
    BASE_PATH as BASE,
};
use bkswitch_admin::{AdminClient, ClientError};
use bkswitch_bk_router::ReadMode;
use bkswitch_cli::cli::{run, write_error, Cli, CliError, EXIT_FAILURE, EXIT_NOT_INSTALLED};
use bkswitch_registry::PrecheckResult;
use clap::Parser;
use serde_json::{json, Value};

use stub::*;

/// Runs the CLI in-process with the stub's URL and the admin token.
async fn cli(stub: &Stub, args: &[&str]) -> (Result<(), CliError>, String) {
    let url = stub.url();
    let mut argv = vec!["bookie-clusters", "--url", &url, "--token", ADMIN_TOKEN];
    argv.extend_from_slice(args);
    cli_raw(&argv).await
}

async fn cli_raw(argv: &[&str]) -> (Result<(), CliError>, String) {
    let parsed = Cli::try_parse_from(argv).unwrap();
    let mut out = Vec::new();
    let result = run(parsed, &mut out).await;
    (result, String::from_utf8(out).unwrap())
}

fn rendered_error(e: &CliError) -> String {
    let mut w = Vec::new();
    write_error(e, &mut w).unwrap();
    String::from_utf8(w).unwrap()
}

fn admin_request(method: &str, path: &str, body: Option<Value>) -> Recorded {
    Recorded {
        method: method.to_owned(),
        path: format!("{BASE}{path}"),
        auth: Some(format!("Bearer {ADMIN_TOKEN}")),
        body,
    }
}

fn err_status(e: &CliError) -> Option<u16> {
    match e {
        CliError::Client(c) => c.status(),
        _ => None,
    }
}

/// Runs the real binary (blocking) with `args` and `envs`.
async fn run_binary(args: Vec<String>, envs: Vec<(&'static str, String)>) -> std::process::Output {
    tokio::task::spawn_blocking(move || {
        std::process::Command::new(env!("CARGO_BIN_EXE_bookie-clusters"))
            .args(args)
            .env_remove("BOOKIE_CLUSTERS_URL")
            .env_remove("BOOKIE_CLUSTERS_TOKEN")
            .envs(envs)
            .output()
            .unwrap()
    })
    .await
    .unwrap()
}

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| (*s).to_owned()).collect()
}
