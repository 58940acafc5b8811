//! Why a command failed, its exit status, and how the operator is told.

use std::io::{self, Write};

use bkswitch_admin::ClientError;

/// Exit status for a failed request (server error, unreachable broker, bad token).
pub const EXIT_FAILURE: u8 = 1;

/// Exit status when the broker has no bookie-clusters API.
pub const EXIT_NOT_INSTALLED: u8 = 3;

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The request failed.
    #[error(transparent)]
    Client(#[from] ClientError),
    /// A setting (token file, trust file) could not be used.
    #[error("{0}")]
    Setup(String),
    /// The output could not be written.
    #[error("cannot write the output: {0}")]
    Output(#[from] io::Error),
}

impl CliError {
    /// The process exit status for this error: [`EXIT_NOT_INSTALLED`] or
    /// [`EXIT_FAILURE`].
    pub fn exit_code(&self) -> u8 {
        match self {
            CliError::Client(ClientError::NotInstalled { .. }) => EXIT_NOT_INSTALLED,
            _ => EXIT_FAILURE,
        }
    }
}

/// Writes `err` for the operator: the message, then the field at fault and the
/// server's details, if any.
///
/// # Errors
///
/// Errors of `w`.
pub fn write_error(err: &CliError, w: &mut dyn Write) -> io::Result<()> {
    match err {
        CliError::Client(ClientError::Api {
            message,
            code,
            status,
            field,
            details,
        }) => {
            writeln!(w, "error: {message} ({code}, HTTP {status})")?;
            if let Some(field) = field {
                writeln!(w, "field: {field}")?;
            }
            if let Some(details) = details {
                let pretty =
                    serde_json::to_string_pretty(details).unwrap_or_else(|_| details.to_string());
                writeln!(w, "details: {pretty}")?;
            }
            Ok(())
        }
        other => writeln!(w, "error: {other}"),
    }
}
