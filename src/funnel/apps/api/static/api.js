// funnel's HTTP API as the page uses it: fetch with the API key kept for this tab, errors as one readable
// line, and server-sent events read from a POST response (EventSource can only GET).

const KEY_STORAGE = "funnel.apiKey";
const LINE_CHARS = 300;

// A readable line from any error body: FastAPI's {detail: "..."} or {detail: [{loc, msg}]}, or plain text.
export function describeDetail(detail) {
  if (detail === null || detail === undefined) return "";
  if (typeof detail === "string") return detail;
  if (Array.isArray(detail)) {
    return detail.map((d) => {
      if (d && typeof d === "object") {
        const loc = Array.isArray(d.loc) ? d.loc.filter((p) => p !== "body").join(".") : "";
        return loc ? `${loc}: ${d.msg}` : String(d.msg ?? JSON.stringify(d));
      }
      return String(d);
    }).join("; ");
  }
  if (typeof detail === "object") {
    const inner = detail.detail ?? detail.message ?? detail.msg;
    return inner !== undefined ? describeDetail(inner) : "";  // never the raw object
  }
  return String(detail);
}

/** One line of at most LINE_CHARS: what an error shows, whatever the server (or a proxy before it) sent. */
export function oneLine(text) {
  const line = String(text ?? "").replace(/<[^>]*>/g, " ").replace(/\s+/g, " ").trim();
  return line.length > LINE_CHARS ? `${line.slice(0, LINE_CHARS - 1)}…` : line;
}

export class ApiError extends Error {
  /** `detail`: the server's own line; `message` adds the status. */
  constructor(status, detail) {
    super(status ? `${detail} (HTTP ${status})` : detail);
    this.status = status;
    this.detail = detail;
  }
}

// The key lives in sessionStorage: it goes when the tab closes, and other tabs never see it. A key an older
// page kept in localStorage is moved here once, so it no longer outlives the browser session.
let memoryKey = "";  // storage disabled: the key lasts until the page is left

export function apiKey() {
  try {
    const old = localStorage.getItem(KEY_STORAGE);
    if (old !== null) {
      localStorage.removeItem(KEY_STORAGE);
      if (!sessionStorage.getItem(KEY_STORAGE)) sessionStorage.setItem(KEY_STORAGE, old);
    }
    return sessionStorage.getItem(KEY_STORAGE) || "";
  } catch { return memoryKey; }
}

export function setApiKey(key) {
  memoryKey = key || "";
  try {
    if (key) sessionStorage.setItem(KEY_STORAGE, key); else sessionStorage.removeItem(KEY_STORAGE);
  } catch { /* memoryKey holds it */ }
}

let onUnauthorised = () => {};

/** `handler(line)` runs on every 401 (no key, or one the server refused), to ask for a key. A 403 (the key's
 * role may not do this) or a 404 (a collection it does not cover) is only the failed action's line. */
export function whenUnauthorised(handler) {
  onUnauthorised = handler;
}

async function errorFrom(response) {
  let message = "";
  const text = await response.text().catch(() => "");
  try { message = oneLine(describeDetail(JSON.parse(text).detail)); } catch { message = oneLine(text); }
  if (response.status === 401) onUnauthorised(message);
  return new ApiError(response.status, message || response.statusText || "request failed");
}

export async function api(path, options = {}) {
  const headers = new Headers(options.headers || {});
  const key = apiKey();
  if (key) headers.set("X-API-Key", key);
  let response;
  try {
    response = await fetch(path, { ...options, headers });
  } catch (e) {
    if (e.name === "AbortError") throw e;
    throw new ApiError(0, `cannot reach the server (${e.message})`);
  }
  if (!response.ok) throw await errorFrom(response);
  return response;
}

export async function apiJson(path, options) {
  const response = await api(path, options);
  if (response.status === 204) return null;
  return response.json();
}

/** The events of a `text/event-stream` response: {event, data}, data lines joined with "\\n". */
export async function* sseEvents(response) {
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  const parse = (frame) => {
    let event = "message";
    const data = [];
    for (const line of frame.split("\n")) {
      if (line === "" || line.startsWith(":")) continue;
      const colon = line.indexOf(":");
      const field = colon < 0 ? line : line.slice(0, colon);
      let value = colon < 0 ? "" : line.slice(colon + 1);
      if (value.startsWith(" ")) value = value.slice(1);
      if (field === "event") event = value;
      else if (field === "data") data.push(value);
    }
    return data.length ? { event, data: data.join("\n") } : null;
  };
  for (;;) {
    const { value, done } = await reader.read();
    buffer += decoder.decode(value || new Uint8Array(), { stream: !done });
    buffer = buffer.replace(/\r\n?/g, "\n");
    let end;
    while ((end = buffer.indexOf("\n\n")) >= 0) {
      const frame = parse(buffer.slice(0, end));
      buffer = buffer.slice(end + 2);
      if (frame) yield frame;
    }
    if (done) {
      const frame = parse(buffer);
      if (frame) yield frame;
      return;
    }
  }
}
