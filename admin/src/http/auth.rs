//! Bearer-token checks: the admin token on the public endpoints, the
//! node-to-node token on `/internal/*`.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;

/// The token a group of endpoints requires, and what a refusal says.
#[derive(Clone)]
pub(super) struct Token {
    expected: Arc<str>,
    refusal: &'static str,
}

impl Token {
    /// The admin token of the public endpoints.
    pub(super) fn admin(token: &str) -> Token {
        Token {
            expected: token.into(),
            refusal: "missing or wrong admin token: send 'Authorization: Bearer <admin token>'",
        }
    }

    /// The token of `GET /metrics`, when one is configured.
    pub(super) fn metrics(token: &str) -> Token {
        Token {
            expected: token.into(),
            refusal: "missing or wrong metrics token: send 'Authorization: Bearer <metrics token>'",
        }
    }

    /// The node-to-node token of `/internal/*`.
    pub(super) fn internal(token: &str) -> Token {
        Token {
            expected: token.into(),
            refusal:
                "missing or wrong node-to-node token: internal endpoints need the internal token",
        }
    }
}

/// Passes the request on when it carries the expected bearer token; answers
/// 401 otherwise.
pub(super) async fn require_token(
    State(token): State<Token>,
    req: Request,
    next: Next,
) -> Response {
    if token_matches(bearer(&req), &token.expected) {
        next.run(req).await
    } else {
        ApiError::unauthorized(token.refusal).into_response()
    }
}

fn bearer(req: &Request) -> Option<&str> {
    req.headers()
        .get(header::AUTHORIZATION)?
        .to_str()
        .ok()?
        .strip_prefix("Bearer ")
}

/// Compares without an early exit on the first differing byte.
fn token_matches(given: Option<&str>, expected: &str) -> bool {
    let Some(given) = given else { return false };
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
