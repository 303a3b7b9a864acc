//! The order of `sort_by`: parsing `item.<field> [ASC|DESC]` and a total order over JSON values.
//!
//! Values of one type compare naturally; values of different types compare by type. Missing and
//! `null` values sort last whichever the direction, and the sort is stable.

use std::cmp::Ordering;

use serde_json::Value;

use super::{write_canonical, InputError, WorkItem};

/// A parsed `sort_by`.
#[derive(Debug, Clone, PartialEq)]
pub(super) struct SortSpec {
    /// Field path inside the item; empty means the item itself.
    path: Vec<String>,
    descending: bool,
}

impl SortSpec {
    pub(super) fn parse(spec: &str) -> Result<SortSpec, InputError> {
        let invalid = |message: &str| InputError::SortBy {
            spec: spec.to_string(),
            message: message.to_string(),
        };
        let words: Vec<&str> = spec.split_whitespace().collect();
        let (field, descending) = match words.as_slice() {
            [] => return Err(invalid("it is empty")),
            [field] => (*field, false),
            [field, dir] if dir.eq_ignore_ascii_case("asc") => (*field, false),
            [field, dir] if dir.eq_ignore_ascii_case("desc") => (*field, true),
            [_, _] => return Err(invalid("the direction must be ASC or DESC")),
            _ => return Err(invalid("expected a field and an optional direction")),
        };
        let rest = if field == "item" {
            ""
        } else {
            field.strip_prefix("item.").unwrap_or(field)
        };
        let path: Vec<String> = if rest.is_empty() {
            Vec::new()
        } else {
            rest.split('.').map(str::to_string).collect()
        };
        if path.iter().any(String::is_empty) {
            return Err(invalid("the field path has an empty segment"));
        }
        Ok(SortSpec { path, descending })
    }

    /// Stable sort; missing and null values last in both directions.
    pub(super) fn apply(&self, items: &mut [WorkItem]) {
        items.sort_by(|a, b| match (self.key(&a.data), self.key(&b.data)) {
            (None, None) => Ordering::Equal,
            (None, Some(_)) => Ordering::Greater,
            (Some(_), None) => Ordering::Less,
            (Some(x), Some(y)) if self.descending => compare_values(y, x),
            (Some(x), Some(y)) => compare_values(x, y),
        });
    }

    fn key<'v>(&self, data: &'v Value) -> Option<&'v Value> {
        let value = self
            .path
            .iter()
            .try_fold(data, |node, segment| node.get(segment.as_str()))?;
        (!value.is_null()).then_some(value)
    }
}

/// Orders JSON values: numbers (numerically) < strings (lexicographically, by bytes) < booleans
/// (false < true) < arrays (element by element) < objects (by canonical JSON).
fn compare_values(a: &Value, b: &Value) -> Ordering {
    fn rank(v: &Value) -> u8 {
        match v {
            Value::Number(_) => 0,
            Value::String(_) => 1,
            Value::Bool(_) => 2,
            Value::Array(_) => 3,
            Value::Object(_) => 4,
            Value::Null => 5,
        }
    }
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => compare_numbers(x, y),
        (Value::String(x), Value::String(y)) => x.cmp(y),
        (Value::Bool(x), Value::Bool(y)) => x.cmp(y),
        (Value::Array(x), Value::Array(y)) => x
            .iter()
            .zip(y.iter())
            .map(|(p, q)| compare_values(p, q))
            .find(|o| o.is_ne())
            .unwrap_or_else(|| x.len().cmp(&y.len())),
        (Value::Object(_), Value::Object(_)) => {
            let (mut x, mut y) = (String::new(), String::new());
            write_canonical(a, &mut x);
            write_canonical(b, &mut y);
            x.cmp(&y)
        }
        _ => rank(a).cmp(&rank(b)),
    }
}

/// Exact for integers (i64 and u64 alike), IEEE total order for the rest.
fn compare_numbers(x: &serde_json::Number, y: &serde_json::Number) -> Ordering {
    let int = |n: &serde_json::Number| {
        n.as_i64()
            .map(i128::from)
            .or_else(|| n.as_u64().map(i128::from))
    };
    match (int(x), int(y)) {
        (Some(a), Some(b)) => a.cmp(&b),
        _ => {
            let a = x.as_f64().unwrap_or(f64::NAN);
            let b = y.as_f64().unwrap_or(f64::NAN);
            a.total_cmp(&b)
        }
    }
}
