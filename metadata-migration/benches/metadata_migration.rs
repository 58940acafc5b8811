//! Placeholder, replaced by the migration bench.
fn main() {}
