//! The wire of the control subject, pure: a request envelope checked against the whitelist of
//! routes a console may run on a node, and the reply.
//!
//! A request is JSON `{"method", "path", "body", "by": {"name", "reason"}}`: `body` is the JSON
//! body of a `POST` (absent or `null` for a `GET`), `by.name` the console operator's name (the
//! node runs the request as the caller `console:<name>`), `by.reason` an optional reason, put
//! into the body's `reason` when the body names none. Anything else (not JSON, unknown fields,
//! a route off the whitelist, a name with spaces) is refused with a 400 reply and runs nothing.

use serde::{Deserialize, Serialize};

/// The longest operator name a request may carry.
pub const MAX_NAME: usize = 64;

/// What a console operator asks a node to run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ControlRequest {
    /// `GET` or `POST`.
    pub method: String,
    /// The route's path, with its query string for a `GET`.
    pub path: String,
    /// The JSON body of a `POST`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<serde_json::Value>,
    /// Who asks.
    pub by: By,
}

/// The operator behind a request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct By {
    /// The console operator's name (a token name of the console).
    pub name: String,
    /// Why, if given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// A node's answer: the HTTP status its router gave and the JSON body (a string for a body
/// that is not JSON).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ControlReply {
    /// The HTTP status.
    pub status: u16,
    /// The answer's body.
    pub body: serde_json::Value,
}

impl ControlReply {
    /// An error reply in the API's error shape `{"error", "code"}`.
    pub fn error(status: u16, code: &str, message: impl Into<String>) -> Self {
        ControlReply {
            status,
            body: serde_json::json!({ "error": message.into(), "code": code }),
        }
    }
}

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Not a request envelope.
    #[error("not a control request ({0}): send JSON {{\"method\", \"path\", \"body\", \"by\": {{\"name\", \"reason\"}}}}")]
    Malformed(String),
    /// A route a console may not run on a node.
    #[error("{method} {path} is not allowed on the control subject: only GET /healthz, GET /v1/items/..., POST /v1/delete and POST /v1/redrive are")]
    NotAllowed {
        /// The method asked for.
        method: String,
        /// The path asked for.
        path: String,
    },
    /// The operator's name is empty, too long or not one word.
    #[error("the operator's name must be 1 to {MAX_NAME} letters, digits, or - _ . @ (no spaces)")]
    BadName,
}

impl ControlRequest {
    /// The caller name the node runs the request as.
    pub fn caller_name(&self) -> String {
        format!("console:{}", self.by.name)
    }

    /// The body to send, with `by.reason` as its `reason` when it names none.
    pub fn body_with_reason(&self) -> Option<serde_json::Value> {
        let mut body = self.body.clone().filter(|b| !b.is_null());
        if let (Some(serde_json::Value::Object(map)), Some(reason)) = (&mut body, &self.by.reason) {
            map.entry("reason")
                .or_insert_with(|| serde_json::Value::String(reason.clone()));
        }
        body
    }
}

/// Parses and checks one request off the control subject.
pub fn parse(bytes: &[u8]) -> Result<ControlRequest, EnvelopeError> {
    let request: ControlRequest =
        serde_json::from_slice(bytes).map_err(|e| EnvelopeError::Malformed(e.to_string()))?;
    check_name(&request.by.name)?;
    if !allowed(&request.method, &request.path) {
        return Err(EnvelopeError::NotAllowed {
            method: request.method,
            path: request.path,
        });
    }
    Ok(request)
}

fn check_name(name: &str) -> Result<(), EnvelopeError> {
    let ok = !name.is_empty()
        && name.chars().count() <= MAX_NAME
        && name
            .chars()
            .all(|c| c.is_alphanumeric() || matches!(c, '-' | '_' | '.' | '@'));
    ok.then_some(()).ok_or(EnvelopeError::BadName)
}

/// The whitelist: the routes a console runs on a node.
fn allowed(method: &str, path: &str) -> bool {
    let (route, query) = path.split_once('?').unwrap_or((path, ""));
    let clean = route.starts_with('/')
        && !route.contains("..")
        && !route.contains("//")
        && !route.chars().any(|c| c.is_control() || c.is_whitespace())
        && !query.chars().any(|c| c.is_control() || c.is_whitespace());
    if !clean {
        return false;
    }
    match method {
        "GET" => route == "/healthz" || route.starts_with("/v1/items/"),
        "POST" => query.is_empty() && matches!(route, "/v1/delete" | "/v1/redrive"),
        _ => false,
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    fn request(method: &str, path: &str) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({
            "method": method, "path": path, "body": {"ids": ["j/a"]}, "by": {"name": "ana"}
        }))
        .unwrap()
    }

    #[test]
    fn the_whitelisted_routes_pass() {
        for (method, path) in [
            ("GET", "/healthz"),
            ("GET", "/v1/items/j/a"),
            ("GET", "/v1/items/j/a/events?format=json"),
            ("POST", "/v1/delete"),
            ("POST", "/v1/redrive"),
        ] {
            let parsed = parse(&request(method, path)).unwrap();
            assert_eq!(parsed.path, path);
            assert_eq!(parsed.caller_name(), "console:ana");
        }
    }

    #[test]
    fn other_routes_are_refused() {
        for (method, path) in [
            ("POST", "/v1/purge"),
            ("POST", "/v1/jobs/j/clear"),
            ("POST", "/v1/jobs/j/retry"),
            ("GET", "/v1/items"),
            ("GET", "/metrics"),
            ("DELETE", "/v1/delete"),
            ("GET", "/v1/items/../purge"),
            ("GET", "/v1/items/a b"),
            ("POST", "/v1/delete?x=1"),
            ("GET", "healthz"),
        ] {
            let err = parse(&request(method, path)).unwrap_err();
            assert!(
                matches!(err, EnvelopeError::NotAllowed { .. }),
                "{method} {path}: {err:?}"
            );
        }
    }

    #[test]
    fn garbage_is_refused_with_what_to_send() {
        for bytes in [
            &b"hello"[..],
            b"{}",
            b"{\"method\":\"GET\",\"path\":\"/healthz\"}",
            b"{\"method\":\"GET\",\"path\":\"/healthz\",\"by\":{\"name\":\"a\"},\"extra\":1}",
        ] {
            let err = parse(bytes).unwrap_err();
            assert!(matches!(err, EnvelopeError::Malformed(_)), "{err:?}");
            assert!(err.to_string().contains("\"method\""), "{err}");
        }
        for name in ["", "a b", "x\n", &"n".repeat(MAX_NAME + 1)] {
            let bytes = serde_json::to_vec(&serde_json::json!({
                "method": "GET", "path": "/healthz", "by": {"name": name}
            }))
            .unwrap();
            assert_eq!(
                parse(&bytes).unwrap_err(),
                EnvelopeError::BadName,
                "{name:?}"
            );
        }
    }

    #[test]
    fn the_reason_goes_into_a_body_that_names_none() {
        let mut request = parse(&request("POST", "/v1/delete")).unwrap();
        request.by.reason = Some("flaky".into());
        let body = request.body_with_reason().unwrap();
        assert_eq!(body["reason"], "flaky");
        request.body = Some(serde_json::json!({"ids": [], "reason": "own"}));
        assert_eq!(request.body_with_reason().unwrap()["reason"], "own");
    }
}
