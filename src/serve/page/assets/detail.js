// One item: its data, every failure in full, its worktree artifacts and its job events.
import { el, replace, table, text, note } from "./dom.js";
import { call, may } from "./api.js";
import { planFor, retryControls } from "./retry.js";
import { deleteControls, idsBody } from "./delete.js";
import { redriveItem } from "./redrive.js";
import { isConsole } from "./console.js";

export async function detail(root, route, { fail }) {
  const [job, id] = route.parts;
  if (!job || !id) {
    replace(root, note("error", "Which item? Open one from the items page."));
    return null;
  }
  const base = `/v1/items/${encodeURIComponent(job)}/${encodeURIComponent(id)}`;
  // A console holds no job events (they are the node's own) and retries nothing.
  const fleet = await isConsole();
  const [item, events] = await Promise.all([call(base), fleet ? { events: [] } :
    call(base + "/events").catch((err) => ({ events: [], error: err.message }))]);
  const facts = [
    ["job", item.job_id], ["item", item.item_id], ["failures", String(item.failure_count)],
    ["first failure", item.first_attempt], ["last failure", item.last_attempt],
    ["error signature", item.error_signature], ["error pattern", item.error_pattern],
    ["eligible for retry", item.reprocess_eligible ? "yes" : "no"],
    ["manual review", item.manual_review_required ? "required" : "no"],
  ];
  if (fleet) facts.unshift(["node", item.node]);
  const operator = may("operator");
  replace(root,
    el("p", {}, el("a", { href: "#/items?job_id=" + encodeURIComponent(item.job_id) }, "← items of this job")),
    el("h1", { id: "item-title" }, "Item ", el("span", { class: "mono" }, item.item_id)),
    el("dl", { class: "facts", id: "item-facts" }, facts.map(([k, v]) => [el("dt", {}, k), el("dd", {}, text(v))])),
    operator && !fleet && el("section", { class: "card" }, el("h2", {}, "Retry this item"),
      retryControls("Retry", "retry-one", () => planFor([{ job_id: item.job_id, item_id: item.item_id }]), { fail })),
    operator && redriveItem(item, fail),
    operator && el("section", { class: "card" }, el("h2", {}, "Delete this item"),
      deleteControls("Delete…", "delete-one", () => idsBody([item]), { fail,
        after: () => el("a", { id: "back-after-delete", href: "#/items?job_id=" + encodeURIComponent(item.job_id) }, "← items of this job") })),
    el("section", {}, el("h2", {}, "Data"),
      el("pre", { id: "item-data", class: "code" }, JSON.stringify(item.item_data, null, 2))),
    el("section", { id: "failures" }, el("h2", {}, `Failures (${item.failure_history.length})`),
      item.failure_history.map(failure)),
    el("section", {}, el("h2", {}, "Worktree artifacts"), artifacts(item.worktree_artifacts)),
    el("section", {}, el("h2", {}, "Event history"),
      fleet ? note("info", `Job events are on the page of node ${item.node}.`)
        : events.error ? note("error", "Cannot read the item's job events: " + events.error) : history(events.events)));
  return null;
}

function failure(f) {
  const rows = [
    ["when", f.timestamp], ["error type", errorType(f.error_type)], ["step", f.step_failed],
    ["agent", f.agent_id], ["duration", `${f.duration_ms} ms`],
    ["JSON log", f.json_log_location || "none"],
  ];
  return el("article", { class: "card failure" },
    el("h3", {}, `Attempt ${f.attempt_number}`),
    el("dl", { class: "facts" }, rows.map(([k, v]) => [el("dt", {}, k), el("dd", {}, text(v))])),
    el("h4", {}, "Message"), el("pre", { class: "code message-full" }, f.error_message),
    f.stack_trace ? [el("h4", {}, "Stack trace"), el("pre", { class: "code" }, f.stack_trace)] : null);
}

/** "CommandFailed (exit_code 1)" for {"CommandFailed": {"exit_code": 1}}. */
function errorType(t) {
  if (!t || typeof t !== "object") return text(t);
  return Object.entries(t).map(([name, fields]) => fields && typeof fields === "object"
    ? `${name} (${Object.entries(fields).map(([k, v]) => `${k} ${text(v)}`).join(", ")})`
    : name).join(", ");
}

function artifacts(a) {
  if (!a) return el("p", { class: "muted" }, "None recorded.");
  return el("dl", { class: "facts", id: "artifacts" },
    Object.entries(a).map(([k, v]) => [el("dt", {}, k), el("dd", { class: "mono" }, text(v))]));
}

function history(events) {
  if (!events.length) return el("p", { class: "muted" }, "No job events for this item (emitted outside a dlq job).");
  return table(["time", "event", "details"], events.map((e) => {
    const { at, event, ...details } = e;
    return [at, event, el("code", {}, JSON.stringify(details))];
  }), { id: "item-events" });
}
