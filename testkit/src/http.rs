//! The bytes of an HTTP/1.1 request to the admin API, for tests that speak HTTP over their own
//! socket (plain or TLS) and must see exactly what the server answers.

/// One request (`Connection: close`), with a bearer token and a JSON body when given.
pub fn request(method: &str, path: &str, token: Option<&str>, body: Option<&str>) -> String {
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some(token) = token {
        request.push_str(&format!("Authorization: Bearer {token}\r\n"));
    }
    let body = body.unwrap_or("");
    if method == "POST" {
        request.push_str(&format!(
            "Content-Type: application/json\r\nContent-Length: {}\r\n",
            body.len()
        ));
    }
    request.push_str("\r\n");
    request.push_str(body);
    request
}
