//! [`render_shell`]: a `shell:` step rendered so that work-item data is never executed.
//!
//! Pasting untrusted text into a shell script, even "quoted", lets it escape its quotes. The
//! renderer therefore never puts a value into the script at all. Each value goes into an
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

use std::collections::BTreeMap;

use super::{is_shell_parameter, Lookup, TemplateError};

/// A rendered shell step: run `sh -c script` with `env` added to the environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(in crate::runner) struct ShellCommand {
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
pub(in crate::runner) fn render_shell(
    template: &str,
    vars: &dyn Lookup,
) -> Result<ShellCommand, TemplateError> {
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
