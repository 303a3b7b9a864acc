// Building the page with DOM calls only. Every value from the API becomes a text node
// (textContent), never markup: an item holding "<script>" shows those characters.

/** An element: `el("td", {class: "num"}, "text", child, ...)`. Attributes are set one by one;
 *  children are nodes or strings (strings become text nodes); null and false are skipped. */
export function el(tag, attrs, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name.startsWith("on")) {
      node.addEventListener(name.slice(2), value);
    } else if (name === "checked" || name === "disabled" || name === "value") {
      node[name] = value;
    } else {
      node.setAttribute(name, value === true ? "" : String(value));
    }
  }
  append(node, children);
  return node;
}

/** Appends children (nodes or strings, arrays flattened) to `node`. */
export function append(node, children) {
  for (const child of children.flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    node.appendChild(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return node;
}

/** Replaces the children of `node`. */
export function replace(node, ...children) {
  node.replaceChildren();
  return append(node, children);
}

/** A value as text: strings as they are, anything else as JSON. */
export function text(value) {
  if (value === null || value === undefined) return "";
  return typeof value === "string" ? value : JSON.stringify(value);
}

/** A link to a place in the page (always "#/..."; values are URI-encoded). */
export function pageLink(parts, label, attrs) {
  const href = "#/" + parts.map(encodeURIComponent).join("/");
  return el("a", Object.assign({ href }, attrs || {}), label);
}

/** How long ago `iso` was, in words ("3 min"). */
export function age(iso) {
  if (!iso) return "";
  const secs = Math.max(0, (Date.now() - Date.parse(iso)) / 1000);
  if (secs < 90) return `${Math.round(secs)} s`;
  if (secs < 5400) return `${Math.round(secs / 60)} min`;
  if (secs < 172800) return `${Math.round(secs / 3600)} h`;
  return `${Math.round(secs / 86400)} days`;
}

/** A table with a header row and rows of cells (nodes or strings). */
export function table(headers, rows, attrs) {
  return el("table", attrs || {},
    el("thead", {}, el("tr", {}, headers.map((h) => el("th", {}, h)))),
    el("tbody", {}, rows.map((cells) => el("tr", {}, cells.map((c) => el("td", {}, c))))));
}

/** A message box: kind is "error", "info" or "ok". */
export function note(kind, ...children) {
  return el("p", { class: `note ${kind}`, role: kind === "error" ? "alert" : "status" }, children);
}
