// Retrying from the page: one item, the selected rows, or every item matching the filter.
// Each retry first runs as a dry run (the API's `dry_run`), the page then asks to confirm
// with the count and the rate limit, and shows how many resolved, failed again, were skipped.
import { el, replace, note } from "./dom.js";
import { call } from "./api.js";

/** A CEL string literal (JSON's escapes are CEL's). */
const lit = (s) => JSON.stringify(String(s));

/** An absolute RFC 3339 time for a `since`/`until` value: "2h" ago, or a date/time. */
function instant(value) {
  const m = /^(\d+)\s*([smhd])$/.exec(value.trim());
  if (m) {
    const unit = { s: 1, m: 60, h: 3600, d: 86400 }[m[2]];
    return new Date(Date.now() - Number(m[1]) * unit * 1000).toISOString();
  }
  const t = Date.parse(value);
  if (Number.isNaN(t)) throw new Error(`cannot read the time '${value}' for a retry: use 2h or an RFC 3339 time`);
  return new Date(t).toISOString();
}

/** The CEL expression selecting what the list's filters select (the job is the retry's path). */
export function celOf(f) {
  const parts = [];
  if (f.filter) parts.push(`(${f.filter})`);
  if (f.error_type) parts.push(`error_type == ${lit(f.error_type)}`);
  if (f.signature) parts.push(`error_signature == ${lit(f.signature)}`);
  if (f.eligible === "true") parts.push("reprocess_eligible");
  if (f.since) parts.push(`last_attempt >= timestamp(${lit(instant(f.since))})`);
  if (f.until) parts.push(`last_attempt < timestamp(${lit(instant(f.until))})`);
  return parts.join(" && ");
}

/** The retry of `items` ([{job_id, item_id}]): one request per job. */
export function planFor(items) {
  const byJob = new Map();
  for (const it of items) {
    if (!byJob.has(it.job_id)) byJob.set(it.job_id, []);
    byJob.get(it.job_id).push(it.item_id);
  }
  return [...byJob].map(([job, ids]) => ({ job, filter: `item_id in [${ids.map(lit).join(", ")}]` }));
}

/** The options row and a result area; `plan()` answers [{job, filter}] when asked. */
export function retryControls(label, id, plan, { fail }) {
  const rate = el("input", { type: "number", id: id + "-rate", min: "0.1", step: "0.1", value: "10", size: 5 });
  const force = el("input", { type: "checkbox", id: id + "-force" });
  const out = el("div", { id: id + "-result", class: "result" });
  const start = async () => {
    let steps;
    try {
      steps = plan();
    } catch (err) {
      replace(out, note("error", err.message));
      return;
    }
    if (!steps.length) {
      replace(out, note("info", "Nothing selected."));
      return;
    }
    const options = { force: force.checked, rate: Number(rate.value) || undefined };
    replace(out, note("info", "Counting (dry run)…"));
    try {
      const counted = [];
      for (const step of steps) {
        const r = await call(`/v1/jobs/${encodeURIComponent(step.job)}/retry`, { method: "POST",
          body: { filter: step.filter || undefined, dry_run: true, force: options.force } });
        counted.push({ ...step, report: r });
      }
      replace(out, confirmBox(counted, options, out, fail));
      out.scrollIntoView({ block: "center" });
    } catch (err) {
      replace(out, note("error", "Dry run refused: " + err.message));
    }
  };
  return el("div", { class: "retry-controls" },
    el("button", { type: "button", id, onclick: start }, label), " ",
    el("label", {}, "rate limit ", rate, " items/s"), " ",
    el("label", {}, force, " also items not marked eligible"),
    out);
}

function confirmBox(counted, options, out, fail) {
  const total = counted.reduce((n, c) => n + c.report.selected, 0);
  const ineligible = counted.reduce((n, c) => n + c.report.skipped_ineligible, 0);
  const jobs = counted.filter((c) => c.report.selected > 0).map((c) => `${c.job}: ${c.report.selected}`).join(", ");
  if (total === 0) {
    return note("info", `No item would be retried (${ineligible} not eligible left out).`);
  }
  const run = async () => {
    replace(out, note("info", `Retrying ${total} items…`));
    const sum = { resolved: 0, failed_again: 0, skipped: 0 };
    try {
      for (const c of counted.filter((c) => c.report.selected > 0)) {
        const r = await call(`/v1/jobs/${encodeURIComponent(c.job)}/retry`, { method: "POST",
          body: { filter: c.filter || undefined, force: options.force, rate: options.rate } });
        sum.resolved += r.resolved;
        sum.failed_again += r.failed_again;
        sum.skipped += r.not_started + r.skipped_busy + r.skipped_ineligible + r.not_recorded;
      }
    } catch (err) {
      fail(err);
      return;
    }
    replace(out, note(sum.failed_again ? "error" : "ok", el("span", { id: "retry-outcome" },
      `${sum.resolved} resolved, ${sum.failed_again} failed again, ${sum.skipped} skipped`)),
    el("button", { type: "button", id: "reload", onclick: () => window.dispatchEvent(new HashChangeEvent("hashchange")) }, "Reload"));
    out.scrollIntoView({ block: "center" });
  };
  const rate = options.rate ? `at most ${options.rate} items/s` : "without a rate limit";
  return el("div", { class: "confirm card", id: "retry-confirm" },
    el("p", { id: "confirm-text" }, `Retry ${total} items (${jobs}) ${rate}? `,
      ineligible ? `${ineligible} not eligible are left out.` : ""),
    el("button", { type: "button", id: "confirm-retry", class: "danger", onclick: run }, `Retry ${total} items`), " ",
    el("button", { type: "button", id: "cancel-retry", class: "quiet", onclick: () => replace(out) }, "Cancel"));
}

/** The retry panel of the items page. */
export function retryPanel({ filters, jobs, selected, fail }) {
  const allMatching = () => {
    const cel = celOf(filters);
    return (filters.job_id ? [filters.job_id] : jobs).map((job) => ({ job, filter: cel }));
  };
  return el("div", { class: "card", id: "retry" },
    el("h2", {}, "Retry"),
    retryControls("Retry selected", "retry-selected", () => planFor(selected()), { fail }),
    retryControls("Retry all matching the filter", "retry-matching", allMatching, { fail }));
}
