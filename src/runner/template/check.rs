//! [`Scope`]: the variables a step will have, without their values, so that a workflow's
//! templates are checked when the workflow is validated, before anything runs.
//!
//! What a template asks for is known from its text: a `${` never closed, a name that is neither
//! a workflow variable nor a shell parameter, `${item...}` in a step without a work item, a
//! `map.NAME` the step does not get, a value inside `$((...))`. Rendering the template against a
//! [`Scope`] finds each of these as rendering it for real would. Whether an item has the field
//! `${item.a.b}` names is data: the runner checks that against every selected item before the
//! first one runs (`Workflow::check_items`).

use std::collections::BTreeMap;

use super::{split_root, Lookup, TemplateError};

/// The variables of a kind of step: whether it has a work item, and its `map.*` names.
#[derive(Debug, Clone, Copy)]
pub(in crate::runner) struct Scope<'a> {
    /// Whether the step runs with a work item (map and handler steps do).
    pub item: bool,
    /// The `map.NAME` variables the step gets, with any value (only the names are used).
    pub map: &'a BTreeMap<String, String>,
}

impl Lookup for Scope<'_> {
    /// A placeholder for every variable the step will have; the errors rendering would give
    /// for the others.
    fn lookup(&self, expr: &str) -> Result<Option<String>, TemplateError> {
        let (head, rest) = split_root(expr);
        let invalid = || TemplateError::InvalidExpression { expr: expr.into() };
        match head {
            "item" => {
                if !self.item {
                    return Err(TemplateError::NoItem { expr: expr.into() });
                }
                if !rest.is_empty() {
                    let path = rest.strip_prefix('.').ok_or_else(invalid)?;
                    if path.split('.').any(str::is_empty) {
                        return Err(invalid());
                    }
                }
                Ok(Some(String::new()))
            }
            "map" => {
                let name = rest.strip_prefix('.').ok_or_else(invalid)?;
                if self.map.contains_key(name) {
                    return Ok(Some(String::new()));
                }
                Err(TemplateError::UnknownVariable {
                    name: expr.into(),
                    known: super::known_names(self.map),
                })
            }
            _ => Ok(None),
        }
    }
}
