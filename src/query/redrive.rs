//! Which items a redrive hands back, read from the sink before anything is written: the
//! items a redrive request names or selects ([`super::delete::select`]), each with the
//! generation the caller saw; and the answers (a dry run, the report) in the shape every
//! operator change prints (`Removal`: a JSON summary and a line).

use serde_json::json;

use super::delete::{select, Selected};
use super::list::find_item;
use super::QueryError;
use crate::request::redrive::RedriveJob;
use dlq::emitter::{Published, RedriveItem, RedriveReport};
use dlq::removal::Removal;
use dlq::sink::LocalSink;

/// The items to redrive, in the order found, and the ids that name none.
#[derive(Debug, Clone, Default)]
pub struct Chosen {
    /// Each item with the generation the caller saw (or the one read now).
    pub items: Vec<RedriveItem>,
    /// What was selected, with the ids given that name no item.
    pub selected: Selected,
}

/// Reads the items `job` names or selects. Ids given that name no item are kept in
/// `selected.unknown`; a CEL expression that cannot decide about an item is an error.
pub fn choose(sink: &LocalSink, job: &RedriveJob) -> Result<Chosen, QueryError> {
    let selected = select(sink, &job.target)?;
    let mut items = Vec::with_capacity(selected.items.len());
    for (job_id, item_id) in &selected.items {
        let item = find_item(sink, item_id, Some(job_id))?;
        let seen = (job.generations.get(&format!("{job_id}/{item_id}")))
            .or_else(|| job.generations.get(item_id));
        let expected = seen.copied().unwrap_or_else(|| item.generation());
        items.push(RedriveItem { item, expected });
    }
    Ok(Chosen { items, selected })
}

impl Chosen {
    /// The answer of a dry run: how many items would be redriven, and which (in JSON).
    pub fn dry_run(&self) -> Removal {
        let items: Vec<_> = (self.items.iter())
            .map(|planned| {
                json!({
                    "job_id": planned.item.job_id,
                    "item_id": planned.item.item_id,
                    "generation": planned.expected,
                    "error_signature": planned.item.error_signature,
                })
            })
            .collect();
        let n = items.len();
        let removal = Removal {
            summary: json!({ "would_redrive": n, "items": items }),
            line: format!("would redrive {n} items"),
        };
        self.selected.answer(removal)
    }

    /// The answer of a redrive that ran: the report, whether its events were published, and
    /// the ids that were not found.
    pub fn answer(&self, report: &RedriveReport, published: Published) -> Removal {
        let mut summary = report.summary();
        summary["unpublished"] = json!(published.unpublished);
        summary["drained"] = json!(published.drained);
        let removal = Removal {
            summary,
            line: format!("{}\n{}", report.line(), published.describe()),
        };
        self.selected.answer(removal)
    }
}
