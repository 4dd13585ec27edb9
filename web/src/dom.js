// Small DOM helpers. Text from the server always goes through textContent, never innerHTML:
// error messages and record keys are data, not markup.

export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

export function svg(tag, attrs = {}, ...children) {
  const el = document.createElementNS("http://www.w3.org/2000/svg", tag);
  setAttrs(el, attrs);
  append(el, children);
  return el;
}

function setAttrs(el, attrs) {
  for (const [name, value] of Object.entries(attrs)) {
    if (value === undefined || value === null || value === false) continue;
    if (name === "testid") el.setAttribute("data-testid", value);
    else if (name === "class") el.setAttribute("class", value);
    else if (name.startsWith("on")) el.addEventListener(name.slice(2), value);
    else el.setAttribute(name, value === true ? "" : String(value));
  }
}

function append(el, children) {
  for (const child of children.flat()) {
    if (child === undefined || child === null || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
}

export function setText(el, text) {
  const value = text === undefined || text === null ? "" : String(text);
  if (el && el.textContent !== value) el.textContent = value;
}

export function rate(value) {
  if (value === null || value === undefined) return "–";
  if (value === 0) return "0/s";
  if (value < 10) return `${value.toFixed(1)}/s`;
  if (value < 10000) return `${Math.round(value)}/s`;
  return `${(value / 1000).toFixed(1)}k/s`;
}

export function count(value) {
  if (value === null || value === undefined) return "–";
  if (value < 10000) return String(Math.round(value));
  if (value < 1e6) return `${(value / 1000).toFixed(1)}k`;
  return `${(value / 1e6).toFixed(1)}M`;
}

export function ago(epoch, now) {
  if (!epoch) return "";
  const seconds = Math.max(0, Math.round(now - epoch));
  if (seconds < 60) return `${seconds}s ago`;
  if (seconds < 3600) return `${Math.round(seconds / 60)}m ago`;
  return `${Math.round(seconds / 3600)}h ago`;
}

export function shortSchema(name) {
  if (!name || name === "?") return "";
  const parts = name.split(".");
  return parts[parts.length - 1];
}

export function idOf(name) {
  return String(name).replace(/[^A-Za-z0-9_.-]/g, "_");
}
