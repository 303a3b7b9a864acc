//! `${...}` interpolation for workflow steps, built so that work-item data is never executed.
//!
//! Work items are untrusted: an item may hold `$(touch /tmp/pwned)`, backticks, quotes, `;` or
//! newlines. [`render_shell`] renders a `shell:` step without ever putting a value into the
//! script: values reach the shell as environment variables only (see [`shell`] for how the
//! quoting context is tracked). [`render_text`] inserts values verbatim, for prompts passed as
//! one argv element, never to a shell.
//!
//! Names the [`Lookup`] does not claim (`${HOME}`, `${N:-1}`) are left for the shell when they
//! are shell parameter expansions; anything else is an error, so typos fail before a step runs.

mod check;
mod shell;

pub(super) use check::Scope;
pub(super) use shell::{render_shell, ShellCommand};

use std::collections::BTreeMap;

/// Why a template could not be rendered; each message says what to fix in the workflow.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    /// A `${` without its closing `}`.
    #[error(
        "`${{` at byte {offset} is never closed: add the `}}`, or write `\\${{` (shell step) or \
         `$${{` (prompt) for a literal `${{`"
    )]
    Unclosed {
        /// Byte offset of the `${` in the template.
        offset: usize,
    },
    /// Neither a workflow variable nor a shell parameter expansion.
    #[error(
        "`${{{expr}}}` is not a workflow variable (`item`, `item.FIELD`, `map.NAME`) nor a shell \
         variable name: fix the spelling"
    )]
    InvalidExpression {
        /// The text between the braces.
        expr: String,
    },
    /// The work item lacks the field a template asks for.
    #[error("the work item has no field `{path}`: check the field name against the input items")]
    MissingField {
        /// The full path asked for, e.g. `item.a.b`.
        path: String,
    },
    /// A `map.NAME` variable that does not exist.
    #[error("unknown variable `{name}`: use one of {known}")]
    UnknownVariable {
        /// The name asked for, e.g. `map.nope`.
        name: String,
        /// The names that exist, comma separated.
        known: String,
    },
    /// `${item...}` in a step that has no work item (e.g. a reduce step).
    #[error("`${{{expr}}}` is used in a step that has no work item: use item variables only in map steps")]
    NoItem {
        /// The text between the braces.
        expr: String,
    },
    /// A value placed inside `$((...))`, where the shell would evaluate it as code.
    #[error(
        "`${{{expr}}}` is inside `$((...))`, where the shell evaluates it as code: assign it to a \
         shell variable and check it is a number first"
    )]
    InArithmetic {
        /// The text between the braces.
        expr: String,
    },
    /// A value with a NUL byte, which no process argument or environment can carry.
    #[error("the value of `${{{expr}}}` contains a NUL byte, which cannot be passed to a process: remove it from the input")]
    NulByte {
        /// The text between the braces.
        expr: String,
    },
}

/// Resolves the expression inside `${...}` (e.g. `item`, `item.a.b`, `map.total`).
pub(super) trait Lookup {
    /// The value of `expr`; `Ok(None)` when the name is not ours (it is then left for the shell
    /// if it is a shell parameter expansion, and is an error otherwise).
    fn lookup(&self, expr: &str) -> Result<Option<String>, TemplateError>;
}

/// The variables of one step: the work item and the job's `map.*` values.
#[derive(Debug, Clone, Copy)]
pub(super) struct ItemVars<'a> {
    /// The work item; `None` in steps that run without one.
    pub item: Option<&'a serde_json::Value>,
    /// `map.NAME` values, e.g. `"total" -> "200"`.
    pub map: &'a BTreeMap<String, String>,
}

/// A string item gives its raw text, a number or bool its JSON text, anything else compact JSON.
fn value_text(value: &serde_json::Value) -> String {
    match value {
        serde_json::Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

/// `item.a.b` as (`item`, `.a.b`): the variable's root name and the rest.
fn split_root(expr: &str) -> (&str, &str) {
    let head_len = expr
        .bytes()
        .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
        .count();
    expr.split_at(head_len)
}

impl Lookup for ItemVars<'_> {
    fn lookup(&self, expr: &str) -> Result<Option<String>, TemplateError> {
        let (head, rest) = split_root(expr);
        let invalid = || TemplateError::InvalidExpression { expr: expr.into() };
        match head {
            "item" => {
                let item = self
                    .item
                    .ok_or_else(|| TemplateError::NoItem { expr: expr.into() })?;
                if rest.is_empty() {
                    return Ok(Some(value_text(item)));
                }
                let path = rest.strip_prefix('.').ok_or_else(invalid)?;
                let mut at = item;
                for key in path.split('.') {
                    if key.is_empty() {
                        return Err(invalid());
                    }
                    let next = match at {
                        serde_json::Value::Object(map) => map.get(key),
                        serde_json::Value::Array(list) => {
                            key.parse::<usize>().ok().and_then(|i| list.get(i))
                        }
                        _ => None,
                    };
                    at = next.ok_or_else(|| TemplateError::MissingField { path: expr.into() })?;
                }
                Ok(Some(value_text(at)))
            }
            "map" => {
                let name = rest.strip_prefix('.').ok_or_else(invalid)?;
                match self.map.get(name) {
                    Some(value) => Ok(Some(value.clone())),
                    None => Err(TemplateError::UnknownVariable {
                        name: expr.into(),
                        known: known_names(self.map),
                    }),
                }
            }
            _ => Ok(None),
        }
    }
}

fn known_names(map: &BTreeMap<String, String>) -> String {
    if map.is_empty() {
        return "no map variables (none are defined here)".into();
    }
    let names: Vec<String> = map.keys().map(|k| format!("map.{k}")).collect();
    names.join(", ")
}

/// Whether `expr` is a shell parameter expansion to leave to the shell: a name (`HOME`), a
/// positional or special parameter (`1`, `@`), `#NAME`, or a name followed by an operator
/// (`N:-1`, `F%.txt`) without nested expansions (the renderer ends `${` at the first `}`).
fn is_shell_parameter(expr: &str) -> bool {
    let bytes = expr.as_bytes();
    let name_len = |s: &[u8]| -> usize {
        match s.first() {
            Some(b) if b.is_ascii_digit() => s.iter().take_while(|b| b.is_ascii_digit()).count(),
            Some(b) if b.is_ascii_alphabetic() || *b == b'_' => s
                .iter()
                .take_while(|b| b.is_ascii_alphanumeric() || **b == b'_')
                .count(),
            Some(b) if b"@*#?$!-".contains(b) => 1,
            _ => 0,
        }
    };
    if let Some(rest) = expr.strip_prefix('#') {
        if !rest.is_empty() && name_len(rest.as_bytes()) == rest.len() {
            return true;
        }
    }
    let len = name_len(bytes);
    if len == 0 {
        return false;
    }
    let rest = &expr[len..];
    rest.is_empty()
        || (rest.starts_with([':', '-', '=', '?', '+', '%', '#', '/'])
            && !rest.contains(['$', '`', '{']))
}

/// Renders a template as plain text, values inserted verbatim: for prompts passed as a single
/// argv element, never through a shell. `$${` gives a literal `${`.
pub(super) fn render_text(template: &str, vars: &dyn Lookup) -> Result<String, TemplateError> {
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find("${") {
        let offset = template.len() - rest.len() + pos;
        if pos > 0 && rest.as_bytes()[pos - 1] == b'$' {
            out.push_str(&rest[..pos - 1]);
            out.push_str("${");
            rest = &rest[pos + 2..];
            continue;
        }
        out.push_str(&rest[..pos]);
        let after = &rest[pos + 2..];
        let close = after.find('}').ok_or(TemplateError::Unclosed { offset })?;
        let expr = &after[..close];
        match vars.lookup(expr)? {
            Some(value) if value.contains('\0') => {
                return Err(TemplateError::NulByte { expr: expr.into() })
            }
            Some(value) => out.push_str(&value),
            None if is_shell_parameter(expr) => out.push_str(&rest[pos..pos + 3 + close]),
            None => return Err(TemplateError::InvalidExpression { expr: expr.into() }),
        }
        rest = &after[close + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

#[cfg(test)]
mod tests;
