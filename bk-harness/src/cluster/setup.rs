//! Setting a cluster up: configuration lines, the layout in ZooKeeper, ports,
//! logs.

use std::collections::BTreeSet;
use std::fmt;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

use super::LAYOUT;
use crate::zk::Zk;
use crate::StartError;

/// The `key=value` lines of a bookie configuration, in order.
pub(super) fn parse_conf_lines(lines: &[String]) -> Result<Vec<(String, String)>, StartError> {
    lines.iter().map(|l| parse_conf_line(l)).collect()
}

pub(super) fn parse_conf_line(line: &str) -> Result<(String, String), StartError> {
    match line.split_once('=') {
        Some((key, value)) if !key.trim().is_empty() && !line.contains('\n') => {
            Ok((key.trim().to_owned(), value.trim().to_owned()))
        }
        _ => Err(StartError::new(format!(
            "bookie configuration line `{line}` is not `key=value`"
        ))),
    }
}

/// `host:port[,host:port…]` from a connect string (a `zk://` prefix is accepted).
pub(super) fn parse_hosts(zk_connect: &str) -> Result<String, StartError> {
    let hosts = zk_connect.strip_prefix("zk://").unwrap_or(zk_connect);
    if hosts.is_empty() || hosts.contains('/') || hosts.contains(char::is_whitespace) {
        return Err(StartError::new(format!(
            "ZooKeeper connect string `{zk_connect}` must be host:port[,host:port...] \
             without a chroot (put the path in the ledgers root)"
        )));
    }
    Ok(hosts.to_owned())
}

pub(super) fn parse_root(root: &str) -> Result<String, StartError> {
    let valid = root.starts_with('/')
        && root.len() > 1
        && !root.ends_with('/')
        && root
            .split('/')
            .skip(1)
            .all(|s| !s.is_empty() && s != "." && s != ".." && s != "zookeeper")
        && !root.contains(char::is_whitespace);
    if valid {
        Ok(root.to_owned())
    } else {
        Err(StartError::new(format!(
            "ledgers root `{root}` must be an absolute ZooKeeper path such as /ledgers"
        )))
    }
}

/// Lays a new cluster out as `initnewcluster` does, unless the root exists.
pub(super) fn init_layout(zk: &Zk, root: &str) -> Result<(), StartError> {
    let fail = |path: &str, e: &dyn fmt::Display| {
        StartError::new(format!("cannot lay out the cluster at {path}: {e}"))
    };
    if zk.exists(root).map_err(|e| fail(root, &e))? {
        return Ok(());
    }
    if !zk.create(root, b"").map_err(|e| fail(root, &e))? {
        // Created meanwhile by someone else: theirs.
        return Ok(());
    }
    for (path, value) in [
        (format!("{root}/available"), Vec::new()),
        (format!("{root}/available/readonly"), Vec::new()),
        (format!("{root}/INSTANCEID"), random_uuid().into_bytes()),
        (format!("{root}/LAYOUT"), LAYOUT.to_vec()),
    ] {
        zk.create(&path, &value).map_err(|e| fail(&path, &e))?;
    }
    Ok(())
}

/// A random (version 4) UUID in Java's `UUID.toString()` form.
pub(super) fn random_uuid() -> String {
    uuid::Uuid::new_v4().hyphenated().to_string()
}

/// A port free on the loopback interface (where the bookies listen), never
/// handed out twice in this process.
pub(super) fn free_port() -> Result<u16, StartError> {
    static GIVEN: Mutex<BTreeSet<u16>> = Mutex::new(BTreeSet::new());
    for _ in 0..100 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .map_err(|e| StartError::new(format!("cannot bind a port: {e}")))?;
        let port = listener
            .local_addr()
            .map_err(|e| StartError::new(format!("cannot read the probed port: {e}")))?
            .port();
        if GIVEN.lock().unwrap_or_else(|e| e.into_inner()).insert(port) {
            return Ok(port);
        }
    }
    Err(StartError::new("no free port found"))
}

/// The log4j2 configuration of the bookies: everything to standard output (the
/// bookie's log file), the ZooKeeper client at WARN.
pub(super) fn log4j_config(level: &str) -> String {
    format!(
        "status = error\n\
         name = bk-harness\n\
         appender.out.type = Console\n\
         appender.out.name = out\n\
         appender.out.target = SYSTEM_OUT\n\
         appender.out.layout.type = PatternLayout\n\
         appender.out.layout.pattern = %d{{HH:mm:ss.SSS}} %-5level [%t] %c{{1}} - %msg%n\n\
         logger.zookeeper.name = org.apache.zookeeper\n\
         logger.zookeeper.level = WARN\n\
         rootLogger.level = {level}\n\
         rootLogger.appenderRef.out.ref = out\n"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::unique_ledgers_root;

    #[test]
    fn uuids_look_like_java_ones() {
        let a = random_uuid();
        let b = random_uuid();
        assert_ne!(a, b);
        assert_eq!(a.len(), 36);
        let groups: Vec<&str> = a.split('-').collect();
        assert_eq!(
            groups.iter().map(|g| g.len()).collect::<Vec<_>>(),
            [8, 4, 4, 4, 12]
        );
        assert!(groups[2].starts_with('4'));
        assert!(matches!(groups[3].as_bytes()[0], b'8' | b'9' | b'a' | b'b'));
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert_eq!(a, a.to_lowercase());
    }

    #[test]
    fn arguments_are_checked() {
        assert_eq!(parse_hosts("127.0.0.1:2181").unwrap(), "127.0.0.1:2181");
        assert_eq!(parse_hosts("zk://a:1,b:2").unwrap(), "a:1,b:2");
        assert!(parse_hosts("127.0.0.1:2181/chroot").is_err());
        assert!(parse_root("/ledgers").is_ok());
        assert!(parse_root("/a/ledgers").is_ok());
        for bad in ["", "/", "ledgers", "/ledgers/", "/a//b", "/zookeeper/x"] {
            assert!(parse_root(bad).is_err(), "{bad}");
        }
        assert_eq!(
            parse_conf_line(" zkTimeout = 6000 ").unwrap(),
            ("zkTimeout".to_owned(), "6000".to_owned())
        );
        assert!(parse_conf_line("novalue").is_err());
        assert!(parse_conf_line("=1").is_err());
    }

    #[test]
    fn roots_are_unique() {
        let a = unique_ledgers_root();
        let b = unique_ledgers_root();
        assert_ne!(a, b);
        assert!(parse_root(&a).is_ok());
    }
}
