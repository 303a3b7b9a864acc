//! `${...}` interpolation for workflow steps, built so that work-item data is never executed.
//!
//! Work items are untrusted: an item may hold `$(touch /tmp/pwned)`, backticks, quotes, `;` or
//! newlines. Pasting such text into a shell script, even "quoted", lets it escape its quotes.
//! [`render_shell`] therefore never puts a value into the script at all. Each value goes into an
//! environment variable (`DLQ_V0`, `DLQ_V1`, ...) and the script gets a double-quoted parameter
//! expansion of that variable in its place. The shell expands a parameter as data, one word,
//! without parsing it as code, globbing or splitting it.
//!
//! So that the reference reads the same in every quoting context of the template, the renderer
//! tracks the shell's quoting as it scans (unquoted, `'...'`, `"..."`, `$'...'`, backslash
//! escapes, `$(...)`, backticks, comments):
//!
//! | context of `${item}` | replaced by |
//! | --- | --- |
//! | unquoted, `$(...)`, backticks | `"${DLQ_V0}"` |
//! | inside `"..."` | `${DLQ_V0}` |
//! | inside `'...'` | `'"${DLQ_V0}"'` (close, expand, reopen) |
//! | inside `$'...'` | `'"${DLQ_V0}"$'` |
//! | inside `$((...))` | an error: the shell would evaluate the value as arithmetic code |
//! | in a `#` comment, or escaped as `\${` | left as written |
//!
//! `./process '${item}'` thus still passes the item as one argument. Limits: a here-document body
//! is scanned as unquoted text, so the reference appears there with its double quotes; and a
//! script that itself re-parses a value (`eval`, `sh -c "$x"`, bash arithmetic on a variable)
//! executes it, as it would any variable.
//!
//! Names the [`Lookup`] does not claim (`${HOME}`, `${N:-1}`) are left for the shell when they
//! are shell parameter expansions; anything else is an error, so typos fail before a step runs.
//! [`render_text`] inserts values verbatim, for prompts passed as one argv element, never to a
//! shell.

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
pub trait Lookup {
    /// The value of `expr`; `Ok(None)` when the name is not ours (it is then left for the shell
    /// if it is a shell parameter expansion, and is an error otherwise).
    fn lookup(&self, expr: &str) -> Result<Option<String>, TemplateError>;
}

/// The variables of one step: the work item and the job's `map.*` values.
#[derive(Debug, Clone, Copy)]
pub struct ItemVars<'a> {
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

impl Lookup for ItemVars<'_> {
    fn lookup(&self, expr: &str) -> Result<Option<String>, TemplateError> {
        let head_len = expr
            .bytes()
            .take_while(|b| b.is_ascii_alphanumeric() || *b == b'_')
            .count();
        let (head, rest) = expr.split_at(head_len);
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

/// A rendered shell step: run `sh -c script` with `env` added to the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShellCommand {
    /// The script; it references values only as `DLQ_V<n>` parameter expansions.
    pub script: String,
    /// `DLQ_V<n>` variables holding the values, in order.
    pub env: Vec<(String, String)>,
}

/// Quoting context of the shell at a point of the template.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ctx {
    Unquoted,
    /// `$(...)`, with the count of inner `(` still open.
    Subst(u32),
    /// `$((...))`, with the count of inner `(` still open.
    Arith(u32),
    Backtick,
    Double,
    Single,
    AnsiC,
}

/// Renders a shell template: values go into environment variables that the script references
/// as double-quoted parameter expansions, so the shell treats them as data (see the module doc).
pub fn render_shell(template: &str, vars: &dyn Lookup) -> Result<ShellCommand, TemplateError> {
    let b = template.as_bytes();
    let mut stack = vec![Ctx::Unquoted];
    let mut script = String::with_capacity(template.len());
    let mut env: Vec<(String, String)> = Vec::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    let (mut i, mut copied, mut word_start) = (0, 0, true);
    while i < b.len() {
        let ctx = stack.last().copied().unwrap_or(Ctx::Unquoted);
        let c = b[i];
        let next = b.get(i + 1).copied();
        if c == b'$' && next == Some(b'{') {
            let close = template[i + 2..]
                .find('}')
                .map(|p| i + 2 + p)
                .ok_or(TemplateError::Unclosed { offset: i })?;
            let expr = &template[i + 2..close];
            if let Some(value) = vars.lookup(expr)? {
                let quoted = match ctx {
                    Ctx::Arith(_) => return Err(TemplateError::InArithmetic { expr: expr.into() }),
                    Ctx::Double => ("", ""),
                    Ctx::Single => ("'\"", "\"'"),
                    Ctx::AnsiC => ("'\"", "\"$'"),
                    Ctx::Unquoted | Ctx::Subst(_) | Ctx::Backtick => ("\"", "\""),
                };
                if value.contains('\0') {
                    return Err(TemplateError::NulByte { expr: expr.into() });
                }
                let name = names.entry(expr.to_string()).or_insert_with(|| {
                    let name = format!("DLQ_V{}", env.len());
                    env.push((name.clone(), value));
                    name
                });
                script.push_str(&template[copied..i]);
                script.push_str(&format!("{}${{{name}}}{}", quoted.0, quoted.1));
                copied = close + 1;
            } else if !is_shell_parameter(expr) {
                return Err(TemplateError::InvalidExpression { expr: expr.into() });
            }
            i = close + 1;
            word_start = false;
            continue;
        }
        let (advance, new_word) = match ctx {
            Ctx::Single => {
                if c == b'\'' {
                    stack.pop();
                }
                (1, false)
            }
            Ctx::AnsiC => match c {
                b'\\' => (2, false),
                b'\'' => {
                    stack.pop();
                    (1, false)
                }
                _ => (1, false),
            },
            Ctx::Double => match (c, next) {
                (b'\\', _) => (2, false),
                (b'"', _) => {
                    stack.pop();
                    (1, false)
                }
                (b'`', _) => {
                    stack.push(Ctx::Backtick);
                    (1, true)
                }
                (b'$', Some(b'(')) => open_subst(b, i, &mut stack),
                (b'$', Some(b'$')) => (2, false),
                _ => (1, false),
            },
            Ctx::Unquoted | Ctx::Subst(_) | Ctx::Arith(_) | Ctx::Backtick => {
                if word_start && c == b'#' && !matches!(ctx, Ctx::Arith(_)) {
                    let end = template[i..].find('\n').map_or(b.len(), |p| i + p);
                    (end - i, false)
                } else {
                    unquoted_step(b, i, ctx, &mut stack)
                }
            }
        };
        word_start = new_word;
        i += advance;
    }
    script.push_str(&template[copied..]);
    Ok(ShellCommand { script, env })
}

/// Pushes the context opened by `$(` or `$((` at `i`; returns (bytes consumed, word start).
fn open_subst(b: &[u8], i: usize, stack: &mut Vec<Ctx>) -> (usize, bool) {
    if b.get(i + 2) == Some(&b'(') {
        stack.push(Ctx::Arith(0));
        (3, true)
    } else {
        stack.push(Ctx::Subst(0));
        (2, true)
    }
}

/// One step of the scan in an unquoted-like context; returns (bytes consumed, word start).
fn unquoted_step(b: &[u8], i: usize, ctx: Ctx, stack: &mut Vec<Ctx>) -> (usize, bool) {
    let next = b.get(i + 1).copied();
    match (b[i], next) {
        (b'\\', _) => (2, false),
        (b'\'', _) => {
            stack.push(Ctx::Single);
            (1, false)
        }
        (b'"', _) => {
            stack.push(Ctx::Double);
            (1, false)
        }
        (b'`', _) if ctx == Ctx::Backtick => {
            stack.pop();
            (1, false)
        }
        (b'`', _) => {
            stack.push(Ctx::Backtick);
            (1, true)
        }
        (b'$', Some(b'\'')) => {
            stack.push(Ctx::AnsiC);
            (2, false)
        }
        (b'$', Some(b'(')) => open_subst(b, i, stack),
        (b'$', Some(b'$')) => (2, false),
        (b'(', _) => {
            if let Some(Ctx::Subst(depth) | Ctx::Arith(depth)) = stack.last_mut() {
                *depth += 1;
            }
            (1, true)
        }
        (b')', _) => {
            match stack.last_mut() {
                Some(Ctx::Subst(0)) => {
                    stack.pop();
                }
                Some(Ctx::Arith(0)) => {
                    stack.pop();
                    return (if next == Some(b')') { 2 } else { 1 }, false);
                }
                Some(Ctx::Subst(depth) | Ctx::Arith(depth)) => *depth -= 1,
                _ => {}
            }
            (1, true)
        }
        (c, _) => (1, c.is_ascii_whitespace() || b";&|<>".contains(&c)),
    }
}

/// Renders a template as plain text, values inserted verbatim: for prompts passed as a single
/// argv element, never through a shell. `$${` gives a literal `${`.
pub fn render_text(template: &str, vars: &dyn Lookup) -> Result<String, TemplateError> {
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
#[path = "shell_tests.rs"]
mod tests;
