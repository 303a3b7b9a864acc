//! Named tokens with roles: who may call which route of the admin API.
//!
//! A tokens file (`dlq serve --tokens-file FILE`) holds one token a line, `NAME ROLE TOKEN`
//! or `NAME TOKEN` (then the role is `read-only`); blank lines and lines starting with `#` are
//! skipped. The roles, each allowing what the one before allows:
//!
//! - `read-only`: every `GET` route (list, inspect, stats, analyze, events, whoami, audit);
//! - `operator`: also retry (redrive) and delete;
//! - `admin`: also clear and purge.
//!
//! The single token of `--token-file` / `DLQ_API_TOKEN` is the `admin` named `default`. Only
//! names are ever printed or logged; a token is kept as its digest ([`Token`]). A token
//! without the role a route needs is answered 403 naming that role ([`require_role`]).

use std::path::Path;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::Response;
use serde::Serialize;

use super::auth::Token;
use super::routes::ApiError;
use super::ServeError;

/// What a token may do; each role allows what the one before allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    /// Read only: the `GET` routes.
    ReadOnly,
    /// Also retry and delete.
    Operator,
    /// Also clear and purge.
    Admin,
}

impl Role {
    /// The role's name as the tokens file and the API spell it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::ReadOnly => "read-only",
            Role::Operator => "operator",
            Role::Admin => "admin",
        }
    }

    fn parse(text: &str) -> Option<Role> {
        [Role::ReadOnly, Role::Operator, Role::Admin]
            .into_iter()
            .find(|role| role.as_str() == text)
    }
}

impl std::fmt::Display for Role {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A token with its name and role.
#[derive(Debug, Clone)]
pub struct NamedToken {
    name: String,
    role: Role,
    token: Token,
}

impl NamedToken {
    /// `token`, known as `name`, allowed what `role` allows.
    pub fn new(name: impl Into<String>, role: Role, token: Token) -> Self {
        NamedToken {
            name: name.into(),
            role,
            token,
        }
    }
}

/// Who a request comes from, as the token middleware found it (a request extension).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Caller {
    /// The token's name (`anonymous` when the server needs no token).
    pub name: String,
    /// What it may do.
    pub role: Role,
}

impl Caller {
    /// The caller of a server without tokens: anyone on loopback, allowed everything.
    pub fn anonymous() -> Self {
        Caller {
            name: "anonymous".into(),
            role: Role::Admin,
        }
    }
}

/// The tokens the API accepts; none lets every request in (as [`Caller::anonymous`]).
#[derive(Debug, Clone, Default)]
pub struct Tokens {
    list: Vec<NamedToken>,
}

impl From<Option<Token>> for Tokens {
    /// The single token of `--token-file`: the `admin` named `default`.
    fn from(token: Option<Token>) -> Self {
        Tokens {
            list: token
                .map(|token| NamedToken::new("default", Role::Admin, token))
                .into_iter()
                .collect(),
        }
    }
}

impl Tokens {
    /// Whether no token is set (then every request gets in).
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }

    /// The names and roles, never the tokens.
    pub fn names(&self) -> impl Iterator<Item = (&str, Role)> {
        self.list.iter().map(|t| (t.name.as_str(), t.role))
    }

    /// Adds `token`; refuses a name already taken.
    pub fn add(&mut self, token: NamedToken, origin: &str) -> Result<(), ServeError> {
        if self.list.iter().any(|t| t.name == token.name) {
            return Err(ServeError::Token {
                origin: origin.to_owned(),
                reason: format!("the name {:?} is given twice", token.name),
            });
        }
        self.list.push(token);
        Ok(())
    }

    /// Adds the tokens of the tokens file at `path` (see the module's doc).
    pub fn load(&mut self, path: &Path) -> Result<(), ServeError> {
        let origin = path.display().to_string();
        let text = std::fs::read_to_string(path).map_err(|err| ServeError::Token {
            origin: origin.clone(),
            reason: err.to_string(),
        })?;
        let before = self.list.len();
        for (number, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let token = parse_line(line).map_err(|reason| ServeError::Token {
                origin: format!("{origin} line {}", number + 1),
                reason,
            })?;
            self.add(token, &format!("{origin} line {}", number + 1))?;
        }
        if self.list.len() == before {
            return Err(ServeError::Token {
                origin,
                reason: "the file holds no token".into(),
            });
        }
        Ok(())
    }

    /// The token `given` is, if any. Every token is compared, so the time taken does not say
    /// which one matched.
    pub fn find(&self, given: &str) -> Option<Caller> {
        let mut found = None;
        for token in &self.list {
            if token.token.matches(given) && found.is_none() {
                found = Some(Caller {
                    name: token.name.clone(),
                    role: token.role,
                });
            }
        }
        found
    }
}

/// One line `NAME [ROLE] TOKEN`; the error never quotes the token.
fn parse_line(line: &str) -> Result<NamedToken, String> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (name, role, token) = match fields.as_slice() {
        [name, token] => (*name, Role::ReadOnly, *token),
        [name, role, token] => {
            let role = Role::parse(role).ok_or_else(|| {
                format!("unknown role {role:?} for {name:?}: read-only, operator or admin")
            })?;
            (*name, role, *token)
        }
        _ => {
            return Err(
                "expected `NAME ROLE TOKEN` or `NAME TOKEN` (a token holds no spaces)".into(),
            )
        }
    };
    Ok(NamedToken::new(name, role, Token::new(token)))
}

/// Middleware of one route: a caller without the role in its state gets 403.
pub async fn require_role(State(needed): State<Role>, request: Request, next: Next) -> Response {
    let caller = request.extensions().get::<Arc<Caller>>().cloned();
    match caller {
        Some(caller) if caller.role >= needed => next.run(request).await,
        caller => ApiError::forbidden(needed, caller.as_deref()).into(),
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
mod tests {
    use super::*;

    #[test]
    fn a_tokens_file_names_roles_and_defaults_to_read_only() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        std::fs::write(
            &file,
            "# who\n\nviewer v-tok\nops operator o-tok\nboss admin a-tok\n",
        )
        .unwrap();
        let mut tokens = Tokens::default();
        tokens.load(&file).unwrap();
        let who = |t: &str| tokens.find(t).map(|c| (c.name, c.role));
        assert_eq!(who("v-tok"), Some(("viewer".into(), Role::ReadOnly)));
        assert_eq!(who("o-tok"), Some(("ops".into(), Role::Operator)));
        assert_eq!(who("a-tok"), Some(("boss".into(), Role::Admin)));
        assert_eq!(who("x-tok"), None);
        assert!(
            !format!("{tokens:?}").contains("tok\""),
            "tokens never printed"
        );
    }

    #[test]
    fn bad_lines_are_named_without_the_token() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("tokens");
        for (text, says) in [
            ("a root s3cret\n", "unknown role"),
            ("a b c s3cret\n", "expected"),
            ("a s3cret\na other\n", "twice"),
            ("# nothing\n", "no token"),
        ] {
            std::fs::write(&file, text).unwrap();
            let err = Tokens::default().load(&file).unwrap_err().to_string();
            assert!(err.contains(says), "{text:?}: {err}");
            assert!(!err.contains("s3cret"), "{err}");
        }
    }

    #[test]
    fn the_single_token_is_the_admin_named_default() {
        let tokens = Tokens::from(Some(Token::new("t")));
        assert_eq!(
            tokens.find("t"),
            Some(Caller {
                name: "default".into(),
                role: Role::Admin
            })
        );
        assert!(Tokens::from(None).is_empty());
    }
}
