// Actions on whole jobs and on age: clear a job, purge items older than N days. Both count
// first and ask to confirm with that count.
import { el, replace, note } from "./dom.js";
import { call, may } from "./api.js";

export async function actions(root, _route, { fail }) {
  const stats = await call("/v1/stats");
  const jobs = Object.entries(stats.jobs || {});
  const out = el("div", { id: "action-result", class: "result" });
  const job = el("select", { id: "clear-job" }, jobs.map(([j, n]) => el("option", { value: j }, `${j} (${n} items)`)));
  const days = el("input", { type: "number", id: "purge-days", min: "0", value: "30", size: 5 });
  const purgeJob = el("select", { id: "purge-job" }, el("option", { value: "" }, "every job"),
    jobs.map(([j]) => el("option", { value: j }, j)));

  const confirm = (text, label, run) => replace(out, el("div", { class: "confirm card" },
    el("p", { id: "confirm-text" }, text),
    el("button", { type: "button", id: "confirm-action", class: "danger", onclick: run }, label), " ",
    el("button", { type: "button", class: "quiet", onclick: () => replace(out) }, "Cancel")));
  const done = (r) => replace(out, note("ok", el("span", { id: "action-outcome" }, summary(r))),
    el("pre", { class: "code" }, JSON.stringify(r, null, 2)));

  const clear = () => {
    const j = job.value;
    const n = (stats.jobs || {})[j];
    if (!j) return;
    confirm(`Remove all ${n} items of job ${j} from the DLQ? They are recorded as removed (item_removed events).`,
      `Clear ${n} items`, async () => {
        try { done(await call(`/v1/jobs/${encodeURIComponent(j)}/clear`, { method: "POST" })); } catch (err) { fail(err); }
      });
  };
  const purge = async () => {
    const body = { older_than_days: Number(days.value), job_id: purgeJob.value || undefined };
    try {
      const counted = await call("/v1/purge", { method: "POST", body: { ...body, dry_run: true } });
      const n = counted.would_remove ?? 0;
      if (!n) { replace(out, note("info", `No item is older than ${body.older_than_days} days.`)); return; }
      confirm(`Purge ${n} items first failed more than ${body.older_than_days} days ago${body.job_id ? " in job " + body.job_id : ""}?`,
        `Purge ${n} items`, async () => {
          try { done(await call("/v1/purge", { method: "POST", body })); } catch (err) { fail(err); }
        });
    } catch (err) {
      replace(out, note("error", err.message));
    }
  };
  if (!may("admin")) {
    replace(root, el("h1", {}, "Actions"),
      note("info", el("span", { id: "actions-need-admin" }, "Clearing a job and purging old items need the admin role.")));
    return null;
  }
  replace(root, el("h1", {}, "Actions"),
    el("p", { class: "muted" }, "Retries act on items: use the items page (selected rows or everything matching a filter) or an item's page."),
    el("section", { class: "card" }, el("h2", {}, "Clear a job"),
      jobs.length ? [job, " ", el("button", { type: "button", id: "clear-start", onclick: clear }, "Clear…")] : note("ok", "No job has items.")),
    el("section", { class: "card" }, el("h2", {}, "Purge old items"),
      el("label", {}, "older than ", days, " days"), " ", el("label", {}, "in ", purgeJob), " ",
      el("button", { type: "button", id: "purge-start", onclick: purge }, "Count and purge…")),
    out);
  return null;
}

function summary(r) {
  const removed = r.removed ?? r.would_remove;
  return removed === undefined ? "Done." : `${removed} items removed.`;
}
