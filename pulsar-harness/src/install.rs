//! Where java, the broker's jars and the Python client are, and whether the
//! real-Pulsar tests can run.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use crate::HarnessError;

/// The Apache Pulsar version of the brokers and of the Java client
/// (`pulsar-harness/java/pom.xml` pins the same one).
pub const PULSAR_VERSION: &str = "4.2.4";

/// The version of Apache Pulsar's own proxy that [`PulsarProxy`](crate::PulsarProxy)
/// runs (`pulsar-harness/java/proxy/pom.xml` pins the same one). Not
/// [`PULSAR_VERSION`]: Maven Central has no `pulsar-proxy` 4.2.4, and 4.0.8
/// (the 4.0 LTS line) is the newest it has.
pub const PULSAR_PROXY_VERSION: &str = "4.0.8";

/// The version of Apache Pulsar's Python client (`pulsar-client` on PyPI;
/// `scripts/fetch-pulsar-python.sh` pins the same one).
pub const PYTHON_CLIENT_VERSION: &str = "3.13.0";

/// Set to `1` to make [`pulsar_available`] and [`python_client_available`]
/// panic instead of skipping when something is missing. `BKSWITCH_REQUIRE_BK=1`
/// (which the project's test script sets for every Java-backed test) does the
/// same.
pub const REQUIRE_ENV: &str = "BKSWITCH_REQUIRE_PULSAR";

/// Points directly at a folder of the broker's runtime jars (it must hold
/// `pulsar-broker-<PULSAR_VERSION>.jar`), instead of the cache folder.
pub const LIB_ENV: &str = "BKSWITCH_PULSAR_LIB";

/// Points directly at a folder of Pulsar's proxy and its runtime jars (it must
/// hold `pulsar-proxy-<PULSAR_PROXY_VERSION>.jar`), instead of the cache folder.
pub const PROXY_LIB_ENV: &str = "BKSWITCH_PULSAR_PROXY_LIB";

/// Points directly at the Python virtual environment with `pulsar-client`
/// (what `scripts/fetch-pulsar-python.sh` makes), instead of the cache folder.
pub const PYTHON_ENV: &str = "BKSWITCH_PULSAR_PYTHON";

const JAVA_HINT: &str =
    "run `scripts/fetch-java-deps.sh` (needs Maven: `apt-get install -y maven`)";
const PYTHON_HINT: &str = "run `scripts/fetch-pulsar-python.sh` (needs python3 with venv)";

fn env_nonempty(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The folder of the broker's runtime jars: `$BKSWITCH_PULSAR_LIB`, else
/// `<java cache>/pulsar-broker-<PULSAR_VERSION>/lib` (the Java cache of
/// [`bkswitch_bk_harness::java_cache_dir`], where
/// `scripts/fetch-java-deps.sh` puts it). It may not exist; see
/// [`pulsar_available`].
pub fn pulsar_lib_dir() -> PathBuf {
    match env_nonempty(LIB_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => bkswitch_bk_harness::java_cache_dir()
            .join(format!("pulsar-broker-{PULSAR_VERSION}"))
            .join("lib"),
    }
}

/// The folder of Pulsar's proxy and its runtime jars: `$BKSWITCH_PULSAR_PROXY_LIB`,
/// else `<java cache>/pulsar-proxy-<PULSAR_PROXY_VERSION>/lib` (where
/// `scripts/fetch-java-deps.sh` puts it). It may not exist; see
/// [`pulsar_proxy_available`].
pub fn pulsar_proxy_lib_dir() -> PathBuf {
    match env_nonempty(PROXY_LIB_ENV) {
        Some(dir) => PathBuf::from(dir),
        None => bkswitch_bk_harness::java_cache_dir()
            .join(format!("pulsar-proxy-{PULSAR_PROXY_VERSION}"))
            .join("lib"),
    }
}

/// The Python virtual environment with `pulsar-client`:
/// `$BKSWITCH_PULSAR_PYTHON`, else
/// `${XDG_CACHE_HOME:-$HOME/.cache}/bkswitch/python/pulsar-<PYTHON_CLIENT_VERSION>`,
/// exactly as `scripts/fetch-pulsar-python.sh` computes it.
pub fn python_env_dir() -> PathBuf {
    if let Some(dir) = env_nonempty(PYTHON_ENV) {
        return PathBuf::from(dir);
    }
    let base = env_nonempty("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| {
            PathBuf::from(env_nonempty("HOME").unwrap_or_else(|| ".".to_owned())).join(".cache")
        });
    base.join("bkswitch")
        .join("python")
        .join(format!("pulsar-{PYTHON_CLIENT_VERSION}"))
}

/// The Python interpreter of [`python_env_dir`].
pub(crate) fn python_binary() -> PathBuf {
    python_env_dir().join("bin").join("python")
}

fn runs(program: &str) -> bool {
    Command::new(program)
        .arg("-version")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// What the brokers and the Java client run with, once checked.
#[derive(Debug, Clone)]
pub(crate) struct JavaInstall {
    pub(crate) java: String,
    pub(crate) lib: PathBuf,
}

/// Java, javac and the broker's jars, checked once per process.
pub(crate) fn java_install() -> Result<JavaInstall, HarnessError> {
    static CHECKED: OnceLock<Result<JavaInstall, String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let java = bkswitch_bk_harness::java_binary();
            let javac = bkswitch_bk_harness::javac_binary();
            let lib = pulsar_lib_dir();
            let mut missing = Vec::new();
            if !runs(&java) {
                missing.push(format!(
                    "cannot run `{java} -version`: install a Java 17 runtime \
                     (`apt-get install -y default-jre-headless`) or set JAVA"
                ));
            }
            if !runs(&javac) {
                missing.push(format!(
                    "cannot run `{javac} -version`: the Java traffic client is compiled \
                     with a JDK (`apt-get install -y default-jdk-headless`)"
                ));
            }
            let jar = lib.join(format!("pulsar-broker-{PULSAR_VERSION}.jar"));
            let complete = env_nonempty(LIB_ENV).is_some() || lib.join(".complete").is_file();
            if !(complete && jar.is_file()) {
                missing.push(format!(
                    "the Apache Pulsar {PULSAR_VERSION} broker jars are not in {}: {JAVA_HINT}",
                    lib.display()
                ));
            }
            if missing.is_empty() {
                Ok(JavaInstall { java, lib })
            } else {
                Err(missing.join("; "))
            }
        })
        .clone()
        .map_err(HarnessError::new)
}

/// Java and the proxy's jars, checked once per process.
pub(crate) fn proxy_install() -> Result<JavaInstall, HarnessError> {
    static CHECKED: OnceLock<Result<JavaInstall, String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let java = bkswitch_bk_harness::java_binary();
            let lib = pulsar_proxy_lib_dir();
            let mut missing = Vec::new();
            if !runs(&java) {
                missing.push(format!(
                    "cannot run `{java} -version`: install a Java 17 runtime \
                     (`apt-get install -y default-jre-headless`) or set JAVA"
                ));
            }
            let jar = lib.join(format!("pulsar-proxy-{PULSAR_PROXY_VERSION}.jar"));
            let complete =
                env_nonempty(PROXY_LIB_ENV).is_some() || lib.join(".complete").is_file();
            if !(complete && jar.is_file()) {
                missing.push(format!(
                    "the Apache Pulsar {PULSAR_PROXY_VERSION} proxy jars are not in {}: {JAVA_HINT}",
                    lib.display()
                ));
            }
            if missing.is_empty() {
                Ok(JavaInstall { java, lib })
            } else {
                Err(missing.join("; "))
            }
        })
        .clone()
        .map_err(HarnessError::new)
}

/// The Python client's environment, checked once per process.
pub(crate) fn python_install() -> Result<PathBuf, HarnessError> {
    static CHECKED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    CHECKED
        .get_or_init(|| {
            let dir = python_env_dir();
            let python = python_binary();
            let complete = env_nonempty(PYTHON_ENV).is_some() || dir.join(".complete").is_file();
            let imports = Command::new(&python)
                .args(["-c", "import pulsar; print(pulsar.__version__)"])
                .stdin(Stdio::null())
                .stderr(Stdio::null())
                .output()
                .ok()
                .filter(|o| o.status.success())
                .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned());
            match imports {
                Some(version) if complete && version == PYTHON_CLIENT_VERSION => Ok(python),
                Some(version) if complete => Err(format!(
                    "{} has pulsar-client {version}, not {PYTHON_CLIENT_VERSION}: {PYTHON_HINT}",
                    dir.display()
                )),
                _ => Err(format!(
                    "pulsar-client {PYTHON_CLIENT_VERSION} is not installed in {}: {PYTHON_HINT}",
                    dir.display()
                )),
            }
        })
        .clone()
        .map_err(HarnessError::new)
}

fn required() -> bool {
    [REQUIRE_ENV, "BKSWITCH_REQUIRE_BK"]
        .iter()
        .any(|name| env_nonempty(name).is_some_and(|v| v != "0"))
}

fn available(what: &str, check: Result<(), HarnessError>) -> bool {
    match check {
        Ok(()) => true,
        Err(e) => {
            if required() {
                panic!("{REQUIRE_ENV} or BKSWITCH_REQUIRE_BK is set but {what}: {e}");
            }
            let thread = std::thread::current();
            // Straight to the process's stderr: the test harness captures
            // `eprintln!`, and this line must be seen.
            let _ = writeln!(
                std::io::stderr(),
                "\nSKIPPED: {}: {what}: {e}. Set {REQUIRE_ENV}=1 to make this a failure.\n",
                thread.name().unwrap_or("this test")
            );
            false
        }
    }
}

/// Whether real Pulsar brokers and the Java traffic client can run here (java,
/// javac and the broker's jars are present).
///
/// When they cannot: with `BKSWITCH_REQUIRE_PULSAR=1` or
/// `BKSWITCH_REQUIRE_BK=1` this panics, saying exactly what is missing and how
/// to get it; otherwise it prints a loud `SKIPPED: …` line on stderr and
/// returns `false`, so that a test can `return` early:
///
/// ```no_run
/// if !bkswitch_pulsar_harness::pulsar_available() {
///     return;
/// }
/// ```
///
/// # Panics
///
/// When something is missing and one of the two variables is set.
pub fn pulsar_available() -> bool {
    available(
        "real Pulsar brokers cannot run here",
        java_install().map(|_| ()),
    )
}

/// Whether Pulsar's own proxy ([`PulsarProxy`](crate::PulsarProxy)) can run
/// here (java and the proxy's jars are present). Skips or fails like
/// [`pulsar_available`].
///
/// # Panics
///
/// When something is missing and `BKSWITCH_REQUIRE_PULSAR=1` or
/// `BKSWITCH_REQUIRE_BK=1`.
pub fn pulsar_proxy_available() -> bool {
    available(
        "Pulsar's proxy cannot run here",
        proxy_install().map(|_| ()),
    )
}

/// Whether the Python traffic client can run here (the virtual environment
/// with `pulsar-client` is present). Skips or fails like [`pulsar_available`].
///
/// # Panics
///
/// When it is missing and `BKSWITCH_REQUIRE_PULSAR=1` or
/// `BKSWITCH_REQUIRE_BK=1`.
pub fn python_client_available() -> bool {
    available(
        "the Python Pulsar client cannot run here",
        python_install().map(|_| ()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pom_pins_the_same_version() {
        let pom = include_str!("../java/pom.xml");
        assert!(
            pom.contains(&format!(
                "<pulsar.version>{PULSAR_VERSION}</pulsar.version>"
            )),
            "pulsar-harness/java/pom.xml and PULSAR_VERSION disagree"
        );
    }

    #[test]
    fn the_proxy_pom_pins_the_same_version() {
        let pom = include_str!("../java/proxy/pom.xml");
        assert!(
            pom.contains(&format!(
                "<pulsar.proxy.version>{PULSAR_PROXY_VERSION}</pulsar.proxy.version>"
            )),
            "pulsar-harness/java/proxy/pom.xml and PULSAR_PROXY_VERSION disagree"
        );
    }

    #[test]
    fn the_python_script_pins_the_same_version() {
        let script = include_str!("../../scripts/fetch-pulsar-python.sh");
        assert!(
            script.contains(&format!("version={PYTHON_CLIENT_VERSION}\n")),
            "scripts/fetch-pulsar-python.sh and PYTHON_CLIENT_VERSION disagree"
        );
    }
}
