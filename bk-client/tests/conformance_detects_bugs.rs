//! The suite must catch broken implementations: each wrapper below breaks one
//! BookKeeper rule on top of `MemoryBookKeeper`, and `run_all` must name that rule.

use std::sync::Arc;

use bkswitch_bk_client::testkit::{async_trait, run_all, BookKeeperTestEnv};
use bkswitch_bk_client::{
    BkError, BkErrorKind, BookKeeper, DeleteMissing, DigestType, EntryId, LedgerConfig,
    LedgerEntry, LedgerId, LedgerMetadata, MemoryBookKeeper, MemoryCluster, ReadHandle, Result,
    WriteHandle,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    NoRecoveryFences,
    PasswordIgnored,
    AdvTouchesIdGenerator,
    ReadIgnoresLac,
    WrongMissingOpenCode,
    QuorumNotValidated,
}

#[derive(Debug)]
struct Buggy {
    inner: MemoryBookKeeper,
    bug: Bug,
}

#[derive(Debug)]
struct LacIgnoringReader(Arc<dyn ReadHandle>);

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl ReadHandle for LacIgnoringReader {
    fn id(&self) -> LedgerId {
        self.0.id()
    }
    fn metadata(&self) -> LedgerMetadata {
        self.0.metadata()
    }
    async fn read_entries(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        self.0.read_unconfirmed(first, last).await
    }
    async fn read_unconfirmed(&self, first: EntryId, last: EntryId) -> Result<Vec<LedgerEntry>> {
        self.0.read_unconfirmed(first, last).await
    }
    fn last_add_confirmed(&self) -> EntryId {
        self.0.last_add_confirmed()
    }
    async fn read_last_add_confirmed(&self) -> Result<EntryId> {
        self.0.read_last_add_confirmed().await
    }
    fn length(&self) -> u64 {
        self.0.length()
    }
    fn is_closed(&self) -> bool {
        self.0.is_closed()
    }
    async fn close(&self) -> Result<()> {
        self.0.close().await
    }
}

impl Buggy {
    fn wrap(&self, r: Result<Arc<dyn ReadHandle>>) -> Result<Arc<dyn ReadHandle>> {
        match (self.bug, r) {
            (Bug::ReadIgnoresLac, Ok(h)) => Ok(Arc::new(LacIgnoringReader(h))),
            (Bug::WrongMissingOpenCode, Err(e))
                if e.kind() == BkErrorKind::NoSuchLedgerOnMetadataServer =>
            {
                Err(BkError::new(
                    BkErrorKind::NoSuchLedger,
                    e.message().to_string(),
                ))
            }
            (_, r) => r,
        }
    }

    fn password(&self, id: LedgerId, given: &[u8]) -> Vec<u8> {
        match (self.bug, self.inner.cluster().ledger_metadata(id)) {
            (Bug::PasswordIgnored, Some(m)) => m.password,
            _ => given.to_vec(),
        }
    }

    fn config(&self, config: &LedgerConfig) -> LedgerConfig {
        let mut c = config.clone();
        if self.bug == Bug::QuorumNotValidated {
            c.write_quorum_size = c.write_quorum_size.min(c.ensemble_size);
            c.ack_quorum_size = c.ack_quorum_size.clamp(1, c.write_quorum_size);
        }
        c
    }
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl BookKeeper for Buggy {
    async fn advance_ledger_ids_beyond(
        &self,
        _above: bkswitch_bk_client::LedgerId,
    ) -> bkswitch_bk_client::Result<()> {
        Err(bkswitch_bk_client::BkError::new(
            bkswitch_bk_client::BkErrorKind::IllegalOp,
            "this test client has no ledger id generator to advance",
        ))
    }

    fn cluster_name(&self) -> &str {
        self.inner.cluster_name()
    }

    async fn create_ledger(&self, config: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
        self.inner.create_ledger(&self.config(config)).await
    }

    async fn create_ledger_adv(
        &self,
        ledger_id: LedgerId,
        config: &LedgerConfig,
    ) -> Result<Arc<dyn WriteHandle>> {
        let h = self
            .inner
            .create_ledger_adv(ledger_id, &self.config(config))
            .await?;
        if self.bug == Bug::AdvTouchesIdGenerator {
            let _ = self.inner.cluster().advance_ledger_id_to(ledger_id + 1);
        }
        Ok(h)
    }

    async fn open_ledger(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let password = self.password(ledger_id, password);
        let r = self
            .inner
            .open_ledger(ledger_id, digest_type, &password)
            .await;
        self.wrap(r)
    }

    async fn open_ledger_no_recovery(
        &self,
        ledger_id: LedgerId,
        digest_type: DigestType,
        password: &[u8],
    ) -> Result<Arc<dyn ReadHandle>> {
        let password = self.password(ledger_id, password);
        let r = if self.bug == Bug::NoRecoveryFences {
            self.inner
                .open_ledger(ledger_id, digest_type, &password)
                .await
        } else {
            self.inner
                .open_ledger_no_recovery(ledger_id, digest_type, &password)
                .await
        };
        self.wrap(r)
    }

    async fn delete_ledger(&self, ledger_id: LedgerId) -> Result<()> {
        self.inner.delete_ledger(ledger_id).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    fn writable_bookies(&self) -> Option<usize> {
        self.inner.writable_bookies()
    }
}

struct BuggyEnv {
    cluster: MemoryCluster,
    bug: Bug,
}

#[async_trait]
impl BookKeeperTestEnv for BuggyEnv {
    type Client = Arc<dyn BookKeeper>;

    async fn client(&self) -> Arc<dyn BookKeeper> {
        Arc::new(Buggy {
            inner: self.cluster.client(),
            bug: self.bug,
        })
    }

    fn delete_missing(&self) -> DeleteMissing {
        DeleteMissing::Succeed
    }

    fn ledger_config(&self) -> LedgerConfig {
        LedgerConfig::default()
    }
}

async fn failing_rules(bug: Bug) -> (Vec<&'static str>, String) {
    let env = BuggyEnv {
        cluster: MemoryCluster::new("buggy"),
        bug,
    };
    let report = run_all(&env)
        .await
        .expect_err("a broken implementation must fail the suite");
    (
        report.failures.iter().map(|f| f.rule).collect(),
        report.to_string(),
    )
}

#[tokio::test]
async fn detects_each_injected_bug() {
    let cases = [
        (Bug::NoRecoveryFences, "no_recovery_open_does_not_fence"),
        (Bug::PasswordIgnored, "password_mismatch_is_unauthorized"),
        (
            Bug::AdvTouchesIdGenerator,
            "adv_does_not_touch_id_generator",
        ),
        (Bug::ReadIgnoresLac, "read_beyond_lac_is_read_exception"),
        (
            Bug::WrongMissingOpenCode,
            "open_missing_ledger_is_no_such_ledger_on_metadata_server",
        ),
        (Bug::QuorumNotValidated, "create_rejects_invalid_quorums"),
    ];
    for (bug, rule) in cases {
        let (failing, report) = failing_rules(bug).await;
        assert!(
            failing.contains(&rule),
            "{bug:?} should fail `{rule}`, failing rules: {failing:?}"
        );
        assert!(report.contains(rule), "{report}");
        assert!(report.contains("BookKeeper conformance rule"), "{report}");
    }
}

#[tokio::test]
async fn a_panicking_client_is_reported_under_the_rule_name() {
    use bkswitch_bk_client::testkit::{all_rules, run_rule};

    #[derive(Debug)]
    struct Panicky;
    #[async_trait]
    impl BookKeeper for Panicky {
        async fn advance_ledger_ids_beyond(
            &self,
            _above: bkswitch_bk_client::LedgerId,
        ) -> bkswitch_bk_client::Result<()> {
            Err(bkswitch_bk_client::BkError::new(
                bkswitch_bk_client::BkErrorKind::IllegalOp,
                "this test client has no ledger id generator to advance",
            ))
        }

        fn writable_bookies(&self) -> Option<usize> {
            None
        }

        fn cluster_name(&self) -> &str {
            "panicky"
        }
        async fn create_ledger(&self, _: &LedgerConfig) -> Result<Arc<dyn WriteHandle>> {
            panic!("create_ledger is broken")
        }
        async fn create_ledger_adv(
            &self,
            _: LedgerId,
            _: &LedgerConfig,
        ) -> Result<Arc<dyn WriteHandle>> {
            panic!("create_ledger_adv is broken")
        }
        async fn open_ledger(
            &self,
            _: LedgerId,
            _: DigestType,
            _: &[u8],
        ) -> Result<Arc<dyn ReadHandle>> {
            panic!("open_ledger is broken")
        }
        async fn open_ledger_no_recovery(
            &self,
            _: LedgerId,
            _: DigestType,
            _: &[u8],
        ) -> Result<Arc<dyn ReadHandle>> {
            panic!("open_ledger_no_recovery is broken")
        }
        async fn delete_ledger(&self, _: LedgerId) -> Result<()> {
            panic!("delete_ledger is broken")
        }
        async fn close(&self) -> Result<()> {
            Ok(())
        }
    }
    struct PanickyEnv;
    #[async_trait]
    impl BookKeeperTestEnv for PanickyEnv {
        type Client = Panicky;
        async fn client(&self) -> Panicky {
            Panicky
        }
        fn delete_missing(&self) -> DeleteMissing {
            DeleteMissing::Succeed
        }
        fn ledger_config(&self) -> LedgerConfig {
            LedgerConfig::default()
        }
    }
    let rules = all_rules::<PanickyEnv>();
    let failure = run_rule(&rules[1], &PanickyEnv).await.unwrap_err();
    assert_eq!(failure.rule, "create_allocates_distinct_increasing_ids");
    assert!(
        failure.detail.contains("create_ledger is broken"),
        "{failure}"
    );
}
