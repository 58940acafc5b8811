//! Failpoints of the registry's writes (the `fail` crate), compiled in only with
//! the `failpoints` feature; without it every check is a no-op.
//!
//! Every JSON write of the registry passes through one failpoint named after
//! what it writes, so a fault-matrix test can fail (or "crash" at) any of them:
//!
//! | failpoint | write |
//! |---|---|
//! | `registry::write::record` | a cluster record (register, status flips) |
//! | `registry::write::active` | the `active` marker (claim and commit of a promotion) |
//! | `registry::write::directive` | the `switch-target` directive |
//! | `registry::write::bootstrap` | the bootstrap marker |
//!
//! An injected fault is reported as the metadata store being unavailable
//! (retryable; the write did not happen), which is what a crash of the writer
//! or a lost connection looks like to the caller.

use crate::error::Result;

/// Every failpoint name of the registry.
pub const FAILPOINTS: &[&str] = &[
    "registry::write::record",
    "registry::write::active",
    "registry::write::directive",
    "registry::write::bootstrap",
];

static INJECTED: [std::sync::atomic::AtomicU64; 4] = [
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
    std::sync::atomic::AtomicU64::new(0),
];

/// How many faults `point` injected so far in this process (always 0 without
/// the `failpoints` feature). Lets a test tell a fault the registry absorbed
/// (e.g. by re-reading after an ambiguous write) from one never reached.
pub fn injected(point: &str) -> u64 {
    FAILPOINTS.iter().position(|p| *p == point).map_or(0, |i| {
        INJECTED[i].load(std::sync::atomic::Ordering::Relaxed)
    })
}

/// The failpoint guarding a write to `path`.
pub(crate) fn point_for(path: &str) -> &'static str {
    match path.rsplit('/').next().unwrap_or_default() {
        "active" => "registry::write::active",
        "switch-target" => "registry::write::directive",
        "bootstrap" => "registry::write::bootstrap",
        _ => "registry::write::record",
    }
}

/// Fails the write to `path` when its failpoint is configured.
#[allow(clippy::unnecessary_wraps)]
pub(crate) fn write_fault(path: &str) -> Result<()> {
    let _point = point_for(path);
    let _ = path;
    fail::fail_point!(_point, |_| Err(
        bkswitch_metadata_store::MetadataError::Unavailable {
            op: bkswitch_metadata_store::Operation::Put,
            path: path.to_owned(),
            reason: format!("failpoint `{_point}` injected a fault"),
        }
        .into()
    ));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_registry_path_has_its_failpoint() {
        assert_eq!(
            point_for("/admin/bookie-clusters/active"),
            "registry::write::active"
        );
        assert_eq!(
            point_for("/admin/bookie-clusters/switch-target"),
            "registry::write::directive"
        );
        assert_eq!(
            point_for("/admin/bookie-clusters/bootstrap"),
            "registry::write::bootstrap"
        );
        assert_eq!(
            point_for("/admin/bookie-clusters/new"),
            "registry::write::record"
        );
        for p in FAILPOINTS {
            assert!(p.starts_with("registry::write::"));
        }
    }
}
