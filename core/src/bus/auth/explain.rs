//! Why a connection failed, in one line that names the cause and the fix.

use async_nats::{ConnectError, ConnectErrorKind};

use super::plan::{Method, Plan};
use super::url::redact_url;

/// One line naming why the connection failed and what to change.
pub fn explain_connect_error(err: &ConnectError, plan: &Plan, url: &str) -> String {
    let url = redact_url(url);
    let detail = source_chain(err);
    match err.kind() {
        ConnectErrorKind::AuthorizationViolation => match plan.method {
            Method::None => format!(
                "{url} requires authentication (authorization violation): give {}",
                plan.method.flags()
            ),
            _ => format!(
                "{url} refused {} (authorization violation): check {}",
                plan.method.describe(),
                plan.method.flags()
            ),
        },
        ConnectErrorKind::Authentication => format!(
            "cannot authenticate to {url} with {} ({detail}): check {}",
            plan.method.describe(),
            plan.method.flags()
        ),
        ConnectErrorKind::Tls => explain_tls(&url, &detail),
        // async-nats reports a failed handshake (an untrusted certificate...) as I/O.
        ConnectErrorKind::Io if looks_like_tls(&detail) => explain_tls(&url, &detail),
        ConnectErrorKind::TimedOut => format!(
            "no answer from {url} in time: is nats-server running there? (if it sets handshake_first, pass --tlsfirst)"
        ),
        ConnectErrorKind::ServerParse | ConnectErrorKind::Dns => format!(
            "cannot resolve the host of {url} ({detail}): check the name in -s/--server (NATS_URL, bus.url)"
        ),
        ConnectErrorKind::Io | ConnectErrorKind::MaxReconnects => format!(
            "{url} is unreachable ({detail}): is nats-server running there? check -s/--server (NATS_URL, bus.url)"
        ),
    }
}

/// Whether no server answered this connection (down, nothing listening, no answer in time),
/// as opposed to a server that refused it or a host name that does not resolve: it may
/// answer later.
pub fn is_unreachable(err: &ConnectError) -> bool {
    match err.kind() {
        ConnectErrorKind::Io => !looks_like_tls(&source_chain(err)),
        ConnectErrorKind::TimedOut | ConnectErrorKind::MaxReconnects => true,
        _ => false,
    }
}

/// Whether the server refused this connection (credentials, TLS): trying again with the same
/// settings cannot help, unlike a server that is down.
pub fn is_refusal(err: &ConnectError) -> bool {
    match err.kind() {
        ConnectErrorKind::AuthorizationViolation
        | ConnectErrorKind::Authentication
        | ConnectErrorKind::Tls => true,
        ConnectErrorKind::Io => looks_like_tls(&source_chain(err)),
        _ => false,
    }
}

fn looks_like_tls(detail: &str) -> bool {
    let lower = detail.to_ascii_lowercase();
    ["certificate", "tls", "handshake", "alert"]
        .iter()
        .any(|word| lower.contains(word))
}

fn explain_tls(url: &str, detail: &str) -> String {
    let lower = detail.to_ascii_lowercase();
    if lower.contains("unknownissuer")
        || lower.contains("unknown issuer")
        || lower.contains("badsignature")
    {
        format!("the server certificate of {url} is not trusted ({detail}): pass the CA that signed it with --tlsca (NATS_CA, bus.tls.ca)")
    } else if lower.contains("notvalidforname") || lower.contains("not valid for name") {
        format!("the server certificate of {url} does not name that host ({detail}): connect by a name the certificate holds")
    } else if lower.contains("expired") {
        format!("the server certificate of {url} has expired ({detail}): the server needs a new certificate")
    } else if lower.contains("certificaterequired") || lower.contains("certificate required") {
        format!("{url} requires a client certificate ({detail}): give --tlscert and --tlskey (NATS_CERT/NATS_KEY, bus.tls.cert/key)")
    } else if lower.contains("tls not required") || lower.contains("not support tls") {
        format!("{url} does not offer TLS ({detail}): use a nats:// URL and no TLS options, or enable TLS on the server")
    } else {
        format!("TLS with {url} failed ({detail}): check --tlsca, --tlscert/--tlskey and --tlsfirst (NATS_CA, NATS_CERT, NATS_KEY; bus.tls)")
    }
}

/// The error and its sources, joined by `: `, duplicates skipped.
fn source_chain(err: &(dyn std::error::Error + 'static)) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next = Some(err);
    while let Some(err) = next {
        let text = err.to_string();
        if !parts.iter().any(|part| part.contains(&text)) {
            parts.push(text);
        }
        next = err.source();
    }
    parts.join(": ")
}
