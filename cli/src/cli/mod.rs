//! The `bookie-clusters` command line: one verb per endpoint of the REST API,
//! mirroring `pulsar-admin bookie-clusters`.
//!
//! [`Cli`] is the clap parser; [`run`] executes a parsed command against the
//! API and writes human tables (or, with `--json`, the server's JSON) to any
//! writer, so the binary is a thin shell and tests run the CLI in-process.
//!
//! Exit status of the binary: `0` success, `1` the server refused the request
//! or could not be reached (the server's message goes to stderr), `2` usage
//! errors (from clap), [`EXIT_NOT_INSTALLED`] when the broker has no
//! bookie-clusters API.
//!
//! Files: `args.rs` (the parser), `commands.rs` (one function per verb),
//! `watch.rs` (`status --watch`), `render.rs` (tables and fields),
//! `error.rs` (errors and exit codes).

mod args;
mod commands;
mod error;
mod render;
mod watch;

use std::io::Write;
use std::time::Duration;

pub use args::{Cli, Command, MigrationCommand, ReadModeArg, StatusArg};
pub use error::{write_error, CliError, EXIT_FAILURE, EXIT_NOT_INSTALLED};
pub use watch::MAX_WATCH_ERRORS;

use bkswitch_admin::AdminClient;

/// How [`run_with`] shows progress.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunOptions {
    /// Draw `status --watch` progress as bars on the terminal (stderr) instead
    /// of plain lines on the output. Only for a terminal.
    pub progress_bars: bool,
}

/// Runs one parsed command, writing its result to `out`, with plain progress
/// lines for `status --watch`.
///
/// # Errors
///
/// [`CliError::Client`] when the request failed, [`CliError::Output`] when
/// `out` failed.
pub async fn run(cli: Cli, out: &mut dyn Write) -> Result<(), CliError> {
    run_with(cli, out, RunOptions::default()).await
}

/// [`run`] with options.
///
/// # Errors
///
/// As [`run`].
pub async fn run_with(cli: Cli, out: &mut dyn Write, options: RunOptions) -> Result<(), CliError> {
    let token = crate::security::token(cli.token.as_ref(), cli.token_file.as_ref())
        .map_err(CliError::Setup)?;
    let tls = match &cli.tls_trust {
        Some(trust) => Some(
            bkswitch_admin::tls::client_config(Some(trust), None)
                .map_err(|e| CliError::Setup(format!("--tls-trust: {e}")))?,
        ),
        None => None,
    };
    let client = AdminClient::with_tls(&cli.url, token.expose(), tls)?
        .with_timeout(Duration::from_millis(cli.timeout_ms));
    let output = commands::Output {
        json: cli.json,
        progress_bars: options.progress_bars && !cli.json,
    };
    commands::execute(&client, cli.command, out, output).await
}
