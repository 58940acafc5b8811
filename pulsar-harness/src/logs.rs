//! Reading the end of a log, and whether folders are kept.

use std::fs;
use std::path::Path;

/// Set to `1` to keep the brokers' and the traffic clients' folders (logs,
/// configuration, data) when they are dropped; their paths are printed then.
pub const KEEP_ENV: &str = "BKSWITCH_KEEP_PULSAR_DIRS";

/// Whether [`KEEP_ENV`] asks to keep the folders.
pub(crate) fn keep_dirs() -> bool {
    std::env::var(KEEP_ENV).is_ok_and(|v| !v.is_empty() && v != "0")
}

/// The end of a log without Java stack frames (`at …`, `... n more`), which
/// would push the messages out of a short excerpt: the last `lines` other lines
/// among the last 300.
pub(crate) fn log_excerpt(path: &Path, lines: usize) -> String {
    let text = tail(path, 300);
    let kept: Vec<&str> = text
        .lines()
        .filter(|l| {
            let t = l.trim_start();
            !(t.starts_with("at ") || (t.starts_with("... ") && t.ends_with(" more")))
        })
        .collect();
    kept[kept.len().saturating_sub(lines)..].join("\n")
}

/// The last `lines` lines of a file (empty when it cannot be read).
pub(crate) fn tail(path: &Path, lines: usize) -> String {
    let bytes = fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&bytes);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
