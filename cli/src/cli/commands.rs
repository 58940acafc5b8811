//! One function per verb: the request, then its answer written as the
//! server's JSON (`--json`) or as text.

use std::io::{self, Write};
use std::time::Duration;

use serde::Serialize;

use super::args::{Command, MigrationCommand, ReadModeArg, StatusArg};
use super::error::CliError;
use super::render::{
    print_json, write_cleanup_report, write_cleanup_targets, write_clusters, write_migration,
    write_node_status, write_precheck, write_switch,
};
use super::watch::watch_status;
use bkswitch_admin::wire::{CleanupRequest, MigrationPlanDoc};
use bkswitch_admin::AdminClient;

type Result = std::result::Result<(), CliError>;

/// How answers are written.
#[derive(Debug, Clone, Copy)]
pub(super) struct Output {
    /// The server's JSON instead of text.
    pub(super) json: bool,
    /// `status --watch` draws bars on stderr (never with `json`).
    pub(super) progress_bars: bool,
}

/// Writes an answer: `json` (the server's JSON) with `--json`, else `text`.
fn answer<T: Serialize + ?Sized>(
    out: &mut dyn Write,
    as_json: bool,
    json: &T,
    text: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result {
    if as_json {
        print_json(out, json)?;
    } else {
        text(out)?;
    }
    Ok(())
}

/// Runs `command` against `client`.
pub(super) async fn execute(
    client: &AdminClient,
    command: Command,
    out: &mut dyn Write,
    output: Output,
) -> Result {
    let json = output.json;
    match command {
        Command::List => list(client, out, json).await,
        Command::Get { name } => get(client, &name, out, json).await,
        Command::Register {
            name,
            metadata_service_uri,
            status,
        } => register(client, &name, &metadata_service_uri, status, out, json).await,
        Command::Unregister { name } => unregister(client, &name, out, json).await,
        Command::Precheck { name } => precheck(client, &name, out, json).await,
        Command::Switch { target } => switch(client, &target, out, json).await,
        Command::SetOverride { prefix, cluster } => {
            let status = client.set_override(&prefix, &cluster).await?;
            answer(out, json, status.raw(), |out| {
                writeln!(out, "canary of '{prefix}' on '{cluster}' accepted")?;
                write_switch(out, &status)
            })
        }
        Command::RemoveOverride { prefix } => {
            let status = client.remove_override(&prefix).await?;
            answer(out, json, status.raw(), |out| {
                writeln!(out, "canary of '{prefix}' rolled back")?;
                write_switch(out, &status)
            })
        }
        Command::ListOverrides => {
            let list = client.list_overrides().await?;
            answer(out, json, &list, |out| {
                for o in list.as_array().into_iter().flatten() {
                    writeln!(
                        out,
                        "{}  {}  {}",
                        o["prefix"].as_str().unwrap_or_default(),
                        o["cluster"].as_str().unwrap_or_default(),
                        o["switch"]["phase"].as_str().unwrap_or("-")
                    )?;
                }
                Ok(())
            })
        }
        Command::Status {
            watch: true,
            interval_ms,
        } => {
            let interval = Duration::from_millis(interval_ms);
            watch_status(client, out, interval, json, output.progress_bars).await
        }
        Command::Status { watch: false, .. } => status(client, out, json).await,
        Command::SetReadMode { mode } => set_read_mode(client, mode, out, json).await,
        Command::ListCleanupTargets => list_cleanup_targets(client, out, json).await,
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
            cleanup(client, &request, out, json).await
        }
        Command::CloseClient { name } => close_client(client, &name, out, json).await,
        Command::Rollback => rollback(client, out, json).await,
        Command::MetadataMigration(verb) => migration(client, verb, out, json).await,
    }
}

async fn migration(
    client: &AdminClient,
    verb: MigrationCommand,
    out: &mut dyn Write,
    json: bool,
) -> Result {
    let (doc, headline) = match verb {
        MigrationCommand::Start {
            target_url,
            dry_run: true,
            ..
        } => {
            let plan = client.plan_migration(&target_url).await?;
            return answer(out, json, &plan, |out| write_plan(out, &plan));
        }
        MigrationCommand::Start {
            target_url,
            wipe_target,
            dry_run: false,
        } => {
            let doc = client
                .start_migration(&target_url, wipe_target.as_deref())
                .await?;
            let line = format!("metadata migration to '{target_url}' started");
            (doc, Some(line))
        }
        MigrationCommand::Status => (client.migration_status().await?, None),
        MigrationCommand::Abort => (
            client.abort_migration().await?,
            Some("metadata migration aborted; writes go on in the source store".to_owned()),
        ),
    };
    answer(out, json, &doc, |out| {
        if let Some(line) = headline {
            writeln!(out, "{line}")?;
        }
        write_migration(out, &doc)
    })
}

async fn list(client: &AdminClient, out: &mut dyn Write, json: bool) -> Result {
    let records = client.list().await?;
    answer(out, json, &records, |out| write_clusters(out, &records))
}

async fn get(client: &AdminClient, name: &str, out: &mut dyn Write, json: bool) -> Result {
    let record = client.get(name).await?;
    answer(out, json, &record, |out| {
        write_clusters(out, std::slice::from_ref(&record))
    })
}

async fn register(
    client: &AdminClient,
    name: &str,
    metadata_service_uri: &str,
    status: Option<StatusArg>,
    out: &mut dyn Write,
    json: bool,
) -> Result {
    let record = client
        .register(name, metadata_service_uri, status.map(Into::into))
        .await?;
    answer(out, json, &record, |out| {
        writeln!(out, "registered cluster '{}'", record.name)?;
        write_clusters(out, std::slice::from_ref(&record))
    })
}

async fn unregister(client: &AdminClient, name: &str, out: &mut dyn Write, json: bool) -> Result {
    client.unregister(name).await?;
    if !json {
        writeln!(out, "unregistered cluster '{name}'")?;
    }
    Ok(())
}

async fn precheck(client: &AdminClient, name: &str, out: &mut dyn Write, json: bool) -> Result {
    let result = client.precheck(name).await?;
    answer(out, json, &result, |out| write_precheck(out, &result))
}

async fn switch(client: &AdminClient, target: &str, out: &mut dyn Write, json: bool) -> Result {
    let status = client.switch(target).await?;
    answer(out, json, status.raw(), |out| {
        writeln!(out, "switch to '{target}' accepted")?;
        write_switch(out, &status)
    })
}

async fn status(client: &AdminClient, out: &mut dyn Write, json: bool) -> Result {
    let status = client.status().await?;
    answer(out, json, status.raw(), |out| {
        write_node_status(out, &status)
    })
}

async fn set_read_mode(
    client: &AdminClient,
    mode: ReadModeArg,
    out: &mut dyn Write,
    json: bool,
) -> Result {
    let set = client.set_read_mode(mode.into()).await?;
    answer(out, json, &set, |out| {
        writeln!(out, "read mode set to {}", set.read_mode)
    })
}

async fn list_cleanup_targets(client: &AdminClient, out: &mut dyn Write, json: bool) -> Result {
    let targets = client.cleanup_targets().await?;
    answer(out, json, &targets, |out| {
        write_cleanup_targets(out, &targets)
    })
}

async fn cleanup(
    client: &AdminClient,
    request: &CleanupRequest,
    out: &mut dyn Write,
    json: bool,
) -> Result {
    let report = client.cleanup(request).await?;
    answer(out, json, report.raw(), |out| {
        write_cleanup_report(out, &report)
    })
}

async fn close_client(client: &AdminClient, name: &str, out: &mut dyn Write, json: bool) -> Result {
    client.close_client(name).await?;
    if !json {
        writeln!(out, "closed the client of cluster '{name}'")?;
    }
    Ok(())
}

async fn rollback(client: &AdminClient, out: &mut dyn Write, json: bool) -> Result {
    let status = client.rollback().await?;
    answer(out, json, status.raw(), |out| {
        writeln!(out, "rollback accepted")?;
        write_switch(out, &status)
    })
}

/// The text of a migration dry run.
fn write_plan(out: &mut dyn Write, plan: &MigrationPlanDoc) -> io::Result<()> {
    writeln!(out, "dry run: nothing was written")?;
    writeln!(out, "target  {} (root {})", plan.target_url, plan.root)?;
    if plan.would_delete.is_empty() {
        return writeln!(
            out,
            "the target is empty: the migration can start without a wipe"
        );
    }
    writeln!(
        out,
        "a wipe would delete {} nodes in {} subtrees:",
        plan.nodes,
        plan.would_delete.len()
    )?;
    for e in &plan.would_delete {
        match &e.kind {
            Some(kind) => writeln!(out, "  {}  ({} nodes: {kind})", e.path, e.nodes)?,
            None => writeln!(out, "  {}  ({} nodes)", e.path, e.nodes)?,
        }
    }
    writeln!(
        out,
        "confirm with: metadata-migration start --target-url {} --wipe-target {}",
        plan.target_url, plan.root
    )
}
