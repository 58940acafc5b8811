//! `status --watch`: polls `GET /status` until the switch settles, showing
//! its progress as lines, JSON documents or terminal bars; with the copy
//! progress (entries and bytes copied, their rate and the time left) while
//! ledgers are copied.

use std::io::{self, Write};
use std::time::Duration;

use super::error::CliError;
use super::render::{progress_line, write_node_status};
use crate::progress::{CopyMeter, SwitchBars};
use bkswitch_admin::AdminClient;

/// How many consecutive retryable failures `status --watch` tolerates.
pub const MAX_WATCH_ERRORS: u32 = 5;

/// Polls `GET /status` every `interval` until the switch settles (or there is
/// none), writing one progress line per change (one JSON document per poll
/// with `json`, or bars on stderr with `bars`), then the final node view.
/// While the status carries a copy progress whose figures changed, a `copy:`
/// line follows with the entries and bytes copied, the rate and the time
/// left (indicatif's estimates over the polls).
pub(super) async fn watch_status(
    client: &AdminClient,
    out: &mut dyn Write,
    interval: Duration,
    json: bool,
    bars: bool,
) -> Result<(), CliError> {
    let mut bars = bars.then(SwitchBars::stderr);
    let mut failures = 0u32;
    let mut last_line = String::new();
    let mut meter = CopyMeter::hidden();
    let mut last_copy = None;
    loop {
        let status = match client.status().await {
            Ok(s) => {
                failures = 0;
                s
            }
            Err(e) if e.is_retryable() && failures + 1 < MAX_WATCH_ERRORS => {
                failures += 1;
                if !json {
                    writeln!(out, "status unavailable ({e}); retrying")?;
                }
                tokio::time::sleep(interval).await;
                continue;
            }
            Err(e) => {
                if let Some(b) = bars.take() {
                    b.abandon();
                }
                return Err(e.into());
            }
        };
        if json {
            writeln!(
                out,
                "{}",
                serde_json::to_string(status.raw()).map_err(io::Error::other)?
            )?;
        }
        let Some(switch) = status.switch() else {
            if let Some(b) = bars.take() {
                b.abandon();
            }
            if !json {
                writeln!(out, "no switch in progress")?;
                write_node_status(out, &status)?;
            }
            return Ok(());
        };
        let copy = status.copy_progress();
        match &mut bars {
            Some(b) => {
                b.update(&switch);
                if let Some(c) = &copy {
                    b.update_copy(c);
                }
            }
            None if !json => {
                let line = progress_line(&switch);
                if line != last_line {
                    writeln!(out, "{line}")?;
                    last_line = line;
                }
                if let Some(c) = &copy {
                    meter.observe(c);
                    let figures = (c.entries(), c.bytes(), c.ledgers());
                    if last_copy != Some(figures) {
                        writeln!(out, "{}", meter.line(c))?;
                        last_copy = Some(figures);
                    }
                }
                out.flush()?;
            }
            None => {}
        }
        if switch.is_settled() {
            if let Some(b) = bars.take() {
                b.finish();
            }
            if !json {
                write_node_status(out, &status)?;
            }
            return Ok(());
        }
        tokio::time::sleep(interval).await;
    }
}
