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
    /// Other source files compiled with it: (file name, text).
    pub(crate) extra: &'static [(&'static str, &'static str)],
}

impl JavaSource {
    /// Every file of the helper: the main one first.
    fn files(&self) -> impl Iterator<Item = (&'static str, &'static str)> + '_ {
        std::iter::once((self.file, self.text)).chain(self.extra.iter().copied())
    }
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

/// Compiles a one-file Java helper (`file`, such as `Traffic.java`, whose
/// source is `text`) with [`javac_binary`](crate::javac_binary) against
/// `classpath` (a Java classpath string, such as `<lib>/*`), into
/// `<cache_parent>/<prefix>-<hash of the source>/classes`, and returns that
/// folder (to put on the `java` classpath). A helper already compiled there is
/// reused; the folder is renamed into place once complete, so concurrent test
/// binaries never see half of it. When `cache_parent` is not writable, it
/// compiles under the temporary folder instead. Callers that compile more than
/// once per process keep the result themselves (the check is a file lookup).
///
/// # Errors
///
/// When `javac` cannot run or fails (the error carries its output).
pub fn compile_java_helper(
    file: &'static str,
    text: &'static str,
    prefix: &'static str,
    classpath: &str,
    cache_parent: &Path,
) -> Result<PathBuf, StartError> {
    let source = JavaSource {
        file,
        text,
        prefix,
        extra: &[],
    };
    compile(&crate::javac_binary(), &source, classpath, cache_parent).map_err(StartError::new)
}

fn compile(
    javac: &str,
    source: &JavaSource,
    classpath: &str,
    cache_parent: &Path,
) -> Result<PathBuf, String> {
    let all: Vec<u8> = source
        .files()
        .flat_map(|(file, text)| [file.as_bytes(), b"\0", text.as_bytes(), b"\0"])
        .flatten()
        .copied()
        .collect();
    let key = if source.extra.is_empty() {
        content_key(source.text.as_bytes())
    } else {
        content_key(&all)
    };
    let name = format!("{}-{key}", source.prefix);
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
    let mut files = Vec::new();
    for (name, text) in source.files() {
        let file = staging.path().join(name);
        fs::write(&file, text).map_err(|e| format!("cannot write {}: {e}", file.display()))?;
        files.push(file);
    }
    let output = Command::new(javac)
        .args(["-nowarn", "-encoding", "UTF-8", "-d"])
        .arg(staging.path().join("classes"))
        .arg("-cp")
        .arg(classpath)
        .args(&files)
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
