//! The optional bearer token of the admin API: where it comes from, and the check of every
//! request except `/healthz`.
//!
//! The token is read from `--token-file` (first line, surrounding whitespace ignored) or from
//! the environment variable `DLQ_API_TOKEN`; the same sources serve `dlq serve` and the CLI that
//! forwards to it. Tokens are compared through their SHA-256 digests, byte by byte without early
//! exit, so the time taken says nothing about how much of a guess was right (not even its
//! length).

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap};
use axum::middleware::Next;
use axum::response::Response;
use sha2::{Digest, Sha256};

use super::routes::ApiError;

/// A bearer token, kept as its digest.
#[derive(Clone)]
pub struct Token {
    digest: [u8; 32],
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Token(..)")
    }
}

impl Token {
    /// A token from its text.
    pub fn new(text: &str) -> Self {
        Token {
            digest: Sha256::digest(text.as_bytes()).into(),
        }
    }

    /// Whether `candidate` is this token, in time independent of where they differ.
    pub fn matches(&self, candidate: &str) -> bool {
        let other: [u8; 32] = Sha256::digest(candidate.as_bytes()).into();
        let difference = self
            .digest
            .iter()
            .zip(other.iter())
            .fold(0u8, |acc, (a, b)| acc | (a ^ b));
        std::hint::black_box(difference) == 0
    }
}

/// Whether the `Authorization` header carries `token`.
pub fn authorized(token: &Token, headers: &HeaderMap) -> bool {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, rest) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
        .is_some_and(|given| token.matches(given))
}

/// Middleware: a request without the right token gets 401 (when a token is configured).
pub async fn require_token(
    State(token): State<Option<Arc<Token>>>,
    request: Request,
    next: Next,
) -> Response {
    match token {
        Some(token) if !authorized(&token, request.headers()) => ApiError::unauthorized().into(),
        _ => next.run(request).await,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;
    use crate::serve::client::token::token_text;
    use axum::http::HeaderValue;

    #[test]
    fn only_the_exact_token_matches() {
        let token = Token::new("s3cret");
        assert!(token.matches("s3cret"));
        for wrong in ["", "s3cre", "s3cret ", "S3cret", "s3cretx"] {
            assert!(!token.matches(wrong), "{wrong:?}");
        }
        assert_eq!(format!("{token:?}"), "Token(..)", "never printed");
    }

    #[test]
    fn the_header_needs_the_bearer_scheme() {
        let token = Token::new("abc");
        let with = |value: &str| {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_str(value).unwrap());
            authorized(&token, &headers)
        };
        assert!(with("Bearer abc"));
        assert!(with("bearer abc"));
        assert!(!with("Basic abc"));
        assert!(!with("Bearer abd"));
        assert!(!with("abc"));
        assert!(!authorized(&token, &HeaderMap::new()));
    }

    #[test]
    fn token_files_are_trimmed_and_must_not_be_empty() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, "  s3cret \n").unwrap();
        assert_eq!(token_text(Some(&file)).unwrap().as_deref(), Some("s3cret"));
        std::fs::write(&file, "\n").unwrap();
        let err = token_text(Some(&file)).unwrap_err().to_string();
        assert!(err.contains("empty"), "{err}");
        let missing = dir.path().join("missing");
        assert!(token_text(Some(&missing)).is_err());
    }
}
