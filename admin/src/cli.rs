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

use std::io::{self, Write};
use std::time::Duration;

use bkswitch_bk_router::ReadMode;
use bkswitch_registry::{ClusterRecord, ClusterStatus, PrecheckResult};
use clap::{ArgAction, Parser, Subcommand, ValueEnum};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use serde::Serialize;
use serde_json::Value;

use crate::client::{
    AdminClient, CleanupReport, CleanupRequest, CleanupTarget, CleanupTargets, ClientError,
    NodeStatus, SwitchStatus,
};

/// Exit status for a failed request (server error, unreachable broker, bad token).
pub const EXIT_FAILURE: u8 = 1;

/// Exit status when the broker has no bookie-clusters API.
pub const EXIT_NOT_INSTALLED: u8 = 3;

/// How many consecutive retryable failures `status --watch` tolerates.
pub const MAX_WATCH_ERRORS: u32 = 5;

/// Manage the BookKeeper clusters of a broker and switch between them.
#[derive(Debug, Clone, Parser)]
#[command(
    name = "bookie-clusters",
    version,
    about = "Manage the BookKeeper clusters of a broker and switch between them",
    after_help = "Exit status: 0 success, 1 request failed (message on stderr), 2 usage error, \
                  3 the broker has no bookie-clusters API."
)]
pub struct Cli {
    /// Base URL of the broker's admin API.
    #[arg(
        long,
        global = true,
        env = "BOOKIE_CLUSTERS_URL",
        default_value = "http://127.0.0.1:8080"
    )]
    pub url: String,
    /// The admin bearer token.
    #[arg(
        long,
        global = true,
        env = "BOOKIE_CLUSTERS_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
    /// Print the server's JSON instead of tables.
    #[arg(long, global = true)]
    pub json: bool,
    /// Request timeout in milliseconds.
    #[arg(long, global = true, default_value_t = 30_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub timeout_ms: u64,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// A cluster status, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusArg {
    /// `ACTIVE`.
    #[value(name = "ACTIVE")]
    Active,
    /// `STANDBY`.
    #[value(name = "STANDBY")]
    Standby,
    /// `DEPRECATED`.
    #[value(name = "DEPRECATED")]
    Deprecated,
}

impl From<StatusArg> for ClusterStatus {
    fn from(s: StatusArg) -> ClusterStatus {
        match s {
            StatusArg::Active => ClusterStatus::Active,
            StatusArg::Standby => ClusterStatus::Standby,
            StatusArg::Deprecated => ClusterStatus::Deprecated,
        }
    }
}

/// A read mode, as given on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReadModeArg {
    /// Route every ledger by its stamp (the default).
    #[value(name = "DUAL_READ")]
    DualRead,
    /// Never read the new (active) cluster; for rollback.
    #[value(name = "OLD_CLUSTER_ONLY")]
    OldClusterOnly,
    /// Only read the new (active) cluster; for a failed old cluster.
    #[value(name = "NEW_CLUSTER_ONLY")]
    NewClusterOnly,
}

impl From<ReadModeArg> for ReadMode {
    fn from(m: ReadModeArg) -> ReadMode {
        match m {
            ReadModeArg::DualRead => ReadMode::DualRead,
            ReadModeArg::OldClusterOnly => ReadMode::OldClusterOnly,
            ReadModeArg::NewClusterOnly => ReadMode::NewClusterOnly,
        }
    }
}

/// The verbs.
#[derive(Debug, Clone, Subcommand)]
pub enum Command {
    /// List the registered clusters.
    List,
    /// Show one cluster.
    Get {
        /// The cluster name.
        #[arg(long)]
        name: String,
    },
    /// Register a cluster.
    Register {
        /// The cluster name.
        #[arg(long)]
        name: String,
        /// The cluster's BookKeeper metadata-service URI (e.g. `zk://host:2181/ledgers`).
        #[arg(long)]
        metadata_service_uri: String,
        /// The status to register with (the server defaults to STANDBY).
        #[arg(long, value_enum)]
        status: Option<StatusArg>,
    },
    /// Unregister a cluster (never the ACTIVE one).
    Unregister {
        /// The cluster name.
        #[arg(long)]
        name: String,
    },
    /// Run the id-generator precheck of a switch to a cluster.
    Precheck {
        /// The prospective target cluster.
        #[arg(long)]
        name: String,
    },
    /// Switch new ledgers to another cluster and migrate metadata ledgers.
    Switch {
        /// The cluster to switch to.
        #[arg(long)]
        target: String,
    },
    /// Show the active cluster, the read mode and the switch progress.
    Status {
        /// Poll until the switch is SWITCHED, DONE, DONE_WITH_FAILURES or ROLLED_BACK.
        #[arg(long)]
        watch: bool,
        /// Poll interval of --watch, in milliseconds.
        #[arg(long, default_value_t = 1000, requires = "watch", value_parser = clap::value_parser!(u64).range(1..))]
        interval_ms: u64,
    },
    /// Override which clusters reads and deletes are routed to.
    SetReadMode {
        /// The read mode.
        #[arg(long, value_enum)]
        mode: ReadModeArg,
    },
    /// List the old-cluster ledgers cleanup may delete.
    ListCleanupTargets,
    /// Delete the old copies left behind by the last switch.
    Cleanup {
        /// Only report what would be deleted.
        #[arg(long, action = ArgAction::Set, default_value_t = true, num_args = 0..=1, default_missing_value = "true")]
        dry_run: bool,
        /// Only clean up this cluster.
        #[arg(long)]
        src_cluster: Option<String>,
        /// Delete at most this many ledgers (0 = no limit).
        #[arg(long, default_value_t = 0)]
        max_deletions: u64,
        /// Clean up inside the rollback window (ends the window).
        #[arg(long)]
        force: bool,
    },
    /// Close this broker's client of an old cluster (refused while reads are open).
    CloseClient {
        /// The cluster whose client to close.
        #[arg(long)]
        name: String,
    },
    /// Roll the current switch back (inside the rollback window).
    Rollback,
}

/// Why a command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CliError {
    /// The request failed.
    #[error(transparent)]
    Client(#[from] ClientError),
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
    let client = AdminClient::new(&cli.url, cli.token.as_deref().unwrap_or(""))?
        .with_timeout(Duration::from_millis(cli.timeout_ms));
    let json = cli.json;
    match cli.command {
        Command::List => {
            let records = client.list().await?;
            if json {
                print_json(out, &records)?;
            } else {
                write_clusters(out, &records)?;
            }
        }
        Command::Get { name } => {
            let record = client.get(&name).await?;
            if json {
                print_json(out, &record)?;
            } else {
                write_clusters(out, std::slice::from_ref(&record))?;
            }
        }
        Command::Register {
            name,
            metadata_service_uri,
            status,
        } => {
            let record = client
                .register(&name, &metadata_service_uri, status.map(Into::into))
                .await?;
            if json {
                print_json(out, &record)?;
            } else {
                writeln!(out, "registered cluster '{}'", record.name)?;
                write_clusters(out, std::slice::from_ref(&record))?;
            }
        }
        Command::Unregister { name } => {
            client.unregister(&name).await?;
            if !json {
                writeln!(out, "unregistered cluster '{name}'")?;
            }
        }
        Command::Precheck { name } => {
            let result = client.precheck(&name).await?;
            if json {
                print_json(out, &result)?;
            } else {
                write_precheck(out, &result)?;
            }
        }
        Command::Switch { target } => {
            let status = client.switch(&target).await?;
            if json {
                print_json(out, status.raw())?;
            } else {
                writeln!(out, "switch to '{target}' accepted")?;
                write_switch(out, &status)?;
            }
        }
        Command::Status { watch, interval_ms } => {
            if watch {
                watch_status(
                    &client,
                    out,
                    Duration::from_millis(interval_ms),
                    json,
                    options.progress_bars && !json,
                )
                .await?;
            } else {
                let status = client.status().await?;
                if json {
                    print_json(out, status.raw())?;
                } else {
                    write_node_status(out, &status)?;
                }
            }
        }
        Command::SetReadMode { mode } => {
            let answer = client.set_read_mode(mode.into()).await?;
            if json {
                print_json(out, &answer)?;
            } else {
                writeln!(out, "read mode set to {}", answer.read_mode)?;
            }
        }
        Command::ListCleanupTargets => {
            let targets = client.cleanup_targets().await?;
            if json {
                print_json(out, &targets)?;
            } else {
                write_cleanup_targets(out, &targets)?;
            }
        }
        Command::Cleanup {
            dry_run,
            src_cluster,
            max_deletions,
            force,
        } => {
            let request = CleanupRequest {
                dry_run,
                src_cluster_filter: src_cluster,
                max_deletions,
                force,
            };
            let report = client.cleanup(&request).await?;
            if json {
                print_json(out, report.raw())?;
            } else {
                write_cleanup_report(out, &report)?;
            }
        }
        Command::CloseClient { name } => {
            client.close_client(&name).await?;
            if !json {
                writeln!(out, "closed the client of cluster '{name}'")?;
            }
        }
        Command::Rollback => {
            let status = client.rollback().await?;
            if json {
                print_json(out, status.raw())?;
            } else {
                writeln!(out, "rollback accepted")?;
                write_switch(out, &status)?;
            }
        }
    }
    Ok(())
}

fn print_json<T: Serialize + ?Sized>(out: &mut dyn Write, value: &T) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    writeln!(out, "{text}")
}

/// Polls `GET /status` until the switch settles, showing progress.
async fn watch_status(
    client: &AdminClient,
    out: &mut dyn Write,
    interval: Duration,
    json: bool,
    bars: bool,
) -> Result<(), CliError> {
    let mut bars = bars.then(ProgressBars::new);
    let mut failures = 0u32;
    let mut last_line = String::new();
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
        match &bars {
            Some(b) => b.update(&switch),
            None if !json => {
                let line = progress_line(&switch);
                if line != last_line {
                    writeln!(out, "{line}")?;
                    out.flush()?;
                    last_line = line;
                }
            }
            None => {}
        }
        if switch.phase().is_some_and(|p| p.is_settled()) {
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

/// Splits the single `failed` counter: ledgers not built count as build
/// failures first (`toBuild - built`), the rest failed in PROMOTE.
fn split_failures(s: &SwitchStatus) -> (u64, u64) {
    let c = s.counts();
    let build_failed = c.failed.min(c.to_build.saturating_sub(c.built));
    (build_failed, c.failed - build_failed)
}

/// BUILD progress: `(done, total)` = (built + build failures, toBuild).
fn build_progress(s: &SwitchStatus) -> (u64, u64) {
    let c = s.counts();
    let (build_failed, _) = split_failures(s);
    ((c.built + build_failed).min(c.to_build), c.to_build)
}

/// PROMOTE progress: `(done, total)` = (promoted + rolloverFallback +
/// promote failures, built).
fn promote_progress(s: &SwitchStatus) -> (u64, u64) {
    let c = s.counts();
    let (_, promote_failed) = split_failures(s);
    (
        (c.promoted + c.rollover_fallback + promote_failed).min(c.built),
        c.built,
    )
}

/// One plain progress line of `status --watch`.
fn progress_line(s: &SwitchStatus) -> String {
    let c = s.counts();
    let (b, bt) = build_progress(s);
    let (p, pt) = promote_progress(s);
    format!(
        "phase {}: build {b}/{bt} (built {}, failed {}), promote {p}/{pt} (promoted {}, rollover fallback {})",
        s.phase_name().unwrap_or("?"),
        c.built,
        c.failed,
        c.promoted,
        c.rollover_fallback,
    )
}

/// The two bars of `status --watch` on a terminal.
struct ProgressBars {
    multi: MultiProgress,
    build: ProgressBar,
    promote: ProgressBar,
}

impl ProgressBars {
    fn new() -> ProgressBars {
        ProgressBars::with_target(ProgressDrawTarget::stderr())
    }

    fn with_target(target: ProgressDrawTarget) -> ProgressBars {
        let style = ProgressStyle::with_template("{prefix:>8} [{bar:40}] {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar())
            .progress_chars("=> ");
        let multi = MultiProgress::with_draw_target(target);
        let build = multi.add(
            ProgressBar::new(0)
                .with_style(style.clone())
                .with_prefix("BUILD"),
        );
        let promote = multi.add(ProgressBar::new(0).with_style(style).with_prefix("PROMOTE"));
        ProgressBars {
            multi,
            build,
            promote,
        }
    }

    fn update(&self, s: &SwitchStatus) {
        let phase = s.phase_name().unwrap_or("?").to_owned();
        let c = s.counts();
        let (b, bt) = build_progress(s);
        self.build.set_length(bt);
        self.build.set_position(b);
        self.build
            .set_message(format!("{phase} (failed {})", c.failed));
        let (p, pt) = promote_progress(s);
        self.promote.set_length(pt);
        self.promote.set_position(p);
        self.promote
            .set_message(format!("rollover fallback {}", c.rollover_fallback));
    }

    fn finish(self) {
        self.build.finish();
        self.promote.finish();
        let _ = self.multi.clear();
    }

    fn abandon(self) {
        self.build.abandon();
        self.promote.abandon();
    }
}

/// Writes rows under a header with columns aligned (two spaces apart, no
/// trailing spaces).
fn write_table(out: &mut dyn Write, header: &[&str], rows: &[Vec<String>]) -> io::Result<()> {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            if i + 1 < row.len() {
                let pad = widths[i].saturating_sub(cell.chars().count());
                line.extend(std::iter::repeat_n(' ', pad));
            }
        }
        writeln!(out, "{line}")?;
    }
    Ok(())
}

/// Writes `label  value` lines with the labels aligned.
fn write_fields(out: &mut dyn Write, fields: &[(&str, String)]) -> io::Result<()> {
    let width = fields
        .iter()
        .map(|(l, _)| l.chars().count())
        .max()
        .unwrap_or(0);
    for (label, value) in fields {
        let pad = width - label.chars().count();
        writeln!(out, "{label}{}  {value}", " ".repeat(pad))?;
    }
    Ok(())
}

fn status_name(s: ClusterStatus) -> &'static str {
    match s {
        ClusterStatus::Active => "ACTIVE",
        ClusterStatus::Standby => "STANDBY",
        ClusterStatus::Deprecated => "DEPRECATED",
    }
}

fn write_clusters(out: &mut dyn Write, records: &[ClusterRecord]) -> io::Result<()> {
    if records.is_empty() {
        return writeln!(out, "no clusters registered");
    }
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.name.clone(),
                status_name(r.status).to_owned(),
                r.metadata_service_uri.clone(),
            ]
        })
        .collect();
    write_table(out, &["NAME", "STATUS", "METADATA SERVICE URI"], &rows)
}

fn yes_no(b: bool) -> String {
    if b { "yes" } else { "no" }.to_owned()
}

fn opt<T: ToString>(v: Option<T>) -> String {
    v.map_or_else(|| "-".to_owned(), |v| v.to_string())
}

fn write_precheck(out: &mut dyn Write, r: &PrecheckResult) -> io::Result<()> {
    let at_risk = if r.at_risk_ledger_count == 0 {
        "none".to_owned()
    } else {
        let ids: Vec<String> = r.at_risk_ledger_ids.iter().map(i64::to_string).collect();
        let more = r.at_risk_ledger_count.saturating_sub(ids.len());
        let mut text = format!("{} ({})", r.at_risk_ledger_count, ids.join(", "));
        if more > 0 {
            text.push_str(&format!(" and {more} more"));
        }
        text
    };
    write_fields(
        out,
        &[
            ("ready", yes_no(r.ready)),
            ("source", r.source_cluster_name.clone()),
            ("target", r.target_cluster_name.clone()),
            ("source max ledger id", opt(r.source_max_ledger_id)),
            ("source next ledger id", opt(r.source_next_ledger_id)),
            ("target next ledger id", r.target_next_ledger_id.to_string()),
            (
                "idgen advanced beyond source",
                yes_no(r.idgen_advanced_beyond_source),
            ),
            ("at-risk ledgers", at_risk),
        ],
    )?;
    if !r.ready {
        writeln!(
            out,
            "not ready: a switch to '{}' would be refused",
            r.target_cluster_name
        )?;
    }
    Ok(())
}

/// Renders a timestamp field: milliseconds since the Unix epoch as UTC, any
/// other JSON as is.
fn time_value(v: Option<&Value>) -> String {
    match v {
        None => "-".to_owned(),
        Some(Value::Number(n)) => match n.as_i64() {
            Some(ms) => format_millis(ms),
            None => n.to_string(),
        },
        Some(Value::String(s)) => s.clone(),
        Some(other) => other.to_string(),
    }
}

/// `2024-05-01T12:00:00.000Z` for milliseconds since the Unix epoch.
fn format_millis(ms: i64) -> String {
    let secs = ms.div_euclid(1000);
    let millis = ms.rem_euclid(1000);
    let days = secs.div_euclid(86_400);
    let sod = secs.rem_euclid(86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{millis:03}Z",
        sod / 3600,
        (sod % 3600) / 60,
        sod % 60
    )
}

fn switch_fields(s: &SwitchStatus) -> Vec<(&'static str, String)> {
    let c = s.counts();
    let (b, bt) = build_progress(s);
    let (p, pt) = promote_progress(s);
    vec![
        ("switch id", opt(s.switch_id())),
        ("epoch", opt(s.epoch())),
        ("source", opt(s.source())),
        ("target", opt(s.target())),
        ("phase", opt(s.phase_name())),
        (
            "build",
            format!("{b}/{bt} (built {}, failed {})", c.built, c.failed),
        ),
        (
            "promote",
            format!(
                "{p}/{pt} (promoted {}, rollover fallback {})",
                c.promoted, c.rollover_fallback
            ),
        ),
        ("deleted", c.deleted.to_string()),
        ("created", time_value(s.created_at())),
        ("updated", time_value(s.updated_at())),
        ("rollback deadline", time_value(s.rollback_deadline())),
    ]
}

fn write_failures(out: &mut dyn Write, s: &SwitchStatus) -> io::Result<()> {
    let failures = s.failures();
    if failures.is_empty() {
        return Ok(());
    }
    writeln!(out, "failures:")?;
    let rows: Vec<Vec<String>> = failures
        .into_iter()
        .map(|f| vec![opt(f.kind), opt(f.ledger_id), opt(f.path), opt(f.reason)])
        .collect();
    write_table(out, &["KIND", "LEDGER", "PATH", "REASON"], &rows)
}

fn write_switch(out: &mut dyn Write, s: &SwitchStatus) -> io::Result<()> {
    write_fields(out, &switch_fields(s))?;
    write_failures(out, s)
}

fn write_node_status(out: &mut dyn Write, s: &NodeStatus) -> io::Result<()> {
    let directive = match s.directive() {
        None => "none".to_owned(),
        Some(d) => {
            let mut text = format!(
                "switch to {}",
                d.get("target").and_then(Value::as_str).unwrap_or("?")
            );
            if let Some(epoch) = d.get("epoch").and_then(Value::as_i64) {
                text.push_str(&format!(", epoch {epoch}"));
            }
            if let Some(origin) = d.get("origin").and_then(Value::as_str) {
                text.push_str(&format!(", origin {origin}"));
            }
            if let Some(ts) = d.get("ts").filter(|v| !v.is_null()) {
                text.push_str(&format!(", at {}", time_value(Some(ts))));
            }
            text
        }
    };
    let mut fields = vec![
        ("node", opt(s.node_id())),
        ("active cluster", opt(s.active_cluster())),
        ("bootstrap cluster", opt(s.bootstrap_cluster())),
        ("read mode", opt(s.read_mode())),
        ("epoch", opt(s.epoch())),
        ("directive", directive),
    ];
    let switch = s.switch();
    match &switch {
        None => fields.push(("switch", "none".to_owned())),
        Some(sw) => fields.extend(switch_fields(sw)),
    }
    write_fields(out, &fields)?;
    if let Some(sw) = &switch {
        write_failures(out, sw)?;
    }
    Ok(())
}

fn target_rows(targets: &[CleanupTarget]) -> Vec<Vec<String>> {
    targets
        .iter()
        .map(|t| {
            vec![
                t.cluster.clone(),
                t.ledger_id.to_string(),
                t.kind.clone(),
                t.path.clone(),
            ]
        })
        .collect()
}

const TARGET_HEADER: [&str; 4] = ["CLUSTER", "LEDGER", "KIND", "PATH"];

fn write_cleanup_targets(out: &mut dyn Write, t: &CleanupTargets) -> io::Result<()> {
    writeln!(
        out,
        "switch {}: {} cleanup target(s)",
        t.switch_id,
        t.targets.len()
    )?;
    if !t.targets.is_empty() {
        write_table(out, &TARGET_HEADER, &target_rows(&t.targets))?;
    }
    Ok(())
}

fn write_cleanup_report(out: &mut dyn Write, r: &CleanupReport) -> io::Result<()> {
    let targets = r.targets();
    let failed = r.failed();
    write_fields(
        out,
        &[
            ("switch id", opt(r.switch_id())),
            ("outcome", opt(r.outcome())),
            ("dry run", opt(r.dry_run().map(yes_no))),
            ("targets", targets.len().to_string()),
            ("deleted", r.deleted().to_string()),
            ("failed", failed.len().to_string()),
        ],
    )?;
    if !targets.is_empty() {
        write_table(out, &TARGET_HEADER, &target_rows(&targets))?;
    }
    if !failed.is_empty() {
        writeln!(out, "failed deletions:")?;
        let rows: Vec<Vec<String>> = failed
            .into_iter()
            .map(|f| vec![opt(f.ledger_id), opt(f.reason)])
            .collect();
        write_table(out, &["LEDGER", "REASON"], &rows)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_epoch_millis_as_utc() {
        assert_eq!(format_millis(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(format_millis(1_714_564_800_123), "2024-05-01T12:00:00.123Z");
        assert_eq!(format_millis(951_782_400_000), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn failures_count_against_build_first_then_promote() {
        let s = |counts: Value| SwitchStatus(serde_json::json!({ "counts": counts }));
        // Build still running: the failure is a build failure.
        let during = s(serde_json::json!({"toBuild": 4, "built": 2, "failed": 1}));
        assert_eq!(build_progress(&during), (3, 4));
        assert_eq!(promote_progress(&during), (0, 2));
        // Everything built, then one promote failed.
        let after = s(
            serde_json::json!({"toBuild": 4, "built": 4, "failed": 1, "promoted": 2, "rolloverFallback": 1}),
        );
        assert_eq!(build_progress(&after), (4, 4));
        assert_eq!(promote_progress(&after), (4, 4));
        // Missing counters read as 0.
        assert_eq!(build_progress(&s(Value::Null)), (0, 0));
    }

    #[test]
    fn progress_bars_follow_the_counters() {
        let bars = ProgressBars::with_target(ProgressDrawTarget::hidden());
        bars.update(&SwitchStatus(serde_json::json!({
            "phase": "PROMOTE",
            "counts": {"toBuild": 10, "built": 8, "failed": 2, "promoted": 3, "rolloverFallback": 1},
        })));
        assert_eq!((bars.build.position(), bars.build.length()), (10, Some(10)));
        assert_eq!(
            (bars.promote.position(), bars.promote.length()),
            (4, Some(8))
        );
        assert_eq!(bars.build.message(), "PROMOTE (failed 2)");
        bars.finish();
    }

    #[test]
    fn table_columns_are_aligned_without_trailing_spaces() {
        let mut out = Vec::new();
        write_table(
            &mut out,
            &["A", "BB"],
            &[
                vec!["long".into(), "x".into()],
                vec!["s".into(), "yy".into()],
            ],
        )
        .unwrap();
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "A     BB\nlong  x\ns     yy\n"
        );
    }
}
