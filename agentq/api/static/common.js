// agentq web page: helpers shared by the job list (index.js) and the job page (job.js).
//
// Every text that comes from a job (names, arguments, results, errors) goes into the page as text: `h()`
// appends strings as text nodes and sets `textContent`; nothing here (or in the pages) parses HTML.

// ------------------------------------------------------------------------------------------------ DOM

/** `h("div", {class: "x", dataset: {a: "1"}, onclick: f}, "text", child)`: an element; strings become text
 * nodes. Only attribute values this page builds itself may go in `props` (never a job's value as an href). */
export function h(tag, props, ...children) {
  const el = document.createElement(tag);
  for (const [key, value] of Object.entries(props || {})) {
    if (value === null || value === undefined || value === false) continue;
    if (key === "class") el.className = Array.isArray(value) ? value.filter(Boolean).join(" ") : value;
    else if (key === "dataset") Object.assign(el.dataset, value);
    else if (key.startsWith("on") && typeof value === "function") el.addEventListener(key.slice(2), value);
    else if (key === "hidden" || key === "open" || key === "disabled") el[key] = Boolean(value);
    else el.setAttribute(key, value === true ? "" : String(value));
  }
  append(el, children);
  return el;
}

/** Append children (nodes, strings as text, nested arrays; null/false skipped). */
export function append(el, children) {
  for (const child of [children].flat(Infinity)) {
    if (child === null || child === undefined || child === false) continue;
    el.append(child instanceof Node ? child : document.createTextNode(String(child)));
  }
  return el;
}

export const $ = (selector, root = document) => root.querySelector(selector);

/** A CSS class name derived from a value of a job (letters, digits, `_` and `-` only). */
export const classOf = (value) => String(value ?? "").replace(/[^A-Za-z0-9_-]/g, "");

// ------------------------------------------------------------------------------------------------ API

export class ApiError extends Error {
  constructor(status, body, text) {
    const error = (body && body.error) || {};
    super(error.message || (status ? `HTTP ${status}` : "the API did not answer"));
    this.status = status;
    this.type = error.type || (status ? `HTTP ${status}` : "NetworkError");
    this.problems = Array.isArray(error.problems) ? error.problems : [];
    this.text = text;
  }
}

/** One API request with the page's cookie; resolves to the decoded JSON (null for an empty body) or throws
 * an `ApiError` with the API's `{type, message, problems}`. */
export async function api(method, path, { body, headers } = {}) {
  const init = { method, headers: { Accept: "application/json", ...(headers || {}) }, credentials: "same-origin" };
  if (body !== undefined) {
    init.body = typeof body === "string" ? body : JSON.stringify(body);
    init.headers["Content-Type"] = "application/json";
  }
  let response;
  try {
    response = await fetch(path, init);
  } catch (error) {
    throw new ApiError(0, { error: { type: "NetworkError", message: `the API did not answer (${error.message})` } });
  }
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch {
    data = null;
  }
  if (!response.ok) {
    const failure = new ApiError(response.status, data, text);
    if (response.status === 401) showSignedOut();
    throw failure;
  }
  return data;
}

/** Show in the top bar the tenant (and role) of the token the page was opened with (`GET /v1/me`). */
export async function showTenant() {
  try {
    const me = await api("GET", "/v1/me");
    const badge = h("p", { id: "tenant", class: "tenant", title: `this page acts as a ${me.role} token of tenant ${me.tenant}` },
      "tenant ", h("strong", {}, String(me.tenant)), me.role === "admin" ? " · admin" : me.role === "read" ? " · read only" : "");
    $(".topbar nav").after(badge);
  } catch {
    // signed out: the banner says so
  }
}

/** The banner shown when the page's cookie is missing or no longer accepted. */
export function showSignedOut() {
  if ($("#signed-out")) return;
  const banner = h("div", { id: "signed-out", class: "banner error-box", role: "alert" },
    h("strong", {}, "Not signed in. "),
    "Open the address `agentq api` printed (it ends with ?token=…), or add ?token=<one of AGENTQ_API_TOKENS> to this page's address.");
  document.body.prepend(banner);
}

/** An error as the page shows it: its type and message, and each problem with its JSON pointer. A pointer is
 * a button when `onPointer` is given (it selects that place in the editor). */
export function errorView(error, { onPointer, title } = {}) {
  const problems = (error.problems || []).map((problem) => {
    const pointer = String(problem.pointer ?? "");
    const label = pointer === "" ? "(the whole document)" : pointer;
    const where = onPointer
      ? h("button", { type: "button", class: "pointer", title: "show this place in the editor",
                      onclick: () => onPointer(pointer) }, label)
      : h("code", { class: "pointer" }, label);
    return h("li", {}, where, " ", h("span", {}, String(problem.message ?? "")));
  });
  return h("div", { class: "error-box", role: "alert" },
    h("p", {}, h("strong", {}, title || error.type || "Error"), title ? ` (${error.type})` : "", ": ",
      String(error.message ?? "")),
    problems.length ? h("ul", { class: "problems" }, problems) : null);
}

// ------------------------------------------------------------------------------------------------ time

/** A Date of an API time: ISO-8601 with a zone (records), or seed 004's UTC time without one (parts). */
export function parseTime(value) {
  if (typeof value !== "string" || !value) return null;
  let text = value.replace(/(\.\d{3})\d+/, "$1");
  if (!/(Z|[+-]\d\d:?\d\d)$/.test(text)) text += "Z";
  const date = new Date(text);
  return Number.isNaN(date.getTime()) ? null : date;
}

const two = (n) => String(n).padStart(2, "0");

/** 14:03:07 (with .123 when `ms`), local time; the date too when it is not today. */
export function formatTime(value, { ms = false } = {}) {
  const date = value instanceof Date ? value : parseTime(value);
  if (!date) return "—";
  let text = `${two(date.getHours())}:${two(date.getMinutes())}:${two(date.getSeconds())}`;
  if (ms) text += "." + String(date.getMilliseconds()).padStart(3, "0");
  const today = new Date();
  if (date.toDateString() !== today.toDateString()) {
    text = `${date.getFullYear()}-${two(date.getMonth() + 1)}-${two(date.getDate())} ${text}`;
  }
  return text;
}

/** A `<time>` element: local time shown, the exact ISO time as its datetime and title. */
export function timeView(value, { ms = false } = {}) {
  const date = value instanceof Date ? value : parseTime(value);
  if (!date) return h("span", { class: "muted" }, "—");
  return h("time", { datetime: date.toISOString(), title: date.toISOString() }, formatTime(date, { ms }));
}

/** 35.8 ms, 1.24 s, 2 min 05 s, 1 h 02 min. */
export function formatDuration(ms) {
  if (typeof ms !== "number" || !Number.isFinite(ms) || ms < 0) return "—";
  if (ms < 1000) return `${ms < 10 ? ms.toFixed(1) : Math.round(ms)} ms`;
  const seconds = ms / 1000;
  if (seconds < 60) return `${seconds.toFixed(seconds < 10 ? 2 : 1)} s`;
  const minutes = Math.floor(seconds / 60);
  if (minutes < 60) return `${minutes} min ${two(Math.floor(seconds % 60))} s`;
  return `${Math.floor(minutes / 60)} h ${two(minutes % 60)} min`;
}

/** "3 s ago", "5 min ago", for a recent time. */
export function formatAgo(value) {
  const date = value instanceof Date ? value : parseTime(value);
  if (!date) return "";
  const seconds = Math.max(0, (Date.now() - date.getTime()) / 1000);
  if (seconds < 5) return "just now";
  if (seconds < 60) return `${Math.floor(seconds)} s ago`;
  if (seconds < 3600) return `${Math.floor(seconds / 60)} min ago`;
  if (seconds < 86400) return `${Math.floor(seconds / 3600)} h ago`;
  return `${Math.floor(seconds / 86400)} d ago`;
}

// ------------------------------------------------------------------------------------------------ statuses

export const FINAL_JOB = new Set(["succeeded", "failed", "canceled"]);

const STATUS_LABELS = {
  awaiting_approval: "awaiting approval",
};

/** A status badge (its colour comes from the stylesheet's `status-<name>` class). */
export function statusBadge(status, extra) {
  const name = status || "unknown";
  return h("span", { class: ["badge", `status-${classOf(name)}`, extra] }, STATUS_LABELS[name] || name);
}

// ------------------------------------------------------------------------------------------------ JSON

/** A JSON value pretty-printed with coloured keys, strings, numbers and literals (all as text). */
export function jsonView(value, { className } = {}) {
  const pre = h("pre", { class: ["json", className] });
  const out = [];
  const put = (text, cls) => out.push(cls ? h("span", { class: cls }, text) : text);
  const walk = (v, indent) => {
    if (v === null) return put("null", "j-lit");
    if (Array.isArray(v)) {
      if (!v.length) return put("[]");
      put("[\n");
      v.forEach((item, i) => {
        put(indent + "  ");
        walk(item, indent + "  ");
        put(i < v.length - 1 ? ",\n" : "\n");
      });
      return put(indent + "]");
    }
    if (typeof v === "object") {
      const keys = Object.keys(v);
      if (!keys.length) return put("{}");
      put("{\n");
      keys.forEach((key, i) => {
        put(indent + "  ");
        put(JSON.stringify(key), "j-key");
        put(": ");
        walk(v[key], indent + "  ");
        put(i < keys.length - 1 ? ",\n" : "\n");
      });
      return put(indent + "}");
    }
    if (typeof v === "string") return put(JSON.stringify(v), "j-str");
    if (typeof v === "number") return put(String(v), "j-num");
    if (typeof v === "boolean") return put(String(v), "j-lit");
    return put(String(v));
  };
  walk(value, "");
  append(pre, out);
  return pre;
}

/** A tool result's content: pretty JSON when it is JSON text, else the text itself. */
export function contentView(text, { className } = {}) {
  if (typeof text === "string") {
    const trimmed = text.trim();
    if (trimmed.startsWith("{") || trimmed.startsWith("[")) {
      try {
        return jsonView(JSON.parse(trimmed), { className });
      } catch {
        /* not JSON: shown as text */
      }
    }
    return h("pre", { class: ["text", className] }, text);
  }
  return jsonView(text, { className });
}

/** Where a JSON pointer's value (or, for an object member, its key) is in a JSON text: {start, end}, or
 * null when the text does not reach it. Used to select the place an error names in the editor. */
export function locatePointer(text, pointer) {
  const tokens = pointer === "" ? [] : String(pointer).split("/").slice(1)
    .map((t) => t.replace(/~1/g, "/").replace(/~0/g, "~"));
  let i = 0;
  const space = () => { while (i < text.length && " \t\r\n".includes(text[i])) i++; };
  const skipString = () => {
    i++;
    while (i < text.length && text[i] !== '"') i += text[i] === "\\" ? 2 : 1;
    i++;
  };
  const skipValue = () => {
    space();
    if (text[i] === '"') return skipString();
    if (text[i] === "{" || text[i] === "[") {
      let depth = 0;
      while (i < text.length) {
        const c = text[i];
        if (c === '"') { skipString(); continue; }
        if (c === "{" || c === "[") depth++;
        else if ((c === "}" || c === "]") && --depth === 0) { i++; return; }
        i++;
      }
      return;
    }
    while (i < text.length && !",}] \t\r\n".includes(text[i])) i++;
  };
  let keyStart = null;
  space();
  for (const token of tokens) {
    space();
    keyStart = null;
    if (text[i] === "{") {
      i++;
      let found = false;
      while (i < text.length) {
        space();
        if (text[i] !== '"') return null;
        const start = i;
        skipString();
        let key;
        try { key = JSON.parse(text.slice(start, i)); } catch { return null; }
        space();
        if (text[i] !== ":") return null;
        i++;
        if (key === token) { found = true; keyStart = start; break; }
        skipValue();
        space();
        if (text[i] !== ",") return null;
        i++;
      }
      if (!found) return null;
    } else if (text[i] === "[") {
      if (!/^\d+$/.test(token)) return null;
      i++;
      for (let k = 0; k < Number(token); k++) {
        skipValue();
        space();
        if (text[i] !== ",") return null;
        i++;
      }
      space();
      if (text[i] === "]") return null;
    } else {
      return null;
    }
  }
  space();
  const start = i;
  skipValue();
  return { start: keyStart ?? start, end: Math.max(i, start + 1) };
}

// ------------------------------------------------------------------------------------------------ editor

/** The place in `text` of a JSON.parse error message's position: {index, line, column} or null. */
function syntaxErrorPlace(message, text) {
  const match = /position (\d+)/.exec(message);
  if (!match) return null;
  const index = Number(match[1]);
  const before = text.slice(0, index).split("\n");
  return { index, line: before.length, column: before[before.length - 1].length + 1 };
}

/** A JSON editor: a textarea with live validation (the syntax error's line and column, or `describe(value)` of
 * valid JSON, which may return {error} for a value of the wrong shape), a Format button, and `showPointer()`
 * to select the place a JSON pointer names. */
export function jsonEditor({ id, label, value = "", rows = 18, describe, onChange }) {
  const feedbackId = `${id}-feedback`;
  const textarea = h("textarea", { id, class: "code", rows, spellcheck: "false", autocomplete: "off",
                                   autocapitalize: "off", "aria-describedby": feedbackId });
  textarea.value = value;
  const feedback = h("p", { id: feedbackId, class: "feedback", "aria-live": "polite" });
  const format = h("button", { type: "button", class: "small" }, "Format");
  const editor = {
    textarea,
    parsed: undefined,
    valid: false,
    element: h("div", { class: "json-editor" },
      h("div", { class: "editor-head" }, h("label", { for: id }, label), format),
      textarea, feedback),
    setValue(text) {
      textarea.value = text;
      editor.validate();
    },
    validate() {
      const text = textarea.value;
      feedback.className = "feedback";
      editor.valid = false;
      editor.parsed = undefined;
      if (!text.trim()) {
        feedback.textContent = "Empty: paste a JSON document or load an example.";
        textarea.removeAttribute("aria-invalid");
      } else {
        try {
          editor.parsed = JSON.parse(text);
          const described = describe ? describe(editor.parsed) : { ok: "valid JSON" };
          if (described.error) throw new SyntaxError(described.error);
          editor.valid = true;
          feedback.classList.add("ok");
          feedback.textContent = `✓ ${described.ok}`;
          textarea.removeAttribute("aria-invalid");
        } catch (error) {
          const place = syntaxErrorPlace(error.message, text);
          feedback.classList.add("bad");
          feedback.textContent = "✗ " + (place ? `line ${place.line}, column ${place.column}: ` : "") + error.message;
          textarea.setAttribute("aria-invalid", "true");
        }
      }
      if (onChange) onChange(editor);
      return editor.valid;
    },
    /** Select (and scroll to) the place of a JSON pointer, or of its nearest parent that exists. */
    showPointer(pointer) {
      const text = textarea.value;
      let place = null;
      let tokens = pointer === "" ? [] : String(pointer).split("/").slice(1);
      while (place === null && tokens.length) {
        place = locatePointer(text, "/" + tokens.join("/"));
        tokens = tokens.slice(0, -1);
      }
      place = place || { start: 0, end: 0 };
      textarea.focus();
      textarea.setSelectionRange(place.start, place.end);
      const line = text.slice(0, place.start).split("\n").length - 1;
      const lineHeight = parseFloat(getComputedStyle(textarea).lineHeight) || 18;
      textarea.scrollTop = Math.max(0, line * lineHeight - textarea.clientHeight / 3);
    },
  };
  textarea.addEventListener("input", () => editor.validate());
  format.addEventListener("click", () => {
    if (editor.validate()) editor.setValue(JSON.stringify(editor.parsed, null, 2));
  });
  editor.validate();
  return editor;
}
