// The audit view: who removed, retried, redrove or edited what, when and why (GET /v1/audit, built from
// the events that name an operator), newest first, a page at a time; an edit with its diff.
import { el, replace, table, text, note } from "./dom.js";
import { call, query } from "./api.js";

const PAGE = 50;

export async function audit(root, route) {
  const offset = Math.max(0, Number(route.params.get("offset")) || 0);
  const r = await call("/v1/audit" + query({ limit: PAGE, offset }));
  const rows = r.actions.map((a) => [
    el("span", { title: a.at }, new Date(a.at).toLocaleString()),
    el("span", { class: "audit-who" }, text(a.who)),
    a.edit ? el("span", {}, text(a.what), " ", el("code", { class: "audit-edit" },
      text(`${a.edit.item_id}: ${JSON.stringify(a.edit.previous)} → ${JSON.stringify(a.edit.patch)}`)))
      : text(a.what),
    text(a.job_id),
    el("span", { class: "num audit-items" }, String(a.items)),
    text(a.reason),
  ]);
  const link = (to, label) => el("a", { href: "#/audit" + query({ offset: to || "" }) }, label);
  replace(root, el("h1", {}, "Audit"),
    el("p", { class: "muted" }, "Clears, purges, deletes, retries, redrives and edits operators asked for, newest first: the API token's name, or local for a command run on the data directory."),
    rows.length
      ? table(["when", "who", "what", "job", "items", "reason"], rows, { id: "audit-table" })
      : note("info", "No operator action yet."),
    el("p", { class: "pager" },
      offset > 0 ? link(Math.max(0, offset - PAGE), "← newer") : null, " ",
      offset + PAGE < r.total ? link(offset + PAGE, "older →") : null));
  return null;
}
