//! The workflow file of `dlq run`: its schema, YAML parsing and semantic validation.
//!
//! A workflow is read once, validated completely and then saved with the job (as JSON), so
//! everything the runner needs to know about a job is decided here, before any agent starts.
//! Every struct rejects unknown keys: a typo such as `max_paralel` is an error that names the
//! key, its line and column, instead of a silently ignored setting.

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};
use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};

mod error_policy;
mod templates;
pub(super) use error_policy::{
    BackoffStrategy, CircuitBreakerConfig, ErrorCollection, ErrorPolicy, OnItemFailure, RetryConfig,
};
pub(super) use templates::item_map_vars;

use super::template::TemplateError;

/// A parsed and validated workflow file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct Workflow {
    /// Name of the workflow, shown in job listings; must not be blank.
    pub name: String,
    /// Execution mode; only `mapreduce` exists.
    pub mode: Mode,
    /// Environment variables given to every step.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// Steps run once before the map phase.
    #[serde(default)]
    pub setup: Vec<Step>,
    /// The map phase: where the items come from and what each agent runs.
    pub map: MapPhase,
    /// Steps run once after the map phase.
    #[serde(default)]
    pub reduce: Vec<Step>,
    /// What happens when an item fails.
    #[serde(default)]
    pub error_policy: ErrorPolicy,
    /// Named step lists for `on_item_failure: custom:<name>`.
    #[serde(default)]
    pub handlers: BTreeMap<String, Vec<Step>>,
}

/// Execution mode of a workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(super) enum Mode {
    /// One agent per work item, then a reduce phase (`mapreduce`).
    #[serde(rename = "mapreduce")]
    MapReduce,
}

/// One step: a shell command or a Claude prompt (`- shell: "make"`, `- claude: "/fix ${item}"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase", deny_unknown_fields)]
pub(super) enum Step {
    /// A command run with `sh -c`.
    Shell(String),
    /// A prompt given to Claude.
    Claude(String),
}

impl Step {
    /// The command or prompt text, before template rendering.
    pub(super) fn text(&self) -> &str {
        match self {
            Step::Shell(text) | Step::Claude(text) => text,
        }
    }

    /// `shell: <text>` or `claude: <text>`: names the step in failures (`step_failed`).
    pub(super) fn label(&self) -> String {
        match self {
            Step::Shell(text) => format!("shell: {text}"),
            Step::Claude(text) => format!("claude: {text}"),
        }
    }
}

fn default_json_path() -> String {
    "$[*]".to_string()
}

fn default_max_parallel() -> usize {
    10
}

/// The map phase: the work items and the agent run for each of them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct MapPhase {
    /// Where the JSON holding the items comes from.
    pub input: Input,
    /// JSONPath (RFC 9535) selecting the items in the input; default `$[*]`.
    #[serde(default = "default_json_path")]
    pub json_path: String,
    /// Steps every agent runs for its item; at least one.
    pub agent_template: Vec<Step>,
    /// Agents running at the same time; at least 1, default 10.
    #[serde(default = "default_max_parallel")]
    pub max_parallel: usize,
    /// CEL expression keeping only the items for which it is true.
    pub filter: Option<String>,
    /// Field to sort the items by before `offset` and `max_items` apply.
    pub sort_by: Option<String>,
    /// At most this many items are processed.
    pub max_items: Option<usize>,
    /// Items skipped at the start of the (filtered, sorted) list.
    #[serde(default)]
    pub offset: usize,
    /// Time limit of one agent in seconds; more than 0 when given.
    pub agent_timeout_secs: Option<u64>,
    /// Where agents run: in the current directory or each in its own git worktree.
    #[serde(default)]
    pub isolation: Isolation,
}

/// Source of the work items: a JSON file, or a command printing JSON on stdout.
///
/// YAML: `input: items.json` or `input: { file: items.json }`, or
/// `input: { command: "gh issue list --json number" }`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Input {
    /// A JSON file, relative to the working directory.
    File(PathBuf),
    /// A `sh -c` command whose stdout is the JSON.
    Command(String),
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(InputVisitor)
    }
}

struct InputVisitor;

impl<'de> Visitor<'de> for InputVisitor {
    type Value = Input;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a file path, `{ file: <path> }` or `{ command: <shell command> }`")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Input, E> {
        Ok(Input::File(PathBuf::from(v)))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Input, A::Error> {
        const KEYS: &[&str] = &["file", "command"];
        let mut input = None;
        while let Some(key) = map.next_key::<String>()? {
            if input.is_some() {
                return Err(de::Error::custom(format!(
                    "`input` takes exactly one of `file` or `command`, found a second key `{key}`"
                )));
            }
            input = Some(match key.as_str() {
                "file" => Input::File(map.next_value()?),
                "command" => Input::Command(map.next_value()?),
                _ => return Err(de::Error::unknown_field(&key, KEYS)),
            });
        }
        input.ok_or_else(|| de::Error::custom("`input` needs a `file` or a `command` key"))
    }
}

/// How agents are isolated from each other.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(super) enum Isolation {
    /// Agents share the current directory (`none`).
    #[default]
    None,
    /// Each agent runs in its own git worktree (`worktree`).
    Worktree,
}

/// Why a workflow file cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkflowError {
    /// The file could not be read.
    #[error("cannot read workflow file {}: {source}; check the path and its permissions", path.display())]
    Read {
        /// The file asked for.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The file is not valid YAML (a bad indent, an unclosed bracket or quote, a tab, ...).
    #[error("workflow file is not valid YAML: {message}")]
    Yaml {
        /// The YAML parser's message, with line, column and a snippet.
        message: String,
    },
    /// The YAML does not match the schema (unknown key, wrong type, ...).
    #[error("workflow file does not match the workflow schema: {message}")]
    Syntax {
        /// The parser's message, with line, column, the offending key and a snippet.
        message: String,
    },
    /// A step's template cannot render in its phase: a `${` never closed, a name that is no
    /// variable, `${item...}` in a step without an item, an unknown `map.NAME`, ...
    #[error("workflow template `{field}`: {source}")]
    Template {
        /// The step, e.g. `map.agent_template[0]`.
        field: String,
        /// What is wrong and what to do.
        #[source]
        source: TemplateError,
    },
    /// A step run with an item does not render for some items (a field they lack).
    #[error(
        "workflow template `{field}` does not fit {failing} of the {total} items (the first: \
         item {position}, id {item_id}): {source}, or leave such items out with `map.filter`"
    )]
    ItemTemplate {
        /// The step, e.g. `map.agent_template[0]`.
        field: String,
        /// Items the template does not render for.
        failing: usize,
        /// Items selected.
        total: usize,
        /// Position (from 1) of the first item that does not fit.
        position: usize,
        /// Its id.
        item_id: String,
        /// Why it does not render.
        #[source]
        source: TemplateError,
    },
    /// A value is well-formed but not acceptable.
    #[error("workflow field `{field}` is invalid: {message}")]
    Invalid {
        /// Dotted path of the field, e.g. `error_policy.failure_threshold`.
        field: String,
        /// What is wrong and what is accepted.
        message: String,
    },
}

/// Whether the YAML parser itself failed (the text is not YAML), rather than the text not
/// matching the workflow's schema.
fn is_yaml_syntax(err: &serde_saphyr::Error) -> bool {
    let mut err = err;
    while let serde_saphyr::Error::WithSnippet { error, .. }
    | serde_saphyr::Error::AliasError { error, .. } = err
    {
        err = error;
    }
    match err {
        serde_saphyr::Error::ExternalMessage { source, .. } => {
            matches!(**source, serde_saphyr::ExternalMessageSource::Parser(_))
        }
        serde_saphyr::Error::Eof { .. } => true,
        _ => false,
    }
}

fn invalid(field: impl Into<String>, message: impl Into<String>) -> WorkflowError {
    WorkflowError::Invalid {
        field: field.into(),
        message: message.into(),
    }
}

fn at_least_one(field: &str, value: u64) -> Result<(), WorkflowError> {
    if value == 0 {
        return Err(invalid(field, "must be at least 1, got 0"));
    }
    Ok(())
}

fn check_steps(field: &str, steps: &[Step]) -> Result<(), WorkflowError> {
    for (i, step) in steps.iter().enumerate() {
        if step.text().trim().is_empty() {
            return Err(invalid(format!("{field}[{i}]"), "the step's text is empty"));
        }
    }
    Ok(())
}

impl Workflow {
    /// Parses YAML text and validates it.
    pub(super) fn parse(text: &str) -> Result<Workflow, WorkflowError> {
        let has_content = text.lines().any(|l| {
            let l = l.trim();
            !l.is_empty() && !l.starts_with('#') && l != "---"
        });
        if !has_content {
            return Err(WorkflowError::Syntax {
                message: "the workflow is empty; it needs at least `name`, `mode` and `map`".into(),
            });
        }
        let workflow: Workflow = serde_saphyr::from_str(text).map_err(|e| {
            let message = e.to_string();
            if is_yaml_syntax(&e) {
                WorkflowError::Yaml { message }
            } else {
                WorkflowError::Syntax { message }
            }
        })?;
        workflow.validate()?;
        Ok(workflow)
    }

    /// Reads, parses and validates a workflow file; syntax errors name the file.
    pub(super) fn load(path: &Path) -> Result<Workflow, WorkflowError> {
        let text = std::fs::read_to_string(path).map_err(|source| WorkflowError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        let named = |message: String| {
            message.replacen("--> <input>:", &format!("--> {}:", path.display()), 1)
        };
        Workflow::parse(&text).map_err(|e| match e {
            WorkflowError::Syntax { message } => WorkflowError::Syntax {
                message: named(message),
            },
            WorkflowError::Yaml { message } => WorkflowError::Yaml {
                message: named(message),
            },
            other => other,
        })
    }

    /// Checks what the schema alone cannot: ranges, references and non-empty lists.
    fn validate(&self) -> Result<(), WorkflowError> {
        if self.name.trim().is_empty() {
            return Err(invalid("name", "must not be empty"));
        }
        self.validate_map()?;
        check_steps("setup", &self.setup)?;
        check_steps("reduce", &self.reduce)?;
        for (name, steps) in &self.handlers {
            let field = format!("handlers.{name}");
            if steps.is_empty() {
                return Err(invalid(field, "a handler needs at least one step"));
            }
            check_steps(&field, steps)?;
        }
        self.validate_error_policy()?;
        self.check_templates()
    }

    fn validate_map(&self) -> Result<(), WorkflowError> {
        let map = &self.map;
        match &map.input {
            Input::File(path) if path.as_os_str().is_empty() => {
                return Err(invalid("map.input.file", "the file path is empty"));
            }
            Input::Command(cmd) if cmd.trim().is_empty() => {
                return Err(invalid("map.input.command", "the command is empty"));
            }
            _ => {}
        }
        if let Err(e) = serde_json_path::JsonPath::parse(&map.json_path) {
            return Err(invalid(
                "map.json_path",
                format!(
                    "`{}` is not a valid JSONPath (RFC 9535): {e}",
                    map.json_path
                ),
            ));
        }
        if map.agent_template.is_empty() {
            return Err(invalid("map.agent_template", "needs at least one step"));
        }
        check_steps("map.agent_template", &map.agent_template)?;
        at_least_one("map.max_parallel", map.max_parallel as u64)?;
        if map.agent_timeout_secs == Some(0) {
            return Err(invalid(
                "map.agent_timeout_secs",
                "must be more than 0; leave it out for no time limit",
            ));
        }
        Ok(())
    }

    fn validate_error_policy(&self) -> Result<(), WorkflowError> {
        let policy = &self.error_policy;
        if let OnItemFailure::Custom(name) = &policy.on_item_failure {
            if !self.handlers.contains_key(name) {
                let known: Vec<&str> = self.handlers.keys().map(String::as_str).collect();
                return Err(invalid(
                    "error_policy.on_item_failure",
                    format!(
                        "handler `{name}` is not defined under `handlers` (defined: [{}])",
                        known.join(", ")
                    ),
                ));
            }
        }
        if let Some(t) = policy.failure_threshold {
            if !(0.0..=1.0).contains(&t) {
                return Err(invalid(
                    "error_policy.failure_threshold",
                    format!("must be a fraction between 0.0 and 1.0, got {t}"),
                ));
            }
        }
        if let ErrorCollection::Batched { size } = policy.error_collection {
            at_least_one("error_policy.error_collection.batched.size", size as u64)?;
        }
        if let Some(cb) = &policy.circuit_breaker {
            let f = "error_policy.circuit_breaker";
            at_least_one(
                &format!("{f}.failure_threshold"),
                cb.failure_threshold.into(),
            )?;
            at_least_one(
                &format!("{f}.success_threshold"),
                cb.success_threshold.into(),
            )?;
            at_least_one(
                &format!("{f}.half_open_requests"),
                cb.half_open_requests.into(),
            )?;
        }
        if let Some(retry) = &policy.retry_config {
            let f = "error_policy.retry_config";
            at_least_one(&format!("{f}.max_attempts"), retry.max_attempts.into())?;
            if !(0.0..=1.0).contains(&retry.jitter_factor) {
                return Err(invalid(
                    format!("{f}.jitter_factor"),
                    format!("must be between 0.0 and 1.0, got {}", retry.jitter_factor),
                ));
            }
            if let BackoffStrategy::Exponential { multiplier, .. } = retry.backoff {
                if !(multiplier.is_finite() && multiplier >= 1.0) {
                    return Err(invalid(
                        format!("{f}.backoff.exponential.multiplier"),
                        format!("must be a finite number of at least 1, got {multiplier}"),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The retry settings the runner applies: `retry_config` when given; otherwise the
    /// defaults (3 attempts, exponential) for `on_item_failure: retry`, else one attempt.
    pub(super) fn effective_retry(&self) -> RetryConfig {
        match (
            &self.error_policy.retry_config,
            &self.error_policy.on_item_failure,
        ) {
            (Some(config), _) => config.clone(),
            (None, OnItemFailure::Retry) => RetryConfig::default(),
            (None, _) => RetryConfig {
                max_attempts: 1,
                ..RetryConfig::default()
            },
        }
    }
}

#[cfg(test)]
mod tests;
