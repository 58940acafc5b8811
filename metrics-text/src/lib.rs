#![doc = include_str!("../README.md")]
#![deny(missing_docs)]

/// The content type of OpenMetrics text (what Prometheus asks for).
pub const OPENMETRICS_CONTENT_TYPE: &str =
    "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// The content type of the classic Prometheus text format, for every other
/// client (`curl`, `promtool check metrics`).
pub const TEXT_CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// Turns OpenMetrics text (as `prometheus-client` encodes it) into the
/// classic Prometheus text format 0.0.4: a counter family is named with its
/// `_total` suffix in its `HELP`/`TYPE` lines, and the `# UNIT` and `# EOF`
/// lines are dropped. Samples are left as they are.
pub fn to_prometheus_text(openmetrics: &str) -> String {
    let counters: std::collections::HashSet<&str> = openmetrics
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.strip_suffix(" counter"))
        .collect();
    let mut out = String::with_capacity(openmetrics.len() + counters.len() * 12);
    for line in openmetrics.lines() {
        if line == "# EOF" || line.starts_with("# UNIT ") {
            continue;
        }
        let header = ["# HELP ", "# TYPE "]
            .into_iter()
            .find_map(|p| line.strip_prefix(p).map(|rest| (p, rest)));
        match header {
            Some((prefix, rest)) => {
                let (name, tail) = rest.split_once(' ').unwrap_or((rest, ""));
                out.push_str(prefix);
                out.push_str(name);
                if counters.contains(name) {
                    out.push_str("_total");
                }
                if !tail.is_empty() {
                    out.push(' ');
                    out.push_str(tail);
                }
            }
            None => out.push_str(line),
        }
        out.push('\n');
    }
    out
}

/// The content type and body to answer with: OpenMetrics when one of the
/// `Accept` values asks for it, the classic text format otherwise.
pub fn negotiate<'a>(
    accept: impl IntoIterator<Item = &'a str>,
    openmetrics: String,
) -> (&'static str, String) {
    if accept
        .into_iter()
        .any(|v| v.contains("application/openmetrics-text"))
    {
        (OPENMETRICS_CONTENT_TYPE, openmetrics)
    } else {
        (TEXT_CONTENT_TYPE, to_prometheus_text(&openmetrics))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_get_their_suffix_in_the_classic_text_format() {
        let om = "# HELP a_events Events.\n# TYPE a_events counter\na_events_total{k=\"v\"} 3\n\
                  # HELP b Gauge.\n# TYPE b gauge\nb 1\n# UNIT c seconds\n# EOF\n";
        assert_eq!(
            to_prometheus_text(om),
            "# HELP a_events_total Events.\n# TYPE a_events_total counter\n\
             a_events_total{k=\"v\"} 3\n# HELP b Gauge.\n# TYPE b gauge\nb 1\n"
        );
    }

    #[test]
    fn openmetrics_only_when_asked() {
        let om = "# HELP b Gauge.\n# TYPE b gauge\nb 1\n# EOF\n".to_owned();
        assert_eq!(
            negotiate(["application/openmetrics-text; version=1.0.0"], om.clone()),
            (OPENMETRICS_CONTENT_TYPE, om.clone())
        );
        assert_eq!(negotiate([], om).0, TEXT_CONTENT_TYPE);
    }
}
