//! What handlers take from a request: the node they serve ([`Live`]) and a
//! JSON body whose rejections are API errors ([`ApiJson`]).

use axum::extract::rejection::JsonRejection;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use axum::http::StatusCode;
use axum::Json;
use serde::de::DeserializeOwned;

use super::error::ApiError;
use crate::node::{Node, WeakNode};
use crate::wire::MAX_BODY_BYTES;

/// The node a request is served by; 503 once every handle to it is gone (it
/// is stopping).
pub(super) struct Live(pub(super) Node);

impl FromRequestParts<WeakNode> for Live {
    type Rejection = ApiError;

    async fn from_request_parts(_: &mut Parts, node: &WeakNode) -> Result<Self, Self::Rejection> {
        node.upgrade()
            .map(Live)
            .ok_or_else(|| ApiError::unavailable("this node is stopping; retry on another node"))
    }
}

/// A JSON body whose rejections become 400 answers naming the field.
pub(super) struct ApiJson<T>(pub(super) T);

impl<S, T> FromRequest<S> for ApiJson<T>
where
    T: DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &S) -> Result<Self, Self::Rejection> {
        match Json::<T>::from_request(req, state).await {
            Ok(Json(v)) => Ok(ApiJson(v)),
            Err(rejection) => Err(json_rejection(rejection)),
        }
    }
}

fn json_rejection(r: JsonRejection) -> ApiError {
    let text = r.body_text();
    let field = ["unknown field `", "missing field `"]
        .iter()
        .find_map(|p| text.split(p).nth(1))
        .and_then(|rest| rest.split('`').next())
        .map(str::to_owned);
    if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
        return ApiError::invalid(
            None,
            format!("request body larger than {MAX_BODY_BYTES} bytes"),
        );
    }
    ApiError::invalid(
        field.as_deref(),
        format!("invalid request body: {text}; see API.md for the expected JSON"),
    )
}
