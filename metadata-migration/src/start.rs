//! Starting a migration in two steps: [`Coordinator::plan`] checks
//! everything and writes nothing (a dry run stops there), then
//! [`StartPlan::start`] wipes what the plan listed (if confirmed) and writes
//! the record.

use std::sync::Arc;

use bkswitch_metadata_store::{
    ErrorKind, ExpectedVersion, MetadataError, MetadataStore, Operation, Result,
};

use crate::coordinator::{Coordinator, CoordinatorOptions, MigrationRequest};
use crate::opener::StoreOpener;
use crate::record::{now_ms, read_current, record_path, MigrationRecord, Phase, CURRENT_PATH};
use crate::target::{check_ancestors, check_locations, inspect, refused, wipe, TargetPlan};

/// How long a start waits for the target to open (a start is an operator's
/// call: an unreachable target answers "unavailable" before the caller's
/// own timeout).
pub const OPEN_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// A migration start that passed every check ([`Coordinator::plan`]): the
/// target is open, nothing is written yet.
#[derive(Debug)]
pub struct StartPlan {
    source: Arc<dyn MetadataStore>,
    target: Arc<dyn MetadataStore>,
    request: MigrationRequest,
    plan: TargetPlan,
}

impl Coordinator {
    /// Checks a migration start without writing anything: no migration is
    /// running; the target URL is well formed and names neither the source
    /// nor a root inside or above it, nor a [`ProtectedRoot`](crate::ProtectedRoot)
    /// (compared by the servers the hosts resolve to, not by spelling);
    /// the target is reachable, no participant uses it, and it holds nothing
    /// a migration does not own ([`TargetPlan`]). The wipe is checked by
    /// [`StartPlan::check_wipe`].
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming the target URL and the reason;
    /// `Unavailable` (and the other errors of connecting) when the target
    /// cannot be reached; errors of reading the source.
    pub async fn plan(
        source: Arc<dyn MetadataStore>,
        opener: &dyn StoreOpener,
        request: MigrationRequest,
    ) -> Result<StartPlan> {
        if let Some((rec, _)) = read_current(source.as_ref()).await? {
            if !rec.phase.is_terminal() {
                return Err(refused(
                    &request.target_url,
                    format!(
                        "migration {} to {} is still running (phase {:?}); wait for it or \
                         abort it first",
                        rec.id, rec.target_url, rec.phase
                    ),
                ));
            }
        }
        if request.target_url == request.source_url {
            return Err(refused(
                &request.target_url,
                "the target is the source store; name another store. Nothing was written"
                    .to_owned(),
            ));
        }
        let location =
            check_locations(&request.source_url, &request.target_url, &request.protected).await?;
        match tokio::time::timeout(
            OPEN_TIMEOUT,
            check_ancestors(opener, &request.target_url, &location),
        )
        .await
        {
            Ok(checked) => checked?,
            Err(_) => return Err(unreachable_target(&request.target_url)),
        }
        let target =
            match tokio::time::timeout(OPEN_TIMEOUT, opener.open(&request.target_url)).await {
                Ok(opened) => opened?,
                Err(_) => return Err(unreachable_target(&request.target_url)),
            };
        match inspect(&target, &request.target_url, &location.root).await {
            Ok(plan) => Ok(StartPlan {
                source,
                target,
                request,
                plan,
            }),
            Err(e) => {
                let _ = target.close().await;
                Err(e)
            }
        }
    }
}

fn unreachable_target(url: &str) -> MetadataError {
    MetadataError::Unavailable {
        op: Operation::Connect,
        path: url.to_owned(),
        reason: format!(
            "the target metadata store did not answer within {OPEN_TIMEOUT:?}; check that its \
             servers run and are reachable, then retry. Nothing was written"
        ),
    }
}

impl StartPlan {
    /// What the target holds (what a confirmed wipe deletes).
    pub fn target(&self) -> &TargetPlan {
        &self.plan
    }

    /// Refuses a target that is not empty unless the request confirms the
    /// wipe by naming the target's root, and a target holding anything a
    /// migration does not own (see [`TargetPlan::check_wipe`]).
    ///
    /// # Errors
    ///
    /// `InvalidArgument` naming what the target holds and what to do.
    pub fn check_wipe(&self) -> Result<()> {
        self.plan.check_wipe(self.request.wipe_target.as_deref())
    }

    /// Leaves the plan without starting (closes the target's session).
    pub async fn close(self) {
        let _ = self.target.close().await;
    }

    /// Starts the migration: checks the wipe again, reads the target again
    /// (it must hold exactly what the plan listed), deletes the listed
    /// subtrees when the wipe was confirmed, then writes the record in
    /// PREPARATION and points the current-migration node at it.
    ///
    /// # Errors
    ///
    /// `InvalidArgument` when the wipe is not confirmed or the target
    /// changed since the plan (nothing written); errors of the stores.
    pub async fn start(self, options: CoordinatorOptions) -> Result<Coordinator> {
        let StartPlan {
            source,
            target,
            request,
            plan,
        } = self;
        let started = async {
            plan.check_wipe(request.wipe_target.as_deref())?;
            let again = inspect(&target, &request.target_url, &plan.root).await?;
            let paths =
                |p: &TargetPlan| p.entries.iter().map(|e| e.path.clone()).collect::<Vec<_>>();
            if paths(&again) != paths(&plan) {
                return Err(refused(
                    &request.target_url,
                    format!(
                        "the target changed since it was checked (it held {:?}, it holds {:?} \
                         now); check it again. Nothing was written",
                        paths(&plan),
                        paths(&again)
                    ),
                ));
            }
            again.check_wipe(request.wipe_target.as_deref())?;
            for entry in &again.entries {
                tracing::warn!(
                    "metadata migration to {}: wiping {} ({} nodes), as confirmed",
                    request.target_url,
                    entry.path,
                    entry.nodes
                );
                wipe(target.as_ref(), &entry.path).await?;
            }
            Ok(!again.entries.is_empty())
        }
        .await;
        let wiped = match started {
            Ok(w) => w,
            Err(e) => {
                let _ = target.close().await;
                return Err(e);
            }
        };
        let id = request
            .id
            .clone()
            .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        let now = now_ms();
        let record = MigrationRecord {
            id: id.clone(),
            source_url: request.source_url,
            target_url: request.target_url,
            phase: Phase::Preparation,
            round: 0,
            wipe_target: wiped,
            copy_cursor: None,
            copied: 0,
            caught_up: 0,
            rescans: 0,
            verified: false,
            pause_nodes: 0,
            pause_ms: 0,
            created_ms: now,
            updated_ms: now,
            error: None,
        };
        let value = serde_json::to_vec(&record).expect("serializes");
        let stat = match source
            .put(&record_path(&id), &value, ExpectedVersion::NotExists)
            .await
        {
            Ok(stat) => stat,
            Err(e) if e.kind() == ErrorKind::BadVersion => {
                return Err(refused(
                    &record.target_url,
                    format!("a migration with id `{id}` is already recorded; use another id"),
                ))
            }
            Err(e) => return Err(e),
        };
        source
            .put(CURRENT_PATH, id.as_bytes(), ExpectedVersion::Any)
            .await?;
        Coordinator::begin(source, target, record, stat.version, options).await
    }
}

impl Coordinator {
    /// Starts a migration: [`plan`](Self::plan), [`StartPlan::check_wipe`]
    /// and [`StartPlan::start`] in one call.
    ///
    /// # Errors
    ///
    /// As those three; nothing is written when a check refuses.
    pub async fn start(
        source: Arc<dyn MetadataStore>,
        opener: &dyn StoreOpener,
        request: MigrationRequest,
        options: CoordinatorOptions,
    ) -> Result<Coordinator> {
        let plan = Coordinator::plan(source, opener, request).await?;
        if let Err(e) = plan.check_wipe() {
            plan.close().await;
            return Err(e);
        }
        plan.start(options).await
    }
}
