// The page's entry: hash routing, the token form and the navigation.
import { el, replace, note } from "./dom.js";
import { ApiError, setToken, token, whoami } from "./api.js";
import { overview } from "./overview.js";
import { items } from "./items.js";
import { detail } from "./detail.js";
import { actions } from "./actions.js";
import { audit } from "./audit.js";

const main = () => document.getElementById("main");
let cleanup = null;

/** The current route: a name, path parts and the query parameters after "?". */
function route() {
  const hash = location.hash.replace(/^#\/?/, "");
  const [path, q] = hash.split("?", 2);
  const parts = path.split("/").filter(Boolean).map(decodeURIComponent);
  return { name: parts[0] || "overview", parts: parts.slice(1), params: new URLSearchParams(q || "") };
}

const views = { overview, items, item: detail, actions, audit };

async function show() {
  if (cleanup) cleanup();
  cleanup = null;
  // Nothing to forget without a token.
  document.getElementById("forget-token").hidden = !token();
  const r = route();
  for (const link of document.querySelectorAll("nav a")) {
    link.classList.toggle("current", link.dataset.view === r.name || (r.name === "item" && link.dataset.view === "items"));
  }
  const view = views[r.name];
  const root = main();
  if (!view) {
    replace(root, note("error", "No such page. "), el("a", { href: "#/overview" }, "Go to the overview"));
    return;
  }
  try {
    // The role decides which buttons the views show.
    const me = await whoami();
    replace(document.getElementById("whoami"), el("span", { id: "whoami-name" }, me.name), " · ",
      el("span", { id: "whoami-role" }, me.role));
    cleanup = await view(root, r, { fail });
  } catch (err) {
    fail(err);
  }
}

/** Shows an error of the API; a 401 asks for the token. */
function fail(err) {
  const root = main();
  if (err instanceof ApiError && err.status === 401) {
    replace(document.getElementById("whoami"));
    if (cleanup) cleanup();
    cleanup = null;
    replace(root, tokenForm(token() ? "The API refused this token." : "This server needs its API token."));
    return;
  }
  replace(root, note("error", err instanceof ApiError ? `${err.message} (${err.code})` : String(err)));
}

function tokenForm(message) {
  const input = el("input", { type: "password", id: "token-input", autocomplete: "off", required: true, size: 40 });
  const form = el("form", { id: "token-form", class: "card" },
    el("h2", {}, "API token"),
    note("info", message),
    el("p", {}, "It is kept in this browser tab only (sessionStorage) and sent in the Authorization header."),
    el("label", {}, "Token ", input), " ",
    el("button", { type: "submit", id: "token-submit" }, "Use token"));
  form.addEventListener("submit", (event) => {
    event.preventDefault();
    setToken(input.value.trim());
    show();
  });
  setTimeout(() => input.focus(), 0);
  return form;
}

function forget() {
  setToken("");
  show();
}

window.addEventListener("hashchange", show);
window.addEventListener("DOMContentLoaded", () => {
  document.getElementById("forget-token").addEventListener("click", forget);
  show();
});
