// The fleet console (`dlq console`): the page knows it is served by a console from
// GET /v1/whoami ("console": true). Its overview shows every node (items, events waiting behind
// a gap, up or down on its control subject), the consumer's lag and waiting events; the list
// shows a node column and a node filter (items.js).
import { el, replace, table, note } from "./dom.js";
import { call, whoami } from "./api.js";

/** Whether the page is served by a fleet console; there, hides the views of a node's own
 *  (actions: clear and purge; the audit), which a console does not serve. */
export async function isConsole() {
  const fleet = !!(await whoami()).console;
  if (fleet) {
    for (const id of ["nav-actions", "nav-audit"]) {
      const link = document.getElementById(id);
      if (link) link.hidden = true;
    }
  }
  return fleet;
}

/** The console's overview, refreshed every `every` ms. */
export async function consoleOverview(root, every, { fail }) {
  const body = el("div", { id: "console-overview" });
  const stamp = el("span", { class: "muted", id: "refreshed" });
  replace(root, el("h1", {}, "Fleet ", stamp), body);
  let stopped = false;
  const refresh = async () => {
    const overview = await call("/v1/console");
    if (stopped) return;
    replace(body, render(overview));
    stamp.textContent = "refreshed " + new Date().toLocaleTimeString();
  };
  await refresh();
  const timer = setInterval(() => refresh().catch((err) => { clearInterval(timer); fail(err); }), every);
  return () => { stopped = true; clearInterval(timer); };
}

function render(o) {
  const consumer = o.consumer || {};
  const down = o.nodes.filter((n) => !n.up).length;
  const cards = el("div", { class: "cards" },
    card("Items, every node", o.items, "items-total"),
    card("Nodes", `${o.nodes.length - down} up, ${down} down`, "nodes-state", down ? "bad" : "ok"),
    card("Consumer lag (messages)", o.lag, "lag", o.lag > 0 ? "warn" : "ok"),
    card("Waiting events", o.waiting, "waiting", o.waiting > 0 ? "warn" : "ok"));
  return [
    cards,
    consumer.error ? note("error", "The console's consumer stopped: " + consumer.error + " (it starts again)") : null,
    el("section", {}, el("h2", {}, "Nodes"),
      o.nodes.length ? table(["node", "state", "items", "waiting", "control subject"], o.nodes.map((n) => [
        el("a", { href: "#/items?node=" + encodeURIComponent(n.node) }, n.node),
        el("span", { class: n.up ? "ok node-state" : "bad node-state", "data-node": n.node }, n.up ? "up" : "down"),
        String(n.items), String(n.waiting), el("code", {}, n.subject),
      ]), { id: "nodes" }) : note("info", "No node has published to the stream yet.")),
  ];
}

function card(title, value, id, kind) {
  return el("div", { class: `card stat ${kind || ""}` },
    el("div", { class: "muted" }, title),
    el("div", { class: "big", id }, String(value)));
}
