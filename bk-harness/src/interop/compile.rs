//! Compiling the helper once per content of its source.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use sha1::{Digest, Sha1};

use super::SOURCE;
use crate::install::{classpath, Installation};
use crate::StartError;

/// The compile-cache key of a source: the first 8 bytes of its SHA-1, in hex.
fn content_key(source: &[u8]) -> String {
    Sha1::digest(source)[..8]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// The folder of the compiled helper, compiling it on first use.
pub(super) fn compiled_helper(installation: &Installation) -> Result<PathBuf, StartError> {
    static COMPILED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    COMPILED
        .get_or_init(|| compile(installation))
        .clone()
        .map_err(StartError::new)
}

fn compile(installation: &Installation) -> Result<PathBuf, String> {
    let name = format!("interop-{}", content_key(SOURCE.as_bytes()));
    let preferred = installation
        .lib
        .parent()
        .map(|p| p.join(&name))
        .unwrap_or_else(|| std::env::temp_dir().join(&name));
    let fallback = std::env::temp_dir().join(format!("bkswitch-{name}"));
    let mut errors = Vec::new();
    for target in [preferred, fallback] {
        match compile_into(installation, &target) {
            Ok(classes) => return Ok(classes),
            Err(e) => errors.push(e),
        }
    }
    Err(errors.join("; "))
}

/// Compiles into `<target>/classes` through a temporary sibling folder renamed
/// into place, so that concurrent test binaries never see a half-compiled
/// helper.
fn compile_into(installation: &Installation, target: &Path) -> Result<PathBuf, String> {
    let classes = target.join("classes");
    if target.join(".complete").is_file() {
        return Ok(classes);
    }
    let parent = target
        .parent()
        .ok_or_else(|| format!("{} has no parent folder", target.display()))?;
    fs::create_dir_all(parent).map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    let staging = tempfile::Builder::new()
        .prefix(".interop-partial-")
        .tempdir_in(parent)
        .map_err(|e| format!("cannot create a folder in {}: {e}", parent.display()))?;
    let source = staging.path().join("BkInterop.java");
    fs::write(&source, SOURCE).map_err(|e| format!("cannot write {}: {e}", source.display()))?;
    let output = Command::new(&installation.javac)
        .args(["-nowarn", "-encoding", "UTF-8", "-d"])
        .arg(staging.path().join("classes"))
        .arg("-cp")
        .arg(classpath(&installation.lib))
        .arg(&source)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run {}: {e}", installation.javac))?;
    if !output.status.success() {
        return Err(format!(
            "javac failed on the interop helper ({}):\n{}{}",
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
