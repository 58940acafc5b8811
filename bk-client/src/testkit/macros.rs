//! [`bk_conformance_tests!`](crate::bk_conformance_tests): one `#[test]` per rule.

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
///     use bkswitch_bk_client::testkit::MemoryBookKeeperTestEnv;
///     bkswitch_bk_client::bk_conformance_tests!(MemoryBookKeeperTestEnv::new());
/// }
/// # fn main() {}
/// ```
#[macro_export]
macro_rules! bk_conformance_tests {
    ($env:expr) => {
        $crate::__bk_conformance_tests! { $env;
            create_rejects_invalid_quorums,
            create_allocates_distinct_increasing_ids,
            new_ledger_is_open_and_empty,
            create_skips_ids_taken_by_adv,
            adv_does_not_touch_id_generator,
            adv_existing_id_is_ledger_exists,
            adv_negative_id_is_invalid,
            adv_stores_custom_metadata_as_given,
            adv_duplicate_entry_checked_before_closed,
            add_on_closed_handle_is_ledger_closed,
            adv_out_of_order_lac_advances_contiguously,
            completions_in_entry_id_order,
            length_counts_confirmed_payload_bytes,
            close_seals_at_lac,
            close_fails_pending_adds_and_second_close_succeeds,
            recovery_open_fences_writer,
            recovery_closes_at_last_recoverable_entry,
            recovery_of_empty_ledger,
            no_recovery_open_does_not_fence,
            no_recovery_lac_refresh,
            open_closed_ledger_reports_sealed_state,
            open_missing_ledger_is_no_such_ledger_on_metadata_server,
            read_rejects_bad_ranges,
            read_beyond_lac_is_read_exception,
            read_unconfirmed_skips_lac_check,
            delete_missing_ledger_as_declared,
            delete_removes_ledger,
            illegal_op_mixing_add_styles,
            password_mismatch_is_unauthorized,
            clients_share_the_cluster,
            client_close_rejects_operations,
        }
    };
}

/// Implementation detail of [`bk_conformance_tests!`](crate::bk_conformance_tests).
#[doc(hidden)]
#[macro_export]
macro_rules! __bk_conformance_tests {
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
                "bk_conformance_tests! must expand to every rule of testkit::RULE_NAMES, in order"
            );
        }
    };
}
