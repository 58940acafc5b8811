//! Where java and the BookKeeper jars are, and whether tests can run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::StartError;

/// The Apache BookKeeper version the harness runs (`bk-harness/java/pom.xml`
/// pins the same one).
pub const BK_VERSION: &str = "4.17.2";

/// Set to `1` to make [`bk_available`] panic instead of skipping when java, javac
/// or the jars are missing (the project's test script sets it).
pub const REQUIRE_ENV: &str = "BKSWITCH_REQUIRE_BK";

/// Points directly at a folder of BookKeeper jars (it must hold a
/// `bookkeeper-server-*.jar`), instead of the cache folder.
pub const LIB_ENV: &str = "BKSWITCH_BK_LIB";

/// The root of the Java cache (default `$XDG_CACHE_HOME/bkswitch/java`, else
/// `$HOME/.cache/bkswitch/java`).
pub const CACHE_ENV: &str = "BKSWITCH_JAVA_CACHE";

const FETCH_HINT: &str =
    "run `scripts/fetch-java-deps.sh` (needs Maven: `apt-get install -y maven`)";

/// Reads an environment variable, treating an empty value as unset (as the
/// shell's `${VAR:-default}` does).
fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The Java cache folder: `$BKSWITCH_JAVA_CACHE`, else
/// `$XDG_CACHE_HOME/bkswitch/java`, else `$HOME/.cache/bkswitch/java` (else
/// `./.cache/bkswitch/java`), exactly as `scripts/fetch-java-deps.sh` computes it.
pub fn java_cache_dir() -> PathBuf {
    if let Some(dir) = env_nonempty(CACHE_ENV) {
        return PathBuf::from(dir);
    }
    let base = env_nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env_nonempty("HOME").unwrap_or_else(|| ".".to_owned())).join(".cache")
        });
    base.join("bkswitch").join("java")
}

/// The folder of BookKeeper jars the harness uses: `$BKSWITCH_BK_LIB`, else
/// `<java_cache_dir()>/bookkeeper-<BK_VERSION>/lib`. It may not exist; see
/// [`bk_available`].
pub fn lib_dir() -> PathBuf {
    match env_nonempty(LIB_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => java_cache_dir()
            .join(format!("bookkeeper-{BK_VERSION}"))
            .join("lib"),
    }
}

/// The java command: `$JAVA`, else `java` on the `PATH`.
pub fn java_binary() -> String {
    env_nonempty("JAVA").unwrap_or_else(|| "java".to_owned())
}

/// The javac command: next to `$JAVA` when it is a path, else `javac` on the
/// `PATH`.
pub fn javac_binary() -> String {
    let java = java_binary();
    if java.contains('/') {
        let sibling = Path::new(&java).with_file_name("javac");
        if sibling.is_file() {
            return sibling.to_string_lossy().into_owned();
        }
    }
    "javac".to_owned()
}

/// The classpath of the bookies and the Java client: `<lib_dir>/*`.
pub(crate) fn classpath(lib: &Path) -> String {
    format!("{}/*", lib.display())
}

/// What the harness runs with, once checked.
#[derive(Debug, Clone)]
pub(crate) struct Installation {
    pub(crate) java: String,
    pub(crate) javac: String,
    pub(crate) lib: PathBuf,
}

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// Checks java, javac and the jars once per process.
pub(crate) fn installation() -> Result<Installation, StartError> {
    static CHECKED: OnceLock<Result<Installation, String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| check().map_err(|missing| missing.join("; ")))
        .clone()
        .map_err(StartError::new)
}

/// Everything that is missing, each with how to get it.
fn check() -> Result<Installation, Vec<String>> {
    let java = java_binary();
    let javac = javac_binary();
    let lib = lib_dir();
    let mut missing = Vec::new();
    if !runs(&java) {
        missing.push(format!(
            "cannot run `{java} -version`: install a Java 17 runtime \
             (`apt-get install -y default-jre-headless`) or set JAVA"
        ));
    }
    if !runs(&javac) {
        missing.push(format!(
            "cannot run `{javac} -version`: the Java interop helper needs a JDK \
             (`apt-get install -y default-jdk-headless`)"
        ));
    }
    if let Err(e) = check_lib(&lib) {
        missing.push(e);
    }
    if missing.is_empty() {
        Ok(Installation { java, javac, lib })
    } else {
        Err(missing)
    }
}

fn check_lib(lib: &Path) -> Result<(), String> {
    let from_env = env_nonempty(LIB_ENV).is_some();
    if from_env {
        let has_server = std::fs::read_dir(lib)
            .map(|entries| {
                entries.flatten().any(|e| {
                    let name = e.file_name();
                    let name = name.to_string_lossy();
                    name.starts_with("bookkeeper-server-") && name.ends_with(".jar")
                })
            })
            .unwrap_or(false);
        if has_server {
            return Ok(());
        }
        return Err(format!(
            "{LIB_ENV}={} holds no bookkeeper-server-*.jar; point it at a BookKeeper lib folder \
             or unset it and {FETCH_HINT}",
            lib.display()
        ));
    }
    let jar = lib.join(format!("bookkeeper-server-{BK_VERSION}.jar"));
    if lib.join(".complete").is_file() && jar.is_file() {
        Ok(())
    } else {
        Err(format!(
            "the BookKeeper {BK_VERSION} jars are not in {}: {FETCH_HINT}",
            lib.display()
        ))
    }
}

/// Whether real bookies can run here (java, javac and the BookKeeper jars are
/// present).
///
/// When they are not: with `BKSWITCH_REQUIRE_BK=1` this panics, saying exactly
/// what is missing and how to get it; otherwise it prints a loud
/// `SKIPPED: …` line on stderr (naming the test thread; not captured by the
/// test harness) and returns `false`, so
/// that a test can `return` early:
///
/// ```no_run
/// if !bkswitch_bk_harness::bk_available() {
///     return;
/// }
/// ```
///
/// # Panics
///
/// When something is missing and `BKSWITCH_REQUIRE_BK=1`.
pub fn bk_available() -> bool {
    match installation() {
        Ok(_) => true,
        Err(e) => {
            if env_nonempty(REQUIRE_ENV).is_some_and(|v| v != "0") {
                panic!("{REQUIRE_ENV} is set but real bookies cannot run here: {e}");
            }
            let thread = std::thread::current();
            let test = thread.name().unwrap_or("this test");
            // Straight to the process's stderr: the test harness captures
            // `eprintln!`, and this line must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\nSKIPPED: {test}: real BookKeeper bookies are unavailable: {e}. \
                 Set {REQUIRE_ENV}=1 to make this a failure.\n"
            );
            false
        }
    }
}

/// Fails loudly when real bookies cannot run here, whatever `BKSWITCH_REQUIRE_BK`
/// says.
///
/// # Panics
///
/// When java, javac or the BookKeeper jars are missing (the message says which
/// and how to get them).
pub fn require_bk() {
    if let Err(e) = installation() {
        panic!("real BookKeeper bookies cannot run here: {e}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pom_pins_the_same_version() {
        let pom = include_str!("../java/pom.xml");
        assert!(
            pom.contains(&format!(
                "<bookkeeper.version>{BK_VERSION}</bookkeeper.version>"
            )),
            "bk-harness/java/pom.xml and BK_VERSION disagree"
        );
    }

    #[test]
    fn classpath_is_a_java_wildcard() {
        assert_eq!(classpath(Path::new("/x/lib")), "/x/lib/*");
    }
}
