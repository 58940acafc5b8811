//! [`StoreLocation`]: which servers a store URL reaches and which root it
//! uses there, so that two URLs are compared by what they name, not by how
//! they are spelled.

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};

use bkswitch_metadata_store::{check_store_url, MetadataError, Operation, Result};

/// The kind of store a URL names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backend {
    /// `zk://…`.
    ZooKeeper,
    /// `etcd://…`.
    Etcd,
    /// `memory://<name>` (one process's named in-memory stores).
    Memory,
}

/// Where a store URL points: its backend, its servers and the root inside
/// them that the store's `/` is (a ZooKeeper chroot, an etcd key prefix).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreLocation {
    /// The backend.
    pub backend: Backend,
    /// `(host, port)` of every server as written (lower-cased hosts); for
    /// [`Backend::Memory`] the store's name with port 0.
    pub servers: Vec<(String, u16)>,
    /// The root, `/` or `/a/b` (no trailing `/`).
    pub root: String,
}

/// How one root lies against another (on the same servers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nesting {
    /// The same root.
    Same,
    /// The first root is inside the second.
    Inside,
    /// The first root holds the second.
    Holds,
}

fn bad(url: &str, reason: String) -> MetadataError {
    MetadataError::InvalidArgument {
        op: Operation::Connect,
        path: url.to_owned(),
        reason,
    }
}

impl StoreLocation {
    /// Parses a store URL (`zk://…`, `etcd://…`, `memory://<name>`), checked
    /// as [`check_store_url`] checks it.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the URL and what is wrong.
    pub fn parse(url: &str) -> Result<StoreLocation> {
        let (backend, rest) = if let Some(name) = url.strip_prefix("memory://") {
            if name.is_empty() || name.contains(['/', ',']) || name.chars().any(char::is_whitespace)
            {
                return Err(bad(url, "expected `memory://<name>`".to_owned()));
            }
            return Ok(StoreLocation {
                backend: Backend::Memory,
                servers: vec![(name.to_ascii_lowercase(), 0)],
                root: "/".to_owned(),
            });
        } else if let Some(rest) = url.strip_prefix("zk://") {
            (Backend::ZooKeeper, rest)
        } else if let Some(rest) = url.strip_prefix("etcd://") {
            (Backend::Etcd, rest)
        } else {
            check_store_url(url)?;
            return Err(bad(
                url,
                "a migration needs a `zk://…` or `etcd://…` store".to_owned(),
            ));
        };
        check_store_url(url)?;
        let (hosts, root) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let mut servers = Vec::new();
        for entry in hosts.split(',') {
            let (host, port) = entry
                .rsplit_once(':')
                .ok_or_else(|| bad(url, format!("host `{entry}` has no port")))?;
            let host = host.trim_start_matches('[').trim_end_matches(']');
            let port = port
                .parse::<u16>()
                .map_err(|_| bad(url, format!("host `{entry}` has a bad port")))?;
            servers.push((host.to_ascii_lowercase(), port));
        }
        let root = match root.trim_end_matches('/') {
            "" => "/".to_owned(),
            r => r.to_owned(),
        };
        Ok(StoreLocation {
            backend,
            servers,
            root,
        })
    }

    /// How this location's root lies against `other`'s, whatever their
    /// servers; `None` when neither holds the other.
    pub fn nesting(&self, other: &StoreLocation) -> Option<Nesting> {
        nesting(&self.root, &other.root)
    }

    /// The path, in this store, of `other`'s root when this root holds it
    /// (or is it): `/` for the same root.
    pub fn path_of(&self, other: &StoreLocation) -> Option<String> {
        match self.nesting(other)? {
            Nesting::Same => Some("/".to_owned()),
            Nesting::Holds if self.root == "/" => Some(other.root.clone()),
            Nesting::Holds => Some(other.root[self.root.len()..].to_owned()),
            Nesting::Inside => None,
        }
    }

    /// Whether this location and `other` reach at least one server in
    /// common: same backend, and a host of each that resolves to the same
    /// address and port. Every loopback address (and `localhost`, and the
    /// unspecified address) counts as this machine, whatever its spelling.
    ///
    /// A host name that does not resolve is compared by its name.
    ///
    /// # Errors
    ///
    /// None today; kept fallible for resolvers that can fail for good.
    pub async fn shares_servers(&self, other: &StoreLocation) -> Result<bool> {
        if self.backend != other.backend {
            return Ok(false);
        }
        if self.backend == Backend::Memory {
            return Ok(self.servers == other.servers);
        }
        let mine = resolve_all(&self.servers).await?;
        let theirs = resolve_all(&other.servers).await?;
        Ok(!mine.is_disjoint(&theirs))
    }
}

/// How root `a` lies against root `b`.
pub(crate) fn nesting(a: &str, b: &str) -> Option<Nesting> {
    let inside = |inner: &str, outer: &str| {
        outer == "/"
            || inner
                .strip_prefix(outer)
                .is_some_and(|rest| rest.starts_with('/'))
    };
    if a == b {
        Some(Nesting::Same)
    } else if inside(a, b) {
        Some(Nesting::Inside)
    } else if inside(b, a) {
        Some(Nesting::Holds)
    } else {
        None
    }
}

/// Who answers at a server address.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Server {
    /// This machine (any loopback or unspecified address).
    Local(u16),
    /// Another address (IPv4-mapped IPv6 as IPv4).
    Addr(IpAddr, u16),
    /// A host name that does not resolve here, by its name.
    Name(String, u16),
}

fn identity(addr: SocketAddr) -> Server {
    let ip = match addr.ip() {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(IpAddr::V6(v6), IpAddr::V4),
        v4 => v4,
    };
    if ip.is_loopback() || ip.is_unspecified() {
        Server::Local(addr.port())
    } else {
        Server::Addr(ip, addr.port())
    }
}

async fn resolve_all(servers: &[(String, u16)]) -> Result<BTreeSet<Server>> {
    let mut out = BTreeSet::new();
    for (host, port) in servers {
        match tokio::net::lookup_host((host.as_str(), *port)).await {
            Ok(addrs) => out.extend(addrs.map(identity)),
            Err(_) => {
                out.insert(Server::Name(host.clone(), *port));
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_roots_and_servers() {
        let l = StoreLocation::parse("zk://A:1,b:2/x/y").unwrap();
        assert_eq!(l.backend, Backend::ZooKeeper);
        assert_eq!(l.servers, [("a".to_owned(), 1), ("b".to_owned(), 2)]);
        assert_eq!(l.root, "/x/y");
        assert_eq!(StoreLocation::parse("zk://a:1/").unwrap().root, "/");
        assert_eq!(
            StoreLocation::parse("etcd://[::1]:3").unwrap().servers[0].0,
            "::1"
        );
        assert_eq!(
            StoreLocation::parse("memory://Dst").unwrap().servers,
            [("dst".to_owned(), 0)]
        );
        for url in [
            "memory",
            "http://a:1",
            "etcd://a :1/x",
            "zk://a",
            "memory://",
        ] {
            assert!(StoreLocation::parse(url).is_err(), "{url}");
        }
    }

    #[test]
    fn nesting_is_by_segment() {
        assert_eq!(nesting("/a", "/a"), Some(Nesting::Same));
        assert_eq!(nesting("/a/b", "/a"), Some(Nesting::Inside));
        assert_eq!(nesting("/a", "/a/b"), Some(Nesting::Holds));
        assert_eq!(nesting("/", "/a"), Some(Nesting::Holds));
        assert_eq!(nesting("/ab", "/a"), None);
        let root = StoreLocation::parse("zk://h:1").unwrap();
        let bkm = StoreLocation::parse("zk://h:1/bkm/x").unwrap();
        assert_eq!(root.path_of(&bkm).as_deref(), Some("/bkm/x"));
        let bkm1 = StoreLocation::parse("zk://h:1/bkm").unwrap();
        assert_eq!(bkm1.path_of(&bkm).as_deref(), Some("/x"));
        assert_eq!(bkm.path_of(&bkm1), None);
    }

    #[tokio::test]
    async fn spellings_of_one_server_are_one_server() {
        let a = StoreLocation::parse("zk://127.0.0.1:2181").unwrap();
        for same in [
            "zk://localhost:2181/x",
            "zk://127.0.0.2:9,LOCALHOST:2181",
            "zk://127.0.1.1:2181",
            "zk://[::1]:2181",
        ] {
            let b = StoreLocation::parse(same).unwrap();
            assert!(a.shares_servers(&b).await.unwrap(), "{same}");
        }
        let unknown = StoreLocation::parse("zk://no-such-host.invalid:2181").unwrap();
        assert!(unknown.shares_servers(&unknown).await.unwrap(), "by name");
        assert!(!a.shares_servers(&unknown).await.unwrap());
        for other in ["zk://127.0.0.1:2182", "etcd://127.0.0.1:2181"] {
            let b = StoreLocation::parse(other).unwrap();
            assert!(!a.shares_servers(&b).await.unwrap(), "{other}");
        }
    }
}
