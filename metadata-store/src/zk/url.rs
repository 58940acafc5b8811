//! Strict parsing of `zk://host:port[,host:port…][/chroot]`.

use crate::error::{MetadataError, Operation, Result};
use crate::path::{validate_path, PathUse};

/// A parsed ZooKeeper URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ZkUrl {
    /// `host:port[,host:port…]`, as the client library takes it.
    pub(crate) hosts: String,
    /// The chroot, `""` when there is none.
    pub(crate) chroot: String,
}

const SHAPE: &str =
    "expected zk://host:port[,host:port...][/chroot], e.g. zk://127.0.0.1:2181/pulsar";

pub(crate) fn parse(url: &str) -> Result<ZkUrl> {
    let fail = |reason: &str| MetadataError::InvalidArgument {
        op: Operation::Connect,
        path: url.to_owned(),
        reason: format!("invalid ZooKeeper URL: {reason}; {SHAPE}"),
    };
    let rest = url
        .strip_prefix("zk://")
        .ok_or_else(|| fail("it must start with `zk://`"))?;
    if let Some(c) = rest
        .chars()
        .find(|c| matches!(c, '?' | '#' | '@' | '\\') || c.is_whitespace() || c.is_control())
    {
        return Err(fail(&format!(
            "it contains {c:?} (no credentials, query, fragment or spaces)"
        )));
    }
    let (hosts, chroot) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if hosts.is_empty() {
        return Err(fail("no host"));
    }
    for entry in hosts.split(',') {
        check_zk_host(entry).map_err(|reason| fail(&format!("host `{entry}`: {reason}")))?;
    }
    let chroot = match chroot {
        "" | "/" => String::new(),
        c => {
            validate_path(Operation::Connect, c, PathUse::Write).map_err(|e| match e {
                MetadataError::InvalidPath { rule, .. } => fail(&format!("chroot `{c}`: {rule}")),
                other => other,
            })?;
            c.to_owned()
        }
    };
    Ok(ZkUrl {
        hosts: hosts.to_owned(),
        chroot,
    })
}

/// Checks one `host:port` (or `[v6]:port`) entry of a ZooKeeper server list;
/// the error says what is wrong with it.
///
/// ```
/// use bkswitch_metadata_store::check_zk_host;
///
/// assert!(check_zk_host("zk-1.example:2181").is_ok());
/// assert!(check_zk_host("[::1]:2181").is_ok());
/// assert_eq!(check_zk_host("zk-1"), Err("the port is missing (host:port)"));
/// ```
///
/// # Errors
/// A static description of the first problem found.
pub fn check_zk_host(entry: &str) -> std::result::Result<(), &'static str> {
    if entry.is_empty() {
        return Err("empty entry (no host, or a stray separator)");
    }
    let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
        let (addr, port) = v6
            .split_once("]:")
            .ok_or("an IPv6 address must be written [addr]:port")?;
        addr.parse::<std::net::Ipv6Addr>()
            .map_err(|_| "not an IPv6 address")?;
        ("v6", port)
    } else {
        entry
            .rsplit_once(':')
            .ok_or("the port is missing (host:port)")?
    };
    if host.is_empty() {
        return Err("the host name is empty");
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    {
        return Err("the host name has characters other than letters, digits, `.`, `-`, `_`");
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err("the port must be a number from 1 to 65535"),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn good_urls() {
        let u = parse("zk://127.0.0.1:2181").unwrap();
        assert_eq!(u.hosts, "127.0.0.1:2181");
        assert_eq!(u.chroot, "");
        let u = parse("zk://a:1,b.example:2,[::1]:3/pulsar/ledgers").unwrap();
        assert_eq!(u.hosts, "a:1,b.example:2,[::1]:3");
        assert_eq!(u.chroot, "/pulsar/ledgers");
        assert_eq!(parse("zk://h:1/").unwrap().chroot, "");
    }

    #[test]
    fn bad_urls() {
        for (url, needle) in [
            ("127.0.0.1:2181", "zk://"),
            ("zookeeper://h:1", "zk://"),
            ("zk://", "no host"),
            ("zk:///chroot", "no host"),
            ("zk://h", "port is missing"),
            ("zk://h:", "port must be"),
            ("zk://h:0", "port must be"),
            ("zk://h:70000", "port must be"),
            ("zk://h:x", "port must be"),
            ("zk://:1", "host name is empty"),
            ("zk://h:1,,g:2", "stray separator"),
            ("zk://h:1/a/", "end with"),
            ("zk://h:1/a//b", "empty segment"),
            ("zk://h:1/zookeeper", "reserved"),
            ("zk://u@h:1", "credentials"),
            ("zk://h:1?x=1", "query"),
            ("zk://h h:1", "spaces"),
            ("zk://[::1:1", "IPv6"),
            ("zk://[zz]:1", "IPv6"),
            ("zk://h*:1", "host name has"),
        ] {
            let e = parse(url).expect_err(url);
            assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{url}");
            let msg = e.to_string();
            assert!(msg.contains(needle), "{url}: {msg}");
            assert!(msg.contains("zk://host:port"), "{url}: {msg}");
        }
    }
}
