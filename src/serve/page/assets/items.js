// Items: the `dlq list` table with the CEL filter, the flag filters, paging, row checkboxes,
// and the actions on the filtered set (retry or delete selected / all matching, export). The list
// refreshes itself as the overview does.
import { el, replace, note, pageLink, age } from "./dom.js";
import { call, query, ApiError, may } from "./api.js";
import { retryPanel } from "./retry.js";
import { deletePanel } from "./delete.js";
import { redrivePanel } from "./redrive.js";
import { REFRESH_MS } from "./overview.js";
import { isConsole } from "./console.js";

/** The list parameters a page of items is fetched with (the rest of the hash's parameters). */
export const FILTER_KEYS = ["filter", "job_id", "error_type", "signature", "eligible", "since", "until", "node"];
const TYPES = ["Timeout", "CommandFailed", "ValidationFailed", "WorktreeError", "MergeConflict",
  "ResourceExhausted", "PermissionError", "Unknown"];
/** Cursors of the pages before the current one, for "previous page". */
let history = [];

export async function items(root, route, { fail }) {
  const p = route.params;
  const filters = Object.fromEntries(FILTER_KEYS.map((k) => [k, p.get(k) || ""]));
  const limit = p.get("limit") || "50";
  const after = p.get("after") || "";
  if (!after) history = [];
  const stats = await call("/v1/stats");
  const jobs = Object.keys(stats.jobs || {});
  // A fleet console lists every node's items: a node column and a node filter.
  const fleet = await isConsole();
  const nodes = fleet ? (await call("/v1/console")).nodes.map((n) => n.node) : null;

  const form = filterForm(filters, limit, jobs, nodes);
  const status = el("div", { id: "list-status" });
  const tableBox = el("div", { id: "items-box" });
  const actionBox = el("div", { id: "item-actions" });
  replace(root, el("h1", {}, "Items"), form, status, tableBox, actionBox);

  let page;
  try {
    page = await call("/v1/items" + query({ ...filters, limit, after }));
  } catch (err) {
    if (err instanceof ApiError && err.status === 400) {
      const at = document.getElementById("filter-error");
      at.textContent = err.message;
      at.hidden = false;
      replace(tableBox, note("info", "Fix the filter to see items."));
      return null;
    }
    throw err;
  }
  // The rows' checkboxes, refilled by each redraw; `selected` reads the current ones.
  const boxes = [];
  const draw = (page) => {
    const checked = new Set(boxes.filter((b) => b.checked).map(rowKey));
    boxes.length = 0;
    replace(status, el("p", { id: "matched" },
      page.matched === null ? "" : `${page.matched} matching`,
      page.items.length ? ` · showing ${page.items.length}` : ""));
    replace(tableBox, itemsTable(page.items, boxes, checked, fleet),
      pager(filters, limit, after, page.next_cursor));
  };
  draw(page);

  const selected = () => boxes.filter((b) => b.checked).map((b) => ({ job_id: b.dataset.job, item_id: b.dataset.item }));
  const operator = may("operator");
  // A console deletes and redrives through the nodes; retry and export are a node's own.
  replace(actionBox, operator && !fleet ? retryPanel({ filters, jobs, selected, matched: page.matched, fail }) : null,
    operator ? redrivePanel({ filters, selected, fail }) : null,
    operator ? deletePanel({ filters, selected, fail }) : null, fleet ? null : exportPanel(filters, fail));

  // Refresh the same page of the same filter, keeping the scroll position and the checked
  // rows; not while the operator is editing the filters (their text stays as typed).
  let stopped = false;
  const refresh = async () => {
    if (form.contains(document.activeElement) && document.activeElement.matches("input, select")) return;
    const next = await call("/v1/items" + query({ ...filters, limit, after }));
    if (stopped) return;
    const [x, y] = [window.scrollX, window.scrollY];
    draw(next);
    window.scrollTo(x, y);
  };
  const timer = setInterval(() => refresh().catch((err) => { clearInterval(timer); fail(err); }), REFRESH_MS);
  return () => { stopped = true; clearInterval(timer); };
}

/** A row's identity, to keep its checkbox over a refresh. */
function rowKey(box) {
  return JSON.stringify([box.dataset.job, box.dataset.item]);
}

/** The table of one page of items (a note when there are none); fills `boxes`. */
function itemsTable(items, boxes, checked, fleet) {
  if (!items.length) return note("ok", "No item matches.", " ");
  const rows = items.map((it) => {
    const box = el("input", { type: "checkbox", class: "row-check", "aria-label": "select " + it.item_id });
    box.dataset.job = it.job_id;
    box.dataset.item = it.item_id;
    box.checked = checked.has(rowKey(box));
    boxes.push(box);
    return el("tr", {},
      el("td", {}, box),
      fleet ? el("td", { class: "node" }, it.node) : null,
      el("td", {}, it.job_id),
      el("td", {}, pageLink(["item", it.job_id, it.item_id], it.item_id, { class: "item-link" })),
      el("td", {}, it.error_type),
      el("td", { class: "num" }, String(it.failure_count)),
      el("td", { title: it.last_attempt }, age(it.last_attempt) + " ago"),
      el("td", {}, it.reprocess_eligible ? "yes" : "no"),
      el("td", { class: "message" }, it.last_error));
  });
  const all = el("input", { type: "checkbox", id: "select-all", "aria-label": "select all on this page" });
  all.addEventListener("change", () => boxes.forEach((b) => { b.checked = all.checked; }));
  return el("table", { id: "items-table" },
    el("thead", {}, el("tr", {}, el("th", {}, all), fleet ? el("th", {}, "node") : null, ["job", "item", "error type", "failures",
      "last failure", "eligible", "last error"].map((h) => el("th", {}, h)))),
    el("tbody", {}, rows));
}

function filterForm(f, limit, jobs, nodes) {
  const input = (id, name, value, attrs) => el("input", Object.assign({ id, name, value }, attrs || {}));
  const select = (id, name, value, options) => el("select", { id, name },
    el("option", { value: "" }, "any"),
    options.map((o) => el("option", { value: o, selected: o === value }, o)));
  const form = el("form", { id: "filters", class: "card" },
    el("div", { class: "row" },
      el("label", { for: "filter" }, "CEL filter"),
      input("filter", "filter", f.filter, { size: 60, class: "mono", spellcheck: "false",
        placeholder: 'error_type == "Timeout" && item.priority >= 2' }),
      el("span", { id: "filter-error", class: "field-error", role: "alert", hidden: true })),
    el("div", { class: "row" },
      nodes ? el("label", {}, "node ", select("node", "node", f.node, nodes)) : null,
      el("label", {}, "job ", select("job_id", "job_id", f.job_id, jobs)),
      el("label", {}, "error type ", select("error_type", "error_type", f.error_type, TYPES)),
      el("label", {}, "signature ", input("signature", "signature", f.signature, { size: 17, class: "mono" })),
      el("label", {}, "since ", input("since", "since", f.since, { size: 12, placeholder: "2h or RFC 3339" })),
      el("label", {}, "until ", input("until", "until", f.until, { size: 12 })),
      el("label", {}, el("input", { type: "checkbox", id: "eligible", name: "eligible", checked: f.eligible === "true" }), " eligible only"),
      el("label", {}, "per page ", select("limit", "limit", limit, ["20", "50", "100", "500"])),
      el("button", { type: "submit", id: "apply-filter" }, "Apply"),
      el("button", { type: "button", id: "reset-filter", class: "quiet", onclick: () => { location.hash = "#/items"; } }, "Reset")));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    const values = {};
    for (const k of FILTER_KEYS) {
      const field = form.elements.namedItem(k);
      if (!field) continue;
      values[k] = k === "eligible" ? (field.checked ? "true" : "") : field.value.trim();
    }
    values.limit = form.elements.namedItem("limit").value;
    location.hash = "#/items" + query(values);
  });
  return form;
}

function pager(filters, limit, after, next) {
  const go = (cursor) => { location.hash = "#/items" + query({ ...filters, limit, after: cursor }); };
  return el("div", { class: "pager" },
    el("button", { type: "button", id: "prev-page", disabled: !after,
      onclick: () => go(history.pop() || "") }, "← Previous"), " ",
    el("button", { type: "button", id: "next-page", disabled: !next,
      onclick: () => { history.push(after); go(next); } }, "Next →"));
}

/** Downloads the whole filtered set (up to 100,000 items) as JSON or CSV. */
function exportPanel(filters, fail) {
  const download = async (format) => {
    try {
      const body = await call("/v1/items" + query({ ...filters, limit: 100000, format }), { raw: true });
      const type = format === "csv" ? "text/csv" : "application/json";
      const url = URL.createObjectURL(new Blob([body], { type }));
      const a = el("a", { href: url, download: `dlq-items.${format}` });
      document.body.appendChild(a);
      a.click();
      a.remove();
      setTimeout(() => URL.revokeObjectURL(url), 10000);
    } catch (err) {
      fail(err);
    }
  };
  return el("div", { class: "card", id: "export" },
    el("h2", {}, "Export the filtered set"),
    el("button", { type: "button", id: "export-json", onclick: () => download("json") }, "Download JSON"), " ",
    el("button", { type: "button", id: "export-csv", onclick: () => download("csv") }, "Download CSV"),
    el("p", { class: "muted" }, "Every matching item, up to 100,000 (the API's page limit)."));
}
