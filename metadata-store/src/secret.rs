//! [`Secret`]: a password or key that is never printed.

use std::fmt;
use std::path::Path;

use crate::error::{MetadataError, Operation, Result};

/// A secret (password, private key) held in memory: its `Debug` and `Display`
/// print `***`, so that options and errors that carry it never show it.
///
/// Read it from a file ([`Secret::from_file`]) or an environment variable
/// ([`Secret::from_env`]) rather than from a command line or a URL, which end
/// up in process listings and logs.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    /// Wraps a secret value.
    pub fn new(value: impl Into<String>) -> Secret {
        Secret(value.into())
    }

    /// Reads a secret from a file, trailing line breaks removed.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// naming the file (not its content) when it cannot be read.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Secret> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| MetadataError::InvalidArgument {
            op: Operation::Connect,
            path: path.display().to_string(),
            reason: format!("cannot read the secret file: {e}"),
        })?;
        Ok(Secret(text.trim_end_matches(['\r', '\n']).to_owned()))
    }

    /// Reads a secret from an environment variable.
    ///
    /// # Errors
    ///
    /// [`ErrorKind::InvalidArgument`](crate::ErrorKind::InvalidArgument)
    /// naming the variable when it is not set or not Unicode.
    pub fn from_env(name: &str) -> Result<Secret> {
        std::env::var(name)
            .map(Secret)
            .map_err(|e| MetadataError::InvalidArgument {
                op: Operation::Connect,
                path: name.to_owned(),
                reason: format!("cannot read the secret from the environment variable: {e}"),
            })
    }

    /// The secret itself, for the client library that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether the value is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Parses a command-line or settings value (as given, never failing).
impl std::str::FromStr for Secret {
    type Err = std::convert::Infallible;

    fn from_str(s: &str) -> std::result::Result<Secret, Self::Err> {
        Ok(Secret::new(s))
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secrets_are_never_printed() {
        let s = Secret::new("hunter2");
        assert_eq!(format!("{s:?} {s}"), "*** ***");
        assert_eq!(s.expose(), "hunter2");
    }

    #[test]
    fn secrets_are_read_from_files_and_the_environment() {
        let dir = std::env::temp_dir().join(format!("bkswitch-secret-{}", std::process::id()));
        std::fs::write(&dir, "pw-from-file\n").expect("write");
        assert_eq!(
            Secret::from_file(&dir).expect("read").expose(),
            "pw-from-file"
        );
        std::fs::remove_file(&dir).expect("remove");
        let e = Secret::from_file(&dir).expect_err("gone");
        assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
        assert!(Secret::from_env("BKSWITCH_SURELY_UNSET_VARIABLE").is_err());
    }
}
