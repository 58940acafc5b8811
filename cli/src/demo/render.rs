//! The human report of a demo run (what `bookie-switch demo` prints).

use super::report::DemoReport;

/// Renders a report for humans.
pub fn render(report: &DemoReport) -> String {
    let mut s = String::new();
    let p = |name: &str| report.traffic.phases.get(name).cloned().unwrap_or_default();
    s.push_str("\n=== bookie cluster switch: report ===\n");
    s.push_str(&format!(
        "topology        {} nodes, {} topics, metadata on {}, bookie clusters {}\n",
        report.nodes, report.topics, report.metadata_store, report.bookkeeper
    ));
    s.push_str("publish         phase     msgs/s    p50 ms   p99 ms   count\n");
    for name in ["before", "during", "after"] {
        let ph = p(name);
        s.push_str(&format!(
            "                {:<8} {:>8.0} {:>9.2} {:>8.2} {:>7}\n",
            name,
            ph.throughput_per_sec,
            ph.p50_us as f64 / 1000.0,
            ph.p99_us as f64 / 1000.0,
            ph.published
        ));
    }
    s.push_str(&format!(
        "traffic         {} published, {} consumed, {} publish failures, {} gaps, {} redeliveries\n",
        report.published,
        report.consumed,
        report.publish_failures,
        report.consumer_gaps,
        report.consumer_duplicates
    ));
    s.push_str(&format!(
        "switch          visible on all nodes {} ms (directive write → last swap {} ms), all writes on 'new' {} ms, BUILD+PROMOTE {} ms\n",
        report.switch_visible_ms,
        report.directive_visible_ms,
        report.all_writes_moved_ms,
        report.build_promote_ms
    ));
    s.push_str(&format!(
        "ledgers         {} copied, {} schema + {} cursor promoted, {} rollover fallbacks, {} failed\n",
        report.ledgers_copied,
        report.schemas_promoted,
        report.cursors_promoted,
        report.rollover_fallbacks,
        report.failed_ledgers
    ));
    s.push_str(&format!("outcome         {}\n", report.outcome));
    s.push_str("invariants\n");
    for c in &report.invariants {
        s.push_str(&format!(
            "  [{}] {} — {}\n",
            if c.ok { "ok" } else { "FAILED" },
            c.name,
            c.detail
        ));
    }
    s.push_str(&format!(
        "result          {}\n",
        if report.invariants_ok {
            "every invariant held"
        } else {
            "SOME INVARIANTS FAILED"
        }
    ));
    s
}
