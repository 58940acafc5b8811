//! One public async function per rule of BookKeeper's ledger API semantics, one
//! module per rule family.
//!
//! Each rule takes the [`BookKeeperTestEnv`](crate::testkit::BookKeeperTestEnv)
//! and returns a [`RuleResult`](crate::testkit::RuleResult) whose failure names
//! the rule and the check. They are independent and may run concurrently on one
//! cluster. Every rule is also re-exported here, so `testkit::rules::<rule>` names
//! it whatever its family.

pub mod add;
pub mod adv;
pub mod clients;
pub mod close;
pub mod create;
pub mod delete;
pub mod open;
pub mod read;
mod support;

pub use add::{
    add_on_closed_handle_is_ledger_closed, adv_out_of_order_lac_advances_contiguously,
    completions_in_entry_id_order, illegal_op_mixing_add_styles,
    length_counts_confirmed_payload_bytes,
};
pub use adv::{
    adv_does_not_touch_id_generator, adv_duplicate_entry_checked_before_closed,
    adv_existing_id_is_ledger_exists, adv_negative_id_is_invalid,
    adv_stores_custom_metadata_as_given,
};
pub use clients::{client_close_rejects_operations, clients_share_the_cluster};
pub use close::{close_fails_pending_adds_and_second_close_succeeds, close_seals_at_lac};
pub use create::{
    create_allocates_distinct_increasing_ids, create_rejects_invalid_quorums,
    create_skips_ids_taken_by_adv, new_ledger_is_open_and_empty,
};
pub use delete::{delete_missing_ledger_as_declared, delete_removes_ledger};
pub use open::{
    no_recovery_lac_refresh, no_recovery_open_does_not_fence,
    open_closed_ledger_reports_sealed_state,
    open_missing_ledger_is_no_such_ledger_on_metadata_server, password_mismatch_is_unauthorized,
    recovery_closes_at_last_recoverable_entry, recovery_of_empty_ledger,
    recovery_open_fences_writer,
};
pub use read::{
    read_beyond_lac_is_read_exception, read_rejects_bad_ranges, read_unconfirmed_skips_lac_check,
};
pub use support::FAR_BASE;
