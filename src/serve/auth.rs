//! The optional bearer token of the admin API: where it comes from, and the check of every
//! request except `/healthz`.
//!
//! The token is read from `--token-file` (first line, surrounding whitespace ignored) or from
//! the environment variable `DLQ_API_TOKEN`; the same sources serve `dlq serve` and the CLI that
//! forwards to it. Tokens are compared through their SHA-256 digests, byte by byte without early
//! exit, so the time taken says nothing about how much of a guess was right (not even its
//! length).
//!
//! Failed authentications (an `Authorization` header with a wrong token; a request without one
//! guesses nothing and is only answered 401) are counted per client IP address ([`Failures`]):
//! after
//! [`MAX_FAILURES`] within [`WINDOW`] of the first, every request from that address is answered
//! 429 until the window has passed, whatever token it carries, so guessing costs a minute per
//! handful of guesses. Each failure is logged with the client's address and the path, never
//! with what it presented.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{ConnectInfo, Request, State};
use axum::http::{header, HeaderMap, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};

use super::roles::{Caller, Tokens};
use super::routes::ApiError;
use super::tls::Peer;

/// Failed authentications from one address that make it wait for the end of the [`WINDOW`].
pub const MAX_FAILURES: u32 = 5;
/// The window failed authentications are counted in, from the first one.
pub const WINDOW: Duration = Duration::from_secs(60);
/// Addresses tracked at most; past that, windows that have ended are forgotten first.
const MAX_TRACKED: usize = 10_000;

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
#[cfg(test)]
fn authorized(token: &Token, headers: &HeaderMap) -> bool {
    bearer(headers).is_some_and(|given| token.matches(given))
}

/// The token of the `Authorization` header's `Bearer` scheme, if any.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    headers
        .get(header::AUTHORIZATION)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| {
            let (scheme, rest) = value.split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| rest.trim())
        })
}

/// The failed authentications of each client address, in windows of [`WINDOW`].
///
/// A std `Mutex`: it is held for a map lookup, never across an await.
#[derive(Debug, Default)]
pub struct Failures {
    windows: Mutex<HashMap<Option<IpAddr>, Window>>,
}

#[derive(Debug, Clone, Copy)]
struct Window {
    start: Instant,
    count: u32,
}

impl Failures {
    /// How long `peer` must still wait, if it has failed [`MAX_FAILURES`] times in its window.
    pub fn blocked(&self, peer: Option<IpAddr>, now: Instant) -> Option<Duration> {
        let windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let window = windows.get(&peer)?;
        let left = WINDOW.checked_sub(now.saturating_duration_since(window.start))?;
        (window.count >= MAX_FAILURES && !left.is_zero()).then_some(left)
    }

    /// Counts one failure of `peer`; returns the failures in its current window.
    pub fn record(&self, peer: Option<IpAddr>, now: Instant) -> u32 {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if windows.len() >= MAX_TRACKED && !windows.contains_key(&peer) {
            windows.retain(|_, w| now.saturating_duration_since(w.start) < WINDOW);
            if windows.len() >= MAX_TRACKED {
                // Still full of live windows: forget the oldest rather than grow without bound.
                if let Some(oldest) = windows.iter().min_by_key(|(_, w)| w.start).map(|(k, _)| *k) {
                    windows.remove(&oldest);
                }
            }
        }
        let window = windows.entry(peer).or_insert(Window {
            start: now,
            count: 0,
        });
        if now.saturating_duration_since(window.start) >= WINDOW {
            *window = Window {
                start: now,
                count: 0,
            };
        }
        window.count += 1;
        window.count
    }
}

/// What the token middleware needs: the tokens, if any is set, and the failures so far.
#[derive(Debug, Default)]
pub struct Guard {
    /// The tokens requests must carry one of; none lets every request through.
    pub tokens: Tokens,
    /// Failed authentications per client address.
    pub failures: Failures,
}

/// Middleware: a request without one of the tokens gets 401 (when tokens are configured), and
/// 429 once its address has failed too often; a request let in carries its [`Caller`].
pub async fn require_token(
    State(guard): State<Arc<Guard>>,
    mut request: Request,
    next: Next,
) -> Response {
    // A request of the control subject (never one from the network) runs as the console's
    // operator: NATS permissions decided who may send it.
    if let Some(trusted) = request
        .extensions()
        .get::<super::control::Trusted>()
        .cloned()
    {
        request.extensions_mut().insert(trusted.caller());
        return next.run(request).await;
    }
    if guard.tokens.is_empty() {
        request
            .extensions_mut()
            .insert(Arc::new(Caller::anonymous()));
        return next.run(request).await;
    }
    let peer = request
        .extensions()
        .get::<ConnectInfo<Peer>>()
        .map(|info| info.0 .0);
    let ip = peer.map(|addr| addr.ip());
    let now = Instant::now();
    if let Some(left) = guard.failures.blocked(ip, now) {
        let seconds = left.as_secs().max(1);
        let mut response = ApiError::too_many_failures(seconds).into_response();
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
        return response;
    }
    if let Some(caller) = bearer(request.headers()).and_then(|given| guard.tokens.find(given)) {
        request.extensions_mut().insert(Arc::new(caller));
        return next.run(request).await;
    }
    if !request.headers().contains_key(header::AUTHORIZATION) {
        // No guess: nothing to learn from the 401, so nothing to count (a scraper or a CLI
        // without --token-file should not lock its address out).
        tracing::debug!(path = request.uri().path(), "API request without a token");
        return ApiError::unauthorized().into();
    }
    let count = guard.failures.record(ip, now);
    let peer = peer.map_or_else(|| "unknown".to_owned(), |addr| addr.to_string());
    let path = request.uri().path();
    if count >= MAX_FAILURES {
        tracing::warn!(%peer, path, failures = count, "API request with a wrong token; this address now gets 429 until {}s after its first failure", WINDOW.as_secs());
    } else {
        tracing::warn!(%peer, path, failures = count, "API request with a wrong token");
    }
    ApiError::unauthorized().into()
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
    fn failures_lock_an_address_out_until_its_window_ends() {
        let failures = Failures::default();
        let start = Instant::now();
        let a = Some(IpAddr::from([10, 0, 0, 1]));
        let b = Some(IpAddr::from([10, 0, 0, 2]));
        for n in 1..MAX_FAILURES {
            assert_eq!(failures.record(a, start), n);
            assert_eq!(failures.blocked(a, start), None, "after {n}");
        }
        assert_eq!(failures.record(a, start), MAX_FAILURES);
        let later = start + Duration::from_secs(20);
        assert_eq!(
            failures.blocked(a, later),
            Some(WINDOW - Duration::from_secs(20))
        );
        assert_eq!(
            failures.blocked(b, later),
            None,
            "other addresses are not affected"
        );
        assert_eq!(
            failures.blocked(a, start + WINDOW),
            None,
            "the window passed"
        );
        assert_eq!(failures.record(a, start + WINDOW), 1, "a new window");
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
