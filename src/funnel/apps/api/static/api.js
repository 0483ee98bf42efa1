// funnel's HTTP API as the page uses it: fetch with the stored API key, errors as one readable line,
// and server-sent events read from a POST response (EventSource can only GET).

const KEY_STORAGE = "funnel.apiKey";

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
  if (typeof detail === "object") return detail.detail ? describeDetail(detail.detail) : JSON.stringify(detail);
  return String(detail);
}

export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

export function apiKey() {
  try { return localStorage.getItem(KEY_STORAGE) || ""; } catch { return ""; }
}

export function setApiKey(key) {
  try {
    if (key) localStorage.setItem(KEY_STORAGE, key); else localStorage.removeItem(KEY_STORAGE);
  } catch { /* storage disabled: the key lasts until the page is left */ }
}

let onUnauthorised = () => {};

/** `handler` runs on every 401/403, e.g. to open the field where the key is set. */
export function whenUnauthorised(handler) {
  onUnauthorised = handler;
}

async function errorFrom(response) {
  let message = "";
  const text = await response.text().catch(() => "");
  try { message = describeDetail(JSON.parse(text).detail); } catch { message = text.trim().slice(0, 500); }
  if (response.status === 401 || response.status === 403) {
    message = `${message || "not authorised"} — set the server's API key under "API key" at the top.`;
    onUnauthorised();
  }
  return new ApiError(response.status, `${message || response.statusText || "request failed"} (HTTP ${response.status})`);
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
