// agentq web page: two jobs side by side (`/diff?a=ID&b=ID`, docs/compare.md).
//
// One request, `GET /v1/jobs/{a}/diff/{b}`; the page shows its answer in two columns, A and B: the jobs' figures
// with their deltas, the calls matched by tool and order, the final output and the state. What differs is
// highlighted (a row's `differs` class, a pair's `kind-*` class, each change at its JSON pointer). Every value
// from a job goes into the page as text (`h()`, `jsonView`).
import {
  $, FINAL_JOB, api, classOf, errorView, formatDuration, h, jsonView, showTenant, statusBadge,
} from "/static/common.js";

const query = new URLSearchParams(location.search);
const sides = { a: (query.get("a") || "").trim(), b: (query.get("b") || "").trim() };
const MARKS = { same: "=", changed: "≠", only_a: "only in A", only_b: "only in B" };
const COUNTERS = [["requests", "Requests"], ["input_tokens", "Input tokens"], ["output_tokens", "Output tokens"],
  ["cache_read_input_tokens", "Cache reads"], ["cache_creation_input_tokens", "Cache writes"]];

const jobLink = (id) => h("a", { href: `/jobs/${encodeURIComponent(id)}`, class: "mono" }, id);
const count = (n) => (typeof n === "number" ? n.toLocaleString("en") : "—");
const dollars = (n) => (typeof n === "number" ? `$${n >= 0.01 || n === 0 ? n.toFixed(4) : n.toFixed(6)}` : "unknown");

/** `+1.20 s`, `−3`, `=`, or nothing for an unknown delta. */
function signed(delta, shown) {
  if (typeof delta !== "number") return "";
  if (delta === 0) return "=";
  return (delta > 0 ? "+" : "−") + shown(Math.abs(delta));
}

function errorText(error) {
  return error ? `${error.type}: ${error.message}` : "—";
}

// ------------------------------------------------------------------------------------------------ figures

function figureRow(name, label, a, b, delta, differs) {
  return h("tr", { class: differs ? "differs" : null, dataset: { figure: name } },
    h("th", { scope: "row" }, label), h("td", { class: "side-a" }, a), h("td", { class: "side-b" }, b),
    h("td", { class: "num delta" }, delta));
}

function figures(diff) {
  const { a, b, usage } = diff;
  const duration = diff.duration_ms;
  const rows = [
    figureRow("status", "Status", statusBadge(a.status), statusBadge(b.status), diff.status_changed ? "changed" : "",
      diff.status_changed),
    figureRow("duration", "Duration", formatDuration(duration.a), formatDuration(duration.b),
      signed(duration.delta, formatDuration), false),
    figureRow("models", "Model(s)", a.models.join(", ") || "—", b.models.join(", ") || "—",
      diff.models_changed ? "changed" : "", diff.models_changed),
    ...COUNTERS.map(([key, label]) => figureRow(key, label, count(usage[key].a), count(usage[key].b),
      signed(usage[key].delta, count), false)),
    figureRow("cost", "Cost", dollars(usage.cost_usd.a), dollars(usage.cost_usd.b),
      signed(usage.cost_usd.delta, dollars), false),
    figureRow("calls", "Calls", String(a.calls), String(b.calls), signed(b.calls - a.calls, count), a.calls !== b.calls),
  ];
  if (a.error || b.error) {
    rows.push(figureRow("error", "Error", errorText(a.error), errorText(b.error), diff.error_changed ? "changed" : "",
      diff.error_changed));
  }
  if (a.forked_from || b.forked_from) {
    rows.push(figureRow("forked_from", "Forked from", a.forked_from || "—", b.forked_from || "—", "", false));
  }
  $("#figures tbody").replaceChildren(...rows);
  $("#link-a").replaceWith(Object.assign(jobLink(a.id), { id: "link-a" }));
  $("#link-b").replaceWith(Object.assign(jobLink(b.id), { id: "link-b" }));
}

// ------------------------------------------------------------------------------------------------ changes

/** The changes of a structural diff: one item per pointer, marked added / removed / changed. */
function changeList(diff, label) {
  const items = diff.changes.map((change) => h("li", { class: `change change-${classOf(change.kind)}`,
    dataset: { pointer: change.pointer, kind: change.kind } },
  h("code", { class: "pointer" }, change.pointer === "" ? "(the whole value)" : change.pointer), " ",
  h("span", { class: "change-kind" }, change.kind), " ",
  change.kind !== "added" ? h("span", { class: "value-a mono" }, JSON.stringify(change.a)) : null,
  change.kind === "changed" ? " → " : null,
  change.kind !== "removed" ? h("span", { class: "value-b mono" }, JSON.stringify(change.b)) : null));
  return h("ul", { class: "changes", "aria-label": label }, items,
    diff.truncated ? h("li", { class: "muted" }, "… and more (only the first changes are listed)") : null);
}

function valuePanel(target, panel, diff, a, b, label) {
  $(panel).hidden = false;
  if (diff.same) {
    $(target).replaceChildren(h("p", { class: "same-note" }, "The same in both."), jsonView(a));
    return;
  }
  $(target).replaceChildren(
    changeList(diff, `${label}: the differences`),
    h("div", { class: "two-columns" },
      h("div", { class: "side-a" }, h("h3", {}, "A"), jsonView(a)),
      h("div", { class: "side-b" }, h("h3", {}, "B"), jsonView(b))));
}

// ------------------------------------------------------------------------------------------------ calls

function callCell(call, side) {
  if (!call) return h("td", { class: `side-${side} absent muted` }, "—");
  return h("td", { class: `side-${side}` },
    h("div", { class: "call-line" }, h("span", { class: "mono small" }, call.id), " ", statusBadge(call.status), " ",
      h("span", { class: "muted small" }, formatDuration(call.duration_ms))),
    call.error ? h("div", { class: "row-error" }, errorText(call.error)) : null,
    call.has_output ? h("details", { class: "plain" }, h("summary", {}, "output"), jsonView(call.output)) : null);
}

function pairRows(pair) {
  const name = [h("span", { class: "pair-mark" }, MARKS[pair.kind] || pair.kind), " ",
    h("span", { class: "tool-name" }, pair.tool), pair.instance ? ` [${pair.instance}]` : "", ` #${pair.n}`];
  const rows = [h("tr", { class: ["pair", `kind-${classOf(pair.kind)}`], dataset: { kind: pair.kind, tool: pair.tool } },
    h("th", { scope: "row" }, name), callCell(pair.a, "a"), callCell(pair.b, "b"))];
  if (pair.kind === "changed") {
    const notes = [];
    if (pair.status_changed) notes.push(h("p", {}, `status: ${pair.a.status} → ${pair.b.status}`));
    if (pair.error_changed) notes.push(h("p", {}, `error: ${errorText(pair.a.error)} → ${errorText(pair.b.error)}`));
    if (!pair.params.same) notes.push(h("p", { class: "small-title" }, "parameters"), changeList(pair.params, "parameters"));
    if (!pair.output.same) notes.push(h("p", { class: "small-title" }, "output"), changeList(pair.output, "output"));
    rows.push(h("tr", { class: "pair-changes" }, h("td", { colspan: "3" }, notes)));
  }
  return rows;
}

function calls(diff) {
  const c = diff.call_counts;
  const replayed = diff.replayed_calls ? ` (${diff.replayed_calls} of the source's calls replayed by the fork, not compared)` : "";
  $("#call-counts").textContent = `${c.same} same, ${c.changed} changed, ${c.only_a} only in A, ${c.only_b} only in B${replayed}`;
  $("#diff-calls tbody").replaceChildren(...diff.calls.flatMap(pairRows));
  $("#calls-panel").hidden = false;
  $("#figures-panel").hidden = false;
}

// ------------------------------------------------------------------------------------------------ the page

function verdict(diff) {
  const what = [];
  if (diff.status_changed) what.push("status");
  if (diff.error_changed) what.push("error");
  if (diff.models_changed) what.push("models");
  if (!diff.result.same) what.push("final output");
  if (!diff.state.same) what.push("state");
  const changedCalls = diff.calls.filter((p) => p.kind !== "same").length;
  if (changedCalls) what.push(`${changedCalls} call${changedCalls === 1 ? "" : "s"}`);
  const el = $("#diff-verdict");
  el.hidden = false;
  el.dataset.same = String(diff.same);
  const running = [["A", diff.a], ["B", diff.b]].filter(([, side]) => !FINAL_JOB.has(side.status)).map(([n]) => n);
  el.textContent = (diff.same ? "The same outcome (cost and durations compared below)."
    : `Different: ${what.join(", ")}.`)
    + (running.length ? ` ${running.join(" and ")} ${running.length > 1 ? "have" : "has"} not ended yet: reload later.` : "");
}

async function load() {
  $("#diff-a").value = sides.a;
  $("#diff-b").value = sides.b;
  if (!sides.a || !sides.b) return;
  document.title = `agentq · ${sides.a} vs ${sides.b}`;
  try {
    const diff = await api("GET", `/v1/jobs/${encodeURIComponent(sides.a)}/diff/${encodeURIComponent(sides.b)}`);
    // the two records give the columns' whole values (the diff names only what differs)
    const [a, b] = await Promise.all([sides.a, sides.b].map((id) => api("GET", `/v1/jobs/${encodeURIComponent(id)}`)));
    verdict(diff);
    figures(diff);
    calls(diff);
    valuePanel("#diff-result", "#result-panel", diff.result, a.result, b.result, "Final output");
    valuePanel("#diff-state", "#state-panel", diff.state, a.state, b.state, "State");
  } catch (error) {
    $("#diff-error").replaceChildren(errorView(error, { title: "Cannot compare these jobs" }));
  }
}

showTenant();
load();
