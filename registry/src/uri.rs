//! Strict parsing and normalisation of metadata-service URIs.
//!
//! Accepted forms (nothing else):
//!
//! - `memory://<name>`: an in-memory cluster; `<name>` follows the cluster name
//!   rules ([`validate_name`](crate::validate_name) without the reserved names).
//! - `zk://`, `zk+null://`, `zk+flat://`, `zk+hierarchical://`,
//!   `zk+longhierarchical://` followed by `host[:port][;host[:port]…][/ledgers/root]`
//!   (hosts separated by `;` as BookKeeper writes them, or `,`).
//! - `metadata-store:zk:host[:port][,host[:port]…][/ledgers/root]` (Pulsar's form).
//!
//! Hosts are DNS names or IPv4 addresses (letters, digits, `-`, `.`; IPv6 is
//! refused); the port defaults to 2181. The ledgers root defaults to `/ledgers`;
//! its segments use letters, digits, `.`, `_`, `-` (not `.` or `..`). No user
//! info, query, fragment or spaces.
//!
//! Normalisation (for collision checks): hosts lower-cased, default port made
//! explicit, hosts sorted and deduplicated, trailing `/` removed; the manager
//! type (`null`, `hierarchical`, …) does not change which cluster is meant.

use std::fmt;

use crate::error::{RegistryError, Result};

/// ZooKeeper's default client port.
pub const DEFAULT_ZK_PORT: u16 = 2181;
/// BookKeeper's default ledgers root.
pub const DEFAULT_LEDGERS_ROOT: &str = "/ledgers";

const ACCEPTED: &str = "accepted: memory://<name>, zk[+null|+flat|+hierarchical|+longhierarchical]://host[:port][;host[:port]...][/ledgers/root], metadata-store:zk:host[:port][,host[:port]...][/ledgers/root]";

/// A parsed, normalised metadata-service URI.
///
/// Strict parsing and normalisation of metadata-service URIs.
///
/// Accepted forms (nothing else):
///
/// - `memory://<name>`: an in-memory cluster; `<name>` follows the cluster name
///   rules ([`validate_name`](crate::validate_name) without the reserved names).
/// - `zk://`, `zk+null://`, `zk+flat://`, `zk+hierarchical://`,
///   `zk+longhierarchical://` followed by `host[:port][;host[:port]…][/ledgers/root]`
///   (hosts separated by `;` as BookKeeper writes them, or `,`).
/// - `metadata-store:zk:host[:port][,host[:port]…][/ledgers/root]` (Pulsar's form).
///
/// Hosts are DNS names or IPv4 addresses (letters, digits, `-`, `.`; IPv6 is
/// refused); the port defaults to 2181. The ledgers root defaults to `/ledgers`;
/// its segments use letters, digits, `.`, `_`, `-` (not `.` or `..`). No user
/// info, query, fragment or spaces.
///
/// Normalisation (for collision checks): hosts lower-cased, default port made
/// explicit, hosts sorted and deduplicated, trailing `/` removed; the manager
/// type (`null`, `hierarchical`, …) does not change which cluster is meant.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ClusterUri {
    /// `memory://<name>`.
    Memory {
        /// The in-memory cluster's name.
        name: String,
    },
    /// A BookKeeper cluster whose metadata lives in ZooKeeper.
    ZooKeeper {
        /// `host:port` entries, lower-cased, sorted, deduplicated.
        hosts: Vec<String>,
        /// The ledgers root, e.g. `/ledgers`.
        ledgers_root: String,
    },
}

impl ClusterUri {
    /// Parses `uri` strictly (see [`ClusterUri`] for the accepted forms).
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidUri`] naming the URI and the broken rule.
    pub fn parse(uri: &str) -> Result<ClusterUri> {
        let fail = |reason: String| RegistryError::InvalidUri {
            uri: uri.to_owned(),
            reason: format!("{reason}; {ACCEPTED}"),
        };
        if let Some(c) = uri.chars().find(|c| {
            matches!(c, '?' | '#' | '@' | '\\' | '[' | ']') || c.is_whitespace() || c.is_control()
        }) {
            return Err(fail(format!(
                "it contains {c:?} (no credentials, query, fragment, IPv6 or spaces)"
            )));
        }
        if let Some(name) = uri.strip_prefix("memory://") {
            crate::validate_name(name).map_err(|e| match e {
                RegistryError::InvalidName { reason, .. } => {
                    fail(format!("memory cluster name: {reason}"))
                }
                other => other,
            })?;
            return Ok(ClusterUri::Memory {
                name: name.to_owned(),
            });
        }
        let rest = if let Some(rest) = uri.strip_prefix("metadata-store:zk:") {
            rest
        } else if let Some((scheme, rest)) = uri.split_once("://") {
            match scheme.to_ascii_lowercase().as_str() {
                "zk" | "zk+null" | "zk+flat" | "zk+hierarchical" | "zk+longhierarchical" => rest,
                _ => return Err(fail(format!("unknown scheme `{scheme}`"))),
            }
        } else {
            return Err(fail("no known scheme".to_owned()));
        };
        let (hosts_part, path) = match rest.find('/') {
            Some(i) => (&rest[..i], &rest[i..]),
            None => (rest, ""),
        };
        if hosts_part.is_empty() {
            return Err(fail("no host".to_owned()));
        }
        let mut hosts = Vec::new();
        for entry in hosts_part.split([';', ',']) {
            hosts.push(normalise_host(entry).map_err(|r| fail(format!("host `{entry}`: {r}")))?);
        }
        hosts.sort();
        hosts.dedup();
        let trimmed = path.trim_end_matches('/');
        let ledgers_root = if trimmed.is_empty() {
            DEFAULT_LEDGERS_ROOT.to_owned()
        } else {
            for seg in trimmed[1..].split('/') {
                if seg.is_empty() || seg == "." || seg == ".." {
                    return Err(fail(format!(
                        "ledgers root `{path}` has an empty, `.` or `..` segment"
                    )));
                }
                if !seg
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
                {
                    return Err(fail(format!(
                        "ledgers root segment `{seg}` may only use letters, digits, `.`, `_`, `-`"
                    )));
                }
            }
            trimmed.to_owned()
        };
        Ok(ClusterUri::ZooKeeper {
            hosts,
            ledgers_root,
        })
    }

    /// The canonical text of the URI: `memory://name` or
    /// `zk://h1:p1,h2:p2/ledgers/root` (same cluster ⇔ same text).
    pub fn canonical(&self) -> String {
        self.to_string()
    }

    /// The keys of the registry's URI index (`<root>/uri-index/<key>`, see
    /// [`Registry::register`](crate::Registry::register)): two URIs share a key
    /// exactly when they name the same in-memory cluster (names compared without
    /// case) or share a ZooKeeper host and use the same ledgers root (which
    /// includes the same cluster after normalisation). Sorted, without duplicates.
    pub fn index_keys(&self) -> Vec<String> {
        match self {
            ClusterUri::Memory { name } => vec![format!("memory://{}", name.to_ascii_lowercase())],
            ClusterUri::ZooKeeper {
                hosts,
                ledgers_root,
            } => {
                let mut keys: Vec<String> = hosts
                    .iter()
                    .map(|h| format!("zk://{h}{ledgers_root}"))
                    .collect();
                keys.sort();
                keys.dedup();
                keys
            }
        }
    }

    /// For a ZooKeeper URI, the URL a [`ZkStore`](bkswitch_metadata_store::ZkStore)
    /// connects to (no chroot: the ledgers root is read as a path).
    pub fn zk_connect_url(&self) -> Option<String> {
        match self {
            ClusterUri::ZooKeeper { hosts, .. } => Some(format!("zk://{}", hosts.join(","))),
            ClusterUri::Memory { .. } => None,
        }
    }

    /// Why two URIs must not both be registered, or `None` when they can be:
    /// the same cluster, or co-located clusters (sharing a ZooKeeper host) whose
    /// ledgers roots are equal or nested.
    pub fn collision(&self, other: &ClusterUri) -> Option<String> {
        match (self, other) {
            (ClusterUri::Memory { name: a }, ClusterUri::Memory { name: b }) => a
                .eq_ignore_ascii_case(b)
                .then(|| "it names the same in-memory cluster".to_owned()),
            (
                ClusterUri::ZooKeeper {
                    hosts: ha,
                    ledgers_root: ra,
                },
                ClusterUri::ZooKeeper {
                    hosts: hb,
                    ledgers_root: rb,
                },
            ) => {
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

fn nested(outer: &str, inner: &str) -> bool {
    inner.starts_with(outer) && inner.as_bytes().get(outer.len()) == Some(&b'/')
}

impl fmt::Display for ClusterUri {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterUri::Memory { name } => write!(f, "memory://{name}"),
            ClusterUri::ZooKeeper {
                hosts,
                ledgers_root,
            } => write!(f, "zk://{}{}", hosts.join(","), ledgers_root),
        }
    }
}

fn normalise_host(entry: &str) -> std::result::Result<String, String> {
    let (host, port) = match entry.rsplit_once(':') {
        Some((h, p)) => {
            let port: u16 = p
                .parse()
                .ok()
                .filter(|p| *p != 0)
                .ok_or_else(|| format!("port `{p}` is not a number in 1..=65535"))?;
            (h, port)
        }
        None => (entry, DEFAULT_ZK_PORT),
    };
    if host.is_empty() || host.len() > 253 {
        return Err("empty or too long host name".to_owned());
    }
    if !host
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '.'))
        || host.starts_with(['-', '.'])
        || host.ends_with('-')
        || host.contains("..")
    {
        return Err(
            "a host is a DNS name or an IPv4 address (letters, digits, `-`, `.`)".to_owned(),
        );
    }
    Ok(format!(
        "{}:{port}",
        host.trim_end_matches('.').to_ascii_lowercase()
    ))
}
