//! Helpers shared by the integration tests.

/// Parses a hex dump: two-digit hex bytes separated by spaces, `'text'` for the
/// ASCII bytes of `text` (no spaces inside), and `#` starting a comment that
/// runs to the end of the line.
pub(crate) fn wire(dump: &str) -> Vec<u8> {
    let mut bytes = Vec::new();
    for line in dump.lines() {
        let code = line.split('#').next().unwrap_or_default();
        for token in code.split_whitespace() {
            if let Some(text) = token.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
                bytes.extend_from_slice(text.as_bytes());
            } else {
                assert_eq!(token.len(), 2, "bad hex token {token:?}");
                bytes.push(u8::from_str_radix(token, 16).expect("hex byte"));
            }
        }
    }
    bytes
}
