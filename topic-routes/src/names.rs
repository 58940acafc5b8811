//! Names: clusters, URLs, topics and route selectors.

use std::fmt;
use std::str::FromStr;

use crate::error::{Result, RoutesError};

/// What separates a partition's number from its topic's name.
pub(crate) const PARTITION: &str = "-partition-";

/// Checks a cluster (or proxy) name: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`.
fn name_rule(name: &str) -> std::result::Result<(), String> {
    let mut chars = name.chars();
    match chars.next() {
        None => return Err("it is empty".to_owned()),
        Some(c) if !c.is_ascii_alphanumeric() => {
            return Err("it must start with a letter or digit".to_owned())
        }
        Some(_) => {}
    }
    if name.len() > 64 {
        return Err("it is longer than 64 characters".to_owned());
    }
    if !chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-')) {
        return Err("it may only use letters, digits, `.`, `_`, `-`".to_owned());
    }
    Ok(())
}

const NAME_FORM: &str = "a name matches [A-Za-z0-9][A-Za-z0-9._-]{0,63}";

/// Checks a Pulsar cluster name: `[A-Za-z0-9][A-Za-z0-9._-]{0,63}`.
///
/// # Errors
/// [`RoutesError::InvalidClusterName`] with the broken rule.
pub fn validate_cluster_name(name: &str) -> Result<()> {
    name_rule(name).map_err(|reason| RoutesError::InvalidClusterName {
        name: name.to_owned(),
        reason: format!("{reason}; {NAME_FORM}"),
    })
}

/// Checks a proxy id (the name of its acknowledgement node), with the rules
/// of cluster names.
///
/// # Errors
/// [`RoutesError::InvalidProxyId`] with the broken rule.
pub fn validate_proxy_id(id: &str) -> Result<()> {
    name_rule(id).map_err(|reason| RoutesError::InvalidProxyId {
        id: id.to_owned(),
        reason: format!("{reason}; {NAME_FORM}"),
    })
}

/// Checks a service URL: one of `schemes`, then one or more comma-separated
/// `host:port` (Pulsar's multi-host form), an optional `/` and nothing else
/// for the binary protocol; a path is allowed for HTTP.
pub(crate) fn check_url(
    url: &str,
    schemes: &[&str],
    path_allowed: bool,
) -> std::result::Result<(), String> {
    let accepted = || format!("expected {}//host:port", schemes.join("//host:port or "));
    let Some((scheme, rest)) = url.split_once("://") else {
        return Err(format!("no scheme; {}", accepted()));
    };
    if !schemes.iter().any(|s| s.trim_end_matches(':') == scheme) {
        return Err(format!("scheme `{scheme}` not accepted; {}", accepted()));
    }
    let (hosts, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, ""),
    };
    if !(path_allowed || path.is_empty() || path == "/") {
        return Err(format!(
            "a path ({path}) is not allowed here; {}",
            accepted()
        ));
    }
    if hosts.is_empty() {
        return Err(format!("no host; {}", accepted()));
    }
    for host in hosts.split(',') {
        let Some((name, port)) = host.rsplit_once(':') else {
            return Err(format!("`{host}` has no port; {}", accepted()));
        };
        let name_ok = !name.is_empty()
            && name.chars().all(|c| {
                c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_' | '[' | ']' | ':')
            });
        if !name_ok {
            return Err(format!("`{name}` is not a host name or address"));
        }
        if port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(format!("`{port}` is not a port (1-65535)"));
        }
    }
    if url.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err("it contains white space or control characters".to_owned());
    }
    Ok(())
}

/// A topic's domain.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Domain {
    /// `persistent://`
    Persistent,
    /// `non-persistent://`
    NonPersistent,
}

impl Domain {
    fn as_str(self) -> &'static str {
        match self {
            Domain::Persistent => "persistent",
            Domain::NonPersistent => "non-persistent",
        }
    }
}

/// Pulsar's rule for tenant and namespace names (`NamedEntity`):
/// `[-=:.\w]+`.
fn check_entity(kind: &str, s: &str) -> std::result::Result<(), String> {
    if s.is_empty() {
        return Err(format!("the {kind} is empty"));
    }
    if !s
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '=' | ':' | '.' | '_'))
    {
        return Err(format!(
            "the {kind} `{s}` may only use letters, digits and `-=:._`"
        ));
    }
    Ok(())
}

fn check_local(local: &str) -> std::result::Result<(), String> {
    if local.is_empty() {
        return Err("the topic's local name is empty".to_owned());
    }
    if local.contains('/') || local.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return Err(format!(
            "the local name `{local}` contains `/`, white space or control characters"
        ));
    }
    Ok(())
}

/// A fully qualified topic name, `domain://tenant/namespace/local`, with its
/// partition split off: `…/orders-partition-3` is the partition 3 of
/// `…/orders`, and routes to wherever `…/orders` routes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TopicName {
    /// The domain.
    pub domain: Domain,
    /// The tenant.
    pub tenant: String,
    /// The namespace (without the tenant).
    pub namespace: String,
    /// The local name, without a `-partition-N` suffix.
    pub local: String,
    /// The partition, when the name had a `-partition-N` suffix.
    pub partition: Option<u32>,
}

impl TopicName {
    /// Parses a fully qualified topic name (the form clients send in lookups).
    ///
    /// # Errors
    /// [`RoutesError::InvalidTopic`] with the broken rule.
    pub fn parse(topic: &str) -> Result<TopicName> {
        parse_topic(topic).map_err(|reason| RoutesError::InvalidTopic {
            topic: topic.to_owned(),
            reason,
        })
    }

    /// The name of the whole topic (`domain://tenant/namespace/local`, no
    /// partition suffix).
    pub fn base(&self) -> String {
        format!(
            "{}://{}/{}/{}",
            self.domain.as_str(),
            self.tenant,
            self.namespace,
            self.local
        )
    }

    /// `tenant/namespace`.
    pub fn namespace_name(&self) -> String {
        format!("{}/{}", self.tenant, self.namespace)
    }
}

/// `0` or a decimal without leading zeros (how Pulsar names partitions).
fn is_partition_number(n: &str) -> bool {
    !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) && (n == "0" || !n.starts_with('0'))
}

fn parse_topic(topic: &str) -> std::result::Result<TopicName, String> {
    let form =
        "expected persistent://tenant/namespace/topic or non-persistent://tenant/namespace/topic";
    let (domain, rest) = match topic.split_once("://") {
        Some(("persistent", rest)) => (Domain::Persistent, rest),
        Some(("non-persistent", rest)) => (Domain::NonPersistent, rest),
        Some((d, _)) => return Err(format!("unknown domain `{d}`; {form}")),
        None => return Err(format!("no domain; {form}")),
    };
    let mut parts = rest.splitn(3, '/');
    let (Some(tenant), Some(namespace), Some(local)) = (parts.next(), parts.next(), parts.next())
    else {
        return Err(format!("not three parts; {form}"));
    };
    check_entity("tenant", tenant)?;
    check_entity("namespace", namespace)?;
    check_local(local)?;
    let (local, partition) = match local.rsplit_once(PARTITION) {
        Some((base, n)) if !base.is_empty() && is_partition_number(n) => match n.parse::<u32>() {
            Ok(p) => (base, Some(p)),
            Err(_) => return Err(format!("partition `{n}` is out of range")),
        },
        _ => (local, None),
    };
    Ok(TopicName {
        domain,
        tenant: tenant.to_owned(),
        namespace: namespace.to_owned(),
        local: local.to_owned(),
        partition,
    })
}

/// What a route applies to. Most specific wins: a topic route, then the
/// longest matching prefix, then the namespace, then the tenant, then the
/// default.
///
/// Written (in the store, in errors, on the command line) as
/// `topic:persistent://t/ns/orders`, `prefix:persistent://t/ns/orders-`,
/// `namespace:t/ns`, `tenant:t` or `default`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RouteKey {
    /// One topic and all its partitions (a whole-topic name; a
    /// `-partition-N` name is refused: partitions move together).
    Topic(String),
    /// Every topic whose whole-topic name starts with this
    /// `domain://tenant/namespace/` and a non-empty start of local name.
    Prefix(String),
    /// Every topic of a namespace, `tenant/namespace`, both domains.
    Namespace(String),
    /// Every topic of a tenant.
    Tenant(String),
    /// Every topic.
    Default,
}

impl RouteKey {
    /// Checks the selector; the canonical form is what [`Display`](fmt::Display)
    /// writes.
    ///
    /// # Errors
    /// [`RoutesError::InvalidRoute`] with the broken rule.
    pub fn validate(&self) -> Result<()> {
        let fail = |reason: String| RoutesError::InvalidRoute {
            route: self.to_string(),
            reason,
        };
        match self {
            RouteKey::Topic(t) => {
                let name = parse_topic(t).map_err(fail)?;
                if name.partition.is_some() {
                    return Err(fail(format!(
                        "it names partition {} of `{}`; route the whole topic (its partitions move together)",
                        name.partition.unwrap_or_default(),
                        name.base()
                    )));
                }
                Ok(())
            }
            RouteKey::Prefix(p) => {
                let Some(slash) = p.rfind('/') else {
                    return Err(fail(
                        "expected domain://tenant/namespace/<start of topic names>".to_owned(),
                    ));
                };
                let (head, start) = p.split_at(slash + 1);
                if start.is_empty() {
                    return Err(fail(
                        "the prefix ends at the namespace; use a namespace route".to_owned(),
                    ));
                }
                parse_topic(&format!("{head}x")).map_err(fail)?;
                check_local(start).map_err(fail)
            }
            RouteKey::Namespace(ns) => {
                let Some((tenant, namespace)) = ns.split_once('/') else {
                    return Err(fail("expected tenant/namespace".to_owned()));
                };
                check_entity("tenant", tenant).map_err(fail)?;
                check_entity("namespace", namespace).map_err(fail)
            }
            RouteKey::Tenant(t) => check_entity("tenant", t).map_err(fail),
            RouteKey::Default => Ok(()),
        }
    }
}

impl fmt::Display for RouteKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RouteKey::Topic(t) => write!(f, "topic:{t}"),
            RouteKey::Prefix(p) => write!(f, "prefix:{p}"),
            RouteKey::Namespace(n) => write!(f, "namespace:{n}"),
            RouteKey::Tenant(t) => write!(f, "tenant:{t}"),
            RouteKey::Default => f.write_str("default"),
        }
    }
}

impl FromStr for RouteKey {
    type Err = RoutesError;

    /// Parses the canonical form and validates it.
    fn from_str(s: &str) -> Result<RouteKey> {
        let key = match s.split_once(':') {
            _ if s == "default" => RouteKey::Default,
            Some(("topic", t)) => RouteKey::Topic(t.to_owned()),
            Some(("prefix", p)) => RouteKey::Prefix(p.to_owned()),
            Some(("namespace", n)) => RouteKey::Namespace(n.to_owned()),
            Some(("tenant", t)) => RouteKey::Tenant(t.to_owned()),
            _ => {
                return Err(RoutesError::InvalidRoute {
                    route: s.to_owned(),
                    reason: "expected topic:<topic>, prefix:<prefix>, namespace:<tenant/ns>, tenant:<tenant> or default".to_owned(),
                })
            }
        };
        key.validate()?;
        Ok(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partitions_are_split_off_only_when_well_formed() {
        let t = TopicName::parse("persistent://acme/billing/orders-partition-12").unwrap();
        assert_eq!(
            (t.base().as_str(), t.partition),
            ("persistent://acme/billing/orders", Some(12))
        );
        for local in [
            "orders-partition-",
            "orders-partition-01",
            "orders-partition-x",
            "-partition-3",
        ] {
            let t = TopicName::parse(&format!("persistent://a/b/{local}")).unwrap();
            assert_eq!((t.local.as_str(), t.partition), (local, None), "{local}");
        }
        assert!(TopicName::parse("persistent://a/b/t-partition-99999999999").is_err());
        for bad in [
            "a/b/c",
            "kafka://a/b/c",
            "persistent://a/b",
            "persistent://a//c",
            "persistent://a b/c/d",
            "persistent://a/b/c d",
        ] {
            assert!(TopicName::parse(bad).is_err(), "{bad}");
        }
        let t = TopicName::parse("non-persistent://a/b/c/d").unwrap_err();
        assert!(t.to_string().contains("c/d"), "{t}");
    }

    #[test]
    fn urls_follow_pulsars_forms() {
        let binary = |u: &str| check_url(u, &["pulsar:"], false);
        assert!(binary("pulsar://b1:6650").is_ok());
        assert!(binary("pulsar://b1:6650,b2:6650/").is_ok());
        assert!(binary("pulsar://[::1]:6650").is_ok());
        for bad in [
            "pulsar://b1",
            "pulsar://:6650",
            "pulsar://b1:0",
            "pulsar://b1:6650/x",
            "http://b1:80",
            "b1:6650",
            "pulsar://b 1:6650",
        ] {
            assert!(binary(bad).is_err(), "{bad}");
        }
        assert!(check_url("https://admin:8443/admin/v2", &["http:", "https:"], true).is_ok());
    }

    #[test]
    fn route_keys_print_and_parse_canonically() {
        for s in [
            "default",
            "tenant:acme",
            "namespace:acme/billing",
            "topic:persistent://acme/billing/orders",
            "prefix:non-persistent://acme/billing/ord",
        ] {
            assert_eq!(s.parse::<RouteKey>().unwrap().to_string(), s);
        }
    }
}
