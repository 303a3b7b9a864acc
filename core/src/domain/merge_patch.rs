//! JSON merge patch (RFC 7396): how an operator edits an item's data before a redrive.
//!
//! [`merge_patch`] is the RFC's algorithm: an object patch merges key by key (`null` removes a
//! key), anything else replaces the target whole. [`reverse_patch`] is the diff an
//! `item_edited` event keeps as `previous`: the old values of what the patch changed (`null`
//! for keys it added), itself a merge patch that takes the new data back to the old, except
//! where the old data held a `null` inside an object (a merge patch cannot write one).
//! Pure functions, no I/O.

use serde_json::{Map, Value};

/// Applies `patch` to `target` as RFC 7396 says and returns the result.
pub fn merge_patch(target: &Value, patch: &Value) -> Value {
    let Value::Object(changes) = patch else {
        return patch.clone();
    };
    let mut merged = match target {
        Value::Object(fields) => fields.clone(),
        _ => Map::new(),
    };
    for (key, change) in changes {
        if change.is_null() {
            merged.remove(key);
        } else {
            let current = merged.get(key).cloned().unwrap_or(Value::Null);
            merged.insert(key.clone(), merge_patch(&current, change));
        }
    }
    Value::Object(merged)
}

/// The old values of what `patch` changes in `target`, as a merge patch: applied to
/// `merge_patch(target, patch)` it gives `target` back (but for `null`s inside objects).
/// Keys the patch names but leaves as they were are left out; an empty object means nothing
/// changed.
pub fn reverse_patch(target: &Value, patch: &Value) -> Value {
    let (Value::Object(changes), Value::Object(fields)) = (patch, target) else {
        return target.clone();
    };
    let mut previous = Map::new();
    for (key, change) in changes {
        let old = fields.get(key);
        match (old, change) {
            (None, Value::Null) => {}
            (Some(old @ Value::Object(_)), Value::Object(_)) => {
                let inner = reverse_patch(old, change);
                if inner.as_object().is_none_or(|m| !m.is_empty()) {
                    previous.insert(key.clone(), inner);
                }
            }
            (Some(old), change) => {
                if merge_patch(old, change) != *old {
                    previous.insert(key.clone(), old.clone());
                }
            }
            (None, _) => {
                previous.insert(key.clone(), Value::Null);
            }
        }
    }
    Value::Object(previous)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Every example of RFC 7396, Appendix A: (original, patch, result).
    fn rfc_examples() -> Vec<(Value, Value, Value)> {
        vec![
            (json!({"a": "b"}), json!({"a": "c"}), json!({"a": "c"})),
            (
                json!({"a": "b"}),
                json!({"b": "c"}),
                json!({"a": "b", "b": "c"}),
            ),
            (json!({"a": "b"}), json!({"a": null}), json!({})),
            (
                json!({"a": "b", "b": "c"}),
                json!({"a": null}),
                json!({"b": "c"}),
            ),
            (json!({"a": ["b"]}), json!({"a": "c"}), json!({"a": "c"})),
            (json!({"a": "c"}), json!({"a": ["b"]}), json!({"a": ["b"]})),
            (
                json!({"a": {"b": "c"}}),
                json!({"a": {"b": "d", "c": null}}),
                json!({"a": {"b": "d"}}),
            ),
            (
                json!({"a": [{"b": "c"}]}),
                json!({"a": [1]}),
                json!({"a": [1]}),
            ),
            (json!(["a", "b"]), json!(["c", "d"]), json!(["c", "d"])),
            (json!({"a": "b"}), json!(["c"]), json!(["c"])),
            (json!({"a": "foo"}), json!(null), json!(null)),
            (json!({"a": "foo"}), json!("bar"), json!("bar")),
            (
                json!({"e": null}),
                json!({"a": 1}),
                json!({"e": null, "a": 1}),
            ),
            (
                json!([1, 2]),
                json!({"a": "b", "c": null}),
                json!({"a": "b"}),
            ),
            (
                json!({}),
                json!({"a": {"bb": {"ccc": null}}}),
                json!({"a": {"bb": {}}}),
            ),
        ]
    }

    #[test]
    fn every_example_of_rfc_7396_gives_its_result() {
        for (original, patch, result) in rfc_examples() {
            assert_eq!(
                merge_patch(&original, &patch),
                result,
                "{original} + {patch}"
            );
        }
    }

    #[test]
    fn the_rfc_s_longer_example_gives_its_result() {
        let original = json!({
            "title": "Goodbye!",
            "author": {"givenName": "John", "familyName": "Doe"},
            "tags": ["example", "sample"],
            "content": "This will be unchanged"
        });
        let patch = json!({
            "title": "Hello!",
            "phoneNumber": "+01-123-456-7890",
            "author": {"familyName": null},
            "tags": ["example"]
        });
        let result = json!({
            "title": "Hello!",
            "author": {"givenName": "John"},
            "tags": ["example"],
            "content": "This will be unchanged",
            "phoneNumber": "+01-123-456-7890"
        });
        assert_eq!(merge_patch(&original, &patch), result);
        assert_eq!(
            reverse_patch(&original, &patch),
            json!({
                "title": "Goodbye!",
                "phoneNumber": null,
                "author": {"familyName": "Doe"},
                "tags": ["example", "sample"]
            })
        );
    }

    #[test]
    fn the_reverse_patch_takes_the_result_back_and_names_only_what_changed() {
        for (original, patch, result) in rfc_examples() {
            let back = reverse_patch(&original, &patch);
            if original.is_object() && !original.to_string().contains("null") {
                assert_eq!(
                    merge_patch(&result, &back),
                    original,
                    "{original} + {patch}"
                );
            }
        }
        let same = reverse_patch(
            &json!({"a": 1, "b": {"c": 2}}),
            &json!({"a": 1, "b": {"c": 2}, "z": null}),
        );
        assert_eq!(same, json!({}), "nothing changed");
    }
}
