#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use chrono::{TimeZone, Utc};
use proptest::prelude::*;
use serde_json::json;

use super::*;
use dlq::domain::model::ErrorType;
use dlq::domain::model::FailureDetail;

fn data_matches(expr: &str, data: serde_json::Value) -> Result<bool, CelError> {
    CelFilter::parse(expr).unwrap().matches_data(&data)
}

fn syntax_message(expr: &str) -> String {
    match CelFilter::parse(expr) {
        Err(CelError::Syntax { message, .. }) => message,
        other => panic!("expected a syntax error for {expr:?}, got {other:?}"),
    }
}

fn eval_message(result: Result<bool, CelError>) -> String {
    match result {
        Err(CelError::Evaluation { message }) => message,
        other => panic!("expected an evaluation error, got {other:?}"),
    }
}

fn dead_item(error_type: ErrorType) -> DeadLetteredItem {
    let first = Utc.with_ymd_and_hms(2025, 1, 11, 10, 25, 0).unwrap();
    let last = Utc.with_ymd_and_hms(2025, 1, 11, 10, 30, 0).unwrap();
    let failure = |n: u32, message: &str, error_type: ErrorType| FailureDetail {
        attempt_number: n,
        timestamp: last,
        error_type,
        error_message: message.to_string(),
        stack_trace: None,
        agent_id: "agent-1".to_string(),
        step_failed: "shell: cargo test".to_string(),
        duration_ms: 45_000,
        json_log_location: None,
    };
    DeadLetteredItem {
        item_id: "item-123".to_string(),
        job_id: "mapreduce-1".to_string(),
        item_data: json!({"file": "src/main.rs", "priority": 5}),
        first_attempt: first,
        last_attempt: last,
        failure_count: 2,
        failure_history: vec![
            failure(1, "disk full", ErrorType::ResourceExhausted),
            failure(2, "cargo test failed with exit code 101", error_type),
        ],
        error_signature: "0123456789abcdef".to_string(),
        error_pattern: "CommandFailed::cargo test failed".to_string(),
        reprocess_eligible: true,
        manual_review_required: false,
        worktree_artifacts: None,
        redrive: None,
    }
}

#[test]
fn issue_example_selects_on_data_and_error_type() {
    let f = CelFilter::parse(r#"item.priority >= 5 && error_type == "Timeout""#).unwrap();
    assert!(f.matches_item(&dead_item(ErrorType::Timeout)).unwrap());
    assert!(!f
        .matches_item(&dead_item(ErrorType::CommandFailed { exit_code: 1 }))
        .unwrap());
    let mut low = dead_item(ErrorType::Timeout);
    low.item_data = json!({"priority": 4});
    assert!(!f.matches_item(&low).unwrap());
    assert_eq!(
        f.source(),
        r#"item.priority >= 5 && error_type == "Timeout""#
    );
}

#[test]
fn operators_behave_as_in_cel() {
    let data = json!({"priority": 5, "name": "src/main.rs", "tags": ["a", "b"], "ok": true});
    let cases = [
        ("(item.priority > 3) && !(item.priority > 9)", true),
        ("item.priority < 3 || item.name == 'src/main.rs'", true),
        ("item.priority != 5", false),
        ("item.priority <= 5 && item.priority >= 5", true),
        ("item.priority < 5", false),
        ("item.name.contains('main')", true),
        ("item.name.startsWith('src/')", true),
        ("item.name.endsWith('.py')", false),
        ("item.priority in [1, 5, 9]", true),
        ("item.name in ['x', 'y']", false),
        ("'a' in item.tags", true),
        ("has(item.priority)", true),
        ("has(item.owner)", false),
        ("has(item.owner) && item.owner == 'me'", false),
        ("item.ok", true),
        ("item.name.matches('^src/.*\\\\.rs$')", true),
        ("size(item.tags) == 2", true),
    ];
    for (expr, expected) in cases {
        assert_eq!(
            data_matches(expr, data.clone()).unwrap(),
            expected,
            "filter {expr}"
        );
    }
}

#[test]
fn numbers_compare_whatever_their_json_form() {
    for (value, expected) in [
        (json!(5), true),
        (json!(5.0), true),
        (json!(7.5), true),
        (json!(4.5), false),
        (json!(-3), false),
        (json!(u64::MAX), true),
    ] {
        let data = json!({ "priority": value });
        assert_eq!(
            data_matches("item.priority >= 5", data.clone()).unwrap(),
            expected,
            "priority {value}"
        );
        assert_eq!(
            data_matches("item.priority >= 5.0", data).unwrap(),
            expected,
            "priority {value} against 5.0"
        );
    }
    assert!(data_matches("item.priority == 5", json!({"priority": 5.0})).unwrap());
    assert!(data_matches("item.priority in [1, 5]", json!({"priority": 5.0})).unwrap());
    assert!(data_matches("item.priority < 7.5", json!({"priority": 7})).unwrap());
}

#[test]
fn missing_field_is_an_error_that_suggests_has() {
    let message = eval_message(data_matches("item.priority >= 5", json!({"name": "x"})));
    assert!(message.contains("`item.priority` is missing"), "{message}");
    assert!(message.contains("has(item.priority) && ..."), "{message}");

    let message = eval_message(data_matches(
        "item.meta.owner == 'me'",
        json!({"meta": {"team": "x"}}),
    ));
    assert!(message.contains("has(item.meta.owner)"), "{message}");

    let message = eval_message(data_matches("item['priority'] > 1", json!({})));
    assert!(message.contains("'priority'"), "{message}");
}

#[test]
fn unknown_names_point_to_item() {
    let message = eval_message(data_matches("priority >= 5", json!({"priority": 5})));
    assert!(message.contains("unknown name 'priority'"), "{message}");
    assert!(message.contains("item.priority"), "{message}");

    let f = CelFilter::parse("retries > 1").unwrap();
    let message = eval_message(f.matches_item(&dead_item(ErrorType::Timeout)));
    assert!(message.contains("failure_count"), "{message}");
    assert!(message.contains("item.retries"), "{message}");

    // DLQ fields are not defined when only work-item data is evaluated.
    let message = eval_message(data_matches("error_type == 'Timeout'", json!({})));
    assert!(message.contains("unknown name 'error_type'"), "{message}");
}

#[test]
fn type_mismatch_says_to_compare_like_with_like() {
    let message = eval_message(data_matches("item.name > 5", json!({"name": "x"})));
    assert!(message.contains("string, int"), "{message}");
    assert!(message.contains("compare like with like"), "{message}");
}

#[test]
fn non_boolean_results_are_refused() {
    match data_matches("item.priority", json!({"priority": 5})) {
        Err(CelError::NotBoolean { got }) => assert_eq!(got, "int 5"),
        other => panic!("{other:?}"),
    }
    match data_matches("item.name", json!({"name": "x"})) {
        Err(e @ CelError::NotBoolean { .. }) => {
            assert!(e.to_string().contains("string \"x\""), "{e}");
            assert!(e.to_string().contains("not true or false"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        data_matches("null", json!({})),
        Err(CelError::NotBoolean { .. })
    ));
}

#[test]
fn malformed_expressions_are_syntax_errors_with_position_and_expectation() {
    let message = syntax_message("item.priority >=");
    assert!(message.contains("end of input"), "{message}");
    assert!(message.contains("column 17"), "{message}");
    assert!(message.contains("expected one of"), "{message}");
    assert!(message.contains("a number"), "{message}");
    assert!(message.contains("item.priority >="), "{message}");

    let message = syntax_message("((a");
    assert!(message.contains("column 4"), "{message}");
    assert!(message.contains("')'"), "{message}");

    let message = syntax_message("item.priority >> 5");
    assert!(message.contains("column 16"), "{message}");
    assert!(message.contains("'>'"), "{message}");

    let message = syntax_message("&& x");
    assert!(message.contains("column 1"), "{message}");
    assert!(message.contains("'&&'"), "{message}");

    for empty in ["", "   ", "\n"] {
        let message = syntax_message(empty);
        assert!(message.contains("empty"), "{message}");
    }
}

#[test]
fn syntax_errors_hint_at_common_mistakes() {
    assert!(syntax_message("item.priority = 5").contains("`==`"));
    assert!(syntax_message("item.a == 1 and item.b == 2").contains("`&&`"));
    let message = syntax_message("item.a ==\n  == 2");
    assert!(message.contains("line 2"), "{message}");
}

#[test]
fn syntax_error_display_quotes_the_expression() {
    let err = CelFilter::parse("item.priority >=").unwrap_err();
    let text = err.to_string();
    assert!(
        text.starts_with("invalid filter `item.priority >=`: "),
        "{text}"
    );
}

#[test]
fn huge_expression_is_refused_with_its_size() {
    let huge = vec!["item.priority == 1"; 6000].join(" || ");
    assert!(huge.len() > 100_000);
    let message = syntax_message(&huge);
    assert!(message.contains("over the limit of 4096"), "{message}");
    // The expression quoted back is shortened.
    match CelFilter::parse(&huge) {
        Err(CelError::Syntax { expr, .. }) => assert!(expr.len() < 200),
        other => panic!("{other:?}"),
    }
}

#[test]
fn deep_nesting_is_refused_not_a_stack_overflow() {
    let message = syntax_message(&"(".repeat(10_000));
    assert!(message.contains("over the limit of 4096"), "{message}");

    let message = syntax_message(&"(".repeat(4000));
    assert!(message.contains("nested more than 32"), "{message}");
    assert!(message.contains("column 33"), "{message}");

    let deep_list = format!("{}1{} == 1", "[".repeat(40), "]".repeat(40));
    assert!(syntax_message(&deep_list).contains("nested more than 32"));

    // Within the bracket limit, parentheses do not deepen the tree: it evaluates.
    let ok = format!("{}item.p == 1{}", "(".repeat(32), ")".repeat(32));
    assert!(data_matches(&ok, json!({"p": 1})).unwrap());
}

#[test]
fn long_chains_are_refused_by_tree_depth() {
    // 4 KiB of `1 + 1 + ...` parses, but evaluating it would recurse ~1300 levels.
    let chain = vec!["1"; 1300].join("+") + " > 0";
    assert!(chain.len() <= MAX_FILTER_BYTES);
    let message = syntax_message(&chain);
    assert!(message.contains("levels deep"), "{message}");

    let dots = format!("{{}}{} == 1", ".a".repeat(2000));
    assert!(syntax_message(&dots).contains("levels deep"));

    let ternary = format!("{}true", "true?1:".repeat(500));
    let message = syntax_message(&ternary);
    assert!(message.contains("deep"), "{message}");

    // Brackets inside strings are not code.
    let quoted = format!("item.name == '{}'", "(".repeat(100));
    assert!(!data_matches(&quoted, json!({"name": "x"})).unwrap());
}

#[test]
fn the_deepest_accepted_tree_evaluates_on_a_test_thread_stack() {
    // `_>_` over n-1 nested `_+_` over the leftmost `item.p` (select over ident): n + 2 deep.
    let terms = MAX_EXPR_DEPTH - 2;
    let expr = vec!["item.p"; terms].join(" + ") + " > 0";
    let filter = CelFilter::parse(&expr).unwrap();
    assert_eq!(expr_depth(filter.program.expression()), MAX_EXPR_DEPTH);
    assert!(filter.matches_data(&json!({"p": 1})).unwrap());
    let one_more = vec!["item.p"; terms + 1].join(" + ") + " > 0";
    assert!(syntax_message(&one_more).contains("levels deep"));
    // Long `&&` chains are balanced by the compiler, so they stay well within the limit.
    let ands = vec!["item.p == 1"; 250].join(" && ");
    assert!(ands.len() <= MAX_FILTER_BYTES);
    assert!(data_matches(&ands, json!({"p": 1})).unwrap());
}

#[test]
fn item_variables_are_all_bound() {
    let item = dead_item(ErrorType::CommandFailed { exit_code: 101 });
    let cases = [
        "item_id == 'item-123'",
        "job_id == 'mapreduce-1'",
        "error_type == 'CommandFailed'",
        "error_message.contains('exit code 101')",
        "failure_count == 2",
        "reprocess_eligible && !manual_review_required",
        "error_signature == '0123456789abcdef'",
        "error_pattern.startsWith('CommandFailed::')",
        "first_attempt == timestamp('2025-01-11T10:25:00Z')",
        "last_attempt > first_attempt",
        "last_attempt < timestamp('2025-02-01T00:00:00Z')",
        "exit_code == 101",
        "item.file == 'src/main.rs'",
    ];
    for expr in cases {
        assert!(
            CelFilter::parse(expr).unwrap().matches_item(&item).unwrap(),
            "filter {expr}"
        );
    }
    assert_eq!(ITEM_VARIABLES.len(), 13);
}

#[test]
fn exit_code_is_null_unless_the_last_failure_was_a_command() {
    let timeout = dead_item(ErrorType::Timeout);
    let f = CelFilter::parse("exit_code == null").unwrap();
    assert!(f.matches_item(&timeout).unwrap());
    assert!(!f
        .matches_item(&dead_item(ErrorType::CommandFailed { exit_code: 2 }))
        .unwrap());

    let mut empty = dead_item(ErrorType::Timeout);
    empty.failure_history.clear();
    let f = CelFilter::parse("error_type == 'Unknown' && error_message == '' && exit_code == null")
        .unwrap();
    assert!(f.matches_item(&empty).unwrap());
}

#[test]
fn non_object_item_data_is_usable() {
    assert!(data_matches("item == 'abc'", json!("abc")).unwrap());
    assert!(data_matches("item > 2", json!(3)).unwrap());
    assert!(data_matches("size(item) == 2", json!([1, 2])).unwrap());
}

#[test]
fn filters_are_shareable_between_threads() {
    fn assert_send_sync<T: Send + Sync + Clone>() {}
    assert_send_sync::<CelFilter>();
    let filter = CelFilter::parse("item.n % 2 == 0").unwrap();
    let handles: Vec<_> = (0..4)
        .map(|n| {
            let filter = filter.clone();
            std::thread::spawn(move || filter.matches_data(&json!({ "n": n })).unwrap())
        })
        .collect();
    let results: Vec<bool> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    assert_eq!(results, vec![true, false, true, false]);
}

#[test]
fn blank_strings_keeps_code_and_hides_literals() {
    assert_eq!(blank_strings(r#"a == "(x)" && b"#), r#"a == "   " && b"#);
    assert_eq!(blank_strings(r"'a\'(' + x"), r"'    ' + x");
    assert_eq!(blank_strings("'''a'b''' (x)"), "'''   ''' (x)");
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Whatever the text, parsing and evaluating return a value or an error: no panic, no
    /// stack overflow.
    #[test]
    fn arbitrary_text_never_crashes(
        parts in proptest::collection::vec(
            prop_oneof![
                Just("item"), Just(".p"), Just("("), Just(")"), Just("["), Just("]"), Just("{"),
                Just("}"), Just(" && "), Just(" || "), Just("!"), Just(" + "), Just(" == "),
                Just(" >= "), Just("1"), Just("2.5"), Just("'s'"), Just("\""), Just(","),
                Just(" ? "), Just(" : "), Just("has("), Just(".contains("), Just(" in "),
                Just("-"), Just("null"), Just("true"),
            ],
            0..120,
        )
    ) {
        let text: String = parts.concat();
        if let Ok(filter) = CelFilter::parse(&text) {
            let _ = filter.matches_data(&json!({"p": 1}));
            prop_assert!(!text.trim().is_empty());
        }
    }
}
