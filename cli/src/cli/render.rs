//! Text for the operator: aligned tables and `label  value` fields for every
//! answer, progress lines, and pretty JSON for `--json`.

use std::io::{self, Write};

use serde::Serialize;
use serde_json::Value;

use crate::progress::{build_progress, promote_progress};
use bkswitch_admin::wire::{
    CleanupReportDoc, CleanupTarget, CleanupTargets, ClusterRecord, ClusterStatus, CopyProgressDoc,
    MigrationStatusDoc, NodeStatus, PrecheckResult, SwitchStatusDoc,
};
use indicatif::{HumanBytes, HumanCount};

/// Writes `value` as pretty JSON.
pub(super) fn print_json<T: Serialize + ?Sized>(out: &mut dyn Write, value: &T) -> io::Result<()> {
    let text = serde_json::to_string_pretty(value).map_err(io::Error::other)?;
    writeln!(out, "{text}")
}

/// One plain progress line of `status --watch`.
pub(super) fn progress_line(s: &SwitchStatusDoc) -> String {
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

/// The copy progress in one field: entries, bytes and ledgers, and whether
/// the answering node copies (live) or read the ledger records.
fn copy_field(c: &CopyProgressDoc) -> String {
    let (copied, total) = c.entries();
    let (bytes, bytes_total) = c.bytes();
    let (done, ledgers) = c.ledgers();
    format!(
        "{}/{} entries, {}/{}, ledgers {done}/{ledgers} (failed {}){}",
        HumanCount(copied),
        HumanCount(total),
        HumanBytes(bytes),
        HumanBytes(bytes_total),
        c.ledgers_failed(),
        if c.live() {
            ""
        } else {
            " (from the ledger records; the coordinator shows live figures)"
        }
    )
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

pub(super) fn write_clusters(out: &mut dyn Write, records: &[ClusterRecord]) -> io::Result<()> {
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

pub(super) fn write_precheck(out: &mut dyn Write, r: &PrecheckResult) -> io::Result<()> {
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
    let check = if r.rollback {
        "rollback (back to the switch's source)"
    } else {
        "switch"
    };
    write_fields(
        out,
        &[
            ("check", check.to_owned()),
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
        let what = if r.rollback {
            "the rollback"
        } else {
            "a switch"
        };
        writeln!(
            out,
            "not ready: {what} to '{}' would be refused",
            r.target_cluster_name
        )?;
        if let (Some(n), Some(cmd)) = (r.advance_beyond, &r.advance_command) {
            writeln!(
                out,
                "run, then precheck again (advances '{}' beyond {n}):\n  {cmd}",
                r.target_cluster_name
            )?;
        }
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

/// `2024-05-01T12:00:00.000Z` for milliseconds since the Unix epoch (the
/// number itself before the epoch).
fn format_millis(ms: i64) -> String {
    match u64::try_from(ms) {
        Ok(ms) => humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        )
        .to_string(),
        Err(_) => ms.to_string(),
    }
}

fn switch_fields(s: &SwitchStatusDoc) -> Vec<(&'static str, String)> {
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

fn write_failures(out: &mut dyn Write, s: &SwitchStatusDoc) -> io::Result<()> {
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

pub(super) fn write_switch(out: &mut dyn Write, s: &SwitchStatusDoc) -> io::Result<()> {
    write_fields(out, &switch_fields(s))?;
    write_failures(out, s)
}

pub(super) fn write_node_status(out: &mut dyn Write, s: &NodeStatus) -> io::Result<()> {
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
    if let Some(c) = s.copy_progress() {
        fields.push(("copy", copy_field(&c)));
        for l in c.copying() {
            fields.push((
                "  copying",
                format!(
                    "{} ledger {} ({} -> {}): {}/{} entries, {}/{}",
                    l.kind.as_deref().unwrap_or("?"),
                    opt(l.ledger_id),
                    l.source.as_deref().unwrap_or("?"),
                    l.target.as_deref().unwrap_or("?"),
                    HumanCount(l.entries_copied),
                    HumanCount(l.entries_total),
                    HumanBytes(l.bytes_copied),
                    HumanBytes(l.bytes_total),
                ),
            ));
        }
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
                t.kind.as_str().to_owned(),
                t.path.clone(),
            ]
        })
        .collect()
}

const TARGET_HEADER: [&str; 4] = ["CLUSTER", "LEDGER", "KIND", "PATH"];

pub(super) fn write_cleanup_targets(out: &mut dyn Write, t: &CleanupTargets) -> io::Result<()> {
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

pub(super) fn write_cleanup_report(out: &mut dyn Write, r: &CleanupReportDoc) -> io::Result<()> {
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

/// A metadata migration's status as `label  value` fields.
pub(super) fn write_migration(out: &mut dyn Write, m: &MigrationStatusDoc) -> io::Result<()> {
    let mut fields = vec![
        ("migration", m.id.clone()),
        ("phase", m.phase.clone()),
        ("source", m.source_url.clone()),
        ("target", m.target_url.clone()),
        ("round", m.round.to_string()),
        ("nodes copied", HumanCount(m.nodes_copied).to_string()),
        (
            "changes caught up",
            HumanCount(m.changes_caught_up).to_string(),
        ),
        ("re-scans", m.rescans.to_string()),
        ("verified", yes_no(m.verified)),
    ];
    if m.phase == "COMPLETED" {
        fields.push((
            "pause",
            format!("{} ms over {} nodes", m.pause_ms, m.pause_nodes),
        ));
    }
    if let Some(e) = &m.error {
        fields.push(("error", e.clone()));
    }
    fields.push(("started", format_millis(m.created_ms)));
    fields.push(("updated", format_millis(m.updated_ms)));
    if let Some(url) = &m.node_store_url {
        fields.push(("this node uses", url.clone()));
        fields.push(("this node's writes paused", yes_no(m.writes_paused)));
    }
    write_fields(out, &fields)
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
