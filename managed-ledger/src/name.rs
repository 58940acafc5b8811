//! Validation of managed-ledger and cursor names.

use crate::error::{ManagedLedgerError, Result};

fn check_segment(what: &'static str, name: &str, segment: &str) -> Result<()> {
    let reason = if segment.is_empty() {
        Some("empty path segment (no leading, trailing or doubled '/')")
    } else if segment == "." || segment == ".." {
        Some("'.' and '..' are not allowed as segments")
    } else if segment.chars().any(char::is_control) {
        Some("control characters are not allowed")
    } else {
        None
    };
    match reason {
        Some(reason) => Err(ManagedLedgerError::InvalidName {
            what,
            name: name.to_owned(),
            reason,
        }),
        None => Ok(()),
    }
}

/// Checks a managed-ledger name such as `tenant/ns/persistent/topic`.
///
/// # Errors
///
/// [`ManagedLedgerError::InvalidName`] for an empty name, an empty segment, a
/// `.` or `..` segment, or a control character.
pub fn validate_managed_ledger_name(name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(ManagedLedgerError::InvalidName {
            what: "managed ledger",
            name: String::new(),
            reason: "the name is empty",
        });
    }
    name.split('/')
        .try_for_each(|s| check_segment("managed ledger", name, s))
}

/// Checks a cursor name: one non-empty segment (no `/`), not `.`/`..`, no
/// control character.
///
/// # Errors
///
/// [`ManagedLedgerError::InvalidName`] naming the rule broken.
pub fn validate_cursor_name(name: &str) -> Result<()> {
    if name.contains('/') {
        return Err(ManagedLedgerError::InvalidName {
            what: "cursor",
            name: name.to_owned(),
            reason: "'/' is not allowed in a cursor name",
        });
    }
    check_segment("cursor", name, name)
}
