//! Leader election among nodes: picks the one node that runs the orchestrator
//! of a directive without `origin` ([design §3](bkswitch_docs::design)).

use std::time::Duration;

use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataError, Notification, Operation, SessionEvent,
    WatchStream,
};
use futures::StreamExt;
use tokio::sync::{watch, Mutex};
use tokio::task::JoinHandle;

use crate::error::{RegistryError, Result};
use crate::registry::Registry;

/// Pause before trying again after a failed store operation of an election.
pub const ELECTION_RETRY_DELAY: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct ElectionState {
    leader: Option<String>,
    is_leader: bool,
    ended: bool,
    /// The node ids of the live candidates as last read (empty while the
    /// connection is lost).
    candidates: Vec<String>,
}

/// One node's candidacy in the leader election of a registry (see
/// [`Registry::elect`]).
///
/// Every candidate holds an ephemeral sequential node `<root>/leader/n-<seq>`
/// whose value is its node id; the candidate with the lowest sequence leads.
/// When the leader's session ends (the store is closed or its session expires)
/// its node disappears and the next candidate takes over. A candidate whose own
/// session expired joins again with a new node once the store has a new
/// session. A candidate stops claiming leadership as soon as its connection is
/// lost, so at most one live candidate leads at any time.
///
/// When the create of the candidate node goes unanswered (the connection was
/// lost: the node may or may not exist), the candidate does not create a
/// second one blindly: it lists the children and adopts the lowest new
/// ephemeral node whose value is its node id, creating one only when there is
/// none. Node ids must therefore differ between live candidates (the store does
/// not tell which session owns a node).
///
/// Dropping the value resigns in the background.
#[derive(Debug)]
pub struct LeaderElection {
    node_id: String,
    state: watch::Receiver<ElectionState>,
    stop: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<Result<()>>>>,
}

impl Registry {
    /// Joins the leader election as `node_id` (a non-empty identifier of this
    /// node, reported by [`LeaderElection::leader`] on every candidate).
    ///
    /// Must be called inside a Tokio runtime (the candidacy is kept by a task).
    ///
    /// # Errors
    ///
    /// [`RegistryError::InvalidName`] for an empty node id;
    /// [`RegistryError::Metadata`] when the election cannot be watched or the
    /// candidate node cannot be created.
    pub async fn elect(&self, node_id: &str) -> Result<LeaderElection> {
        if node_id.is_empty() {
            return Err(RegistryError::InvalidName {
                name: node_id.to_owned(),
                reason: "a node id must not be empty".to_owned(),
            });
        }
        let dir = self.path("leader");
        let watch_stream = self.store.watch(&dir).await?;
        let mut candidate = Candidate {
            registry: self.clone(),
            node_id: node_id.to_owned(),
            dir,
            own: None,
            pending: None,
        };
        let first = match candidate.step().await {
            Ok(first) => first,
            Err(e) => {
                candidate.abandon().await;
                return Err(e);
            }
        };
        let (state_tx, state_rx) = watch::channel(first);
        let (stop_tx, stop_rx) = watch::channel(false);
        let task = tokio::spawn(candidate.run(watch_stream, state_tx, stop_rx));
        Ok(LeaderElection {
            node_id: node_id.to_owned(),
            state: state_rx,
            stop: stop_tx,
            task: Mutex::new(Some(task)),
        })
    }
}

impl LeaderElection {
    /// This candidate's node id.
    pub fn node_id(&self) -> &str {
        &self.node_id
    }

    /// Whether this candidate leads now.
    pub fn is_leader(&self) -> bool {
        self.state.borrow().is_leader
    }

    /// The node id of the leading candidate as last seen; `None` when there is
    /// no candidate, while the connection is lost, or after resigning.
    pub fn leader(&self) -> Option<String> {
        self.state.borrow().leader.clone()
    }

    /// The node ids of every live candidate (this one included) as last read:
    /// a node whose session ended is gone from it once the election saw its
    /// candidate node disappear. Empty while the connection is lost or after
    /// resigning, so an absent id proves a node gone only while
    /// [`is_leader`](Self::is_leader) holds.
    pub fn candidates(&self) -> Vec<String> {
        self.state.borrow().candidates.clone()
    }

    /// Whether `node_id` is a live candidate as last read (see
    /// [`candidates`](Self::candidates)).
    pub fn is_candidate(&self, node_id: &str) -> bool {
        self.state.borrow().candidates.iter().any(|c| c == node_id)
    }

    /// Waits until this candidate leads.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Metadata`] with [`ErrorKind::Closed`] when the candidacy
    /// ended first (resigned, or the store was closed).
    pub async fn wait_for_leadership(&self) -> Result<()> {
        let mut rx = self.state.clone();
        let ended = {
            let s = rx
                .wait_for(|s| s.is_leader || s.ended)
                .await
                .map_err(|_| self.closed())?;
            s.ended && !s.is_leader
        };
        if ended {
            return Err(self.closed());
        }
        Ok(())
    }

    /// Leaves the election: deletes this candidate's node (the next candidate
    /// takes over) and stops following the election. Resigning twice is
    /// harmless.
    ///
    /// # Errors
    ///
    /// [`RegistryError::Metadata`] when the node could not be deleted (it then
    /// disappears when the store's session ends).
    pub async fn resign(&self) -> Result<()> {
        let _ = self.stop.send(true);
        let task = self.task.lock().await.take();
        match task {
            Some(task) => task.await.unwrap_or(Ok(())),
            None => Ok(()),
        }
    }

    fn closed(&self) -> RegistryError {
        RegistryError::Metadata(MetadataError::Closed {
            op: Operation::Watch,
            path: format!("leader election of `{}`", self.node_id),
        })
    }
}

impl Drop for LeaderElection {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

struct Candidate {
    registry: Registry,
    node_id: String,
    dir: String,
    /// The child name of this candidate's node, while it is known to exist.
    own: Option<String>,
    /// The children listed before a create whose reply was lost, until the
    /// node it may have made is looked for.
    pending: Option<Vec<String>>,
}

impl Candidate {
    /// Makes sure this candidate has a node, then reads who leads.
    async fn step(&mut self) -> Result<ElectionState> {
        let store = self.registry.store.clone();
        for _ in 0..crate::MAX_CAS_ATTEMPTS {
            let mut children = store.children(&self.dir).await?;
            if let Some(before) = self.pending.take() {
                match self.find_lost_create(&children, &before).await {
                    Ok(found) => self.own = found,
                    Err(e) => {
                        self.pending = Some(before);
                        return Err(e);
                    }
                }
            }
            if !self.own.as_ref().is_some_and(|own| children.contains(own)) {
                self.own = None;
                match store
                    .create(
                        &format!("{}/n-", self.dir),
                        self.node_id.as_bytes(),
                        CreateMode::EPHEMERAL_SEQUENTIAL,
                    )
                    .await
                {
                    Ok((path, _)) => {
                        let name = path.rsplit('/').next().unwrap_or_default().to_owned();
                        self.own = Some(name);
                    }
                    Err(e) if e.kind() == ErrorKind::Unavailable => {
                        // The reply was lost: the node may exist. Look for it
                        // (next round) instead of creating a second one.
                        tracing::debug!(error = %e, node = %self.node_id, "leader election: candidate create unanswered");
                        self.pending = Some(children);
                        continue;
                    }
                    Err(e) => return Err(e.into()),
                }
                children = store.children(&self.dir).await?;
            }
            let mut live: Vec<&String> = children.iter().filter(|c| c.starts_with("n-")).collect();
            live.sort();
            let Some(lowest) = live.first().copied() else {
                continue;
            };
            // Every candidate's node id; a node gone since the listing is
            // skipped (the next notification reads the election again).
            let mut candidates = Vec::with_capacity(live.len());
            let mut leader = None;
            for child in &live {
                if self.own.as_ref() == Some(*child) {
                    candidates.push(self.node_id.clone());
                    if *child == lowest {
                        leader = Some(self.node_id.clone());
                    }
                    continue;
                }
                if let Some(r) = store.get(&format!("{}/{child}", self.dir)).await? {
                    let id = String::from_utf8_lossy(&r.value).into_owned();
                    if *child == lowest {
                        leader = Some(id.clone());
                    }
                    candidates.push(id);
                }
            }
            let Some(leader) = leader else {
                continue;
            };
            return Ok(ElectionState {
                is_leader: self.own.as_ref() == Some(lowest),
                leader: Some(leader),
                ended: false,
                candidates,
            });
        }
        Err(RegistryError::Conflict {
            path: self.dir.clone(),
            attempts: crate::MAX_CAS_ATTEMPTS,
        })
    }

    /// The node an unanswered create made, if it made one: the lowest
    /// ephemeral `n-` child that was not there before the create (`before`)
    /// and whose value is this candidate's node id.
    async fn find_lost_create(
        &self,
        children: &[String],
        before: &[String],
    ) -> Result<Option<String>> {
        let store = &self.registry.store;
        let mut fresh: Vec<&String> = children
            .iter()
            .filter(|c| c.starts_with("n-") && !before.contains(c))
            .collect();
        fresh.sort();
        for child in fresh {
            let Some(r) = store.get(&format!("{}/{child}", self.dir)).await? else {
                continue;
            };
            if r.stat.ephemeral && r.value == self.node_id.as_bytes() {
                tracing::debug!(node = %self.node_id, child, "leader election: adopting the node of an unanswered create");
                return Ok(Some(child.clone()));
            }
        }
        Ok(None)
    }

    /// Best effort after a failed first step: removes the node this candidate
    /// holds or that an unanswered create made, so that it cannot block the
    /// election while nobody follows it.
    async fn abandon(mut self) {
        if let Some(before) = self.pending.take() {
            if let Ok(children) = self.registry.store.children(&self.dir).await {
                if let Ok(Some(found)) = self.find_lost_create(&children, &before).await {
                    self.own = Some(found);
                }
            }
        }
        if let Some(own) = self.own.take() {
            let _ = self
                .registry
                .store
                .delete(&format!("{}/{own}", self.dir), ExpectedVersion::Any)
                .await;
        }
    }

    async fn run(
        mut self,
        mut stream: WatchStream,
        state: watch::Sender<ElectionState>,
        mut stop: watch::Receiver<bool>,
    ) -> Result<()> {
        let mut retry = false;
        loop {
            tokio::select! {
                biased;
                changed = stop.changed() => {
                    if changed.is_err() || *stop.borrow() {
                        break;
                    }
                    continue;
                }
                n = stream.next() => {
                    let Some(n) = n else { break };
                    let mut lost = is_loss(&n);
                    while let Some(n) = stream.try_next() {
                        lost = is_loss(&n);
                    }
                    if lost {
                        state.send_modify(|s| {
                            s.is_leader = false;
                            s.leader = None;
                            s.candidates.clear();
                        });
                        continue;
                    }
                }
                () = tokio::time::sleep(ELECTION_RETRY_DELAY), if retry => {}
            }
            if *stop.borrow() {
                break;
            }
            match self.step().await {
                Ok(s) => {
                    retry = false;
                    state.send_replace(s);
                }
                Err(RegistryError::Metadata(e)) if e.kind() == ErrorKind::Closed => break,
                Err(e) => {
                    tracing::debug!(error = %e, node = %self.node_id, "leader election: retrying");
                    state.send_modify(|s| {
                        s.is_leader = false;
                        s.leader = None;
                        s.candidates.clear();
                    });
                    retry = true;
                }
            }
        }
        state.send_replace(ElectionState {
            leader: None,
            is_leader: false,
            ended: true,
            candidates: Vec::new(),
        });
        if let Some(before) = self.pending.take() {
            if let Ok(children) = self.registry.store.children(&self.dir).await {
                if let Ok(Some(found)) = self.find_lost_create(&children, &before).await {
                    self.own = Some(found);
                }
            }
        }
        match self.own.take() {
            Some(own) => match self
                .registry
                .store
                .delete(&format!("{}/{own}", self.dir), ExpectedVersion::Any)
                .await
            {
                Ok(()) => Ok(()),
                Err(e) if matches!(e.kind(), ErrorKind::NotFound | ErrorKind::Closed) => Ok(()),
                Err(e) => Err(e.into()),
            },
            None => Ok(()),
        }
    }
}

/// Whether the last queued notification says the connection or session is
/// gone (a later reconnection notification clears it).
fn is_loss(n: &Notification) -> bool {
    matches!(
        n,
        Notification::Session(SessionEvent::ConnectionLost | SessionEvent::SessionExpired)
    )
}
