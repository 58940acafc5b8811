//! Metadata-service URIs: the one parser of the forms Pulsar's
//! `bookkeeperMetadataServiceUri` and BookKeeper's `metadataServiceUri` write,
//! plus the in-memory clusters of this crate.
//!
//! Accepted forms (nothing else):
//!
//! - `memory://<name>`: an in-memory cluster ([`MemoryClusters`](crate::MemoryClusters));
//!   `<name>` matches `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`.
//! - `zk+<layout>://host[:port][;host[:port]…][/ledgers/root]`, where `<layout>`
//!   is `hierarchical` or `longhierarchical`; plain `zk://` and `zk+null://`
//!   mean "the layout the cluster's `LAYOUT` znode records". Hosts are
//!   separated by `;` (BookKeeper's form) or `,` (ZooKeeper's).
//! - `metadata-store:zk:host[:port][,host[:port]…][/ledgers/root]` (Pulsar's
//!   form; the layout comes from the cluster).
//!
//! Schemes are compared without regard to case. A host is a DNS name, an IPv4
//! address or `[IPv6]`; the port defaults to ZooKeeper's 2181. The ledgers
//! root defaults to BookKeeper's `/ledgers`; its segments use letters, digits,
//! `.`, `_`, `-` (not `.` or `..`). No user info, query, fragment or spaces.
//! The layouts no client here can serve (`zk+flat`, `zk+ms`,
//! `zk+legacyhierarchical`) are refused by name.
//!
//! [`ClusterUri`] is any accepted form; [`MetadataServiceUri`] is a BookKeeper
//! cluster whose metadata lives in ZooKeeper (what a real client connects to).
//! Two URIs name the same cluster when their [`ClusterUri::canonical`] texts
//! are equal: hosts lower-cased, default port made explicit, hosts sorted and
//! deduplicated, trailing `/` removed; the layout does not change which cluster
//! is meant.

use std::fmt;

use crate::error::{BkError, BkErrorKind};

/// ZooKeeper's default client port.
pub const DEFAULT_ZK_PORT: u16 = 2181;
/// BookKeeper's default ledgers root (`zkLedgersRootPath`).
pub const DEFAULT_LEDGERS_ROOT: &str = "/ledgers";
/// The schemes of ZooKeeper-backed BookKeeper clusters that
/// [`MetadataServiceUri::parse`] accepts, as
/// [`SchemeClientFactory::scheme_of`](crate::SchemeClientFactory::scheme_of)
/// names them (Pulsar's `metadata-store:zk:` form included).
pub const ZOOKEEPER_SCHEMES: [&str; 5] = [
    "zk",
    "zk+null",
    "zk+hierarchical",
    "zk+longhierarchical",
    "metadata-store:zk",
];
/// Every scheme [`ClusterUri::parse`] accepts: `memory` and the
/// [`ZOOKEEPER_SCHEMES`].
pub const SUPPORTED_SCHEMES: [&str; 6] = [
    "memory",
    "zk",
    "zk+null",
    "zk+hierarchical",
    "zk+longhierarchical",
    "metadata-store:zk",
];

const PULSAR_PREFIX: &str = "metadata-store:zk:";

const ACCEPTED: &str = "accepted: memory://<name>, \
     zk[+null|+hierarchical|+longhierarchical]://host[:port][;host[:port]...][/ledgers/root], \
     metadata-store:zk:host[:port][,host[:port]...][/ledgers/root]; \
     e.g. zk+hierarchical://127.0.0.1:2181/ledgers";

/// A metadata-service URI that is not accepted: the URI and the broken rule.
///
/// Converts into a [`BkError`] of kind
/// [`InvalidArgument`](BkErrorKind::InvalidArgument) (-14).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid metadata-service URI `{uri}`: {reason}")]
pub struct UriError {
    uri: String,
    reason: String,
}

impl UriError {
    fn new(uri: &str, reason: impl fmt::Display) -> UriError {
        UriError {
            uri: uri.to_owned(),
            reason: format!("{reason}; {ACCEPTED}"),
        }
    }

    /// The refused URI, as given.
    pub fn uri(&self) -> &str {
        &self.uri
    }

    /// What is wrong and what is accepted.
    pub fn reason(&self) -> &str {
        &self.reason
    }
}

impl From<UriError> for BkError {
    fn from(e: UriError) -> BkError {
        BkError::new(BkErrorKind::InvalidArgument, e.to_string())
    }
}

/// The ledger manager a ZooKeeper URI asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LayoutChoice {
    /// `zk+hierarchical://`: short paths below id 2^31 − 1, long paths above.
    Hierarchical,
    /// `zk+longhierarchical://`: long paths for every id.
    LongHierarchical,
    /// `zk://`, `zk+null://` or `metadata-store:zk:`: whatever the cluster's
    /// `LAYOUT` says (hierarchical when the cluster has none yet).
    FromCluster,
}

/// A BookKeeper cluster whose metadata lives in ZooKeeper, parsed from its
/// metadata-service URI.
///
/// ```
/// use bkswitch_bk_client::{LayoutChoice, MetadataServiceUri};
///
/// let uri = MetadataServiceUri::parse("zk+hierarchical://zk1:2181;zk2/pulsar/ledgers")?;
/// assert_eq!(uri.layout(), LayoutChoice::Hierarchical);
/// assert_eq!(uri.zk_hosts(), ["zk1:2181", "zk2:2181"]);
/// assert_eq!(uri.ledgers_root(), "/pulsar/ledgers");
/// assert_eq!(uri.zk_url(), "zk://zk1:2181,zk2:2181");
/// # Ok::<(), bkswitch_bk_client::UriError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct MetadataServiceUri {
    raw: String,
    layout: LayoutChoice,
    hosts: Vec<String>,
    root: String,
}

impl MetadataServiceUri {
    /// Parses the URI of a ZooKeeper-backed BookKeeper cluster (see the
    /// [module](self) for the accepted forms).
    ///
    /// # Errors
    /// [`UriError`] naming the URI, what is wrong and what is accepted; a
    /// `memory://` URI is refused here (it is no BookKeeper cluster: use
    /// [`ClusterUri::parse`]).
    pub fn parse(uri: &str) -> Result<MetadataServiceUri, UriError> {
        match ClusterUri::parse(uri)? {
            ClusterUri::ZooKeeper(zk) => Ok(zk),
            ClusterUri::Memory { .. } => Err(UriError::new(
                uri,
                "it names an in-memory cluster, not a BookKeeper cluster in ZooKeeper",
            )),
        }
    }

    /// The URI as given.
    pub fn as_str(&self) -> &str {
        &self.raw
    }

    /// The layout the URI asks for.
    pub fn layout(&self) -> LayoutChoice {
        self.layout
    }

    /// The ZooKeeper servers, `host:port` each, in the order given (the
    /// default port made explicit).
    pub fn zk_hosts(&self) -> &[String] {
        &self.hosts
    }

    /// The cluster's ledgers root, e.g. `/ledgers` (no trailing `/`).
    pub fn ledgers_root(&self) -> &str {
        &self.root
    }

    /// The ZooKeeper URL of the servers, without chroot (the ledgers root is
    /// read as a path), as `bkswitch_metadata_store::ZkStore::connect` takes it.
    pub fn zk_url(&self) -> String {
        format!("zk://{}", self.hosts.join(","))
    }

    /// The hosts lower-cased, sorted and deduplicated (what identifies the
    /// ensemble).
    pub fn normalised_hosts(&self) -> Vec<String> {
        let mut hosts: Vec<String> = self.hosts.iter().map(|h| h.to_ascii_lowercase()).collect();
        hosts.sort();
        hosts.dedup();
        hosts
    }
}

impl fmt::Display for MetadataServiceUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.raw)
    }
}

/// Any accepted metadata-service URI: an in-memory cluster or a ZooKeeper-backed
/// BookKeeper cluster.
///
/// ```
/// use bkswitch_bk_client::ClusterUri;
///
/// let a = ClusterUri::parse("zk+hierarchical://ZK2;zk1:2181/ledgers/")?;
/// let b = ClusterUri::parse("metadata-store:zk:zk1,zk2:2181")?;
/// assert_eq!(a.canonical(), "zk://zk1:2181,zk2:2181/ledgers");
/// assert_eq!(a.canonical(), b.canonical());
/// assert_eq!(ClusterUri::parse("memory://old")?.memory_name(), Some("old"));
/// # Ok::<(), bkswitch_bk_client::UriError>(())
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClusterUri {
    /// `memory://<name>`.
    Memory {
        /// The in-memory cluster's name.
        name: String,
    },
    /// A BookKeeper cluster whose metadata lives in ZooKeeper.
    ZooKeeper(MetadataServiceUri),
}

impl ClusterUri {
    /// Parses `uri` strictly (see the [module](self) for the accepted forms).
    ///
    /// # Errors
    /// [`UriError`] naming the URI, the broken rule and what is accepted.
    pub fn parse(uri: &str) -> Result<ClusterUri, UriError> {
        let fail = |reason: String| UriError::new(uri, reason);
        if let Some(c) = uri
            .chars()
            .find(|c| matches!(c, '?' | '#' | '@' | '\\') || c.is_whitespace() || c.is_control())
        {
            return Err(fail(format!(
                "it contains {c:?} (no credentials, query, fragment or spaces)"
            )));
        }
        let (layout, rest) = if let Some((scheme, rest)) = uri.split_once("://") {
            let layout = match scheme.to_ascii_lowercase().as_str() {
                "memory" => {
                    check_memory_name(rest)
                        .map_err(|r| fail(format!("memory cluster name `{rest}`: {r}")))?;
                    return Ok(ClusterUri::Memory {
                        name: rest.to_owned(),
                    });
                }
                "zk" | "zk+null" => LayoutChoice::FromCluster,
                "zk+hierarchical" => LayoutChoice::Hierarchical,
                "zk+longhierarchical" => LayoutChoice::LongHierarchical,
                s @ ("zk+flat" | "zk+ms" | "zk+legacyhierarchical") => {
                    return Err(fail(format!(
                        "the `{s}` ledger layout is not supported (hierarchical and long \
                         hierarchical are)"
                    )))
                }
                "" => return Err(fail("it has an empty scheme".to_owned())),
                other => return Err(fail(format!("unsupported scheme `{other}`"))),
            };
            (layout, rest)
        } else if let Some(rest) = uri
            .get(..PULSAR_PREFIX.len())
            .filter(|p| p.eq_ignore_ascii_case(PULSAR_PREFIX))
            .map(|_| &uri[PULSAR_PREFIX.len()..])
        {
            (LayoutChoice::FromCluster, rest)
        } else {
            return Err(fail("it has no `scheme://`".to_owned()));
        };
        let (hosts_part, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        let mut hosts = Vec::new();
        for entry in hosts_part.split([';', ',']) {
            hosts.push(check_host(entry).map_err(|r| fail(format!("host `{entry}`: {r}")))?);
        }
        let trimmed = path.trim_end_matches('/');
        let root = if trimmed.is_empty() {
            DEFAULT_LEDGERS_ROOT.to_owned()
        } else {
            for seg in trimmed[1..].split('/') {
                if seg.is_empty() || seg == "." || seg == ".." {
                    return Err(fail(format!(
                        "the ledgers root `{path}` has an empty, `.` or `..` segment"
                    )));
                }
                if !seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                {
                    return Err(fail(format!(
                        "the ledgers root segment `{seg}` may only use letters, digits, `.`, `_`, `-`"
                    )));
                }
            }
            trimmed.to_owned()
        };
        Ok(ClusterUri::ZooKeeper(MetadataServiceUri {
            raw: uri.to_owned(),
            layout,
            hosts,
            root,
        }))
    }

    /// The in-memory cluster's name, for a `memory://` URI.
    pub fn memory_name(&self) -> Option<&str> {
        match self {
            ClusterUri::Memory { name } => Some(name),
            ClusterUri::ZooKeeper(_) => None,
        }
    }

    /// The ZooKeeper-backed cluster, for a ZooKeeper URI.
    pub fn zookeeper(&self) -> Option<&MetadataServiceUri> {
        match self {
            ClusterUri::ZooKeeper(zk) => Some(zk),
            ClusterUri::Memory { .. } => None,
        }
    }

    /// The canonical text of the URI: `memory://name` or
    /// `zk://h1:p1,h2:p2/ledgers/root` (same cluster ⇔ same text).
    pub fn canonical(&self) -> String {
        self.to_string()
    }

    /// One key per ZooKeeper host and ledgers root (`zk://host:port/root`), or
    /// the lower-cased `memory://name`: two URIs share a key exactly when they
    /// name the same in-memory cluster (names compared without case) or share
    /// a ZooKeeper host and use the same ledgers root. Sorted, without
    /// duplicates.
    pub fn index_keys(&self) -> Vec<String> {
        match self {
            ClusterUri::Memory { name } => vec![format!("memory://{}", name.to_ascii_lowercase())],
            ClusterUri::ZooKeeper(zk) => zk
                .normalised_hosts()
                .iter()
                .map(|h| format!("zk://{h}{}", zk.root))
                .collect(),
        }
    }

    /// For a ZooKeeper URI, the URL a `ZkStore` connects to (no chroot: the
    /// ledgers root is read as a path).
    pub fn zk_connect_url(&self) -> Option<String> {
        self.zookeeper()
            .map(|zk| format!("zk://{}", zk.normalised_hosts().join(",")))
    }

    /// Why two URIs must not both name registered clusters, or `None` when they
    /// can: the same cluster, or co-located clusters (sharing a ZooKeeper host)
    /// whose ledgers roots are equal or nested.
    pub fn collision(&self, other: &ClusterUri) -> Option<String> {
        match (self, other) {
            (ClusterUri::Memory { name: a }, ClusterUri::Memory { name: b }) => a
                .eq_ignore_ascii_case(b)
                .then(|| "it names the same in-memory cluster".to_owned()),
            (ClusterUri::ZooKeeper(a), ClusterUri::ZooKeeper(b)) => {
                let (ha, hb) = (a.normalised_hosts(), b.normalised_hosts());
                let (ra, rb) = (&a.root, &b.root);
                let shared = ha.iter().find(|h| hb.contains(h))?;
                if ra == rb {
                    Some(if ha == hb {
                        "it names the same BookKeeper cluster (after normalisation)".to_owned()
                    } else {
                        format!("both use ledgers root `{ra}` on ZooKeeper host `{shared}`")
                    })
                } else if nested(ra, rb) || nested(rb, ra) {
                    Some(format!(
                        "ledgers roots `{ra}` and `{rb}` are nested on ZooKeeper host `{shared}`"
                    ))
                } else {
                    None
                }
            }
            _ => None,
        }
    }
}

impl fmt::Display for ClusterUri {
    /// The canonical text (see [`ClusterUri::canonical`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterUri::Memory { name } => write!(f, "memory://{name}"),
            ClusterUri::ZooKeeper(zk) => {
                write!(f, "zk://{}{}", zk.normalised_hosts().join(","), zk.root)
            }
        }
    }
}

fn nested(outer: &str, inner: &str) -> bool {
    inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/')
}

fn check_memory_name(name: &str) -> Result<(), &'static str> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("it is empty"),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return Err("it must start with a letter or digit")
        }
        Some(_) => {}
    }
    if name.len() > 64 {
        return Err("it is longer than 64 characters");
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        return Err("it may only use letters, digits, `.`, `_`, `-`");
    }
    Ok(())
}

/// One `host[:port]` or `[v6][:port]` entry, with the default port made explicit.
fn check_host(entry: &str) -> Result<String, &'static str> {
    if entry.is_empty() {
        return Err("empty entry (no host, or a stray separator)");
    }
    let (host, port) = if let Some(v6) = entry.strip_prefix('[') {
        let (addr, port) = match v6.split_once(']') {
            Some((addr, "")) => (addr, None),
            Some((addr, p)) => (
                addr,
                Some(
                    p.strip_prefix(':')
                        .ok_or("an IPv6 address must be written [addr] or [addr]:port")?,
                ),
            ),
            None => return Err("an IPv6 address must be written [addr] or [addr]:port"),
        };
        addr.parse::<std::net::Ipv6Addr>()
            .map_err(|_| "not an IPv6 address")?;
        (&entry[..addr.len() + 2], port)
    } else {
        let (host, port) = match entry.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (entry, None),
        };
        if host.is_empty() || host.len() > 253 {
            return Err("the host name is empty or too long");
        }
        if !host
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_'))
            || host.starts_with(['-', '.'])
            || host.contains("..")
        {
            return Err(
                "a host is a DNS name, an IPv4 address or [IPv6] (letters, digits, `-`, `.`, `_`)",
            );
        }
        (host.trim_end_matches('.'), port)
    };
    let port = match port {
        None => DEFAULT_ZK_PORT,
        Some(p) => match p.parse::<u16>() {
            Ok(0) | Err(_) => return Err("the port must be a number from 1 to 65535"),
            Ok(p) => p,
        },
    };
    Ok(format!("{host}:{port}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn zookeeper_forms_and_defaults() {
        let u = MetadataServiceUri::parse("zk://127.0.0.1:2181/ledgers").unwrap();
        assert_eq!(u.layout(), LayoutChoice::FromCluster);
        assert_eq!(u.ledgers_root(), "/ledgers");
        let u = MetadataServiceUri::parse("ZK+Null://a:1,b:2/x/ledgers/").unwrap();
        assert_eq!(u.layout(), LayoutChoice::FromCluster);
        assert_eq!(u.zk_hosts(), ["a:1", "b:2"]);
        assert_eq!(u.ledgers_root(), "/x/ledgers");
        let u = MetadataServiceUri::parse("zk+longhierarchical://[::1]:2181/l").unwrap();
        assert_eq!(u.layout(), LayoutChoice::LongHierarchical);
        assert_eq!(u.zk_url(), "zk://[::1]:2181");
        assert_eq!(u.to_string(), "zk+longhierarchical://[::1]:2181/l");
        // Defaults: ZooKeeper's port, BookKeeper's ledgers root.
        let u = MetadataServiceUri::parse("zk+hierarchical://h;[::1]").unwrap();
        assert_eq!(u.zk_hosts(), ["h:2181", "[::1]:2181"]);
        assert_eq!(u.ledgers_root(), DEFAULT_LEDGERS_ROOT);
        let u = MetadataServiceUri::parse("metadata-store:zk:zk1,zk2:2182/ledgers/sub").unwrap();
        assert_eq!(u.layout(), LayoutChoice::FromCluster);
        assert_eq!(u.zk_hosts(), ["zk1:2181", "zk2:2182"]);
        assert_eq!(u.ledgers_root(), "/ledgers/sub");
    }

    #[test]
    fn scheme_lists_match_the_parser_and_the_scheme_factory() {
        assert_eq!(SUPPORTED_SCHEMES[0], "memory");
        assert_eq!(SUPPORTED_SCHEMES[1..], ZOOKEEPER_SCHEMES);
        for scheme in ZOOKEEPER_SCHEMES {
            let uri = if scheme.contains(':') {
                format!("{scheme}:h:1/l")
            } else {
                format!("{scheme}://h:1/l")
            };
            assert!(MetadataServiceUri::parse(&uri).is_ok(), "{uri}");
            assert_eq!(
                crate::SchemeClientFactory::scheme_of(&uri).as_deref(),
                Some(scheme)
            );
        }
    }

    #[test]
    fn same_cluster_same_canonical_text_and_keys() {
        let forms = [
            "zk+hierarchical://ZK2:2181;zk1/ledgers/",
            "zk://zk1:2181,zk2,zk1/ledgers",
            "metadata-store:zk:zk2:2181,zk1:2181",
        ];
        for f in forms {
            let u = ClusterUri::parse(f).unwrap();
            assert_eq!(u.canonical(), "zk://zk1:2181,zk2:2181/ledgers", "{f}");
            assert_eq!(
                u.index_keys(),
                ["zk://zk1:2181/ledgers", "zk://zk2:2181/ledgers"],
                "{f}"
            );
            assert_eq!(u.zk_connect_url().unwrap(), "zk://zk1:2181,zk2:2181");
        }
        let m = ClusterUri::parse("memory://Old").unwrap();
        assert_eq!(m.memory_name(), Some("Old"));
        assert_eq!(m.index_keys(), ["memory://old"]);
        assert!(m.zk_connect_url().is_none());
        assert!(m
            .collision(&ClusterUri::parse("memory://OLD").unwrap())
            .is_some());
    }

    #[test]
    fn collisions_name_the_reason() {
        let p = |s: &str| ClusterUri::parse(s).unwrap();
        let a = p("zk://h1:1,h2:2/ledgers");
        assert!(a
            .collision(&p("zk://h2:2;h1:1/ledgers"))
            .unwrap()
            .contains("same BookKeeper cluster"));
        assert!(a
            .collision(&p("zk://h2:2/ledgers"))
            .unwrap()
            .contains("both use ledgers root"));
        assert!(a
            .collision(&p("zk://h1:1/ledgers/sub"))
            .unwrap()
            .contains("nested"));
        assert!(a.collision(&p("zk://h1:1/ledgers-b")).is_none());
        assert!(a.collision(&p("zk://h3:1/ledgers")).is_none());
        assert!(a.collision(&p("memory://ledgers")).is_none());
    }

    #[test]
    fn refused_forms_name_the_problem() {
        for (uri, needle) in [
            ("etcd://h:1/l", "unsupported scheme `etcd`"),
            (
                "zk+flat://h:1/l",
                "`zk+flat` ledger layout is not supported",
            ),
            ("zk+ms://h:1/l", "not supported"),
            ("127.0.0.1:2181/ledgers", "no `scheme://`"),
            ("://h:1/l", "empty scheme"),
            ("zk+hierarchical://h:0/l", "port must be a number"),
            ("zk+hierarchical://h:99999/l", "port must be a number"),
            ("zk+hierarchical://h:x/l", "port must be a number"),
            ("zk+hierarchical://h:1;;h:2/l", "stray separator"),
            ("zk+hierarchical:///l", "empty entry"),
            ("zk+hierarchical://[::1/l", "IPv6"),
            ("zk+hierarchical://[zz]:1/l", "not an IPv6 address"),
            ("zk+hierarchical://-h:1/l", "DNS name"),
            ("zk+hierarchical://u@h:1/l", "credentials"),
            ("zk+hierarchical://h:1/l?x=1", "query"),
            ("zk+hierarchical://h:1/a//b", "empty"),
            ("zk+hierarchical://h:1/a/../b", "`..`"),
            ("zk+hierarchical://h:1/a/b*", "may only use"),
            ("memory://", "it is empty"),
            ("memory://-x", "must start with a letter"),
            ("memory://a/b", "may only use"),
            ("metadata-store:zk:", "empty entry"),
        ] {
            let e = ClusterUri::parse(uri).unwrap_err();
            assert_eq!(e.uri(), uri);
            let s = e.to_string();
            assert!(s.contains(needle), "{uri}: {s}");
            assert!(s.contains(uri), "{uri}: {s}");
            assert!(s.contains("accepted: memory://<name>"), "{uri}: {s}");
            let bk: BkError = e.into();
            assert_eq!(bk.code(), -14, "{uri}");
        }
        let e = MetadataServiceUri::parse("memory://old").unwrap_err();
        assert!(e.to_string().contains("in-memory cluster"), "{e}");
    }
}
