// The JSON API with the token of this tab. The token lives in sessionStorage (gone when the
// tab closes) and travels only in the Authorization header, never in a URL.

const KEY = "dlq-api-token";

export function token() {
  return sessionStorage.getItem(KEY) || "";
}

export function setToken(value) {
  if (value) sessionStorage.setItem(KEY, value);
  else sessionStorage.removeItem(KEY);
  caller = null;
}

// Who this tab's token is ({name, role}, from GET /v1/whoami), asked once per token.
let caller = null;
const RANKS = { "read-only": 0, operator: 1, admin: 2 };

/** Asks the server who the token is (a 401 raises, as any call does); answers {name, role}. */
export async function whoami() {
  if (!caller) caller = await call("/v1/whoami");
  return caller;
}

/** Whether the token has `role` (or more): the page shows only the buttons it may use; the
 *  server refuses the rest anyway (403). */
export function may(role) {
  return !!caller && RANKS[caller.role] >= RANKS[role];
}

/** Raised for an answer that is not 2xx: `status`, `code` and the server's message. */
export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

/** A query string of the non-empty values of `params`. */
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== "" && v !== null && v !== undefined && v !== false) q.set(k, String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

/** Sends a request; answers the parsed JSON (or the text with `raw`). POST sends `body` as JSON. */
export async function call(path, { method = "GET", body, raw = false } = {}) {
  const headers = {};
  const t = token();
  if (t) headers["Authorization"] = "Bearer " + t;
  const init = { method, headers, credentials: "omit", cache: "no-store" };
  if (method === "POST") {
    headers["Content-Type"] = "application/json";
    init.body = JSON.stringify(body || {});
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (err) {
    throw new ApiError(0, "unreachable", "cannot reach dlq serve: " + err.message);
  }
  const textBody = await response.text();
  if (!response.ok) {
    let code = "http_" + response.status;
    let message = textBody;
    try {
      const parsed = JSON.parse(textBody);
      code = parsed.code || code;
      message = parsed.error || message;
    } catch (_) { /* not JSON */ }
    throw new ApiError(response.status, code, message);
  }
  return raw ? textBody : JSON.parse(textBody);
}
