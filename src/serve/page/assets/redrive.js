// Redriving from the page: one item (optionally with a JSON merge patch of its data), the
// selected rows, or every item matching the list's filter, handed back to the scheduler's
// redrive handler. A dry run counts first; the confirmation sends the generation of each item
// the dry run saw, so a second click or a second operator never redrives it twice. A canary
// (count) and a halt threshold let the first items go alone.
import { el, replace, note } from "./dom.js";
import { call } from "./api.js";
import { idsBody, filterBody } from "./delete.js";

/** Canary count and halt threshold inputs; `read()` answers the body fields they set. */
function canaryInputs(id) {
  const count = el("input", { id: id + "-canary", type: "number", min: "1", placeholder: "all at once", size: "6" });
  const halt = el("input", { id: id + "-halt", type: "number", min: "0", max: "1", step: "0.05", placeholder: "0.5", size: "5" });
  const read = () => {
    const body = {};
    if (count.value) body.canary = Number(count.value);
    if (halt.value) body.halt_above = Number(halt.value);
    return body;
  };
  const box = el("span", { class: "canary" },
    el("label", {}, "canary ", count), " ", el("label", {}, "halt above ", halt));
  return { box, read };
}

/** "N resolved, M failed again, …", and the canary's verdict. */
function outcome(r) {
  const parts = [`${r.redriven} redriven`, `${r.resolved} resolved`, `${r.failed_again} failed again`];
  if (r.already_redriven) parts.push(`${r.already_redriven} already redriven`);
  if (r.not_found) parts.push(`${r.not_found} not found`);
  const halted = r.halted
    ? note("error", el("span", { id: "redrive-halted" },
      `Canary halted on ${r.halted_by.join(", ")}: ${r.not_released} items not released.`))
    : null;
  return [note("ok", el("span", { id: "redrive-outcome" }, parts.join(", "))), halted];
}

/** A "Redrive" button with canary inputs (and a patch field when `patchable`) and a result
 *  area; `body()` answers the selection's body when asked. */
export function redriveControls(label, id, body, { fail, patchable }) {
  const out = el("div", { id: id + "-result", class: "result" });
  const canary = canaryInputs(id);
  const patch = patchable
    ? el("textarea", { id: id + "-patch", rows: "3", cols: "50", placeholder: 'optional JSON merge patch of the data, e.g. {"url": "https://new"}' })
    : null;
  const start = async () => {
    const selection = body();
    if (!selection) {
      replace(out, note("info", "Nothing selected."));
      return;
    }
    const request = { ...selection, ...canary.read() };
    if (patch && patch.value.trim()) {
      try {
        request.patch = JSON.parse(patch.value);
      } catch (err) {
        replace(out, note("error", "The patch is not JSON: " + err.message));
        return;
      }
    }
    replace(out, note("info", "Counting (dry run)…"));
    let dry;
    try {
      dry = await call("/v1/redrive", { method: "POST", body: { ...request, dry_run: true } });
    } catch (err) {
      replace(out, note("error", "Redrive refused: " + err.message));
      return;
    }
    const n = dry.would_redrive ?? 0;
    if (!n) {
      replace(out, note("info", "No item would be redriven."));
      return;
    }
    // The generations the dry run saw: only those are redriven.
    const generations = {};
    for (const it of dry.items || []) generations[`${it.job_id}/${it.item_id}`] = it.generation;
    const run = async () => {
      replace(out, note("info", `Redriving ${n} items…`));
      let r;
      try {
        r = await call("/v1/redrive", { method: "POST", body: { ...request, generations } });
      } catch (err) {
        fail(err);
        return;
      }
      replace(out, ...outcome(r));
    };
    replace(out, el("div", { class: "confirm card", id: "redrive-confirm" },
      el("p", { id: "redrive-confirm-text" }, `Redrive ${n} items to the scheduler's handler?`,
        request.canary ? ` The first ${request.canary} go alone; the rest only if they pass.` : "",
        request.patch ? " The patch is applied to the item's data first (recorded with you as its author)." : ""),
      el("button", { type: "button", id: "confirm-redrive", onclick: run }, `Redrive ${n} items`), " ",
      el("button", { type: "button", id: "cancel-redrive", class: "quiet", onclick: () => replace(out) }, "Cancel")));
    out.scrollIntoView({ block: "center" });
  };
  return el("div", { class: "redrive-controls" },
    patch, patch ? el("br") : null, canary.box, " ",
    el("button", { type: "button", id, onclick: start }, label), out);
}

/** The redrive panel of the items page. */
export function redrivePanel({ filters, selected, fail }) {
  return el("div", { class: "card", id: "redrive" },
    el("h2", {}, "Redrive"),
    el("p", { class: "muted" }, "Hand items back to the scheduler that failed them, oldest failure first."),
    redriveControls("Redrive selected", "redrive-selected", () => idsBody(selected()), { fail }),
    redriveControls("Redrive all matching", "redrive-matching", () => filterBody(filters), { fail }));
}

/** The redrive section of an item's page. */
export function redriveItem(item, fail) {
  const state = item.redrive
    ? el("p", { id: "redrive-state" }, `Generation ${item.redrive.generation}: ${item.redrive.state.replace("_", " ")}`,
      item.redrive.error ? ` (${item.redrive.error})` : "")
    : null;
  return el("section", { class: "card" }, el("h2", {}, "Redrive this item"), state,
    redriveControls("Redrive…", "redrive-one", () => idsBody([item]), { fail, patchable: true }));
}
