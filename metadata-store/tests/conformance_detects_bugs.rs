//! The suite must catch broken implementations: each wrapper below breaks one
//! rule of the `MetadataStore` contract on top of `MemoryStore`, and `run_all`
//! must name that rule.

use std::sync::Arc;

use bkswitch_metadata_store::testkit::{
    all_rules, async_trait, run_all, run_rule, MetadataStoreTestEnv, TestNamespace,
};
use bkswitch_metadata_store::{
    CreateMode, ErrorKind, ExpectedVersion, GetResult, MemoryStore, MetadataError, MetadataStore,
    Result, Stat, WatchStream,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Bug {
    /// `put` expecting a version writes whatever the node's version is.
    PutIgnoresVersion,
    /// `children` lists names in reverse order.
    ChildrenUnsorted,
    /// Deleting a missing node succeeds.
    DeleteOfMissingSucceeds,
    /// A counter import stops one short (the next suffix repeats one the
    /// source gave out).
    CounterImportOneShort,
    /// `put_version` answers the version the node had, not the new one.
    PutVersionAnswersTheOldVersion,
}

#[derive(Debug)]
struct Buggy {
    inner: MemoryStore,
    bug: Bug,
}

#[async_trait]
#[deny(clippy::missing_trait_methods)]
impl MetadataStore for Buggy {
    async fn get(&self, path: &str) -> Result<Option<GetResult>> {
        self.inner.get(path).await
    }

    async fn put(&self, path: &str, value: &[u8], expected: ExpectedVersion) -> Result<Stat> {
        let expected = match (self.bug, expected) {
            (Bug::PutIgnoresVersion, ExpectedVersion::Exactly(_))
                if self.inner.exists(path).await?.is_some() =>
            {
                ExpectedVersion::Any
            }
            (_, expected) => expected,
        };
        self.inner.put(path, value, expected).await
    }

    async fn put_version(
        &self,
        path: &str,
        value: &[u8],
        expected: ExpectedVersion,
    ) -> Result<i64> {
        let v = self.put(path, value, expected).await?.version;
        Ok(match self.bug {
            Bug::PutVersionAnswersTheOldVersion => v - 1,
            _ => v,
        })
    }

    async fn create(&self, path: &str, value: &[u8], mode: CreateMode) -> Result<(String, Stat)> {
        self.inner.create(path, value, mode).await
    }

    async fn delete(&self, path: &str, expected: ExpectedVersion) -> Result<()> {
        match (self.bug, self.inner.delete(path, expected).await) {
            (Bug::DeleteOfMissingSucceeds, Err(e)) if e.kind() == ErrorKind::NotFound => Ok(()),
            (_, r) => r,
        }
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>> {
        self.inner.exists(path).await
    }

    async fn children(&self, path: &str) -> Result<Vec<String>> {
        let mut children = self.inner.children(path).await?;
        if self.bug == Bug::ChildrenUnsorted {
            children.reverse();
        }
        Ok(children)
    }

    async fn watch(&self, path: &str) -> Result<WatchStream> {
        self.inner.watch(path).await
    }

    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }

    fn can_import_versions(&self) -> bool {
        self.inner.can_import_versions()
    }

    fn session_generation(&self) -> Option<u64> {
        self.inner.session_generation()
    }

    async fn import_version(&self, path: &str, value: &[u8], version: i64) -> Result<Stat> {
        self.inner.import_version(path, value, version).await
    }

    async fn import_sequential_counter(&self, path: &str, next: i64) -> Result<Stat> {
        let next = if self.bug == Bug::CounterImportOneShort {
            next - 1
        } else {
            next
        };
        self.inner.import_sequential_counter(path, next).await
    }
}

struct BuggyEnv(Bug);

struct BuggyNamespace {
    root: MemoryStore,
    bug: Bug,
}

#[async_trait]
impl MetadataStoreTestEnv for BuggyEnv {
    async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
        Ok(Box::new(BuggyNamespace {
            root: MemoryStore::new(),
            bug: self.0,
        }))
    }
}

#[async_trait]
impl TestNamespace for BuggyNamespace {
    async fn session(&self) -> Result<Arc<dyn MetadataStore>> {
        Ok(Arc::new(Buggy {
            inner: self.root.new_session(),
            bug: self.bug,
        }))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn detects_each_injected_bug() {
    let cases = [
        (Bug::PutIgnoresVersion, "put_wrong_version_is_bad_version"),
        (
            Bug::ChildrenUnsorted,
            "children_sorted_and_missing_is_empty",
        ),
        (Bug::DeleteOfMissingSucceeds, "delete_versions_and_errors"),
        (Bug::CounterImportOneShort, "sequential_counter_import"),
        (
            Bug::PutVersionAnswersTheOldVersion,
            "put_version_writes_as_put_does",
        ),
    ];
    for (bug, rule) in cases {
        let report = run_all(&BuggyEnv(bug))
            .await
            .expect_err("a broken implementation must fail the suite");
        let failing: Vec<_> = report.failures.iter().map(|f| f.rule).collect();
        assert!(
            failing.contains(&rule),
            "{bug:?} should fail `{rule}`, failing rules: {failing:?}"
        );
        let text = report.to_string();
        assert!(text.contains(rule), "{text}");
        assert!(text.contains("metadata-store conformance rule"), "{text}");
    }
}

#[tokio::test]
async fn a_failing_environment_is_reported_under_the_rule_name() {
    struct Unreachable;
    #[async_trait]
    impl MetadataStoreTestEnv for Unreachable {
        async fn namespace(&self) -> Result<Box<dyn TestNamespace>> {
            Err(MetadataError::Unavailable {
                op: bkswitch_metadata_store::Operation::Connect,
                path: "/".to_owned(),
                reason: "the store is down".to_owned(),
            })
        }
    }
    let rules = all_rules::<Unreachable>();
    let failure = run_rule(&rules[0], &Unreachable).await.unwrap_err();
    assert_eq!(failure.rule, "get_put_versions");
    assert!(failure.detail.contains("the store is down"), "{failure}");
}
