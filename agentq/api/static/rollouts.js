// agentq web page: the rollout report (`/rollouts`, docs/rollouts.md): per tool, its routes side by side.
import { $, api, append, errorView, formatDuration, h, showTenant } from "/static/common.js";

const REFRESH_MS = 3000;
// The report's two special routes, named as `agentq rollouts` names them.
const ROUTE_LABELS = new Map([["*", "(usual)"], ["", "(model)"]]);
const COLUMNS = [["Route"], ["Calls", "num"], ["Success", "num"], ["P50", "num"], ["P95", "num"], ["Cost", "num"],
  ["Retries", "num"], ["Rule"]];

// ------------------------------------------------------------------------------------------------ formats

/** `share * 100` as Python's `{:g}` writes it (six significant digits, no trailing zeros): "10", "2.5". */
const percentOf = (share) => String(Number((Number(share) * 100).toPrecision(6)));

/** A rule in words, as the RULE column of `agentq rollouts` says it (agentq/cli/rollouts.py `describe`):
 * "sendEmail@2 for tenants acme; 10% sendEmail@2; 5% model; the rest as usual", "(cleared)" without one. */
function describeRule(rule) {
  if (!rule) return "(cleared)";
  const parts = (rule.routes || []).map((route) => {
    const to = route.to || "model";
    return Array.isArray(route.tenants) ? `${to} for tenants ${route.tenants.join(", ")}` : `${percentOf(route.share)}% ${to}`;
  });
  return [...parts, "the rest as usual"].join("; ");
}

const missing = (value) => value === null || value === undefined;
const rateText = (rate) => (missing(rate) ? "—" : `${(rate * 100).toFixed(1)}%`);
const secondsText = (seconds) => (missing(seconds) ? "—" : formatDuration(seconds * 1000));
const costText = (cost) => (missing(cost) ? "unpriced" : `$${cost.toFixed(4)}`);

// ------------------------------------------------------------------------------------------------ tables

/** A figure's cell: its text, and the report's own value in `data-value` (JSON) for whoever checks it. */
function figure(name, value, text, title) {
  return h("td", { class: "num", title, dataset: { figure: name, value: JSON.stringify(missing(value) ? null : value) } },
    text);
}

function routeRow(row, ruleCell) {
  const special = ROUTE_LABELS.has(row.route);
  return h("tr", { dataset: { route: row.route } },
    h("th", { scope: "row", class: ["route", special ? "special-route" : "mono"] },
      special ? ROUTE_LABELS.get(row.route) : row.route),
    figure("calls", row.calls, String(row.calls), `${row.done} done, ${row.failed} failed`),
    figure("success_rate", row.success_rate, rateText(row.success_rate)),
    figure("p50_s", row.p50_s, secondsText(row.p50_s)),
    figure("p95_s", row.p95_s, secondsText(row.p95_s)),
    figure("cost_usd", row.cost_usd, costText(row.cost_usd), "the price of the route's model requests"),
    figure("retries", row.retries, String(row.retries), "attempts that failed and were tried again"),
    ruleCell);
}

/** One tool's table: a row per route; the rule in words beside them (once, as the CLI's RULE column). */
function toolView(tool, entry, index) {
  const titleId = `rollout-tool-${index}`;
  const routes = entry.routes || [];
  const ruleCell = h("td", { class: "rule", rowspan: Math.max(routes.length, 1) }, describeRule(entry.rule));
  return h("section", { class: "rollout-tool", dataset: { tool }, "aria-labelledby": titleId },
    h("h2", { id: titleId }, h("span", { class: "tool-name" }, tool),
      entry.rule ? null : h("span", { class: "chip" }, "rule cleared")),
    h("div", { class: "table-wrap" },
      h("table", { class: "rollouts-table" },
        h("thead", {}, h("tr", {}, COLUMNS.map(([label, cls]) => h("th", { scope: "col", class: cls }, label)))),
        h("tbody", {}, routes.map((row, i) => routeRow(row, i === 0 ? ruleCell : null))))));
}

// ------------------------------------------------------------------------------------------------ refresh

let shown = null;
let refresher = null;
let busy = false;

function show(report) {
  const tools = (report && report.tools) || {};
  const key = JSON.stringify(tools);
  if (key === shown) return; // rebuilt only when a figure changed (keeps a selection otherwise)
  shown = key;
  const names = Object.keys(tools);
  $("#rollouts").replaceChildren(...names.map((tool, i) => toolView(tool, tools[tool], i)));
  $("#rollouts-empty").hidden = names.length > 0;
}

/** A refused token (403: not an admin's) will not become an admin's: say so once, stop asking. Other errors
 * (the API restarting, Redis away) keep the last figures and are retried. */
function showError(error) {
  if (shown === null) $("#rollouts").replaceChildren();
  if (error.status !== 403) {
    $("#rollouts-error").replaceChildren(errorView(error, { title: "Cannot read the rollout report" }));
    return;
  }
  clearInterval(refresher);
  shown = null;
  $("#rollouts").replaceChildren();
  $("#rollouts-empty").hidden = true;
  $("#rollouts-updated").textContent = "";
  const box = errorView(error, { title: "This page's token may not read the rollout report" });
  append(box, h("p", { class: "hint" }, "The report counts every tenant's calls, so it is for admin tokens: open "
    + "this page with a token whose role is \"admin\" in AGENTQ_API_TOKENS."));
  $("#rollouts-error").replaceChildren(box);
}

async function refresh() {
  if (busy) return; // one request at a time: answers are shown in the order they were asked
  busy = true;
  try {
    show(await api("GET", "/v1/rollouts"));
    $("#rollouts-error").replaceChildren();
    $("#rollouts-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    showError(error);
  } finally {
    busy = false;
  }
}

showTenant();
refresher = setInterval(() => {
  if (!document.hidden) refresh();
}, REFRESH_MS);
refresh();
