//! [`metadata_store_conformance_tests!`](crate::metadata_store_conformance_tests):
//! one `#[test]` per rule.

/// Expand to one plain `#[test]` per conformance rule, each running the rule
/// against the environment `$env` on [`testkit::block_on`](crate::testkit::block_on)
/// (so the test file needs no tokio macros), plus a test `macro_lists_every_rule`
/// that checks the expansion covers every rule of
/// [`RULE_NAMES`](crate::testkit::RULE_NAMES). `$env` is an expression evaluated
/// inside each test's runtime, so it may `.await`. Put the invocation in its own
/// module to keep the test names apart:
///
/// ```
/// mod memory_conformance {
///     use bkswitch_metadata_store::testkit::MemoryTestEnv;
///     bkswitch_metadata_store::metadata_store_conformance_tests!(MemoryTestEnv);
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! metadata_store_conformance_tests {
    ($env:expr) => {
        $crate::__metadata_store_conformance_tests! { $env;
            get_put_versions,
            put_creates_parents,
            put_not_exists_on_existing_fails,
            put_exactly_on_missing_is_not_found,
            put_wrong_version_is_bad_version,
            cas_race_exactly_one_writer_wins,
            create_if_absent_race_exactly_one_wins,
            delete_versions_and_errors,
            children_sorted_and_missing_is_empty,
            sequential_names_follow_cversion,
            cversion_counts_child_creations_and_deletions,
            ephemeral_nodes_end_with_their_session,
            invalid_paths_change_nothing,
            oversized_values_are_rejected,
            notify_created_modified_deleted,
            notify_children_changed,
            notify_latest_value_is_never_lost,
            watch_streams_are_independent,
            closed_store_fails_and_ends_streams,
            extension_helpers,
            root_node,
            version_import_when_offered,
            sequential_counter_import,
            put_version_writes_as_put_does,
        }
    };
}

/// Implementation detail of
/// [`metadata_store_conformance_tests!`](crate::metadata_store_conformance_tests).
#[doc(hidden)]
#[macro_export]
macro_rules! __metadata_store_conformance_tests {
    ($env:expr; $($rule:ident,)*) => {
        $(
            #[test]
            fn $rule() {
                $crate::testkit::block_on(async {
                    let env = $env;
                    if let ::core::result::Result::Err(failure) =
                        $crate::testkit::rules::$rule(&env).await
                    {
                        ::core::panic!("{}", failure);
                    }
                });
            }
        )*

        #[test]
        fn macro_lists_every_rule() {
            let listed: &[&str] = &[$(::core::stringify!($rule)),*];
            ::core::assert_eq!(
                listed,
                $crate::testkit::RULE_NAMES,
                "metadata_store_conformance_tests! must expand to every rule of testkit::RULE_NAMES, in order"
            );
        }
    };
}
