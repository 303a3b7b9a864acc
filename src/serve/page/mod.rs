//! The operators' web page at `/`: static files embedded in the binary, served without a token
//! (they hold no data). The page asks for the API token once, keeps it in the tab's
//! `sessionStorage` and calls the JSON API with it in the `Authorization` header; it builds
//! every element with DOM calls and sets item values as text, never as markup.
//!
//! Every answer here carries a Content-Security-Policy that allows scripts, styles and
//! connections from the server itself only (no inline script or style, no external asset, no
//! framing), `X-Content-Type-Options: nosniff` and `Referrer-Policy: no-referrer`.

use axum::extract::Path;
use axum::http::{header, HeaderName, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

/// The policy of every page answer: only this server's scripts, styles and API.
pub const CONTENT_SECURITY_POLICY: &str = "default-src 'none'; script-src 'self'; \
     style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; \
     form-action 'self'; frame-ancestors 'none'";

/// The page's files under `/ui/`: name, content type, content.
const ASSETS: &[(&str, &str, &str)] = &[
    (
        "app.css",
        "text/css; charset=utf-8",
        include_str!("assets/app.css"),
    ),
    ("app.js", JS, include_str!("assets/app.js")),
    ("api.js", JS, include_str!("assets/api.js")),
    ("dom.js", JS, include_str!("assets/dom.js")),
    ("overview.js", JS, include_str!("assets/overview.js")),
    ("items.js", JS, include_str!("assets/items.js")),
    ("detail.js", JS, include_str!("assets/detail.js")),
    ("retry.js", JS, include_str!("assets/retry.js")),
    ("delete.js", JS, include_str!("assets/delete.js")),
    ("redrive.js", JS, include_str!("assets/redrive.js")),
    ("actions.js", JS, include_str!("assets/actions.js")),
    ("audit.js", JS, include_str!("assets/audit.js")),
    ("console.js", JS, include_str!("assets/console.js")),
    ("icon.svg", "image/svg+xml", include_str!("assets/icon.svg")),
];

const JS: &str = "text/javascript; charset=utf-8";

const INDEX: &str = include_str!("assets/index.html");

/// The page's routes: `GET /` and `GET /ui/{file}`, outside the token check.
pub fn router<S: Clone + Send + Sync + 'static>() -> Router<S> {
    Router::new()
        .route("/", get(index))
        .route("/ui/{file}", get(asset))
}

async fn index() -> Response {
    page(StatusCode::OK, "text/html; charset=utf-8", INDEX)
}

async fn asset(Path(file): Path<String>) -> Response {
    match ASSETS.iter().find(|(name, _, _)| *name == file) {
        Some((_, kind, body)) => page(StatusCode::OK, kind, body),
        None => page(
            StatusCode::NOT_FOUND,
            "text/plain; charset=utf-8",
            "no such file of the page",
        ),
    }
}

/// An answer of the page with its security headers.
fn page(status: StatusCode, kind: &'static str, body: &'static str) -> Response {
    let headers = [
        (header::CONTENT_TYPE, HeaderValue::from_static(kind)),
        (
            header::CONTENT_SECURITY_POLICY,
            HeaderValue::from_static(CONTENT_SECURITY_POLICY),
        ),
        (
            header::X_CONTENT_TYPE_OPTIONS,
            HeaderValue::from_static("nosniff"),
        ),
        (
            header::REFERRER_POLICY,
            HeaderValue::from_static("no-referrer"),
        ),
        (header::CACHE_CONTROL, HeaderValue::from_static("no-cache")),
        (
            HeaderName::from_static("x-frame-options"),
            HeaderValue::from_static("DENY"),
        ),
    ];
    (status, headers, body).into_response()
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    /// The file names after `prefix` up to the next `"`, in `text`.
    fn references<'a>(text: &'a str, prefix: &str) -> Vec<&'a str> {
        text.split(prefix)
            .skip(1)
            .filter_map(|rest| rest.split('"').next())
            .collect()
    }

    #[test]
    fn every_file_the_page_loads_is_served() {
        let served = |name: &str| ASSETS.iter().any(|(file, _, _)| *file == name);
        let from_index = references(INDEX, "\"/ui/");
        assert!(from_index.contains(&"app.js"), "{from_index:?}");
        for name in from_index {
            assert!(
                served(name),
                "index.html loads /ui/{name}, which is not served"
            );
        }
        for (file, _, body) in ASSETS {
            for name in references(body, "from \"./") {
                assert!(served(name), "{file} imports ./{name}, which is not served");
            }
        }
    }

    #[test]
    fn no_inline_script_or_style_and_no_markup_from_data() {
        assert!(!INDEX.contains("<script>") && !INDEX.contains("style="));
        for (file, _, body) in ASSETS {
            for banned in [
                "innerHTML",
                "outerHTML",
                "insertAdjacentHTML",
                "document.write",
                "eval(",
            ] {
                assert!(!body.contains(banned), "{file} uses {banned}");
            }
        }
        assert!(!CONTENT_SECURITY_POLICY.contains("unsafe"));
    }
}
