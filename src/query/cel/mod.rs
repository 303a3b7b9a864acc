//! Filter expressions: which items `dlq retry --filter`, `dlq list --filter` and a workflow's
//! `map.filter` select.
//!
//! A filter is a [CEL](https://github.com/google/cel-spec) expression, compiled once by the `cel`
//! crate and evaluated per item, e.g. `item.priority >= 5 && error_type == "Timeout"`. One
//! language serves every place that selects items, instead of a home-made parser per command.
//!
//! # Variables
//! - `item`: the work item's data (the JSON object read from the job's input). It is the only
//!   variable of `Filter::matches_data`.
//! - `Filter::matches_item` adds the dead-letter fields of [`DeadLetteredItem`]: `item_id`,
//!   `job_id`, `error_type` (variant name of the last failure, e.g. `"Timeout"`; `"Unknown"` when
//!   the history is empty), `error_message` (last failure's message; `""` when none),
//!   `failure_count` (int), `reprocess_eligible`, `manual_review_required` (bools),
//!   `error_signature`, `error_pattern` (strings), `first_attempt`, `last_attempt` (CEL
//!   timestamps: compare with `timestamp("2025-01-11T10:30:00Z")`) and `exit_code` (int for a
//!   `CommandFailed` last failure, otherwise `null`).
//!
//! # Semantics worth knowing
//! - JSON numbers become CEL `int` (integers), `uint` (integers above `i64::MAX`) or `double`;
//!   `cel` compares them across types, so `item.priority >= 5` holds for 5, 5.0 and 7.5.
//! - A missing field is an error, never a silent `false`: guard it with
//!   `has(item.priority) && item.priority >= 5`. As in CEL, `&&`/`||` absorb an error when the
//!   other side decides the result (`true || item.missing` is `true`).
//! - A result that is not a boolean is an error ([`CelError::NotBoolean`]).
//!
//! # Limits
//! The `cel` parser recurses deeply and its evaluator recurses once per level of the expression
//! tree, so untrusted input could overflow the stack. A filter is refused unless it is at most
//! [`MAX_FILTER_BYTES`] long, nests brackets at most [`MAX_NESTING`] deep and compiles to a tree
//! at most [`MAX_EXPR_DEPTH`] deep. Compiling runs on a short-lived thread with a large stack;
//! the depth bound keeps evaluation safe on ordinary (2 MiB) threads.

use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, OnceLock};

use cel::common::value::Val;
use cel::{Context, Env, ExecutionError, Program, Value};
use thiserror::Error;

use dlq::domain::model::DeadLetteredItem;

mod compile;
#[cfg(test)]
use compile::expr_depth;
use compile::{
    blank_strings, common_mistake_hint, compile_on_large_stack, nesting_overflow, select_path,
};

/// Longest accepted filter, in bytes.
pub const MAX_FILTER_BYTES: usize = 4096;
/// Deepest accepted nesting of `(`, `[` and `{` (outside string literals).
pub const MAX_NESTING: usize = 32;
/// Deepest accepted compiled expression tree (`a + b + c` is 3 deep; `a && b && c && d` is
/// balanced by the compiler and stays shallow).
pub const MAX_EXPR_DEPTH: usize = 32;
/// Deepest item data a filter reads (serde_json parses at most 128 levels anyway).
const MAX_DATA_DEPTH: usize = 128;
/// Longest part of an expression quoted back in an error message.
const SHOWN_CHARS: usize = 120;

/// Variables of [`CelFilter::matches_item`], in the order they are documented.
pub const ITEM_VARIABLES: &[&str] = &[
    "item",
    "item_id",
    "job_id",
    "error_type",
    "error_message",
    "failure_count",
    "reprocess_eligible",
    "manual_review_required",
    "error_signature",
    "error_pattern",
    "first_attempt",
    "last_attempt",
    "exit_code",
];

/// The help text of a `--filter` option: `what` (e.g. "Only items") this CEL expression
/// selects, an example, and the variables of [`ITEM_VARIABLES`].
pub fn filter_help(what: &str) -> String {
    format!(
        "{what} this CEL expression selects, e.g. `item.priority >= 5 && error_type == \"Timeout\"` \
         (variables: {})",
        ITEM_VARIABLES.join(", ")
    )
}

/// Why a filter was refused or could not decide about an item.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum CelError {
    /// The expression does not compile (or exceeds a limit).
    #[error("invalid filter `{expr}`: {message}")]
    Syntax {
        /// The expression (shortened when long).
        expr: String,
        /// Where and what is wrong, and what was expected.
        message: String,
    },
    /// Evaluating against an item failed (missing field, type mismatch, unknown name, ...).
    #[error("{message}")]
    Evaluation {
        /// The filter, what failed and how to write it instead.
        message: String,
    },
    /// The expression gave something other than `true` or `false`.
    #[error("the filter gave {got}, not true or false: write a condition, e.g. `item.priority >= 5` or `has(item.tag)`")]
    NotBoolean {
        /// The type and value it gave.
        got: String,
    },
}

/// A compiled filter expression. Cheap to clone; safe to share between threads.
#[derive(Clone)]
pub struct CelFilter {
    source: String,
    program: Arc<Program>,
}

impl fmt::Debug for CelFilter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CelFilter")
            .field("source", &self.source)
            .finish()
    }
}

/// Which variables an evaluation defines, for error hints.
#[derive(Clone, Copy)]
enum Scope {
    Data,
    Item,
}

impl CelFilter {
    /// Compiles `expr`. A syntax error names the line, column and a snippet, and says what was
    /// expected there. An empty expression is an error, never "match everything".
    ///
    /// Compiling blocks the calling thread briefly (on a helper thread with a large stack).
    pub fn parse(expr: &str) -> Result<CelFilter, CelError> {
        let syntax = |message: String| CelError::Syntax {
            expr: shorten(expr),
            message,
        };
        if expr.len() > MAX_FILTER_BYTES {
            return Err(syntax(format!(
                "the filter is {} bytes, over the limit of {MAX_FILTER_BYTES}: shorten it, e.g. \
                 test fewer fields or use `x in [...]` instead of many `||`",
                expr.len()
            )));
        }
        if expr.trim().is_empty() {
            return Err(syntax(
                "the filter is empty: write a condition such as `item.priority >= 5`, or give no \
                 filter to select every item"
                    .to_string(),
            ));
        }
        let code = blank_strings(expr);
        if let Some(column) = nesting_overflow(&code) {
            return Err(syntax(format!(
                "brackets are nested more than {MAX_NESTING} deep (at column {column}): flatten \
                 the expression"
            )));
        }
        let program = compile_on_large_stack(expr).map_err(|message| {
            let hint = common_mistake_hint(&code);
            syntax(format!("{message}{hint}"))
        })?;
        Ok(CelFilter {
            source: expr.to_string(),
            program: Arc::new(program),
        })
    }

    /// The expression as written.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// Evaluates against a work item's data: `item` is `data`, no other variable is defined.
    pub fn matches_data(&self, data: &serde_json::Value) -> Result<bool, CelError> {
        let mut ctx = Context::with_env(env());
        bind(&mut ctx, "item", json_to_cel(data, 0)?)?;
        self.run(&ctx, Scope::Data)
    }

    /// Evaluates against a dead-lettered item: `item` is its `item_data`, and its dead-letter
    /// fields are top-level variables (see the module documentation).
    pub fn matches_item(&self, item: &DeadLetteredItem) -> Result<bool, CelError> {
        let mut ctx = Context::with_env(env());
        let error_type = item.last_error_type_name();
        let error_message = item.last_error_message();
        let exit_code = item
            .last_exit_code()
            .map_or(Value::Null, |code| Value::Int(i64::from(code)));
        let vars = [
            ("item", json_to_cel(&item.item_data, 0)?),
            ("item_id", Value::from(item.item_id.as_str())),
            ("job_id", Value::from(item.job_id.as_str())),
            ("error_type", Value::from(error_type)),
            ("error_message", Value::from(error_message)),
            ("failure_count", Value::Int(i64::from(item.failure_count))),
            ("reprocess_eligible", Value::Bool(item.reprocess_eligible)),
            (
                "manual_review_required",
                Value::Bool(item.manual_review_required),
            ),
            (
                "error_signature",
                Value::from(item.error_signature.as_str()),
            ),
            ("error_pattern", Value::from(item.error_pattern.as_str())),
            (
                "first_attempt",
                Value::Timestamp(item.first_attempt.fixed_offset()),
            ),
            (
                "last_attempt",
                Value::Timestamp(item.last_attempt.fixed_offset()),
            ),
            ("exit_code", exit_code),
        ];
        for (name, value) in vars {
            bind(&mut ctx, name, value)?;
        }
        self.run(&ctx, Scope::Item)
    }

    fn run(&self, ctx: &Context, scope: Scope) -> Result<bool, CelError> {
        match self.program.execute(ctx) {
            Ok(Value::Bool(b)) => Ok(b),
            Ok(other) => Err(CelError::NotBoolean {
                got: describe_value(&other),
            }),
            Err(err) => Err(CelError::Evaluation {
                message: format!(
                    "filter `{}`: {}",
                    shorten(&self.source),
                    self.explain(&err, scope)
                ),
            }),
        }
    }

    /// Turns an evaluation error into what happened and what to write instead.
    fn explain(&self, err: &ExecutionError, scope: Scope) -> String {
        match err {
            ExecutionError::NoSuchKey(key) => match select_path(self.program.expression(), key) {
                Some(path) => format!(
                    "`{path}` is missing in this item: write `has({path}) && ...` to skip items \
                     without it"
                ),
                None => format!(
                    "key '{key}' is missing in this item: test for it first, e.g. \
                     `'{key}' in <map> && ...`"
                ),
            },
            ExecutionError::UndeclaredReference(name) => {
                let name = name.as_str();
                match scope {
                    Scope::Data => format!(
                        "unknown name '{name}': the work item is `item` (did you mean \
                         `item.{name}`?); no other variable is defined here"
                    ),
                    Scope::Item if ITEM_VARIABLES.contains(&name) => {
                        format!("'{name}' cannot be used this way: check the call or field access")
                    }
                    Scope::Item => format!(
                        "unknown name '{name}': use `item.{name}` for a field of the work item's \
                         data, or one of {}",
                        ITEM_VARIABLES.join(", ")
                    ),
                }
            }
            ExecutionError::NoSuchOverload(_)
            | ExecutionError::ValuesNotComparable(..)
            | ExecutionError::UnsupportedBinaryOperator(..) => format!(
                "{err}: the operation does not accept these types; compare like with like \
                 (quote strings, or convert with int(), double() or string())"
            ),
            other => other.to_string(),
        }
    }
}

/// The standard CEL environment, built once (building it per evaluation costs ~0.2 ms).
fn env() -> Arc<Env> {
    static ENV: OnceLock<Arc<Env>> = OnceLock::new();
    Arc::clone(ENV.get_or_init(|| Arc::new(Env::stdlib())))
}

fn bind(ctx: &mut Context, name: &str, value: Value) -> Result<(), CelError> {
    let val = Box::<dyn Val>::try_from(value).map_err(|e| CelError::Evaluation {
        message: format!("variable `{name}` cannot be given to the filter: {e}"),
    })?;
    ctx.add_variable_as_val(name, val);
    Ok(())
}

/// Converts JSON to CEL: integers to `int` (or `uint` above `i64::MAX`), other numbers to
/// `double`, objects to maps with string keys.
fn json_to_cel(value: &serde_json::Value, depth: usize) -> Result<Value, CelError> {
    use serde_json::Value as J;
    if depth > MAX_DATA_DEPTH {
        return Err(CelError::Evaluation {
            message: format!(
                "the item data is nested deeper than {MAX_DATA_DEPTH} levels; filters cannot \
                 read it"
            ),
        });
    }
    Ok(match value {
        J::Null => Value::Null,
        J::Bool(b) => Value::Bool(*b),
        J::Number(n) => {
            if let Some(i) = n.as_i64() {
                Value::Int(i)
            } else if let Some(u) = n.as_u64() {
                Value::UInt(u)
            } else {
                Value::Float(n.as_f64().unwrap_or(f64::NAN))
            }
        }
        J::String(s) => Value::from(s.as_str()),
        J::Array(items) => Value::List(Arc::new(
            items
                .iter()
                .map(|v| json_to_cel(v, depth + 1))
                .collect::<Result<Vec<_>, _>>()?,
        )),
        J::Object(map) => {
            let mut out = HashMap::with_capacity(map.len());
            for (k, v) in map {
                out.insert(k.clone(), json_to_cel(v, depth + 1)?);
            }
            Value::from(out)
        }
    })
}

fn describe_value(value: &Value) -> String {
    let shown = match value {
        Value::String(s) => format!("{:?}", s.as_str()),
        Value::Int(i) => i.to_string(),
        Value::UInt(u) => format!("{u}u"),
        Value::Float(f) => f.to_string(),
        Value::Null => return "null".to_string(),
        Value::List(l) => format!("of {} elements", l.len()),
        Value::Map(m) => format!("of {} entries", m.map.len()),
        other => format!("{other:?}"),
    };
    let text = format!("{} {shown}", value.type_of());
    shorten(&text)
}

/// `text`, cut to [`SHOWN_CHARS`] characters with an ellipsis.
fn shorten(text: &str) -> String {
    if text.chars().count() <= SHOWN_CHARS {
        return text.to_string();
    }
    let mut out: String = text.chars().take(SHOWN_CHARS).collect();
    out.push_str("...");
    out
}

#[cfg(test)]
mod tests;
