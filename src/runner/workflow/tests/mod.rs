#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use std::time::Duration;

const FULL: &str = r#"
name: fix-issues
mode: mapreduce
env:
  PROJECT: dlq
  LEVEL: "3"
setup:
  - shell: "make items"
map:
  input: { command: "cat items.json" }
  json_path: "$.items[*]"
  agent_template:
    - claude: "/fix ${item.id}"
    - shell: "cargo test"
  max_parallel: 4
  filter: "item.priority > 2"
  sort_by: "priority"
  max_items: 50
  offset: 5
  agent_timeout_secs: 600
  isolation: worktree
reduce:
  - shell: "echo done ${map.successful}"
error_policy:
  on_item_failure: custom:notify
  continue_on_failure: false
  max_failures: 10
  failure_threshold: 0.2
  error_collection:
    batched: { size: 10 }
  circuit_breaker:
    failure_threshold: 3
    success_threshold: 1
    timeout: 1m
    half_open_requests: 2
  retry_config:
    max_attempts: 4
    backoff:
      linear: { initial: 1s, increment: 500ms }
    jitter: true
    jitter_factor: 0.25
    max_delay: 2m
handlers:
  notify:
    - shell: "notify-send failed"
"#;

fn full_expected() -> Workflow {
    Workflow {
        name: "fix-issues".into(),
        mode: Mode::MapReduce,
        env: BTreeMap::from([
            ("PROJECT".into(), "dlq".into()),
            ("LEVEL".into(), "3".into()),
        ]),
        setup: vec![Step::Shell("make items".into())],
        map: MapPhase {
            input: Input::Command("cat items.json".into()),
            json_path: "$.items[*]".into(),
            agent_template: vec![
                Step::Claude("/fix ${item.id}".into()),
                Step::Shell("cargo test".into()),
            ],
            max_parallel: 4,
            filter: Some("item.priority > 2".into()),
            sort_by: Some("priority".into()),
            max_items: Some(50),
            offset: 5,
            agent_timeout_secs: Some(600),
            isolation: Isolation::Worktree,
        },
        reduce: vec![Step::Shell("echo done ${map.successful}".into())],
        error_policy: ErrorPolicy {
            on_item_failure: OnItemFailure::Custom("notify".into()),
            continue_on_failure: false,
            max_failures: Some(10),
            failure_threshold: Some(0.2),
            error_collection: ErrorCollection::Batched { size: 10 },
            circuit_breaker: Some(CircuitBreakerConfig {
                failure_threshold: 3,
                success_threshold: 1,
                timeout: Duration::from_secs(60),
                half_open_requests: 2,
            }),
            retry_config: Some(RetryConfig {
                max_attempts: 4,
                backoff: BackoffStrategy::Linear {
                    initial: Duration::from_secs(1),
                    increment: Duration::from_millis(500),
                },
                jitter: true,
                jitter_factor: 0.25,
                max_delay: Some(Duration::from_secs(120)),
            }),
        },
        handlers: BTreeMap::from([(
            "notify".into(),
            vec![Step::Shell("notify-send failed".into())],
        )]),
    }
}

const MINIMAL: &str = "name: w\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \"echo ${item}\"\n";

/// MINIMAL with extra lines appended under the top level.
fn with(extra: &str) -> String {
    format!("{MINIMAL}{extra}")
}

fn syntax_message(text: &str) -> String {
    match Workflow::parse(text) {
        Err(WorkflowError::Syntax { message }) => message,
        other => panic!("expected a syntax error, got {other:?}"),
    }
}

fn invalid_field(text: &str) -> (String, String) {
    match Workflow::parse(text) {
        Err(WorkflowError::Invalid { field, message }) => (field, message),
        other => panic!("expected an invalid field, got {other:?}"),
    }
}

#[test]
fn full_example_parses_to_expected_struct() {
    assert_eq!(Workflow::parse(FULL).unwrap(), full_expected());
}

#[test]
fn minimal_workflow_gets_defaults() {
    let w = Workflow::parse(MINIMAL).unwrap();
    assert_eq!(w.map.input, Input::File(PathBuf::from("items.json")));
    assert_eq!(w.map.json_path, "$[*]");
    assert_eq!(w.map.max_parallel, 10);
    assert_eq!(w.map.offset, 0);
    assert_eq!(w.map.isolation, Isolation::None);
    assert_eq!((w.map.filter, w.map.sort_by), (None, None));
    assert_eq!((w.map.max_items, w.map.agent_timeout_secs), (None, None));
    assert!(w.env.is_empty() && w.setup.is_empty() && w.reduce.is_empty());
    assert!(w.handlers.is_empty());
    assert_eq!(w.error_policy, ErrorPolicy::default());
    assert_eq!(w.error_policy.on_item_failure, OnItemFailure::Dlq);
    assert!(w.error_policy.continue_on_failure);
    assert_eq!(w.error_policy.error_collection, ErrorCollection::Aggregate);
}

#[test]
fn input_forms() {
    let file = Workflow::parse(&MINIMAL.replace("input: items.json", "input: { file: x.json }"));
    assert_eq!(file.unwrap().map.input, Input::File("x.json".into()));
    let cmd = Workflow::parse(&MINIMAL.replace("input: items.json", "input:\n    command: ls"));
    assert_eq!(cmd.unwrap().map.input, Input::Command("ls".into()));
}

#[test]
fn input_rejects_unknown_key_and_two_keys() {
    let msg = syntax_message(&MINIMAL.replace("input: items.json", "input: { url: x }"));
    assert!(msg.contains("url") && msg.contains("line 4"), "{msg}");
    let msg =
        syntax_message(&MINIMAL.replace("input: items.json", "input: { file: x, command: y }"));
    assert!(msg.contains("exactly one"), "{msg}");
    let msg = syntax_message(&MINIMAL.replace("input: items.json", "input: {}"));
    assert!(msg.contains("needs a `file` or a `command`"), "{msg}");
}

#[test]
fn isolation_and_step_forms() {
    let w = Workflow::parse(&MINIMAL.replace(
        "  agent_template:",
        "  isolation: none\n  agent_template:\n    - claude: \"/go\"",
    ))
    .unwrap();
    assert_eq!(w.map.isolation, Isolation::None);
    assert_eq!(w.map.agent_template[0], Step::Claude("/go".into()));
    assert_eq!(w.map.agent_template[0].label(), "claude: /go");
    assert_eq!(w.map.agent_template[1].label(), "shell: echo ${item}");
    assert_eq!(w.map.agent_template[1].text(), "echo ${item}");
}

#[test]
fn typos_name_the_key_and_line_at_every_level() {
    let cases = [
        // (yaml, key, line)
        (with("nmae: x\n"), "nmae", 7),
        (
            MINIMAL.replace("  input: items.json", "  input: items.json\n  max_paralel: 3"),
            "max_paralel",
            5,
        ),
        (with("error_policy:\n  on_item_failur: dlq\n"), "on_item_failur", 8),
        (
            with("error_policy:\n  circuit_breaker:\n    timout: 5s\n"),
            "timout",
            9,
        ),
        (
            with("error_policy:\n  retry_config:\n    backoff:\n      exponential: { initial: 1s, multipler: 2 }\n"),
            "multipler",
            10,
        ),
        (
            with("error_policy:\n  retry_config:\n    backoff:\n      expo: { initial: 1s }\n"),
            "expo",
            10,
        ),
        (MINIMAL.replace("- shell:", "- shel:"), "shel", 6),
        (with("reduce:\n  - bash: ls\n"), "bash", 8),
        (
            with("error_policy:\n  error_collection: { batched: { sise: 2 } }\n"),
            "sise",
            8,
        ),
    ];
    for (yaml, key, line) in cases {
        let msg = syntax_message(&yaml);
        assert!(msg.contains(key), "message lacks `{key}`: {msg}");
        assert!(
            msg.contains(&format!("line {line} ")),
            "message lacks line {line} for `{key}`: {msg}"
        );
    }
}

#[test]
fn step_with_two_keys_is_an_error() {
    let msg = syntax_message(
        &MINIMAL.replace("- shell: \"echo ${item}\"", "- shell: ls\n      claude: hi"),
    );
    assert!(msg.contains("line 7 "), "{msg}");
}

#[test]
fn invalid_values_name_the_field() {
    let cases = [
        (with("error_policy:\n  failure_threshold: 1.5\n"), "error_policy.failure_threshold"),
        (with("error_policy:\n  failure_threshold: -0.1\n"), "error_policy.failure_threshold"),
        (
            MINIMAL.replace("  input: items.json", "  input: items.json\n  max_parallel: 0"),
            "map.max_parallel",
        ),
        (
            MINIMAL.replace("  input: items.json", "  input: items.json\n  agent_timeout_secs: 0"),
            "map.agent_timeout_secs",
        ),
        (with("error_policy:\n  on_item_failure: custom:missing\n"), "error_policy.on_item_failure"),
        (
            MINIMAL.replace("  input: items.json", "  input: items.json\n  json_path: \"$[\""),
            "map.json_path",
        ),
        (
            MINIMAL.replace("  agent_template:\n    - shell: \"echo ${item}\"\n", "  agent_template: []\n"),
            "map.agent_template",
        ),
        (MINIMAL.replace("name: w", "name: \"  \""), "name"),
        (
            with("error_policy:\n  error_collection: { batched: { size: 0 } }\n"),
            "error_policy.error_collection.batched.size",
        ),
        (
            with("error_policy:\n  circuit_breaker: { half_open_requests: 0 }\n"),
            "error_policy.circuit_breaker.half_open_requests",
        ),
        (
            with("error_policy:\n  retry_config: { max_attempts: 0 }\n"),
            "error_policy.retry_config.max_attempts",
        ),
        (
            with("error_policy:\n  retry_config: { jitter_factor: 2 }\n"),
            "error_policy.retry_config.jitter_factor",
        ),
        (
            with("error_policy:\n  retry_config:\n    backoff: { exponential: { initial: 1s, multiplier: 0.5 } }\n"),
            "error_policy.retry_config.backoff.exponential.multiplier",
        ),
        (with("handlers:\n  empty: []\n"), "handlers.empty"),
        (MINIMAL.replace("\"echo ${item}\"", "\" \""), "map.agent_template[0]"),
        (MINIMAL.replace("input: items.json", "input: { command: \"\" }"), "map.input.command"),
    ];
    for (yaml, expected_field) in cases {
        let (field, message) = invalid_field(&yaml);
        assert_eq!(field, expected_field, "{message}");
        assert!(!message.is_empty());
    }
}

#[test]
fn bad_enum_strings_and_durations_are_syntax_errors() {
    let msg = syntax_message(&with("error_policy:\n  on_item_failure: dlx\n"));
    assert!(
        msg.contains("dlx") && msg.contains("custom:<handler name>"),
        "{msg}"
    );
    assert!(msg.contains("line 8"), "{msg}");
    let msg = syntax_message(&with("error_policy:\n  on_item_failure: \"custom:\"\n"));
    assert!(msg.contains("custom:"), "{msg}");
    let msg = syntax_message(&MINIMAL.replace("mode: mapreduce", "mode: batch"));
    assert!(
        msg.contains("batch") && msg.contains("mapreduce") && msg.contains("line 2"),
        "{msg}"
    );
    let msg = syntax_message(&with(
        "error_policy:\n  circuit_breaker: { timeout: 5 parsecs }\n",
    ));
    assert!(msg.contains("5 parsecs") && msg.contains("line 8"), "{msg}");
    let msg = syntax_message(&MINIMAL.replace(
        "  input: items.json",
        "  input: items.json\n  isolation: docker",
    ));
    assert!(msg.contains("docker") && msg.contains("line 5"), "{msg}");
    let msg = syntax_message(&MINIMAL.replace(
        "  input: items.json",
        "  input: items.json\n  max_parallel: -2",
    ));
    assert!(msg.contains("line 5"), "{msg}");
}

#[test]
fn missing_required_fields_and_garbage_are_syntax_errors() {
    assert!(syntax_message("name: w\nmode: mapreduce\n").contains("map"));
    assert!(syntax_message(&MINIMAL.replace("mode: mapreduce\n", "")).contains("mode"));
    assert!(syntax_message("").contains("empty"));
    assert!(syntax_message("# only a comment\n").contains("empty"));
    syntax_message("name: [unclosed\n");
    syntax_message("- just\n- a list\n");
}

#[test]
fn json_round_trip_is_identity() {
    for text in [FULL.to_string(), MINIMAL.to_string()] {
        let w = Workflow::parse(&text).unwrap();
        let json = serde_json::to_string(&w).unwrap();
        let back: Workflow = serde_json::from_str(&json).unwrap();
        assert_eq!(back, w, "{json}");
    }
    let json = serde_json::to_value(full_expected()).unwrap();
    assert_eq!(json["error_policy"]["on_item_failure"], "custom:notify");
    assert_eq!(json["map"]["input"]["command"], "cat items.json");
    assert_eq!(json["mode"], "mapreduce");
}

#[test]
fn load_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.yml");
    let err = Workflow::load(&missing).unwrap_err();
    assert!(matches!(err, WorkflowError::Read { .. }));
    assert!(err.to_string().contains("nope.yml"), "{err}");

    let bad = dir.path().join("bad.yml");
    std::fs::write(&bad, with("colour: blue\n")).unwrap();
    let err = Workflow::load(&bad).unwrap_err();
    assert!(err.to_string().contains("bad.yml:7"), "{err}");

    let good = dir.path().join("good.yml");
    std::fs::write(&good, FULL).unwrap();
    assert_eq!(Workflow::load(&good).unwrap(), full_expected());
}

mod error_policy;
mod templates;
