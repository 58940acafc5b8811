//! `etcd://host:port[,host:port…][/prefix]` URLs.

use crate::error::{MetadataError, Operation, Result};
use crate::path::{validate_path, PathUse};

/// A parsed `etcd://` URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EtcdUrl {
    /// `http://host:port` of every member.
    pub(crate) endpoints: Vec<String>,
    /// `host:port,…` as written.
    pub(crate) hosts: String,
    /// The key prefix (a path such as `/a/b`), or empty.
    pub(crate) prefix: String,
}

const FORM: &str = "expected etcd://host:port[,host:port…][/prefix], for instance \
                    etcd://127.0.0.1:2379 or etcd://e1:2379,e2:2379,e3:2379/pulsar";

pub(crate) fn parse(url: &str) -> Result<EtcdUrl> {
    let fail = |what: String| MetadataError::InvalidArgument {
        op: Operation::Connect,
        path: url.to_owned(),
        reason: format!("{what}; {FORM}"),
    };
    let rest = url
        .strip_prefix("etcd://")
        .ok_or_else(|| fail("the URL does not start with etcd://".to_owned()))?;
    if let Some(c) = rest
        .chars()
        .find(|c| matches!(c, '?' | '#' | '@' | '\\') || c.is_whitespace() || c.is_control())
    {
        return Err(fail(format!(
            "it contains {c:?} (no credentials, query, fragment or spaces)"
        )));
    }
    let (hosts, prefix) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if hosts.is_empty() {
        return Err(fail("no host".to_owned()));
    }
    let mut endpoints = Vec::new();
    for host in hosts.split(',') {
        let (name, port) = host
            .rsplit_once(':')
            .ok_or_else(|| fail(format!("host `{host}` has no port")))?;
        if name.is_empty() || name.contains('@') {
            return Err(fail(format!("host `{host}` is not host:port")));
        }
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(fail(format!("host `{host}` has a bad port")));
        }
        endpoints.push(format!("http://{host}"));
    }
    if !prefix.is_empty() {
        if prefix == "/" {
            return Err(fail("the prefix `/` is empty; leave it out".to_owned()));
        }
        validate_path(Operation::Connect, prefix, PathUse::Write)
            .map_err(|e| fail(format!("the prefix `{prefix}` is not a valid path ({e})")))?;
    }
    Ok(EtcdUrl {
        endpoints,
        hosts: hosts.to_owned(),
        prefix: prefix.to_owned(),
    })
}

/// Checks the host list of an `etcd://` URL (`host:port[,host:port…]`) without
/// connecting: what a settings file validator calls.
///
/// # Errors
///
/// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument) naming the
/// URL and the expected form.
pub fn check_etcd_url(url: &str) -> Result<()> {
    parse(url).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn good_urls() {
        let u = parse("etcd://127.0.0.1:2379").unwrap();
        assert_eq!(u.endpoints, ["http://127.0.0.1:2379"]);
        assert_eq!(u.prefix, "");
        let u = parse("etcd://a:1,b:2/x/y").unwrap();
        assert_eq!(u.endpoints, ["http://a:1", "http://b:2"]);
        assert_eq!(u.hosts, "a:1,b:2");
        assert_eq!(u.prefix, "/x/y");
    }

    #[test]
    fn bad_urls_name_the_form() {
        for url in [
            "zk://a:1",
            "etcd://",
            "etcd://a",
            "etcd://a:x",
            "etcd://a:0",
            "etcd://:1",
            "etcd://u@a:1",
            "etcd://a:1/",
            "etcd://a:1/x/",
            "etcd://a:1//x",
            "etcd://127.0.0.1 :22379/x",
            "etcd://a:1/x y",
            "etcd://a:1?x",
        ] {
            let e = parse(url).expect_err(url);
            assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{url}");
            assert!(e.to_string().contains("etcd://host:port"), "{e}");
        }
    }
}
