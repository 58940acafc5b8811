//! The one error type of the crate.

use std::sync::Arc;

use bkswitch_metadata_store::MetadataError;
use bkswitch_registry::{PrecheckResult, RegistryError};

use crate::model::Phase;

/// Result alias of the crate.
pub type Result<T, E = OrchestratorError> = std::result::Result<T, E>;

/// The error of a [`ClusterClients`](crate::ClusterClients) implementation,
/// kept as the source of [`OrchestratorError::Client`]: it says whether
/// retrying may help, and the orchestrator's error keeps that answer.
pub trait RetryableError: std::error::Error + Send + Sync + 'static {
    /// Whether retrying the same call may succeed (the cause passes).
    fn is_retryable(&self) -> bool;
}

/// Error of every orchestrator operation.
///
/// Refusals (unknown or DEPRECATED target, precheck failure, cleanup inside the
/// rollback window, rollback after cleanup, …) are returned before anything is
/// written: the store is left untouched.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum OrchestratorError {
    /// The target cluster is not registered.
    #[error(
        "bookie cluster `{name}` is not registered; register it (STANDBY) before switching to it"
    )]
    UnknownCluster {
        /// The unknown cluster.
        name: String,
    },
    /// The target cluster is DEPRECATED.
    #[error("bookie cluster `{name}` is DEPRECATED and cannot become the switch target again; register the cluster under a new name")]
    ClusterDeprecated {
        /// The deprecated cluster.
        name: String,
    },
    /// The target cluster already is the ACTIVE cluster and no switch to it is recorded.
    #[error("bookie cluster `{name}` already is the ACTIVE cluster; nothing to switch")]
    AlreadyActive {
        /// The active cluster.
        name: String,
    },
    /// No cluster is ACTIVE in the registry, so there is no switch source.
    #[error("no bookie cluster is ACTIVE in the registry; start the storage (it registers its cluster) before switching")]
    NoActiveCluster,
    /// The idgen precheck ([I11](bkswitch_docs::invariants::I11)) refused the switch.
    #[error("{}", precheck_refusal(.0))]
    PrecheckFailed(Box<PrecheckResult>),
    /// Another switch is still in progress.
    #[error("switch `{switch_id}` to `{target}` is still in progress ({}); finish it (run/cleanup) or roll it back first", in_progress(.phase))]
    SwitchInProgress {
        /// The switch in progress.
        switch_id: String,
        /// Its target.
        target: String,
        /// Its phase; `None` while it is starting (its directive is written,
        /// its switch record not yet).
        phase: Option<Phase>,
    },
    /// A cluster-wide switch was asked while canaries (per-prefix overrides)
    /// exist.
    #[error(
        "per-prefix overrides exist ({prefixes}); a cluster-wide switch would leave them \
         pointing elsewhere: finish each canary by removing its override (its rollback), then \
         switch the whole cluster. Nothing was written"
    )]
    OverridesExist {
        /// The prefixes, comma separated.
        prefixes: String,
    },
    /// No switch with this id is recorded.
    #[error("no switch `{switch_id}` is recorded; list the switches with `current_status`")]
    NoSuchSwitch {
        /// The unknown switch id.
        switch_id: String,
    },
    /// Cleanup was asked inside the rollback window without `force`.
    #[error("switch `{switch_id}` is inside its rollback window until {}; wait, roll back, or pass force=true to clean up now (rollback is then impossible)", utc(*.deadline_ms))]
    InsideRollbackWindow {
        /// The switch.
        switch_id: String,
        /// End of the rollback window, milliseconds since the Unix epoch.
        deadline_ms: i64,
    },
    /// Rollback after the window closed.
    #[error("the rollback window of switch `{switch_id}` closed at {}; switch forward to the old cluster instead (a new switch)", utc(*.deadline_ms))]
    RollbackWindowClosed {
        /// The switch.
        switch_id: String,
        /// End of the rollback window.
        deadline_ms: i64,
    },
    /// Rollback after cleanup deleted old-cluster copies.
    #[error("cleanup of switch `{switch_id}` has started deleting old-cluster copies; it cannot be rolled back any more: finish the cleanup, then switch forward to the old cluster if needed")]
    CleanupStarted {
        /// The switch.
        switch_id: String,
    },
    /// The operation does not apply in the switch's current phase.
    #[error("switch `{switch_id}` is in phase {phase}: {reason}")]
    WrongPhase {
        /// The switch.
        switch_id: String,
        /// Its phase.
        phase: Phase,
        /// What the operator can do.
        reason: String,
    },
    /// The run did not converge (cursor owners unavailable, contended locators, …);
    /// progress is recorded and `resume` continues.
    #[error("switch `{switch_id}` did not finish {phase}: {reason}; call resume to continue")]
    NotConverged {
        /// The switch.
        switch_id: String,
        /// The phase that did not finish.
        phase: Phase,
        /// Why.
        reason: String,
    },
    /// A record of the switch kept changing under this coordinator's
    /// compare-and-set (another writer); nothing half-written, retry.
    #[error("switch `{switch_id}`: the {what} `{path}` kept changing concurrently; retry (progress is recorded)")]
    Contended {
        /// The switch.
        switch_id: String,
        /// Which record (`switch record`, `ledger record`).
        what: &'static str,
        /// Its node.
        path: String,
    },
    /// A record of the coordinator's own (a switch record, a ledger record,
    /// a lease) does not parse (or cannot be encoded).
    #[error("corrupt switch record `{path}`: {reason}; nothing further was written: restore the node from a backup, or delete it by hand if that step should be forgotten, then resume")]
    CorruptRecord {
        /// The node.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A managed-ledger, cursor or schema metadata value that the switch
    /// reads (or flips a stamp in) does not parse; the switch leaves it
    /// untouched.
    #[error("corrupt metadata `{path}`: {reason}; the switch left it untouched: repair the value (or delete the topic or schema it belongs to) by hand, then resume")]
    CorruptMetadata {
        /// The node.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// A BookKeeper client could not be obtained or failed outside a per-ledger step.
    #[error("bookie cluster `{cluster}`: {reason}; check that the cluster is reachable and retry")]
    Client {
        /// The cluster.
        cluster: String,
        /// What failed.
        reason: String,
        /// The clients' own error (the router's, for the node's
        /// clients), whose retryability this error keeps; `None` for a
        /// cluster no client is configured for.
        #[source]
        source: Option<Arc<dyn RetryableError>>,
    },
    /// The registry failed.
    #[error(transparent)]
    Registry(#[from] RegistryError),
    /// The metadata store failed.
    #[error("metadata store failed while {what}: {source}; retry (progress is recorded)")]
    Metadata {
        /// What was being done.
        what: String,
        /// The store error.
        source: MetadataError,
    },
    /// Another coordinator holds the switch's lease (or this one lost it).
    #[error(
        "{switch_id} is being coordinated by {holder}; retry once it finishes or its session ends"
    )]
    Locked {
        /// What the lease guards, as a phrase: ``switch `7` `` or
        /// ``starting a switch to `new` ``.
        switch_id: String,
        /// The lease holder, as a phrase: its instance id in backticks, or
        /// why there is none.
        holder: String,
    },
    /// A failpoint injected a crash (only with the `failpoints` feature).
    #[error("failpoint `{point}` injected a crash; resume the switch")]
    Injected {
        /// The failpoint.
        point: &'static str,
    },
}

/// The phase of a switch in progress, as its error names it.
fn in_progress(phase: &Option<Phase>) -> String {
    match phase {
        Some(p) => format!("phase {p}"),
        None => "starting: its directive is written, its switch record not yet".to_owned(),
    }
}

/// The operator's message for a refused idgen precheck: what is wrong and the
/// exact bound to advance the target's generator beyond.
fn precheck_refusal(r: &PrecheckResult) -> String {
    let what = if r.rollback {
        "the rollback"
    } else {
        "the switch"
    };
    if let Some(e) = &r.source_idgen_error {
        return format!(
            "idgen precheck refused {what} from `{}` to `{}`: the source's ledger id \
             generator cannot be read ({e}), so the target's next ledger id {} cannot be checked \
             against it; fix access to `{}`'s metadata and retry",
            r.source_cluster_name,
            r.target_cluster_name,
            r.target_next_ledger_id,
            r.source_cluster_name
        );
    }
    // The exact step, when the orchestrator computed it (the safety margin
    // included); else the bound the registry's check alone gives.
    let step = match (r.advance_beyond, &r.advance_command) {
        (Some(id), Some(cmd)) => format!(
            "advance `{}`'s ledger id generator beyond {id} (`{cmd}`) and retry",
            r.target_cluster_name
        ),
        _ => match r.source_max_ledger_id.max(r.source_next_ledger_id) {
            Some(id) => format!(
                "advance `{}`'s ledger id generator beyond {id} (`bookie-switch idgen \
                 --metadata-service-uri <its URI> --advance-beyond {id}`) and retry",
                r.target_cluster_name
            ),
            None => format!(
                "advance `{}`'s ledger id generator beyond every id `{}` handed out and retry",
                r.target_cluster_name, r.source_cluster_name
            ),
        },
    };
    if let Some(next) = r.source_next_ledger_id {
        if r.idgen_advanced_beyond_source && r.target_next_ledger_id > next {
            // Ordered, but too close: the coordinator's safety margin refused it.
            return format!(
                "idgen precheck refused {what} from `{}` to `{}`: the target's next ledger \
                 id {} is only {} id(s) beyond the source's next id {next}, less than the idgen \
                 safety margin (`bookieClusterIdgenSafetyMargin`): nodes keep creating ledgers \
                 on the source until they applied the directive, and each of those ids must stay \
                 below the target's; {step}",
                r.source_cluster_name,
                r.target_cluster_name,
                r.target_next_ledger_id,
                r.target_next_ledger_id - next,
            );
        }
    }
    format!(
        "idgen precheck refused {what} from `{}` to `{}`: the target's next ledger id {} \
         is not above the source's ids (next {}, highest copied {}; {} copied id(s) at risk{}); \
         {step}",
        r.source_cluster_name,
        r.target_cluster_name,
        r.target_next_ledger_id,
        r.source_next_ledger_id
            .map_or("unknown".to_owned(), |n| n.to_string()),
        r.source_max_ledger_id
            .map_or("none".to_owned(), |n| n.to_string()),
        r.at_risk_ledger_count,
        if r.at_risk_ledger_ids.is_empty() {
            String::new()
        } else {
            format!(": {:?}", r.at_risk_ledger_ids)
        },
    )
}

impl OrchestratorError {
    /// A record of ours at `path` that cannot be understood (or encoded),
    /// and what is wrong with it.
    pub(crate) fn corrupt_record(path: impl Into<String>, reason: impl std::fmt::Display) -> Self {
        OrchestratorError::CorruptRecord {
            path: path.into(),
            reason: reason.to_string(),
        }
    }

    /// A managed-ledger, cursor or schema value at `path` that cannot be
    /// understood (or encoded), and what is wrong with it.
    pub(crate) fn corrupt_metadata(
        path: impl Into<String>,
        reason: impl std::fmt::Display,
    ) -> Self {
        OrchestratorError::CorruptMetadata {
            path: path.into(),
            reason: reason.to_string(),
        }
    }

    pub(crate) fn metadata(what: impl Into<String>, source: MetadataError) -> Self {
        OrchestratorError::Metadata {
            what: what.into(),
            source,
        }
    }

    /// Whether retrying (or resuming) the same operation may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            OrchestratorError::NotConverged { .. }
            | OrchestratorError::Contended { .. }
            | OrchestratorError::Injected { .. }
            | OrchestratorError::Locked { .. } => true,
            // The clients' error says whether its cause passes (for the
            // router: an unreachable cluster) or not (an unknown cluster, a
            // refused URI); without one (no client configured yet) a later
            // attempt may find it.
            OrchestratorError::Client {
                source: Some(source),
                ..
            } => source.is_retryable(),
            OrchestratorError::Client { source: None, .. } => true,
            OrchestratorError::Metadata { source, .. } => {
                source.is_retryable() || source.is_conflict()
            }
            OrchestratorError::Registry(e) => e.is_retryable(),
            _ => false,
        }
    }
}

/// `2024-05-01T12:00:00.123Z` for milliseconds since the Unix epoch (the
/// number itself when it is before the epoch).
pub(crate) fn utc(ms: i64) -> String {
    match u64::try_from(ms) {
        Ok(ms) => humantime::format_rfc3339_millis(
            std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms),
        )
        .to_string(),
        Err(_) => format!("{ms} ms since the epoch"),
    }
}

#[cfg(test)]
mod tests {
    use bkswitch_bk_client::{BkError, BkErrorKind};

    use super::*;

    /// A clients' error that answers as told.
    #[derive(Debug, thiserror::Error)]
    #[error("client start failed (retryable: {0})")]
    struct Failure(bool);

    impl RetryableError for Failure {
        fn is_retryable(&self) -> bool {
            self.0
        }
    }

    fn client(source: Option<Failure>) -> OrchestratorError {
        OrchestratorError::Client {
            cluster: "new".into(),
            reason: "no client".into(),
            source: source.map(|s| Arc::new(s) as Arc<dyn RetryableError>),
        }
    }

    #[test]
    fn a_locked_switch_names_it_and_its_holder_once() {
        let e = OrchestratorError::Locked {
            switch_id: "switch `7`".into(),
            holder: "`node-2`".into(),
        };
        assert_eq!(
            e.to_string(),
            "switch `7` is being coordinated by `node-2`; retry once it finishes or its \
             session ends"
        );
    }

    #[test]
    fn rollback_window_errors_name_the_time_in_utc() {
        let inside = OrchestratorError::InsideRollbackWindow {
            switch_id: "7".into(),
            deadline_ms: 1_714_564_800_123,
        };
        assert!(
            inside
                .to_string()
                .contains("until 2024-05-01T12:00:00.123Z;"),
            "{inside}"
        );
        let closed = OrchestratorError::RollbackWindowClosed {
            switch_id: "7".into(),
            deadline_ms: 951_782_400_000,
        };
        assert!(
            closed
                .to_string()
                .contains("closed at 2000-02-29T00:00:00.000Z;"),
            "{closed}"
        );
        assert_eq!(utc(-5), "-5 ms since the epoch");
    }

    #[test]
    fn client_errors_keep_their_source_retryability() {
        assert!(client(Some(Failure(true))).is_retryable());
        assert!(!client(Some(Failure(false))).is_retryable());
        assert!(client(None).is_retryable());
        // The source stays reachable (and printable) through the error.
        let e = client(Some(Failure(false)));
        let source = std::error::Error::source(&e).expect("the source is kept");
        assert_eq!(source.to_string(), "client start failed (retryable: false)");
        // Clones keep it too.
        assert!(!e.clone().is_retryable());
        // The registry's own answer is kept as well.
        assert!(OrchestratorError::Registry(RegistryError::Conflict {
            path: "/p".into(),
            attempts: 3
        })
        .is_retryable());
        assert!(!OrchestratorError::Registry(RegistryError::Idgen {
            cluster: "new".into(),
            source: Box::new(BkError::new(BkErrorKind::InvalidArgument, "bad uri")),
        })
        .is_retryable());
        assert!(OrchestratorError::Registry(RegistryError::Idgen {
            cluster: "new".into(),
            source: Box::new(BkError::new(BkErrorKind::Timeout, "slow")),
        })
        .is_retryable());
    }

    #[test]
    fn phases_are_typed_and_a_starting_switch_is_not_a_phase() {
        let starting = OrchestratorError::SwitchInProgress {
            switch_id: "7".into(),
            target: "new".into(),
            phase: None,
        };
        assert!(starting
            .to_string()
            .contains("starting: its directive is written"));
        let building = OrchestratorError::SwitchInProgress {
            switch_id: "7".into(),
            target: "new".into(),
            phase: Some(Phase::Build),
        };
        assert!(building.to_string().contains("(phase BUILD)"), "{building}");
        let contended = OrchestratorError::Contended {
            switch_id: "7".into(),
            what: "ledger record",
            path: "/r".into(),
        };
        assert!(contended.is_retryable());
        assert!(contended.to_string().contains("`/r` kept changing"));
    }

    #[test]
    fn corrupt_records_and_corrupt_metadata_are_told_apart() {
        let record = OrchestratorError::corrupt_record("/o/7", "expected value");
        let metadata = OrchestratorError::corrupt_metadata("/managed-ledgers/t/c", "not a cursor");
        assert!(
            matches!(record, OrchestratorError::CorruptRecord { ref path, .. } if path == "/o/7")
        );
        assert!(
            matches!(metadata, OrchestratorError::CorruptMetadata { ref path, .. } if path == "/managed-ledgers/t/c")
        );
        assert!(record.to_string().contains("corrupt switch record `/o/7`"));
        assert!(metadata
            .to_string()
            .contains("corrupt metadata `/managed-ledgers/t/c`"));
        assert!(metadata.to_string().contains("left it untouched"));
        assert!(!record.is_retryable() && !metadata.is_retryable());
    }
}
