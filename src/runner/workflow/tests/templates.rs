//! Templates checked at validation (their text) and against the items (their data).

use super::*;
use crate::runner::input::WorkItem;
use crate::runner::template::TemplateError;

/// A workflow whose agent runs `agent` (a shell step), with `extra` appended at the top level.
fn workflow(agent: &str, extra: &str) -> String {
    format!(
        "name: w\nmode: mapreduce\nmap:\n  input: items.json\n  agent_template:\n    - shell: \
         \"{agent}\"\n{extra}"
    )
}

/// The step and the template error of a workflow refused for a template.
fn template_error(text: &str) -> (String, TemplateError) {
    match Workflow::parse(text) {
        Err(WorkflowError::Template { field, source }) => (field, source),
        other => panic!("expected a template error, got {other:?}"),
    }
}

#[test]
fn what_a_template_says_is_checked_at_validation() {
    let (field, err) = template_error(&workflow("echo ${itm.x}", ""));
    assert_eq!(field, "map.agent_template[0]");
    assert_eq!(
        err,
        TemplateError::InvalidExpression {
            expr: "itm.x".into()
        }
    );
    let (_, err) = template_error(&workflow("echo ${item.x", ""));
    assert_eq!(err, TemplateError::Unclosed { offset: 5 });
    let (_, err) = template_error(&workflow("echo ${item..x}", ""));
    assert!(
        matches!(err, TemplateError::InvalidExpression { .. }),
        "{err:?}"
    );
    let (_, err) = template_error(&workflow("echo $((${item.n} + 1))", ""));
    assert!(matches!(err, TemplateError::InArithmetic { .. }), "{err:?}");
    // The agent gets map.total only; reduce gets the summary's counts and no item.
    let (_, err) = template_error(&workflow("echo ${map.failed}", ""));
    assert!(
        matches!(err, TemplateError::UnknownVariable { .. }),
        "{err:?}"
    );
    let (field, err) = template_error(&workflow(
        "true",
        "reduce:\n  - shell: \"echo ${item.id}\"\n",
    ));
    assert_eq!(field, "reduce[0]");
    assert!(matches!(err, TemplateError::NoItem { .. }), "{err:?}");
    let (field, err) = template_error(&workflow(
        "true",
        "setup:\n  - claude: \"make ${map.total}\"\n",
    ));
    assert_eq!(field, "setup[0]");
    assert!(
        matches!(err, TemplateError::UnknownVariable { .. }),
        "{err:?}"
    );
    let handler = "handlers:\n  h:\n    - shell: \"true\"\n    - shell: \"echo ${nope.x}\"\n";
    let (field, _) = template_error(&workflow("true", handler));
    assert_eq!(field, "handlers.h[1]");
    let message = WorkflowError::Template { field, source: err }.to_string();
    assert!(
        message.starts_with("workflow template `handlers.h[1]`: unknown variable `map.total`"),
        "{message}"
    );
}

#[test]
fn what_a_template_needs_of_an_item_passes_validation() {
    let fine = [
        workflow(
            "echo ${item} ${item.a.b} ${item.list.0} ${map.total} ${HOME} ${N:-1}",
            "",
        ),
        workflow(
            "true",
            "reduce:\n  - shell: \"echo ${map.failed} of ${map.total}\"\n",
        ),
        FULL.to_owned(),
    ];
    for text in fine {
        assert!(Workflow::parse(&text).is_ok(), "{text}");
    }
}

fn items(data: &[serde_json::Value]) -> Vec<WorkItem> {
    data.iter()
        .enumerate()
        .map(|(i, d)| WorkItem {
            id: format!("i{i}"),
            data: d.clone(),
        })
        .collect()
}

#[test]
fn a_field_some_items_lack_is_found_before_any_runs() {
    let w = Workflow::parse(&workflow("echo ${item.x}", "")).unwrap();
    let all = items(&[
        serde_json::json!({"x": 1}),
        serde_json::json!({"y": 2}),
        serde_json::json!({"x": 3}),
        serde_json::json!({}),
    ]);
    match w.check_items(&all) {
        Err(WorkflowError::ItemTemplate {
            field,
            failing,
            total,
            position,
            item_id,
            source,
        }) => {
            assert_eq!(field, "map.agent_template[0]");
            assert_eq!((failing, total, position), (2, 4, 2));
            assert_eq!(item_id, "i1");
            assert_eq!(
                source,
                TemplateError::MissingField {
                    path: "item.x".into()
                }
            );
        }
        other => panic!("expected an item template error, got {other:?}"),
    }
    assert!(w.check_items(&all[..1]).is_ok());
    assert!(w.check_items(&[]).is_ok());
}

#[test]
fn the_handler_in_use_is_checked_against_the_items_too() {
    let handler = "error_policy:\n  on_item_failure: custom:h\nhandlers:\n  h:\n    - shell: \"echo ${item.owner}\"\n";
    let w = Workflow::parse(&workflow("echo ${item.x}", handler)).unwrap();
    let err = w
        .check_items(&items(&[serde_json::json!({"x": 1})]))
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("workflow template `handlers.h[0]` does not fit 1 of the 1 items"),
        "{err}"
    );
}
