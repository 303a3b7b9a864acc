//! The CLI's side of the admin API: one HTTP/1.1 request per connection over a
//! `tokio::net::TcpStream`, with TLS for `https://` URLs (rustls; the CA of `--api-ca`, else
//! the system's roots), `Connection: close`, the body read to the end.
//!
//! JSON answers need nothing more, so the CLI carries no HTTP client crate: no redirects, no
//! keep-alive. Responses with `Content-Length`, `Transfer-Encoding: chunked` or neither (read to
//! EOF) are understood.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls_pki_types::pem::PemObject;
use rustls_pki_types::{CertificateDer, ServerName};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{ClientConfig, RootCertStore};
use tokio_rustls::TlsConnector;

pub mod discovery;
pub mod token;

use super::ServeError;

/// Longest wait for the connection.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(3);
/// Longest wait for a whole answer (a large listing or analysis of a big queue takes a while).
const ANSWER_TIMEOUT: Duration = Duration::from_secs(600);
/// Longest wait of the health probe.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Largest answer read (a page of 100,000 items with their data fits comfortably).
const MAX_ANSWER_BYTES: usize = 1 << 30;

/// A client of one `dlq serve`.
#[derive(Debug, Clone)]
pub struct ApiClient {
    url: String,
    host: String,
    port: u16,
    prefix: String,
    token: Option<String>,
    tls: Option<Tls>,
}

/// The TLS side of an `https://` client.
#[derive(Clone)]
struct Tls {
    connector: TlsConnector,
    name: ServerName<'static>,
}

impl std::fmt::Debug for Tls {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Tls({:?})", self.name)
    }
}

/// A successful answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The HTTP status (2xx).
    pub status: u16,
    /// The body.
    pub body: Vec<u8>,
}

impl ApiClient {
    /// A client of the API at `url` (`http[s]://host:port[/prefix]`), sending `token` if
    /// given; an `https://` server's certificate must be signed by `ca` (a PEM file), else by
    /// one of the system's roots.
    pub fn new(url: &str, token: Option<String>, ca: Option<&Path>) -> Result<Self, ServeError> {
        let bad = |why: &str| ServeError::BadUrl {
            url: url.to_owned(),
            reason: why.to_owned(),
        };
        let (https, rest) = match (url.strip_prefix("http://"), url.strip_prefix("https://")) {
            (Some(rest), _) => (false, rest),
            (None, Some(rest)) => (true, rest),
            (None, None) => return Err(bad("only http:// and https:// URLs are supported")),
        };
        let default_port = if https { 443 } else { 80 };
        let (authority, prefix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let port_of = |text: &str| {
            text.parse::<u16>()
                .map_err(|_| bad("the port is not a number"))
        };
        let (host, port) = match authority.strip_prefix('[') {
            // An IPv6 address: `[::1]` or `[::1]:9465`.
            Some(inner) => {
                let (host, after) = inner
                    .split_once(']')
                    .ok_or_else(|| bad("the IPv6 address lacks its closing ]"))?;
                match after.strip_prefix(':') {
                    Some(port) => (host, port_of(port)?),
                    None if after.is_empty() => (host, default_port),
                    None => return Err(bad("unexpected text after the IPv6 address")),
                }
            }
            None => match authority.split_once(':') {
                Some((host, port)) => (host, port_of(port)?),
                None => (authority, default_port),
            },
        };
        if host.is_empty() {
            return Err(bad("the host is missing"));
        }
        let tls = if https {
            let name = ServerName::try_from(host.to_owned())
                .map_err(|_| bad("the host is not a valid TLS server name"))?;
            Some(Tls {
                connector: TlsConnector::from(Arc::new(client_config(ca)?)),
                name,
            })
        } else {
            None
        };
        Ok(ApiClient {
            url: url.trim_end_matches('/').to_owned(),
            host: host.to_owned(),
            port,
            prefix: prefix.trim_end_matches('/').to_owned(),
            token,
            tls,
        })
    }

    /// The base URL.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Whether `GET /healthz` answers 200 within a short time.
    pub async fn healthy(&self) -> bool {
        matches!(
            tokio::time::timeout(PROBE_TIMEOUT, self.send("GET", "/healthz", None)).await,
            Ok(Ok(answer)) if answer.status == 200
        )
    }

    /// `GET path_and_query`; an error status becomes [`ServeError::Api`].
    pub async fn get(&self, path_and_query: &str) -> Result<Answer, ServeError> {
        self.call("GET", path_and_query, None).await
    }

    /// `POST path_and_query` with an empty body; an error status becomes [`ServeError::Api`].
    pub async fn post(&self, path_and_query: &str) -> Result<Answer, ServeError> {
        self.call("POST", path_and_query, None).await
    }

    /// `POST path_and_query` with `body` as JSON (one of the request types of
    /// [`crate::request`]); an error status becomes [`ServeError::Api`].
    pub async fn post_json(
        &self,
        path_and_query: &str,
        body: &impl serde::Serialize,
    ) -> Result<Answer, ServeError> {
        let body = serde_json::to_vec(body).map_err(|source| ServeError::Body {
            url: self.url.clone(),
            source,
        })?;
        self.call("POST", path_and_query, Some(body)).await
    }

    async fn call(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ServeError> {
        let answer = tokio::time::timeout(ANSWER_TIMEOUT, self.send(method, path_and_query, body))
            .await
            .map_err(|_| self.unreachable(format!("no answer within {ANSWER_TIMEOUT:?}")))??;
        if (200..300).contains(&answer.status) {
            return Ok(answer);
        }
        Err(api_error(answer.status, &answer.body))
    }

    async fn send(
        &self,
        method: &str,
        path_and_query: &str,
        body: Option<Vec<u8>>,
    ) -> Result<Answer, ServeError> {
        let connect = TcpStream::connect((self.host.as_str(), self.port));
        let stream = tokio::time::timeout(CONNECT_TIMEOUT, connect)
            .await
            .map_err(|_| self.unreachable(format!("no connection within {CONNECT_TIMEOUT:?}")))?
            .map_err(|err| self.unreachable(err.to_string()))?;
        let request = self.request(method, path_and_query, body.as_deref());
        let raw = match &self.tls {
            None => exchange(stream, &request).await,
            Some(tls) => {
                let handshake = tls.connector.connect(tls.name.clone(), stream);
                let stream = tokio::time::timeout(CONNECT_TIMEOUT, handshake)
                    .await
                    .map_err(|_| {
                        self.unreachable(format!("no TLS handshake within {CONNECT_TIMEOUT:?}"))
                    })?
                    .map_err(|err| {
                        self.unreachable(format!(
                            "TLS: {err} (is the server's CA given with --api-ca?)"
                        ))
                    })?;
                exchange(stream, &request).await
            }
        }
        .map_err(|err| self.unreachable(err.to_string()))?;
        parse_response(&raw).map_err(|reason| ServeError::Protocol {
            url: self.url.clone(),
            reason,
        })
    }

    fn request(&self, method: &str, path_and_query: &str, body: Option<&[u8]>) -> Vec<u8> {
        let host = if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        };
        let mut head = format!(
            "{method} {}{path_and_query} HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\nAccept: */*\r\nUser-Agent: dlq/{}\r\n",
            self.prefix,
            env!("CARGO_PKG_VERSION")
        );
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        let body = body.unwrap_or_default();
        if method != "GET" {
            head.push_str(&format!(
                "Content-Type: application/json\r\nContent-Length: {}\r\n",
                body.len()
            ));
        }
        head.push_str("\r\n");
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        request
    }

    fn unreachable(&self, reason: String) -> ServeError {
        ServeError::Unreachable {
            url: self.url.clone(),
            reason,
        }
    }
}

/// Writes `request` and reads the answer to its end. A TLS peer that closes without its
/// close_notify still gave a whole answer when it said how long it is (`parse_response` checks).
async fn exchange(
    mut stream: impl AsyncRead + AsyncWrite + Unpin,
    request: &[u8],
) -> std::io::Result<Vec<u8>> {
    stream.write_all(request).await?;
    stream.flush().await?;
    let mut raw = Vec::new();
    match (&mut stream)
        .take(MAX_ANSWER_BYTES as u64 + 64 * 1024)
        .read_to_end(&mut raw)
        .await
    {
        Err(err) if err.kind() == std::io::ErrorKind::UnexpectedEof && !raw.is_empty() => Ok(raw),
        Err(err) => Err(err),
        Ok(_) => Ok(raw),
    }
}

/// The rustls client configuration: trusting the certificates of the PEM file `ca`, else the
/// system's roots.
fn client_config(ca: Option<&Path>) -> Result<ClientConfig, ServeError> {
    let mut roots = RootCertStore::empty();
    match ca {
        Some(path) => {
            let bad = |reason: String| ServeError::Tls {
                path: path.to_owned(),
                reason,
            };
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|err| bad(err.to_string()))?
                .collect::<Result<Vec<_>, _>>()
                .map_err(|err| bad(err.to_string()))?;
            if certs.is_empty() {
                return Err(bad(
                    "no PEM certificate (-----BEGIN CERTIFICATE-----) in it".into(),
                ));
            }
            for cert in certs {
                roots
                    .add(cert)
                    .map_err(|err| bad(format!("not a usable CA certificate: {err}")))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            roots.add_parsable_certificates(native.certs);
        }
    }
    let provider = Arc::new(tokio_rustls::rustls::crypto::ring::default_provider());
    let config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| ServeError::Tls {
            path: ca.map(Path::to_owned).unwrap_or_default(),
            reason: err.to_string(),
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

/// The error an API answer with status `status` stands for (its JSON `error`, else the body).
fn api_error(status: u16, body: &[u8]) -> ServeError {
    let parsed: Option<serde_json::Value> = serde_json::from_slice(body).ok();
    let field = |name: &str| {
        parsed
            .as_ref()
            .and_then(|v| v.get(name))
            .and_then(|v| v.as_str())
            .map(str::to_owned)
    };
    let message = field("error").unwrap_or_else(|| {
        let text = String::from_utf8_lossy(body).trim().to_owned();
        if text.is_empty() {
            format!("the API answered HTTP {status}")
        } else {
            text
        }
    });
    ServeError::Api {
        status,
        code: field("code").unwrap_or_default(),
        message,
    }
}

/// Splits a raw HTTP/1.1 response into status and (de-chunked) body. Pure, for tests.
pub fn parse_response(raw: &[u8]) -> Result<Answer, String> {
    let end = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or("the answer has no complete header")?;
    let head = String::from_utf8_lossy(&raw[..end]);
    let body = &raw[end + 4..];
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|code| code.parse::<u16>().ok())
        .ok_or("the answer has no HTTP status line")?;
    let mut chunked = false;
    let mut length = None;
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        if name.eq_ignore_ascii_case("transfer-encoding") {
            chunked = value.eq_ignore_ascii_case("chunked");
        } else if name.eq_ignore_ascii_case("content-length") {
            length = Some(value.parse::<usize>().map_err(|_| "bad Content-Length")?);
        }
    }
    let body = if chunked {
        dechunk(body)?
    } else if let Some(length) = length {
        body.get(..length)
            .ok_or("the answer is shorter than its Content-Length")?
            .to_vec()
    } else {
        body.to_vec()
    };
    if body.len() > MAX_ANSWER_BYTES {
        return Err(format!(
            "the answer is larger than {MAX_ANSWER_BYTES} bytes"
        ));
    }
    Ok(Answer { status, body })
}

fn dechunk(mut rest: &[u8]) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    loop {
        let line_end = rest
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("a chunk has no size line")?;
        let size_text = String::from_utf8_lossy(&rest[..line_end]);
        let size_text = size_text.split(';').next().unwrap_or("").trim();
        let size = usize::from_str_radix(size_text, 16).map_err(|_| "bad chunk size")?;
        rest = &rest[line_end + 2..];
        if size == 0 {
            return Ok(body);
        }
        let chunk = rest.get(..size).ok_or("the answer ends inside a chunk")?;
        body.extend_from_slice(chunk);
        rest = rest
            .get(size + 2..)
            .ok_or("the answer ends after a chunk")?;
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_with_port_prefix_and_ipv6() {
        let c = ApiClient::new("http://127.0.0.1:9465/", None, None).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.prefix.as_str()),
            ("127.0.0.1", 9465, "")
        );
        assert_eq!(c.url(), "http://127.0.0.1:9465");
        let c = ApiClient::new("http://[::1]:80/dlq", None, None).unwrap();
        assert_eq!(
            (c.host.as_str(), c.port, c.prefix.as_str()),
            ("::1", 80, "/dlq")
        );
        let c = ApiClient::new("http://localhost", None, None).unwrap();
        assert_eq!(c.port, 80);
        let c = ApiClient::new("https://localhost", None, None).unwrap();
        assert_eq!(c.port, 443);
        assert!(c.tls.is_some());
        for bad in ["ftp://x:1", "127.0.0.1:9465", "http://:1", "http://x:port"] {
            assert!(
                matches!(
                    ApiClient::new(bad, None, None),
                    Err(ServeError::BadUrl { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn requests_carry_host_token_and_length() {
        let c = ApiClient::new("http://127.0.0.1:1/p", Some("s3cret".into()), None).unwrap();
        let text = String::from_utf8(c.request("POST", "/v1/purge", Some(b"{}"))).unwrap();
        assert!(
            text.starts_with("POST /p/v1/purge HTTP/1.1\r\nHost: 127.0.0.1:1\r\n"),
            "{text}"
        );
        assert!(text.contains("Authorization: Bearer s3cret\r\n"), "{text}");
        assert!(text.contains("Content-Length: 2\r\n"), "{text}");
        assert!(text.ends_with("\r\n\r\n{}"), "{text}");
    }

    #[test]
    fn responses_parse_by_length_chunks_or_eof() {
        let by_length = b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\nhello";
        assert_eq!(parse_response(by_length).unwrap().body, b"hello");
        let chunked =
            b"HTTP/1.1 404 Not Found\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n2;x=y\r\nde\r\n0\r\n\r\n";
        let answer = parse_response(chunked).unwrap();
        assert_eq!(
            (answer.status, answer.body.as_slice()),
            (404, &b"abcde"[..])
        );
        let to_eof = b"HTTP/1.1 200 OK\r\n\r\nall of it";
        assert_eq!(parse_response(to_eof).unwrap().body, b"all of it");
        assert!(parse_response(b"HTTP/1.1 200 OK\r\n").is_err());
        assert!(parse_response(b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\nshort").is_err());
    }

    #[test]
    fn error_answers_keep_the_servers_message_and_code() {
        let err = api_error(
            404,
            br#"{"error":"item 'x' not found in any job","code":"not_found"}"#,
        );
        match err {
            ServeError::Api {
                status,
                code,
                message,
            } => {
                assert_eq!((status, code.as_str()), (404, "not_found"));
                assert_eq!(message, "item 'x' not found in any job");
            }
            other => panic!("{other:?}"),
        }
        assert!(api_error(502, b"").to_string().contains("502"));
    }

    #[tokio::test]
    async fn an_unreachable_server_is_a_clear_error() {
        let c = ApiClient::new("http://127.0.0.1:1", None, None).unwrap();
        assert!(!c.healthy().await);
        let err = c.get("/v1/stats").await.unwrap_err();
        assert!(matches!(err, ServeError::Unreachable { .. }), "{err:?}");
        assert!(err.to_string().contains("http://127.0.0.1:1"), "{err}");
    }
}
