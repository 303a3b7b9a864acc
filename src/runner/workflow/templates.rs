//! The workflow's `${...}` templates checked before any step runs.
//!
//! What the text of a template decides is checked when the workflow is validated
//! ([`Workflow::check_templates`], so `dlq run` refuses it before it opens the data directory):
//! a `${` never closed, a name that is neither a workflow variable nor a shell parameter,
//! `${item...}` outside the steps that have an item, a `map.NAME` the step does not get, a value
//! inside `$((...))`. Whether an item has the field `${item.a.b}` names is data: the runner
//! renders the item steps against every selected item before the first one runs
//! ([`Workflow::check_items`]), so a typo fails the job at once instead of dead-lettering every
//! item.

use std::collections::BTreeMap;

use super::{OnItemFailure, Step, Workflow, WorkflowError};
use crate::runner::input::WorkItem;
use crate::runner::job_summary::JobSummary;
use crate::runner::template::{render_shell, render_text, ItemVars, Lookup, Scope, TemplateError};

/// The `map.*` variables of the map phase's steps (agents and handlers).
pub(in crate::runner) fn item_map_vars(total: usize) -> BTreeMap<String, String> {
    BTreeMap::from([("total".to_owned(), total.to_string())])
}

/// Renders `step` against `vars`, keeping only whether it renders.
fn render(step: &Step, vars: &dyn Lookup) -> Result<(), TemplateError> {
    match step {
        Step::Shell(text) => render_shell(text, vars).map(drop),
        Step::Claude(text) => render_text(text, vars).map(drop),
    }
}

/// `field[i]` with each step of `steps`.
fn named<'a>(field: &str, steps: &'a [Step]) -> impl Iterator<Item = (String, &'a Step)> {
    let field = field.to_owned();
    steps
        .iter()
        .enumerate()
        .map(move |(i, step)| (format!("{field}[{i}]"), step))
}

impl Workflow {
    /// Checks every step's template against the variables its phase will have (see the module
    /// doc); the error names the step's field.
    pub(super) fn check_templates(&self) -> Result<(), WorkflowError> {
        let none = BTreeMap::new();
        let item_vars = item_map_vars(0);
        let reduce_vars = JobSummary::default().map_vars();
        let setup = Scope {
            item: false,
            map: &none,
        };
        let item = Scope {
            item: true,
            map: &item_vars,
        };
        let reduce = Scope {
            item: false,
            map: &reduce_vars,
        };
        let handlers = self
            .handlers
            .iter()
            .flat_map(|(name, steps)| named(&format!("handlers.{name}"), steps))
            .map(|(field, step)| (field, step, item));
        let phases = named("setup", &self.setup)
            .map(|(f, s)| (f, s, setup))
            .chain(named("map.agent_template", &self.map.agent_template).map(|(f, s)| (f, s, item)))
            .chain(named("reduce", &self.reduce).map(|(f, s)| (f, s, reduce)))
            .chain(handlers);
        for (field, step, scope) in phases {
            render(step, &scope).map_err(|source| WorkflowError::Template { field, source })?;
        }
        Ok(())
    }

    /// Renders the steps run with an item (the agent template and the `custom:` handler in
    /// use) against every item; the error names the step, the first item that does not fit
    /// and how many do not.
    pub(in crate::runner) fn check_items(&self, items: &[WorkItem]) -> Result<(), WorkflowError> {
        let map = item_map_vars(items.len());
        let mut steps: Vec<(String, &Step)> =
            named("map.agent_template", &self.map.agent_template).collect();
        if let OnItemFailure::Custom(name) = &self.error_policy.on_item_failure {
            if let Some(handler) = self.handlers.get(name) {
                steps.extend(named(&format!("handlers.{name}"), handler));
            }
        }
        let mut first = None;
        let mut failing = 0;
        for (index, item) in items.iter().enumerate() {
            let vars = ItemVars {
                item: Some(&item.data),
                map: &map,
            };
            let failed = steps
                .iter()
                .find_map(|(field, step)| render(step, &vars).err().map(|e| (field, e)));
            if let Some((field, source)) = failed {
                failing += 1;
                first.get_or_insert_with(|| (field.clone(), index, item.id.clone(), source));
            }
        }
        match first {
            None => Ok(()),
            Some((field, index, item_id, source)) => Err(WorkflowError::ItemTemplate {
                field,
                failing,
                total: items.len(),
                position: index + 1,
                item_id,
                source,
            }),
        }
    }
}
