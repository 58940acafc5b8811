//! Topic ownership: an ephemeral node `<owners root>/<encoded topic>` names the
//! node that owns a topic and its REST URL ([`Ownership`]), so that a
//! coordinator anywhere promotes a cursor on its owner
//! ([I13](bkswitch_docs::invariants::I13)): in process when it owns the topic
//! itself, otherwise over HTTP (`POST /internal/promote-cursor`). The node
//! disappears with its owner's session; the coordinator then promotes the
//! cursor itself.

use std::sync::Arc;

use async_trait::async_trait;
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, MetadataError, MetadataStore,
};
use bkswitch_switch_orchestrator::adapters::LocalTopics;
use bkswitch_switch_orchestrator::{
    CursorPromoteOutcome, CursorPromoteRequest, CursorPromoter, OrchestratorError, PromoteError,
    TopicOwners,
};
use serde::{Deserialize, Serialize};

use crate::client::{AdminClient, ClientError};
use crate::wire::PromoteCursorRequest;

/// Default root of the topic-ownership nodes.
pub const DEFAULT_OWNERS_ROOT: &str = "/bkswitch/topic-owners";

/// The value of a topic-ownership node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Ownership {
    /// The owning node.
    pub node_id: String,
    /// Its REST base URL.
    pub url: String,
}

/// The ownership node of `topic` under `root`.
pub(super) fn owner_path(root: &str, topic: &str) -> String {
    format!("{root}/{}", encode_topic(topic))
}

/// `/` in topic names becomes `%2F` in the ownership node name.
fn encode_topic(topic: &str) -> String {
    let mut out = String::with_capacity(topic.len());
    for b in topic.bytes() {
        if b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What [`claim`] found.
#[derive(Debug)]
pub(super) enum Claim {
    /// `owner` now owns the topic (its ephemeral node, in this session).
    Claimed,
    /// Another live node owns it.
    OwnedBy(Ownership),
}

/// Claims the topic at `path` for `owner` with an ephemeral node in this
/// session, by compare-and-set only: two nodes can never both believe they
/// own a topic. A node left by an earlier session of the same node id (a
/// restart before that session expired) is replaced — deleted at the version
/// read, then created in this session, so the claim does not vanish when the
/// old session expires. A node naming another node id is never overwritten.
pub(super) async fn claim(
    store: &dyn MetadataStore,
    path: &str,
    owner: &Ownership,
) -> Result<Claim, MetadataError> {
    let value = serde_json::to_vec(owner).unwrap_or_default();
    for _ in 0..CLAIM_ATTEMPTS {
        match store.create(path, &value, CreateMode::EPHEMERAL).await {
            Ok(_) => return Ok(Claim::Claimed),
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {}
            Err(e) => return Err(e),
        }
        let Some(current) = store.get(path).await? else {
            continue; // released meanwhile: create again
        };
        match serde_json::from_slice::<Ownership>(&current.value) {
            Ok(o) if o.node_id != owner.node_id => return Ok(Claim::OwnedBy(o)),
            // Ours from an earlier session, or unreadable: replace it.
            _ => match store
                .delete(path, ExpectedVersion::Exactly(current.stat.version))
                .await
            {
                Ok(()) => {}
                Err(e) if e.is_conflict() || e.kind() == ErrorKind::NotFound => {}
                Err(e) => return Err(e),
            },
        }
    }
    match store.get(path).await? {
        Some(r) => match serde_json::from_slice::<Ownership>(&r.value) {
            Ok(o) if o.node_id != owner.node_id => Ok(Claim::OwnedBy(o)),
            _ => Ok(Claim::Claimed),
        },
        None => Ok(Claim::OwnedBy(Ownership {
            node_id: "<unknown>".to_owned(),
            url: String::new(),
        })),
    }
}

/// How many create / read / delete rounds [`claim`] makes before giving up.
const CLAIM_ATTEMPTS: usize = 8;

/// Deletes the ownership node at `path` if it names `node_id` (best effort).
pub(super) async fn release(store: &dyn MetadataStore, path: &str, node_id: &str) {
    if let Ok(Some(r)) = store.get(path).await {
        if serde_json::from_slice::<Ownership>(&r.value)
            .map(|o| o.node_id == node_id)
            .unwrap_or(false)
        {
            let _ = store
                .delete(path, ExpectedVersion::Exactly(r.stat.version))
                .await;
        }
    }
}

/// Topic ownership from the ownership nodes: this node's topics are promoted
/// in process, other nodes' over HTTP.
pub(crate) struct NodeOwners {
    pub(crate) store: Arc<dyn MetadataStore>,
    pub(crate) root: String,
    pub(crate) node_id: String,
    pub(crate) local: Arc<LocalTopics>,
    pub(crate) internal_token: String,
    /// The TLS client settings of calls to `https://` nodes.
    pub(crate) tls: Option<Arc<rustls::ClientConfig>>,
}

#[async_trait]
impl TopicOwners for NodeOwners {
    async fn owner(
        &self,
        managed_ledger: &str,
    ) -> bkswitch_switch_orchestrator::Result<Option<Arc<dyn CursorPromoter>>> {
        let path = owner_path(&self.root, managed_ledger);
        let found = self
            .store
            .get(&path)
            .await
            .map_err(|e| OrchestratorError::Metadata {
                what: format!("reading the owner of '{managed_ledger}' at '{path}'"),
                source: e,
            })?;
        let Some(r) = found else {
            return Ok(None);
        };
        let Ok(o) = serde_json::from_slice::<Ownership>(&r.value) else {
            tracing::warn!(path = %path, "unreadable ownership node; treating the topic as unowned");
            return Ok(None);
        };
        if o.node_id == self.node_id {
            return Ok(Some(self.local.clone()));
        }
        Ok(Some(Arc::new(HttpPromoter {
            url: o.url,
            node_id: o.node_id,
            token: self.internal_token.clone(),
            tls: self.tls.clone(),
        })))
    }
}

/// The HTTP [`CursorPromoter`]: `POST <owner>/admin/v2/bookie-clusters/internal/promote-cursor`
/// with the node-to-node token.
struct HttpPromoter {
    url: String,
    node_id: String,
    token: String,
    tls: Option<Arc<rustls::ClientConfig>>,
}

#[async_trait]
impl CursorPromoter for HttpPromoter {
    async fn promote_cursor(
        &self,
        req: &CursorPromoteRequest,
    ) -> Result<CursorPromoteOutcome, PromoteError> {
        let owner = &self.node_id;
        let client =
            AdminClient::with_tls(&self.url, &self.token, self.tls.clone()).map_err(|e| {
                PromoteError::Unavailable {
                    reason: format!("owner node {owner} at {}: {e}", self.url),
                }
            })?;
        match client
            .promote_cursor(&PromoteCursorRequest::from(req))
            .await
        {
            Ok(resp) => resp.cursor_outcome().ok_or_else(|| PromoteError::Other {
                reason: format!("owner node {owner} answered ROLLED_OVER without newLedgerId"),
            }),
            Err(e) => Err(refusal(owner, req, e)),
        }
    }
}

/// The owner's refusal as a [`PromoteError`]: the one it sent as details, or
/// one made from the HTTP status.
fn refusal(owner: &str, req: &CursorPromoteRequest, e: ClientError) -> PromoteError {
    let ClientError::Api {
        status,
        details,
        message,
        ..
    } = e
    else {
        return PromoteError::Unavailable {
            reason: format!("owner node {owner} unreachable: {e}"),
        };
    };
    if let Some(e) = details.and_then(|d| serde_json::from_value::<PromoteError>(d).ok()) {
        return e;
    }
    match status {
        // A 409 that does not say which ledger the cursor records cannot be
        // taken for "rolled over" (that would record ledger -1 and drop the
        // copy): the promotion failed, the cursor stays where it is.
        409 => PromoteError::Other {
            reason: format!(
                "owner node {owner} refused to promote cursor `{}` of `{}` (HTTP 409) without \
                 saying which ledger the cursor records ({message}); the cursor stays on its \
                 cluster: check the owner runs the same version, then start a new switch",
                req.cursor_name, req.managed_ledger
            ),
        },
        404 => PromoteError::NotOwner {
            managed_ledger: req.managed_ledger.clone(),
            cursor: req.cursor_name.clone(),
        },
        _ => PromoteError::Unavailable {
            reason: format!("owner node {owner}: {message}"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> CursorPromoteRequest {
        CursorPromoteRequest {
            managed_ledger: "t/ns/persistent/a".into(),
            cursor_name: "sub".into(),
            target_cluster_name: "new".into(),
            expected_cursors_ledger_id: 7,
            copied_last_entry_id: 3,
        }
    }

    fn api(status: u16, details: Option<serde_json::Value>) -> ClientError {
        ClientError::Api {
            status,
            code: "CONFLICT".into(),
            message: "conflict".into(),
            field: None,
            details,
        }
    }

    #[test]
    fn a_409_without_details_is_not_taken_for_a_rollover() {
        let e = refusal("node-2", &request(), api(409, None));
        assert!(
            matches!(&e, PromoteError::Other { reason }
                if reason.contains("node-2") && reason.contains("`sub`")),
            "{e:?}"
        );
    }

    #[test]
    fn a_409_with_details_keeps_the_owners_answer() {
        let sent = PromoteError::RolledOver {
            managed_ledger: "t/ns/persistent/a".into(),
            cursor: "sub".into(),
            expected: 7,
            actual: 9,
        };
        let details = serde_json::to_value(&sent).unwrap();
        assert_eq!(refusal("node-2", &request(), api(409, Some(details))), sent);
    }
}
