//! Path rules shared by every backend, so that all of them give the same answer.

use crate::error::{MetadataError, Operation, Result};

/// The largest value a node may hold, in bytes.
///
/// ZooKeeper refuses packets larger than `jute.maxbuffer` (1 MiB less one byte by
/// default, path and headers included) by dropping the connection; every backend
/// rejects larger values up front with [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
/// instead, so that the limit does not depend on the backend.
pub const MAX_VALUE_LEN: usize = 1_000_000;

/// Top-level name reserved by ZooKeeper for its own nodes (`/zookeeper/quota`,
/// `/zookeeper/config`); writes below it are refused everywhere.
pub const RESERVED_ROOT: &str = "zookeeper";

/// Whether the path is about to be read or written: writes are refused below
/// [`RESERVED_ROOT`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PathUse {
    /// get, exists, children, watch.
    Read,
    /// put, create, delete.
    Write,
}

/// Checks `path` against the rules every backend applies.
///
/// A valid path starts with `/`; is `/` itself or has no trailing `/`; has no
/// empty, `.` or `..` segment; holds no NUL, control character (U+0000–U+001F,
/// U+007F–U+009F) or character ZooKeeper refuses (U+E000–U+F8FF, U+FFF0–U+FFFF);
/// and, for writes, is not `/zookeeper` or below it.
///
/// # Errors
///
/// [`MetadataError::InvalidPath`] naming the path and the first rule it breaks.
pub fn validate_path(op: Operation, path: &str, usage: PathUse) -> Result<()> {
    match check(path, usage) {
        Ok(()) => Ok(()),
        Err(rule) => Err(MetadataError::InvalidPath {
            op,
            path: path.to_owned(),
            rule,
        }),
    }
}

/// Validates the prefix of a sequential create: a valid path other than `/`
/// (ZooKeeper would accept a trailing `/`, as in `/queue/`, but the Rust client
/// refuses it, so no backend accepts it).
pub(crate) fn validate_sequential_prefix(op: Operation, path: &str) -> Result<()> {
    validate_path(op, path, PathUse::Write)?;
    if path == "/" {
        return Err(MetadataError::InvalidPath {
            op,
            path: path.to_owned(),
            rule: "`/` cannot be a sequential prefix; use a name prefix such as `/id-`",
        });
    }
    Ok(())
}

fn check(path: &str, usage: PathUse) -> std::result::Result<(), &'static str> {
    let bytes = path.as_bytes();
    if bytes.is_empty() {
        return Err("the path is empty; paths start with `/`");
    }
    if bytes[0] != b'/' {
        return Err("the path must start with `/`");
    }
    if path == "/" {
        return Ok(());
    }
    if bytes[bytes.len() - 1] == b'/' {
        return Err("the path must not end with `/`");
    }
    // Fast path: printable ASCII only needs the segment checks.
    if !bytes.iter().all(|b| (0x20..0x7f).contains(b)) {
        for c in path.chars() {
            if c == '\0' {
                return Err("the path contains a NUL character");
            }
            if c.is_control() {
                return Err("the path contains a control character");
            }
            if ('\u{E000}'..='\u{F8FF}').contains(&c) || ('\u{FFF0}'..='\u{FFFF}').contains(&c) {
                return Err("the path contains a character ZooKeeper refuses (U+E000-U+F8FF or U+FFF0-U+FFFF)");
            }
        }
    }
    for (i, segment) in path[1..].split('/').enumerate() {
        match segment {
            "" => return Err("the path has an empty segment (`//`)"),
            "." | ".." => return Err("the path has a `.` or `..` segment"),
            RESERVED_ROOT if i == 0 && usage == PathUse::Write => {
                return Err("`/zookeeper` is reserved by ZooKeeper and cannot be written")
            }
            _ => {}
        }
    }
    Ok(())
}

/// The parent of a valid path other than `/`.
pub(crate) fn parent(path: &str) -> &str {
    match path.rfind('/') {
        Some(0) | None => "/",
        Some(i) => &path[..i],
    }
}

/// The last segment of a valid path other than `/`.
pub(crate) fn name(path: &str) -> &str {
    match path.rfind('/') {
        Some(i) => &path[i + 1..],
        None => path,
    }
}

/// Joins a valid parent path and a child name.
pub(crate) fn join(parent: &str, name: &str) -> String {
    if parent == "/" {
        format!("/{name}")
    } else {
        format!("{parent}/{name}")
    }
}

/// Rejects values larger than [`MAX_VALUE_LEN`].
pub(crate) fn check_value(op: Operation, path: &str, value: &[u8]) -> Result<()> {
    if value.len() > MAX_VALUE_LEN {
        return Err(MetadataError::InvalidArgument {
            op,
            path: path.to_owned(),
            reason: format!(
                "the value is {} bytes, more than the {MAX_VALUE_LEN}-byte limit; store \
                 large data elsewhere (a ledger) and keep a reference here",
                value.len()
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_paths() {
        for p in [
            "/",
            "/a",
            "/a/b",
            "/a-b_c.d/e f",
            "/zookeeper2",
            "/a/zookeeper",
            "/é",
        ] {
            assert!(check(p, PathUse::Write).is_ok(), "{p}");
        }
        assert!(check("/zookeeper", PathUse::Read).is_ok());
        assert!(check("/zookeeper/quota", PathUse::Read).is_ok());
    }

    #[test]
    fn invalid_paths() {
        for (p, rule) in [
            ("", "empty"),
            ("a", "start with"),
            ("/a/", "end with"),
            ("//a", "empty segment"),
            ("/a//b", "empty segment"),
            ("/a/./b", "`.`"),
            ("/a/..", "`.`"),
            ("/a\0b", "NUL"),
            ("/a\u{1}b", "control"),
            ("/a\u{7f}b", "control"),
            ("/a\u{85}b", "control"),
            ("/a\u{E000}", "refuses"),
            ("/a\u{FFFF}", "refuses"),
            ("/zookeeper", "reserved"),
            ("/zookeeper/x", "reserved"),
        ] {
            let err = check(p, PathUse::Write).expect_err(p);
            assert!(err.contains(rule), "{p:?}: {err}");
        }
    }

    #[test]
    fn sequential_prefixes() {
        assert!(validate_sequential_prefix(Operation::Create, "/q/id-").is_ok());
        assert!(validate_sequential_prefix(Operation::Create, "/q/").is_err());
        assert!(validate_sequential_prefix(Operation::Create, "/").is_err());
        assert!(validate_sequential_prefix(Operation::Create, "/zookeeper/x").is_err());
    }

    #[test]
    fn parent_name_join() {
        assert_eq!(parent("/a"), "/");
        assert_eq!(parent("/a/b/c"), "/a/b");
        assert_eq!(name("/a/b/c"), "c");
        assert_eq!(join("/", "a"), "/a");
        assert_eq!(join("/a", "b"), "/a/b");
    }

    #[test]
    fn error_names_path_and_rule() {
        let e = validate_path(Operation::Put, "/a//b", PathUse::Write).unwrap_err();
        let msg = e.to_string();
        assert!(msg.contains("put") && msg.contains("/a//b") && msg.contains("empty segment"));
        assert_eq!(e.kind(), crate::ErrorKind::InvalidPath);
    }
}
