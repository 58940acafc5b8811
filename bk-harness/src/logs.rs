//! Reading the end of a JVM's log for error messages.

use std::fs;
use std::path::Path;

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
