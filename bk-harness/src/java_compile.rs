//! Compiling a one-file Java helper once per content of its source, into a
//! folder next to the jars it is compiled against.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use sha1::{Digest, Sha1};

use crate::StartError;

/// The compile-cache key of a source: the first 8 bytes of its SHA-1, in hex.
fn content_key(source: &[u8]) -> String {
    Sha1::digest(source)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A one-file Java helper to compile.
pub(crate) struct JavaSource {
    /// The file name (`BkInterop.java`).
    pub(crate) file: &'static str,
    /// The source text.
    pub(crate) text: &'static str,
    /// The cache folder prefix (`interop`, …).
    pub(crate) prefix: &'static str,
}

/// The classes folder of `source`, compiled on first use (once per process,
/// per source) against `classpath`, into a folder under `cache_parent`.
pub(crate) fn compiled(
    slot: &'static OnceLock<Result<PathBuf, String>>,
    javac: &str,
    source: &JavaSource,
    classpath: &str,
    cache_parent: &Path,
) -> Result<PathBuf, StartError> {
    slot.get_or_init(|| compile(javac, source, classpath, cache_parent))
        .clone()
        .map_err(StartError::new)
}

fn compile(
    javac: &str,
    source: &JavaSource,
    classpath: &str,
    cache_parent: &Path,
) -> Result<PathBuf, String> {
    let name = format!("{}-{}", source.prefix, content_key(source.text.as_bytes()));
    let preferred = cache_parent.join(&name);
    let fallback = std::env::temp_dir().join(format!("bkswitch-{name}"));
    let mut errors = Vec::new();
    for target in [preferred, fallback] {
        match compile_into(javac, source, classpath, &target) {
            Ok(classes) => return Ok(classes),
            Err(e) => errors.push(e),
        }
    }
    Err(errors.join("; "))
}

/// Compiles into `<target>/classes` through a temporary sibling folder renamed
/// into place, so that concurrent test binaries never see a half-compiled
/// helper.
fn compile_into(
    javac: &str,
    source: &JavaSource,
    classpath: &str,
    target: &Path,
) -> Result<PathBuf, String> {
    let classes = target.join("classes");
    if target.join(".complete").is_file() {
        return Ok(classes);
    }
    let parent = target
        .parent()
        .ok_or_else(|| format!("{} has no parent folder", target.display()))?;
    fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".helper-partial-")
        .tempdir_in(parent)
        .map_err(|e| format!("cannot create a folder in {}: {e}", parent.display()))?;
    let file = staging.path().join(source.file);
    fs::write(&file, source.text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
    let output = Command::new(javac)
        .args(["-nowarn", "-encoding", "UTF-8", "-d"])
        .arg(staging.path().join("classes"))
        .arg("-cp")
        .arg(classpath)
        .arg(&file)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {javac}: {e}"))?;
    if !output.status.success() {
        return Err(format!(
            "javac failed on {} ({}):\n{}{}",
            source.file,
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        ));
    }
    fs::write(staging.path().join(".complete"), "compiled\n")
        .map_err(|e| format!("cannot write the marker: {e}"))?;
    let staged = staging.keep();
    match fs::rename(&staged, target) {
        Ok(()) => Ok(classes),
        Err(e) => {
            let _ = fs::remove_dir_all(&staged);
            if target.join(".complete").is_file() {
                // Another process compiled it meanwhile.
                Ok(classes)
            } else {
                Err(format!(
                    "cannot move the compiled helper to {}: {e}",
                    target.display()
                ))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cache_key_follows_the_content() {
        assert_eq!(content_key(b""), "da39a3ee5e6b4b0d");
        assert_ne!(content_key(b"a"), content_key(b"b"));
    }
}
