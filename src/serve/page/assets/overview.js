// Overview: items by job, by error type and by signature, failures per hour, the backlog of
// events the bus has not acknowledged, and the bus connection. Refreshes itself.
import { el, replace, table, age, note, pageLink, text } from "./dom.js";
import { call } from "./api.js";
import { isConsole, consoleOverview } from "./console.js";

/** How often the overview and the item list refresh themselves. */
export const REFRESH_MS = 3000;
const TOP_JOBS = 10;
// Whether "show all" was clicked: kept over the refreshes, which redraw the tables.
let allJobs = false;
const SVG = "http://www.w3.org/2000/svg";

export async function overview(root, _route, { fail }) {
  // Served by a fleet console: its nodes, lag and waiting events instead.
  if (await isConsole()) return consoleOverview(root, REFRESH_MS, { fail });
  const body = el("div", { id: "overview" });
  const stamp = el("span", { class: "muted", id: "refreshed" });
  replace(root, el("h1", {}, "Overview ", stamp), body);
  let stopped = false;
  const refresh = async () => {
    const [health, stats, analysis] = await Promise.all([
      call("/healthz"), call("/v1/stats"), call("/v1/analyze"),
    ]);
    if (stopped) return;
    replace(body, render(health, stats, analysis));
    stamp.textContent = "refreshed " + new Date().toLocaleTimeString();
  };
  await refresh();
  const timer = setInterval(() => refresh().catch((err) => { clearInterval(timer); fail(err); }), REFRESH_MS);
  return () => { stopped = true; clearInterval(timer); };
}

function render(health, stats, analysis) {
  const bus = health.bus || "unknown";
  const cards = el("div", { class: "cards" },
    card("Items in the DLQ", fmt(stats.total_items), "items-total"),
    card("Bus", bus, "bus-state", bus === "connected" ? "ok" : "bad"),
    card("Unpublished events", fmt(health.unpublished), "backlog",
      health.unpublished > 0 ? "warn" : "ok",
      health.oldest_unpublished ? `oldest ${age(health.oldest_unpublished)} ago` : "none waiting"),
    card("Parked events", fmt(health.parked), "parked", health.parked > 0 ? "warn" : "ok"));
  // Most items first, then by name with numbers compared as numbers (bench-2 before bench-10);
  // the first TOP_JOBS rows, the rest behind a button.
  const jobs = Object.entries(stats.jobs || {})
    .sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0], undefined, { numeric: true }));
  const types = Object.entries(stats.by_error_type || {}).sort((a, b) => b[1] - a[1]);
  const groups = analysis.pattern_groups || [];
  return [
    cards,
    el("section", {}, el("h2", {}, "Failures per hour (last 24 h)"), chart(analysis.temporal_distribution || [])),
    el("div", { class: "columns" },
      el("section", {}, el("h2", {}, "By job (now in the DLQ)"),
        jobs.length ? byJob(jobs) : note("ok", "The DLQ is empty.")),
      el("section", {}, el("h2", {}, "By error type"),
        types.length ? table(["error type", "items"], types.map(([t, n]) => [t, num(n)]), { id: "by-type" }) : none())),
    el("section", {}, el("h2", {}, "By error signature"),
      groups.length ? table(["signature", "pattern", "type", "items", "remediation"], groups.map((g) => [
        el("a", { href: "#/items?signature=" + encodeURIComponent(g.error_signature), class: "mono" }, g.error_signature),
        el("code", {}, text(g.error_pattern)), g.error_type, num(g.count), text(g.remediation),
      ]), { id: "by-signature" }) : none()),
  ];
}

/** The by-job table: the first TOP_JOBS jobs, and a button that shows the others. */
function byJob(jobs) {
  const rows = (list) => list.map(([job, n]) => [
    pageLink(["items"], job, { href: "#/items?job_id=" + encodeURIComponent(job) }), num(n),
  ]);
  if (allJobs || jobs.length <= TOP_JOBS) return table(["job", "items"], rows(jobs), { id: "by-job" });
  const more = el("button", { type: "button", id: "by-job-all", class: "quiet" },
    `show all ${fmt(jobs.length)} jobs`);
  const box = el("div", {}, table(["job", "items"], rows(jobs.slice(0, TOP_JOBS)), { id: "by-job" }), more);
  more.addEventListener("click", () => {
    allJobs = true;
    replace(box, table(["job", "items"], rows(jobs), { id: "by-job" }));
  });
  return box;
}

function none() {
  return el("p", { class: "muted" }, "None.");
}

function card(title, value, id, kind, detail) {
  return el("div", { class: `card stat ${kind || ""}` },
    el("div", { class: "muted" }, title),
    el("div", { class: "big", id }, value),
    detail ? el("div", { class: "muted", id: id + "-detail" }, detail) : null);
}

function num(n) {
  return el("span", { class: "num" }, fmt(n));
}

/** A count with thousands separators (12,345). */
function fmt(n) {
  return typeof n === "number" ? n.toLocaleString("en-US") : String(n);
}

/** Bars of the last 24 hours (hours without failures are 0), drawn as SVG elements. */
function chart(hours) {
  const now = Math.floor(Date.now() / 3600000);
  const counts = new Map(hours.map((h) => [Math.floor(Date.parse(h.hour) / 3600000), h.failures]));
  const bars = [];
  for (let h = now - 23; h <= now; h++) bars.push([h, counts.get(h) || 0]);
  const max = Math.max(1, ...bars.map(([, n]) => n));
  const width = 720, height = 160, pad = 24, barW = (width - pad) / bars.length;
  const svg = svgEl("svg", { viewBox: `0 0 ${width} ${height + 20}`, class: "chart", id: "hourly-chart", role: "img" });
  svg.appendChild(svgEl("title", {}, `failures per hour, at most ${max}`));
  svg.appendChild(svgEl("text", { x: 0, y: 12, class: "axis" }, String(max)));
  svg.appendChild(svgEl("line", { x1: pad, y1: height, x2: width, y2: height, class: "base" }));
  bars.forEach(([h, n], i) => {
    const barH = Math.round((n / max) * (height - 20));
    const x = pad + i * barW + 2;
    const rect = svgEl("rect", { x, y: height - barH, width: barW - 4, height: barH, class: "bar" });
    rect.appendChild(svgEl("title", {}, `${new Date(h * 3600000).toISOString().slice(0, 13)}:00Z: ${n} failures`));
    svg.appendChild(rect);
    if (i % 4 === 3) {
      const label = new Date(h * 3600000).toISOString().slice(11, 13) + "h";
      svg.appendChild(svgEl("text", { x: x, y: height + 16, class: "axis" }, label));
    }
  });
  return svg;
}

function svgEl(tag, attrs, content) {
  const node = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  if (content !== undefined) node.textContent = content;
  return node;
}
