// Deleting from the page: one item, the selected rows, or every item matching the list's
// filter. Each delete first runs as a dry run (the API's `dry_run`), the page then asks to
// confirm with the count, and shows how many were deleted (`item_removed` events, reason
// `deleted`).
import { el, replace, note } from "./dom.js";
import { call } from "./api.js";

/** The body deleting these items ([{job_id, item_id}]); null when there are none. */
export function idsBody(items) {
  return items.length ? { ids: items.map((it) => `${it.job_id}/${it.item_id}`) } : null;
}

/** The body deleting what the list's filters select (every item when there is no filter). */
export function filterBody(f) {
  const body = {};
  for (const k of ["filter", "job_id", "error_type", "signature", "since", "until"]) {
    if (f[k]) body[k] = f[k];
  }
  if (f.eligible === "true") body.eligible = true;
  if (!Object.keys(body).length) body.all = true;
  // The fleet console's node filter: only that node's items.
  if (f.node) body.node = f.node;
  return body;
}

/** A "Delete" button and a result area; `body()` answers the request's body when asked.
 *  `after` runs once the items are deleted (a reload, a link back). */
export function deleteControls(label, id, body, { fail, after }) {
  const out = el("div", { id: id + "-result", class: "result" });
  const start = async () => {
    const request = body();
    if (!request) {
      replace(out, note("info", "Nothing selected."));
      return;
    }
    replace(out, note("info", "Counting (dry run)…"));
    let n;
    try {
      n = (await call("/v1/delete", { method: "POST", body: { ...request, dry_run: true } })).would_remove ?? 0;
    } catch (err) {
      replace(out, note("error", "Dry run refused: " + err.message));
      return;
    }
    if (!n) {
      replace(out, note("info", "No item would be deleted."));
      return;
    }
    const run = async () => {
      replace(out, note("info", `Deleting ${n} items…`));
      let r;
      try {
        r = await call("/v1/delete", { method: "POST", body: request });
      } catch (err) {
        fail(err);
        return;
      }
      replace(out, note("ok", el("span", { id: "delete-outcome" }, `${r.removed} items deleted`)),
        r.unknown ? note("info", "Not found: " + r.unknown.join(", ")) : null,
        after ? after() : null);
    };
    replace(out, el("div", { class: "confirm card", id: "delete-confirm" },
      el("p", { id: "confirm-text" }, `Delete ${n} items from the DLQ? Each is recorded as removed `,
        "(an item_removed event with reason deleted); this cannot be undone."),
      el("button", { type: "button", id: "confirm-delete", class: "danger", onclick: run }, `Delete ${n} items`), " ",
      el("button", { type: "button", id: "cancel-delete", class: "quiet", onclick: () => replace(out) }, "Cancel")));
    out.scrollIntoView({ block: "center" });
  };
  return el("div", { class: "delete-controls" },
    el("button", { type: "button", id, class: "danger", onclick: start }, label), out);
}

/** The delete panel of the items page. */
export function deletePanel({ filters, selected, fail }) {
  const reload = () => el("button", { type: "button", id: "reload-after-delete",
    onclick: () => window.dispatchEvent(new HashChangeEvent("hashchange")) }, "Reload");
  return el("div", { class: "card", id: "delete" },
    el("h2", {}, "Delete"),
    deleteControls("Delete selected", "delete-selected", () => idsBody(selected()), { fail, after: reload }),
    deleteControls("Delete all matching the filter", "delete-matching", () => filterBody(filters), { fail, after: reload }));
}
