//! The admin API's bearer token as the CLI sends it and the server expects it: read from a
//! file, or from the environment.

use std::path::Path;

use crate::serve::ServeError;

/// Environment variable holding the token itself.
pub const TOKEN_ENV: &str = "DLQ_API_TOKEN";

/// The token text from `file` if given, else from `DLQ_API_TOKEN`; `None` when neither is set.
/// An unreadable or empty file, or an empty variable, is an error.
pub fn token_text(file: Option<&Path>) -> Result<Option<String>, ServeError> {
    let (text, source) = match file {
        Some(path) => (
            std::fs::read_to_string(path).map_err(|err| ServeError::Token {
                origin: path.display().to_string(),
                reason: err.to_string(),
            })?,
            path.display().to_string(),
        ),
        None => match std::env::var(TOKEN_ENV) {
            Ok(text) => (text, TOKEN_ENV.to_owned()),
            Err(_) => return Ok(None),
        },
    };
    let token = text.lines().next().unwrap_or("").trim().to_owned();
    if token.is_empty() {
        return Err(ServeError::Token {
            origin: source.clone(),
            reason: "the token is empty".into(),
        });
    }
    if token.chars().any(|c| c.is_control()) {
        return Err(ServeError::Token {
            origin: source.clone(),
            reason: "the token contains control characters".into(),
        });
    }
    Ok(Some(token))
}
