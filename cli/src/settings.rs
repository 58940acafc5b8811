//! `bookie-switch serve --config FILE`: a broker-style `key=value` file
//! (Java properties: `#` and `!` comments, blank lines, `\` continuations),
//! with the proposal's keys and the node's own. Flags given on the command
//! line override the file; unknown keys are warned about (by name) and
//! ignored; a bad value is an error naming the key, the value and what is
//! allowed, and the node does not start.
//!
//! | key | default | meaning |
//! |---|---|---|
//! | `bookkeeperMetadataServiceUri` | `memory://old` | the initial cluster's metadata-service URI (`zk+hierarchical://…/ledgers`, `memory://<name>`) |
//! | `bookieClusterConfigPath` | `/admin/bookie-clusters` | the registry root in the metadata store |
//! | `bookieClusterSwitch.currentClusterName` | (none) | name hint of the initial cluster |
//! | `bookieClusterSwitchSkipIdgenPrecheck` | `false` | do not refuse a switch or rollback whose idgen precheck fails (lab only) |
//! | `bookieClusterIdgenSafetyMargin` | `1000` | ledger ids the idgen precheck requires between the source's next id and the target's (nodes keep creating ledgers on the source until they applied a switch) |
//! | `bookieClusterDualReadTimeoutDays` | `15` | days after SWITCHED when the coordinator runs CLEANUP by itself (0: never) |
//! | `migrationConcurrency` | `16` | ledgers copied or promoted at once |
//! | `rollbackWindowHours` | `24` | how long a switch can be rolled back (no cleanup inside it) |
//! | `oldLedgerReadTimeoutMs` | `5000` | bound on operations on a non-active cluster |
//! | `metadataStoreUrl` | `memory` | `memory`, `zk://host:port[,host:port…][/chroot]` or `etcd://host:port[,host:port…][/prefix]` |
//! | `metadataStoreSessionTimeoutMillis` | `30000` | the metadata session timeout (ZooKeeper session; etcd lease TTL, whole seconds, at least 2 s) |
//! | `bkswitchNodeId` | `node-1` | this node's id, unique among live nodes |
//! | `bkswitchListenAddress` | `127.0.0.1:8080` | REST API and `/metrics` address |
//! | `bkswitchForcedRolloverRate` | `100` | topics rolled over per second after a switch (0: natural rollover only) |
//!
//! Tokens never live in the file: `BKSWITCH_ADMIN_TOKEN`,
//! `BKSWITCH_INTERNAL_TOKEN` and `BKSWITCH_METRICS_TOKEN` (optional) come
//! from the environment (or the matching flags).

use std::net::SocketAddr;
use std::time::Duration;

/// Every key the file may set, with its default and meaning (the table above).
pub const KEYS: &[(&str, &str, &str)] = &[
    (
        "bookkeeperMetadataServiceUri",
        "memory://old",
        "the initial cluster's metadata-service URI",
    ),
    (
        "bookieClusterConfigPath",
        bkswitch_registry::DEFAULT_ROOT,
        "the registry root in the metadata store",
    ),
    (
        "bookieClusterSwitch.currentClusterName",
        "",
        "name hint of the initial cluster",
    ),
    (
        "bookieClusterSwitchSkipIdgenPrecheck",
        "false",
        "do not refuse a switch whose idgen precheck fails (lab only)",
    ),
    (
        "bookieClusterDualReadTimeoutDays",
        "15",
        "days after SWITCHED when CLEANUP runs by itself (0: never)",
    ),
    (
        "migrationConcurrency",
        "16",
        "ledgers copied or promoted at once",
    ),
    (
        "bookieClusterIdgenSafetyMargin",
        "1000",
        "ledger ids the idgen precheck requires between the source's and the target's next ids",
    ),
    (
        "rollbackWindowHours",
        "24",
        "how long a switch can be rolled back",
    ),
    (
        "oldLedgerReadTimeoutMs",
        "5000",
        "bound on operations on a non-active cluster",
    ),
    (
        "metadataStoreUrl",
        "memory",
        "`memory`, `zk://host:port[,host:port…][/chroot]` or `etcd://host:port[,host:port…][/prefix]`",
    ),
    (
        "metadataStoreSessionTimeoutMillis",
        "30000",
        "the metadata session timeout (ZooKeeper session; etcd lease TTL, whole seconds, at least 2 s)",
    ),
    ("bkswitchNodeId", "node-1", "this node's id"),
    (
        "bkswitchListenAddress",
        "127.0.0.1:8080",
        "REST API and /metrics address",
    ),
    (
        "bkswitchForcedRolloverRate",
        "100",
        "topics rolled over per second after a switch",
    ),
];

/// A node's settings: the defaults, then a file, then flags.
#[derive(Debug, Clone, PartialEq)]
pub struct ServeSettings {
    /// `bookkeeperMetadataServiceUri`.
    pub bookkeeper_uri: String,
    /// `bookieClusterConfigPath`.
    pub registry_root: String,
    /// `bookieClusterSwitch.currentClusterName`.
    pub cluster_name: Option<String>,
    /// `bookieClusterSwitchSkipIdgenPrecheck`.
    pub skip_idgen_precheck: bool,
    /// `bookieClusterDualReadTimeoutDays`, as a duration (`None`: never).
    pub dual_read_timeout: Option<Duration>,
    /// `bookieClusterIdgenSafetyMargin`: see
    /// [`OrchestratorConfig::idgen_safety_margin`](bkswitch_switch_orchestrator::OrchestratorConfig::idgen_safety_margin).
    pub idgen_safety_margin: i64,
    /// `migrationConcurrency`.
    pub migration_concurrency: usize,
    /// `rollbackWindowHours`, as a duration.
    pub rollback_window: Duration,
    /// `oldLedgerReadTimeoutMs`, as a duration.
    pub old_ledger_read_timeout: Duration,
    /// `metadataStoreUrl`.
    pub metadata_store: String,
    /// `metadataStoreSessionTimeoutMillis`, as a duration.
    pub session_timeout: Duration,
    /// `bkswitchNodeId`.
    pub node_id: String,
    /// `bkswitchListenAddress`.
    pub listen: SocketAddr,
    /// `bkswitchForcedRolloverRate` (0: natural rollover only).
    pub forced_rollover_rate: u32,
    /// TLS, JWT and token-file keys: see
    /// [`SecuritySettings`](crate::security::SecuritySettings).
    pub security: crate::security::SecuritySettings,
}

impl Default for ServeSettings {
    fn default() -> Self {
        ServeSettings {
            bookkeeper_uri: "memory://old".to_owned(),
            registry_root: bkswitch_registry::DEFAULT_ROOT.to_owned(),
            cluster_name: None,
            skip_idgen_precheck: false,
            dual_read_timeout: Some(days(15)),
            idgen_safety_margin: bkswitch_switch_orchestrator::DEFAULT_IDGEN_SAFETY_MARGIN,
            migration_concurrency: 16,
            rollback_window: Duration::from_secs(24 * 3600),
            old_ledger_read_timeout: Duration::from_millis(5000),
            metadata_store: "memory".to_owned(),
            session_timeout: Duration::from_millis(30_000),
            node_id: "node-1".to_owned(),
            listen: SocketAddr::from(([127, 0, 0, 1], 8080)),
            forced_rollover_rate: 100,
            security: Default::default(),
        }
    }
}

fn days(n: u64) -> Duration {
    Duration::from_secs(n * 24 * 3600)
}

/// Why a configuration file was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SettingsError {
    /// The file could not be read or parsed.
    #[error("cannot read the configuration file `{path}`: {reason}")]
    Read {
        /// The file.
        path: String,
        /// What went wrong.
        reason: String,
    },
    /// A key has a value outside what it allows.
    #[error(
        "{path}:{line}: `{key}={value}` is not allowed: {key} must be {allowed}; the node \
         was not started"
    )]
    BadValue {
        /// The file.
        path: String,
        /// The line of the key.
        line: usize,
        /// The key.
        key: String,
        /// The value given.
        value: String,
        /// What the key allows.
        allowed: &'static str,
    },
}

impl ServeSettings {
    /// Applies the `key=value` text of the file at `path` (named in errors)
    /// over these settings. Returns the warnings (unknown keys, by name).
    ///
    /// # Errors
    ///
    /// [`SettingsError`] for text that is not a properties file or a bad
    /// value; the settings are then left as they were.
    pub fn apply_file(&mut self, path: &str, text: &str) -> Result<Vec<String>, SettingsError> {
        let mut next = self.clone();
        let mut warnings = Vec::new();
        let lines = java_properties::PropertiesIter::new(text.as_bytes());
        for line in lines {
            let line = line.map_err(|e| SettingsError::Read {
                path: path.to_owned(),
                reason: e.to_string(),
            })?;
            let number = line.line_number();
            let java_properties::LineContent::KVPair(key, value) = line.consume_content() else {
                continue;
            };
            let value = value.trim().to_owned();
            let bad = |allowed: &'static str| SettingsError::BadValue {
                path: path.to_owned(),
                line: number,
                key: key.clone(),
                value: value.clone(),
                allowed,
            };
            match key.as_str() {
                "bookkeeperMetadataServiceUri" => {
                    if value.is_empty() {
                        return Err(bad(
                            "a metadata-service URI, e.g. zk+hierarchical://zk1:2181/ledgers",
                        ));
                    }
                    next.bookkeeper_uri = value.clone();
                }
                "bookieClusterConfigPath" => {
                    if !value.starts_with('/') || value.len() < 2 || value.ends_with('/') {
                        return Err(bad(
                            "an absolute path without a trailing '/', e.g. /bookie-clusters",
                        ));
                    }
                    next.registry_root = value.clone();
                }
                "bookieClusterSwitch.currentClusterName" => {
                    next.cluster_name = (!value.is_empty()).then(|| value.clone());
                }
                "bookieClusterSwitchSkipIdgenPrecheck" => {
                    next.skip_idgen_precheck = match value.as_str() {
                        "true" => true,
                        "false" => false,
                        _ => return Err(bad("true or false")),
                    };
                }
                "bookieClusterDualReadTimeoutDays" => {
                    let n: u64 = value
                        .parse()
                        .map_err(|_| bad("a whole number of days, 0 to 3650 (0: never)"))?;
                    if n > 3650 {
                        return Err(bad("a whole number of days, 0 to 3650 (0: never)"));
                    }
                    next.dual_read_timeout = (n > 0).then(|| days(n));
                }
                "bookieClusterIdgenSafetyMargin" => {
                    next.idgen_safety_margin = match value.parse::<i64>() {
                        Ok(n @ 1..=1_000_000_000_000) => n,
                        _ => return Err(bad("a whole number of ledger ids, 1 to 1000000000000")),
                    };
                }
                "migrationConcurrency" => {
                    next.migration_concurrency = match value.parse::<usize>() {
                        Ok(n @ 1..=1024) => n,
                        _ => return Err(bad("a whole number from 1 to 1024")),
                    };
                }
                "rollbackWindowHours" => {
                    next.rollback_window = match value.parse::<u64>() {
                        Ok(n @ 0..=87_600) => Duration::from_secs(n * 3600),
                        _ => return Err(bad("a whole number of hours, 0 to 87600")),
                    };
                }
                "oldLedgerReadTimeoutMs" => {
                    next.old_ledger_read_timeout = match value.parse::<u64>() {
                        Ok(n @ 1..=3_600_000) => Duration::from_millis(n),
                        _ => return Err(bad("a whole number of milliseconds, 1 to 3600000")),
                    };
                }
                "metadataStoreUrl" => {
                    if bkswitch_metadata_store::check_store_url(&value).is_err() {
                        return Err(bad(bkswitch_metadata_store::STORE_URL_FORMS));
                    }
                    next.metadata_store = value.clone();
                }
                "metadataStoreSessionTimeoutMillis" => {
                    next.session_timeout = match value.parse::<u64>() {
                        Ok(n @ 2_000..=600_000) => Duration::from_millis(n),
                        _ => return Err(bad("a whole number of milliseconds, 2000 to 600000")),
                    };
                }
                "bkswitchNodeId" => {
                    if value.is_empty() || value.contains('/') {
                        return Err(bad("a non-empty id without '/'"));
                    }
                    next.node_id = value.clone();
                }
                "bkswitchListenAddress" => {
                    next.listen = value
                        .parse()
                        .map_err(|_| bad("an address and port, e.g. 127.0.0.1:8080"))?;
                }
                "bkswitchForcedRolloverRate" => {
                    next.forced_rollover_rate = value
                        .parse()
                        .map_err(|_| bad("a whole number of topics per second (0: none)"))?;
                }
                k if next.security.apply_key(k, &value) => {}
                _ => warnings.push(format!(
                    "{path}:{number}: unknown key `{key}` ignored (known keys: see `bookie-switch \
                     serve --help` or the settings table in the README)"
                )),
            }
        }
        *self = next;
        Ok(warnings)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_file_sets_every_key_and_comments_are_skipped() {
        let text = "\
# a broker.conf-style file
! another comment

bookkeeperMetadataServiceUri=zk+hierarchical://127.0.0.1:2181/ledgers-new
bookieClusterConfigPath=/clusters
bookieClusterSwitch.currentClusterName=blue
bookieClusterSwitchSkipIdgenPrecheck=true
bookieClusterDualReadTimeoutDays=2
bookieClusterIdgenSafetyMargin=50000
migrationConcurrency = 4
rollbackWindowHours=1
oldLedgerReadTimeoutMs=750
metadataStoreUrl=zk://127.0.0.1:2181/pulsar
metadataStoreSessionTimeoutMillis=4000
bkswitchNodeId=broker-7
bkswitchListenAddress=127.0.0.1:9090
bkswitchForcedRolloverRate=0
";
        let mut s = ServeSettings::default();
        let warnings = s.apply_file("broker.conf", text).unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(
            s,
            ServeSettings {
                bookkeeper_uri: "zk+hierarchical://127.0.0.1:2181/ledgers-new".into(),
                registry_root: "/clusters".into(),
                cluster_name: Some("blue".into()),
                skip_idgen_precheck: true,
                dual_read_timeout: Some(days(2)),
                idgen_safety_margin: 50_000,
                migration_concurrency: 4,
                rollback_window: Duration::from_secs(3600),
                old_ledger_read_timeout: Duration::from_millis(750),
                metadata_store: "zk://127.0.0.1:2181/pulsar".into(),
                session_timeout: Duration::from_millis(4000),
                node_id: "broker-7".into(),
                listen: "127.0.0.1:9090".parse().unwrap(),
                forced_rollover_rate: 0,
                security: Default::default(),
            }
        );
        let mut never = ServeSettings::default();
        never
            .apply_file("f", "bookieClusterDualReadTimeoutDays=0")
            .unwrap();
        assert_eq!(never.dual_read_timeout, None);
    }

    #[test]
    fn unknown_keys_are_warned_about_by_name() {
        let mut s = ServeSettings::default();
        let w = s
            .apply_file(
                "broker.conf",
                "migrationConcurrency=8\nzookeeperServers=zk1:2181\n",
            )
            .unwrap();
        assert_eq!(w.len(), 1);
        assert!(
            w[0].contains("`zookeeperServers`") && w[0].contains("broker.conf:2"),
            "{w:?}"
        );
        assert_eq!(s.migration_concurrency, 8);
    }

    #[test]
    fn a_bad_value_names_key_value_and_what_is_allowed_and_changes_nothing() {
        for (text, key, allowed) in [
            (
                "migrationConcurrency=0",
                "migrationConcurrency",
                "1 to 1024",
            ),
            (
                "migrationConcurrency=lots",
                "migrationConcurrency",
                "1 to 1024",
            ),
            (
                "bookieClusterSwitchSkipIdgenPrecheck=yes",
                "bookieClusterSwitchSkipIdgenPrecheck",
                "true or false",
            ),
            ("rollbackWindowHours=-1", "rollbackWindowHours", "hours"),
            (
                "bookieClusterDualReadTimeoutDays=1.5",
                "bookieClusterDualReadTimeoutDays",
                "days",
            ),
            (
                "oldLedgerReadTimeoutMs=0",
                "oldLedgerReadTimeoutMs",
                "milliseconds",
            ),
            (
                "metadataStoreUrl=etcd://x",
                "metadataStoreUrl",
                "etcd://host:port",
            ),
            (
                "metadataStoreUrl=etcd://x:1/",
                "metadataStoreUrl",
                "etcd://host:port",
            ),
            (
                "metadataStoreUrl=zk://x",
                "metadataStoreUrl",
                "zk://host:port",
            ),
            (
                "metadataStoreUrl=consul://x:1",
                "metadataStoreUrl",
                "memory",
            ),
            (
                "metadataStoreSessionTimeoutMillis=100",
                "metadataStoreSessionTimeoutMillis",
                "2000",
            ),
            (
                "bkswitchListenAddress=localhost",
                "bkswitchListenAddress",
                "address and port",
            ),
            (
                "bookieClusterConfigPath=clusters",
                "bookieClusterConfigPath",
                "absolute path",
            ),
        ] {
            let mut s = ServeSettings::default();
            let text = format!("migrationConcurrency=3\n{text}\n");
            let e = s.apply_file("broker.conf", &text).unwrap_err();
            let msg = e.to_string();
            assert!(
                msg.contains(key) && msg.contains(allowed) && msg.contains("broker.conf:2"),
                "{msg}"
            );
            assert_eq!(s, ServeSettings::default(), "nothing applied: {text}");
        }
    }

    #[test]
    fn the_readme_documents_every_key_with_its_default() {
        for doc in [include_str!("../../README.md"), include_str!("settings.rs")] {
            for (key, default, _) in KEYS {
                let shown = if default.is_empty() {
                    "(none)".to_owned()
                } else {
                    format!("`{default}`")
                };
                let row = format!("| `{key}` | {shown} |");
                assert!(doc.contains(&row), "missing or wrong row: {row}");
            }
        }
    }

    #[test]
    fn the_key_table_matches_the_defaults() {
        let d = ServeSettings::default();
        let mut from_table = ServeSettings::default();
        let text: String = KEYS
            .iter()
            .filter(|(_, v, _)| !v.is_empty())
            .map(|(k, v, _)| format!("{k}={v}\n"))
            .collect();
        assert!(from_table.apply_file("table", &text).unwrap().is_empty());
        assert_eq!(from_table, d);
    }

    #[cfg(feature = "etcd")]
    #[test]
    fn etcd_metadata_store_url_is_accepted() {
        let mut s = ServeSettings::default();
        let warnings = s
            .apply_file(
                "broker.conf",
                "metadataStoreUrl=etcd://e1:2379,e2:2379/pulsar\n",
            )
            .unwrap();
        assert!(warnings.is_empty(), "{warnings:?}");
        assert_eq!(s.metadata_store, "etcd://e1:2379,e2:2379/pulsar");
    }
}
