#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use serde_json::json;

use super::*;

fn opts(json_path: &str) -> SelectOptions<'_> {
    SelectOptions {
        json_path,
        filter: None,
        sort_by: None,
        offset: 0,
        max_items: None,
    }
}

fn ids(items: &[WorkItem]) -> Vec<&str> {
    items.iter().map(|i| i.id.as_str()).collect()
}

fn select(doc: &Value, opts: &SelectOptions) -> Vec<WorkItem> {
    select_items(doc, opts).unwrap()
}

#[test]
fn json_path_variants() {
    let doc = json!({"items": [{"id": "a"}, {"id": "b"}], "other": {"nested": [{"id": "c"}]}});
    assert_eq!(ids(&select(&doc, &opts("$.items[*]"))), ["a", "b"]);
    assert_eq!(ids(&select(&doc, &opts("$.other.nested[*]"))), ["c"]);
    assert_eq!(ids(&select(&doc, &opts("$..id"))).len(), 3);
    assert_eq!(ids(&select(&doc, &opts("$.items[?@.id == 'b']"))), ["b"]);

    let top = json!([{"id": 1}, {"id": 2}]);
    assert_eq!(ids(&select(&top, &opts("$[*]"))), ["1", "2"]);

    // A path that matches nothing is an empty job, not an error.
    assert!(select(&doc, &opts("$.missing[*]")).is_empty());
    assert!(select(&json!([]), &opts("$[*]")).is_empty());
}

#[test]
fn invalid_json_path_is_an_error() {
    for bad in ["items[*]", "$.items[", "$[?@.x ==]", ""] {
        match select_items(&json!({}), &opts(bad)) {
            Err(e @ InputError::JsonPath { .. }) => {
                assert!(e.to_string().contains("$.items[*]"), "{e}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let long = format!("$.{}", "a.".repeat(3000));
    assert!(matches!(
        select_items(&json!({}), &opts(&long)),
        Err(InputError::JsonPath { .. })
    ));
}

#[test]
fn explicit_ids_are_used_as_strings() {
    let doc = json!([
        {"id": "x-1", "v": 1},
        {"id": 42},
        {"id": -7},
        {"item_id": "from-item-id"},
        {"id": "wins", "item_id": "loses"},
        {"id": null, "v": 2},
    ]);
    let items = select(&doc, &opts("$[*]"));
    assert_eq!(
        &ids(&items)[..5],
        ["x-1", "42", "-7", "from-item-id", "wins"]
    );
    assert!(items[5].id.starts_with("item-"), "null id counts as absent");
    assert_eq!(items[0].data, json!({"id": "x-1", "v": 1}));
}

#[test]
fn hash_ids_are_stable_across_position_and_key_order() {
    let a: Value = serde_json::from_str(r#"[{"file": "a.rs", "priority": 5}]"#).unwrap();
    let b: Value =
        serde_json::from_str(r#"[{"other": 1}, {"x": [1, 2]}, {"priority": 5,   "file": "a.rs"}]"#)
            .unwrap();
    let first = select(&a, &opts("$[*]"));
    let later = select(&b, &opts("$[*]"));
    assert_eq!(first[0].id, later[2].id);
    assert!(first[0].id.starts_with("item-"));
    assert_eq!(first[0].id.len(), "item-".len() + 16);
    assert!(first[0].id[5..].chars().all(|c| c.is_ascii_hexdigit()));
    // Different content, different id.
    assert_ne!(later[0].id, later[1].id);
    // Scalars hash too.
    let scalars = select(&json!(["a", "b", 1]), &opts("$[*]"));
    assert_eq!(scalars.len(), 3);
    assert_ne!(scalars[0].id, scalars[1].id);
}

#[test]
fn canonical_json_sorts_keys_and_has_no_spaces() {
    let mut out = String::new();
    write_canonical(&json!({"b": [1, {"d": 1, "c": "x"}], "a": null}), &mut out);
    assert_eq!(out, r#"{"a":null,"b":[1,{"c":"x","d":1}]}"#);
}

#[test]
fn identical_items_without_ids_get_suffixes_in_input_order() {
    let doc = json!([{"v": 1}, {"v": 2}, {"v": 1}, {"v": 1}]);
    let items = select(&doc, &opts("$[*]"));
    let base = items[0].id.clone();
    assert_eq!(items[2].id, format!("{base}-2"));
    assert_eq!(items[3].id, format!("{base}-3"));
    assert_ne!(items[1].id, base);
    // Appending items does not change the ids of the existing ones.
    let grown = json!([{"v": 1}, {"v": 2}, {"v": 1}, {"v": 1}, {"v": 3}, {"v": 1}]);
    let more = select(&grown, &opts("$[*]"));
    assert_eq!(ids(&more)[..4], ids(&items)[..]);
    assert_eq!(more[5].id, format!("{base}-4"));
}

#[test]
fn duplicate_explicit_ids() {
    let different = json!([{"id": "a", "v": 1}, {"id": "b"}, {"id": "a", "v": 2}]);
    match select_items(&different, &opts("$[*]")) {
        Err(e @ InputError::DuplicateId { .. }) => {
            let text = e.to_string();
            assert!(text.contains("\"a\""), "{text}");
            assert!(text.contains("positions 0 and 2"), "{text}");
        }
        other => panic!("{other:?}"),
    }
    // A string and an integer with the same text are the same id.
    assert!(matches!(
        select_items(&json!([{"id": "7"}, {"id": 7}]), &opts("$[*]")),
        Err(InputError::DuplicateId { .. })
    ));
    // The very same item twice is run once.
    let same = json!([{"id": "a", "v": 1}, {"id": "a", "v": 1}]);
    assert_eq!(ids(&select(&same, &opts("$[*]"))), ["a"]);
}

#[test]
fn invalid_explicit_ids_name_the_position() {
    let long = "x".repeat(MAX_ID_BYTES + 1);
    let cases = [
        (json!([{"v": 0}, {"id": ""}]), "empty"),
        (json!([{"v": 0}, {"id": "a\u{0}b"}]), "control character"),
        (json!([{"v": 0}, {"id": "a\nb"}]), "control character"),
        (json!([{"v": 0}, {"id": long}]), "over the limit of 256"),
        (json!([{"v": 0}, {"id": 1.5}]), "strings or integers"),
        (json!([{"v": 0}, {"item_id": true}]), "strings or integers"),
        (json!([{"v": 0}, {"id": {"a": 1}}]), "strings or integers"),
    ];
    for (doc, reason) in cases {
        match select_items(&doc, &opts("$[*]")) {
            Err(e @ InputError::InvalidId { index: 1, .. }) => {
                let text = e.to_string();
                assert!(text.contains(reason), "{text}");
                assert!(text.contains("position 1"), "{text}");
            }
            other => panic!("{doc}: {other:?}"),
        }
    }
    let ok = "y".repeat(MAX_ID_BYTES);
    assert_eq!(
        select(&json!([{ "id": ok }]), &opts("$[*]"))[0].id.len(),
        MAX_ID_BYTES
    );
}

fn sample() -> Value {
    json!({"items": [
        {"id": "a", "priority": 3, "name": "delta"},
        {"id": "b", "priority": 9.5, "name": "alpha"},
        {"id": "c", "name": "charlie"},
        {"id": "d", "priority": 3, "name": "bravo"},
        {"id": "e", "priority": 10, "name": "echo"},
        {"id": "f", "priority": null, "name": "foxtrot"},
    ]})
}

#[test]
fn filter_selects_and_ids_do_not_depend_on_it() {
    let doc = sample();
    let all = select(&doc, &opts("$.items[*]"));
    let filtered = select(
        &doc,
        &SelectOptions {
            filter: Some("has(item.priority) && item.priority != null && item.priority >= 5"),
            ..opts("$.items[*]")
        },
    );
    assert_eq!(ids(&filtered), ["b", "e"]);
    assert!(filtered.iter().all(|f| all.contains(f)));
}

#[test]
fn filter_errors_are_reported() {
    let doc = sample();
    match select_items(
        &doc,
        &SelectOptions {
            filter: Some("item.priority >="),
            ..opts("$.items[*]")
        },
    ) {
        Err(e @ InputError::Filter(CelError::Syntax { .. })) => {
            assert!(
                e.to_string().starts_with("map.filter: invalid filter"),
                "{e}"
            )
        }
        other => panic!("{other:?}"),
    }
    // Item c has no priority: the filter fails on it, naming it, instead of skipping it.
    match select_items(
        &doc,
        &SelectOptions {
            filter: Some("item.priority > 1"),
            ..opts("$.items[*]")
        },
    ) {
        Err(e @ InputError::FilterItem { .. }) => {
            let text = e.to_string();
            assert!(text.contains("work item c"), "{text}");
            assert!(text.contains("has(item.priority)"), "{text}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn sort_by_numbers_strings_and_missing_last() {
    let doc = sample();
    let sorted = |spec: &str| {
        ids(&select(
            &doc,
            &SelectOptions {
                sort_by: Some(spec),
                ..opts("$.items[*]")
            },
        ))
        .into_iter()
        .map(str::to_string)
        .collect::<Vec<_>>()
    };
    // Ties (a, d) keep input order in both directions; missing (c) and null (f) stay last.
    assert_eq!(sorted("item.priority"), ["a", "d", "b", "e", "c", "f"]);
    assert_eq!(sorted("priority ASC"), ["a", "d", "b", "e", "c", "f"]);
    assert_eq!(sorted("item.priority DESC"), ["e", "b", "a", "d", "c", "f"]);
    assert_eq!(sorted("item.priority desc"), ["e", "b", "a", "d", "c", "f"]);
    assert_eq!(sorted("  item.name   asc "), ["b", "d", "c", "a", "e", "f"]);
    assert_eq!(sorted("name Desc"), ["f", "e", "a", "c", "d", "b"]);
}

#[test]
fn sort_by_nested_fields_and_mixed_types() {
    let doc = json!([
        {"id": "s", "m": {"k": "text"}},
        {"id": "t", "m": {"k": true}},
        {"id": "n", "m": {"k": 2}},
        {"id": "big", "m": {"k": u64::MAX}},
        {"id": "neg", "m": {"k": -1.5}},
        {"id": "arr", "m": {"k": [1]}},
        {"id": "obj", "m": {"k": {"a": 1}}},
        {"id": "none", "m": {}},
    ]);
    let got = select(
        &doc,
        &SelectOptions {
            sort_by: Some("item.m.k"),
            ..opts("$[*]")
        },
    );
    assert_eq!(
        ids(&got),
        ["neg", "n", "big", "s", "t", "arr", "obj", "none"]
    );
    let got = select(
        &json!([3, 1, 2]),
        &SelectOptions {
            sort_by: Some("item desc"),
            ..opts("$[*]")
        },
    );
    let data: Vec<&Value> = got.iter().map(|i| &i.data).collect();
    assert_eq!(data, [&json!(3), &json!(2), &json!(1)]);
}

#[test]
fn malformed_sort_by_is_an_error() {
    for bad in [
        "",
        "   ",
        "item.priority sideways",
        "item.priority DESC extra",
        "item..x",
        "item.x.",
    ] {
        match select_items(
            &sample(),
            &SelectOptions {
                sort_by: Some(bad),
                ..opts("$.items[*]")
            },
        ) {
            Err(e @ InputError::SortBy { .. }) => {
                assert!(e.to_string().contains("item.priority DESC"), "{e}")
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn offset_and_max_items_apply_after_filter_and_sort() {
    let doc = json!((0..10)
        .map(|n| json!({"id": format!("i{n}"), "n": n}))
        .collect::<Vec<_>>());
    let base = SelectOptions {
        filter: Some("item.n % 2 == 0"),
        sort_by: Some("item.n DESC"),
        ..opts("$[*]")
    };
    assert_eq!(ids(&select(&doc, &base)), ["i8", "i6", "i4", "i2", "i0"]);
    assert_eq!(
        ids(&select(
            &doc,
            &SelectOptions {
                offset: 1,
                max_items: Some(2),
                ..base
            }
        )),
        ["i6", "i4"]
    );
    assert_eq!(
        ids(&select(
            &doc,
            &SelectOptions {
                max_items: Some(0),
                ..base
            }
        ))
        .len(),
        0
    );
    assert_eq!(
        ids(&select(&doc, &SelectOptions { offset: 99, ..base })).len(),
        0
    );
    assert_eq!(
        ids(&select(
            &doc,
            &SelectOptions {
                offset: 3,
                max_items: Some(10),
                ..base
            }
        )),
        ["i2", "i0"]
    );
}
