//! Bearer-token checks: the admin token or a superuser JWT on the public
//! endpoints, the node-to-node token or an internal-role JWT on
//! `/internal/*`, the metrics token on `GET /metrics` when one is set.
//!
//! A missing, unknown, invalid or expired token is a 401; a valid JWT whose
//! role may not call the endpoint a 403. Every refusal is logged (target
//! `bkswitch::audit`: the path, the role when known and the reason, never the
//! token).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use crate::auth::JwtVerifier;

/// What a group of endpoints accepts, and what a refusal says.
#[derive(Clone)]
pub(super) struct Token {
    /// The static token; `None` when not configured (empty).
    expected: Option<Arc<str>>,
    /// JWTs, with the roles this group admits.
    jwt: Option<(Arc<JwtVerifier>, Arc<[String]>)>,
    scope: &'static str,
    refusal: &'static str,
}

impl Token {
    fn of(token: &str, scope: &'static str, refusal: &'static str) -> Token {
        Token {
            expected: (!token.is_empty()).then(|| token.into()),
            jwt: None,
            scope,
            refusal,
        }
    }

    /// The admin token of the public endpoints.
    pub(super) fn admin(token: &str) -> Token {
        Token::of(
            token,
            "admin",
            "missing or wrong admin token: send 'Authorization: Bearer <admin token>'",
        )
    }

    /// The token of `GET /metrics`, when one is configured.
    pub(super) fn metrics(token: &str) -> Token {
        Token::of(
            token,
            "metrics",
            "missing or wrong metrics token: send 'Authorization: Bearer <metrics token>'",
        )
    }

    /// The node-to-node token of `/internal/*`.
    pub(super) fn internal(token: &str) -> Token {
        Token::of(
            token,
            "internal",
            "missing or wrong node-to-node token: internal endpoints need the internal token",
        )
    }

    /// The same, also admitting JWTs of `roles`.
    pub(super) fn with_jwt(
        mut self,
        verifier: Option<Arc<JwtVerifier>>,
        roles: &[String],
    ) -> Token {
        self.jwt = verifier.map(|v| (v, roles.to_vec().into()));
        self
    }
}

/// Passes the request on when it carries an accepted bearer token; answers
/// 401 or 403 otherwise.
pub(super) async fn require_token(
    State(token): State<Token>,
    req: Request,
    next: Next,
) -> Response {
    let path = req.uri().path().to_owned();
    let Some(given) = bearer(&req) else {
        return refuse(&token, &path, None, StatusCode::UNAUTHORIZED, token.refusal);
    };
    if token
        .expected
        .as_deref()
        .is_some_and(|expected| token_matches(given, expected))
    {
        return next.run(req).await;
    }
    let Some((verifier, roles)) = &token.jwt else {
        return refuse(&token, &path, None, StatusCode::UNAUTHORIZED, token.refusal);
    };
    match verifier.role(given) {
        Ok(role) if roles.contains(&role) => next.run(req).await,
        Ok(role) => {
            let message = format!("role '{role}' may not call the {} endpoints", token.scope);
            refuse(&token, &path, Some(&role), StatusCode::FORBIDDEN, &message)
        }
        Err(refusal) => {
            let message = format!("{}; {}", refusal.0, token.refusal);
            refuse(&token, &path, None, StatusCode::UNAUTHORIZED, &message)
        }
    }
}

fn refuse(
    token: &Token,
    path: &str,
    role: Option<&str>,
    status: StatusCode,
    why: &str,
) -> Response {
    tracing::warn!(
        target: "bkswitch::audit",
        path,
        scope = token.scope,
        role = role.unwrap_or("-"),
        status = status.as_u16(),
        reason = why,
        "request refused"
    );
    if status == StatusCode::FORBIDDEN {
        ApiError::forbidden(why).into_response()
    } else {
        ApiError::unauthorized(why).into_response()
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
fn token_matches(given: &str, expected: &str) -> bool {
    let (a, b) = (given.as_bytes(), expected.as_bytes());
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}
