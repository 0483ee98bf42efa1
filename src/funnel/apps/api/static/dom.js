// Building DOM from data: every string becomes a text node, so nothing the server sends is parsed as HTML.

export function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") el.className = value;
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
  for (const child of children.flat()) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export function formatBytes(n) {
  if (typeof n !== "number") return "";
  if (n < 1024) return `${n} B`;
  if (n < 1024 * 1024) return `${(n / 1024).toFixed(1)} KB`;
  return `${(n / 1024 / 1024).toFixed(1)} MB`;
}

export function formatTime(value) {
  if (value === null || value === undefined || value === "") return "";
  const date = typeof value === "number" ? new Date(value < 1e12 ? value * 1000 : value) : new Date(value);
  return isNaN(date) ? String(value) : date.toLocaleString();
}

/** Where a citation or chunk sits: the server's location, in its file type's units ("p.2", "slide 3",
 * "row 4-6", "L3-5"), then its section's heading trail, if it has one. */
export function where(c) {
  return [c.location || lines(c), c.heading].filter(Boolean).join(" · ");
}

function lines(c) {  // an object from before `location` was sent
  if (c.page !== null && c.page !== undefined) return `page ${c.page}`;
  if (c.line_start !== null && c.line_start !== undefined) {
    return c.line_end && c.line_end !== c.line_start ? `lines ${c.line_start}–${c.line_end}` : `line ${c.line_start}`;
  }
  return "";
}
