#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use super::*;
use proptest::prelude::*;
use serde_json::json;
use std::path::Path;

fn no_map() -> BTreeMap<String, String> {
    BTreeMap::new()
}

/// Runs a rendered command with `sh -c` in `dir`; returns its exit status.
fn run(cmd: &ShellCommand, dir: &Path) -> std::process::ExitStatus {
    std::process::Command::new("sh")
        .arg("-c")
        .arg(&cmd.script)
        .envs(cmd.env.iter().map(|(k, v)| (k, v)))
        .current_dir(dir)
        .status()
        .unwrap()
}

fn render(template: &str, item: &serde_json::Value) -> Result<ShellCommand, TemplateError> {
    let map = no_map();
    render_shell(
        template,
        &ItemVars {
            item: Some(item),
            map: &map,
        },
    )
}

const HOSTILE: &[&str] = &[
    "$(touch PWNED)",
    "`touch PWNED`",
    "; touch PWNED",
    "' ; touch PWNED ; '",
    "\" ; touch PWNED ; \"",
    "a\nb\ntouch PWNED\n",
    "\\",
    "\\'\\\"",
    "${IFS}touch${IFS}PWNED",
    "* ?",
    "-n",
    "$HOME ${HOME}",
    "'$(touch PWNED)'\"`touch PWNED`\"",
    "",
    "  spaced  out  ",
    "ünïcødé ✓",
];

/// Every template prints the value (wrapped in `pre`/`post` where the template adds them).
const CONTEXTS: &[(&str, &str, &str)] = &[
    ("printf %s ${item.x} > out", "", ""),
    ("printf %s '${item.x}' > out", "", ""),
    ("printf %s \"${item.x}\" > out", "", ""),
    ("printf %s 'pre ${item.x} post' > out", "pre ", " post"),
    ("printf %s \"pre ${item.x} post\" > out", "pre ", " post"),
    ("printf %s 'a'${item.x}\"b\" > out", "a", "b"),
    (
        "x=$(printf %s ${item.x}; printf .); printf %s \"${x%.}\" > out",
        "",
        "",
    ),
    (
        "x=\"$(printf '%s' '${item.x}'; printf .)\"; printf %s \"${x%.}\" > out",
        "",
        "",
    ),
    (
        "x=`printf %s ${item.x}; printf .`; printf %s \"${x%.}\" > out",
        "",
        "",
    ),
    (
        "# don't be fooled by this quote\nprintf %s ${item.x} > out",
        "",
        "",
    ),
];

#[test]
fn hostile_values_are_passed_as_data_in_every_context() {
    for value in HOSTILE {
        for (template, pre, post) in CONTEXTS {
            let dir = tempfile::tempdir().unwrap();
            let item = json!({ "x": value.replace("PWNED", &dir.path().join("pwned").display().to_string()) });
            let cmd = render(template, &item).unwrap();
            assert!(
                !cmd.script.contains("touch"),
                "value leaked into the script: {}",
                cmd.script
            );
            assert!(run(&cmd, dir.path()).success(), "{template} with {value:?}");
            let out = std::fs::read(dir.path().join("out")).unwrap();
            let want = format!("{pre}{}{post}", item["x"].as_str().unwrap());
            assert_eq!(
                String::from_utf8_lossy(&out),
                want,
                "{template} with {value:?}"
            );
            assert!(
                !dir.path().join("pwned").exists(),
                "{template} with {value:?} ran code"
            );
        }
    }
}

#[test]
fn references_match_the_quoting_context() {
    let item = json!("v");
    let script = |t: &str| render(t, &item).unwrap().script;
    assert_eq!(script("a ${item} b"), "a \"${DLQ_V0}\" b");
    assert_eq!(script("a \"x${item}y\""), "a \"x${DLQ_V0}y\"");
    assert_eq!(script("a 'x${item}y'"), "a 'x'\"${DLQ_V0}\"'y'");
    assert_eq!(script("a $'x${item}y'"), "a $'x'\"${DLQ_V0}\"$'y'");
    assert_eq!(script("a $'\\'${item}'"), "a $'\\''\"${DLQ_V0}\"$''");
}

#[test]
fn the_same_expression_reuses_one_variable() {
    let cmd = render(
        "echo ${item.a} ${item.b} ${item.a}",
        &json!({"a": "1", "b": "2"}),
    )
    .unwrap();
    assert_eq!(cmd.script, "echo \"${DLQ_V0}\" \"${DLQ_V1}\" \"${DLQ_V0}\"");
    assert_eq!(
        cmd.env,
        vec![("DLQ_V0".into(), "1".into()), ("DLQ_V1".into(), "2".into())]
    );
}

#[test]
fn item_values_render_by_type() {
    let item = json!({"s": "text", "n": 5, "f": 1.5, "b": true, "z": null,
        "o": {"k": [1, "x"]}, "tags": ["a", "b"]});
    let map = no_map();
    let vars = ItemVars {
        item: Some(&item),
        map: &map,
    };
    let get = |e: &str| vars.lookup(e).unwrap().unwrap();
    assert_eq!(get("item.s"), "text");
    assert_eq!(get("item.n"), "5");
    assert_eq!(get("item.f"), "1.5");
    assert_eq!(get("item.b"), "true");
    assert_eq!(get("item.z"), "null");
    assert_eq!(get("item.o"), r#"{"k":[1,"x"]}"#);
    assert_eq!(get("item.o.k.1"), "x");
    assert_eq!(get("item.tags.0"), "a");
    assert!(get("item").starts_with('{'));
    let text = json!("raw \"text\"");
    let vars = ItemVars {
        item: Some(&text),
        map: &map,
    };
    assert_eq!(vars.lookup("item").unwrap().unwrap(), "raw \"text\"");
    assert_eq!(vars.lookup("HOME").unwrap(), None);
    assert_eq!(vars.lookup("item_count").unwrap(), None);
}

#[test]
fn map_variables_render_and_run() {
    let mut map = BTreeMap::new();
    map.insert("successful".to_string(), "3".to_string());
    map.insert("total".to_string(), "5".to_string());
    let vars = ItemVars {
        item: None,
        map: &map,
    };
    let dir = tempfile::tempdir().unwrap();
    let cmd = render_shell("echo \"done ${map.successful}/${map.total}\" > out", &vars).unwrap();
    assert!(run(&cmd, dir.path()).success());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "done 3/5\n"
    );
    let err = render_shell("echo ${map.nope}", &vars).unwrap_err();
    assert_eq!(
        err,
        TemplateError::UnknownVariable {
            name: "map.nope".into(),
            known: "map.successful, map.total".into()
        }
    );
    assert!(err.to_string().contains("map.total"));
    assert_eq!(
        render_shell("echo ${item}", &vars).unwrap_err(),
        TemplateError::NoItem {
            expr: "item".into()
        }
    );
}

#[test]
fn shell_variables_pass_through_to_the_shell() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = render(
        "echo $HOME ${HOME} ${UNSET_X:-dflt} ${#HOME} > out",
        &json!({}),
    )
    .unwrap();
    assert_eq!(
        cmd.script,
        "echo $HOME ${HOME} ${UNSET_X:-dflt} ${#HOME} > out"
    );
    assert!(cmd.env.is_empty());
    assert!(run(&cmd, dir.path()).success());
    let home = std::env::var("HOME").unwrap();
    let want = format!("{home} {home} dflt {}\n", home.len());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        want
    );
}

#[test]
fn escaped_and_commented_placeholders_are_left_alone() {
    let dir = tempfile::tempdir().unwrap();
    let cmd = render("printf %s \\${item} > out # ${map.nope}", &json!("v")).unwrap();
    assert!(cmd.env.is_empty());
    assert!(run(&cmd, dir.path()).success());
    assert_eq!(
        std::fs::read_to_string(dir.path().join("out")).unwrap(),
        "${item}"
    );
}

#[test]
fn template_errors_name_the_problem() {
    let item = json!({"a": {"b": 1}});
    assert_eq!(
        render("echo ${item", &item).unwrap_err(),
        TemplateError::Unclosed { offset: 5 }
    );
    assert_eq!(
        render("echo ${item.a.c}", &item).unwrap_err(),
        TemplateError::MissingField {
            path: "item.a.c".into()
        }
    );
    assert_eq!(
        render("echo ${item.a.b.c}", &item).unwrap_err(),
        TemplateError::MissingField {
            path: "item.a.b.c".into()
        }
    );
    for bad in [
        "${item-x}",
        "${item..a}",
        "${item.}",
        "${}",
        "${foo bar}",
        "${map}",
        "${N:-${item}}",
    ] {
        assert!(
            matches!(
                render(bad, &item).unwrap_err(),
                TemplateError::InvalidExpression { .. }
            ),
            "{bad}"
        );
    }
    assert_eq!(
        render("echo $(( ${item.a.b} + 1 ))", &item).unwrap_err(),
        TemplateError::InArithmetic {
            expr: "item.a.b".into()
        }
    );
    assert_eq!(
        render("echo ${item.z}", &json!({"z": "a\0b"})).unwrap_err(),
        TemplateError::NulByte {
            expr: "item.z".into()
        }
    );
    let msg = TemplateError::MissingField {
        path: "item.a.c".into(),
    }
    .to_string();
    assert!(msg.contains("item.a.c") && msg.contains("check"), "{msg}");
}

#[test]
fn text_rendering_inserts_values_verbatim() {
    let mut map = BTreeMap::new();
    map.insert("total".to_string(), "9".to_string());
    let item = json!({"f": "$(rm -rf ~) 'q' \"d\""});
    let vars = ItemVars {
        item: Some(&item),
        map: &map,
    };
    assert_eq!(
        render_text(
            "fix ${item.f} of ${map.total} in ${HOME}, $${item} stays",
            &vars
        )
        .unwrap(),
        "fix $(rm -rf ~) 'q' \"d\" of 9 in ${HOME}, ${item} stays"
    );
    assert_eq!(
        render_text("a ${item", &vars).unwrap_err(),
        TemplateError::Unclosed { offset: 2 }
    );
    assert!(matches!(
        render_text("${item.nope}", &vars).unwrap_err(),
        TemplateError::MissingField { .. }
    ));
    assert!(matches!(
        render_text("${a b}", &vars).unwrap_err(),
        TemplateError::InvalidExpression { .. }
    ));
}

proptest! {
    /// Any string without NUL comes back byte for byte from `printf '%s'` in every context.
    #[test]
    fn arbitrary_values_round_trip(chars in proptest::collection::vec(any::<char>(), 0..40)) {
        let value: String = chars.into_iter().filter(|c| *c != '\0').collect();
        let dir = tempfile::tempdir().unwrap();
        let template = "printf '%s' ${item.v} > u; printf '%s' '${item.v}' > s; \
                        printf '%s' \"${item.v}\" > d";
        let cmd = render(template, &json!({ "v": value })).unwrap();
        prop_assert!(run(&cmd, dir.path()).success());
        for file in ["u", "s", "d"] {
            let out = std::fs::read(dir.path().join(file)).unwrap();
            prop_assert_eq!(&out, value.as_bytes(), "context {}", file);
        }
    }
}
