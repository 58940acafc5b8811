//! Errors of the lookup proxy.

use bkswitch_topic_routes::RoutesError;

/// What can go wrong starting or running the proxy.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProxyError {
    /// The routing table could not be read or acknowledged, or the proxy id
    /// is not valid.
    #[error(transparent)]
    Routes(#[from] RoutesError),
    /// A listener could not be bound.
    #[error("cannot listen on {addr} for {what}: {source}")]
    Bind {
        /// Which listener.
        what: &'static str,
        /// The address asked for.
        addr: String,
        /// Why.
        source: std::io::Error,
    },
    /// The TLS certificate or key could not be loaded.
    #[error("TLS configuration: {0}")]
    Tls(String),
    /// A configuration value is not valid.
    #[error("invalid proxy configuration: {0}")]
    Config(String),
}

/// A result of the proxy.
pub type Result<T, E = ProxyError> = std::result::Result<T, E>;
