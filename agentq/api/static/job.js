// agentq web page: one job, live (`/jobs/{id}`).
//
// The events come from `GET /v1/jobs/{id}/events` through an EventSource, which resumes after a disconnect by
// itself (it sends the last `id:` it received as Last-Event-ID); when the server refused the stream (it was
// restarting, say) the page reconnects with `?after=<last id>`. Each event is rendered once, in stream order,
// as seed 004 shows: a collapsible block per activity part, the text parts as text, and a short line for the
// envelopes without a part. Call and job events (and a slow poll while the job runs) re-fetch the record and
// the calls view.
import {
  $, FINAL_JOB, api, classOf, contentView, errorView, formatDuration, h, jsonEditor, jsonView, parseTime,
  statusBadge, timeView,
  showTenant,
} from "/static/common.js";

const jobId = decodeURIComponent(location.pathname.replace(/^\/jobs\//, "").replace(/\/+$/, ""));
const jobPath = `/v1/jobs/${encodeURIComponent(jobId)}`;
const EVENT_NAMES = ["job.queued", "job.started", "job.finished", "job.resumed", "call.started",
  "call.awaiting_approval", "call.waiting", "call.retrying", "call.finished", "thought", "tick.started", "tick.finished", "part", "message"];
const DEFAULT_ICONS = { tool_request: "🔧", tool_result: "✅", tool_call: "🔧", thought: "💭", activity: "🧠",
  error: "❌", skill_loading: "📥", chart_generation: "📊", diagram_generation: "📊", approval: "✋" };
const POLL_MS = 2000;
const FINAL_CALL = new Set(["done", "failed", "skipped", "canceled"]);

const view = {
  record: null,
  calls: [],
  callIndex: new Map(), // call id -> its item of the calls view (with `n`, its 1-based position)
  kind: null, // "plan" | "agent", from job.queued
  finished: false, // job.finished was received
  seen: new Set(), // event ids rendered
  lastEventId: null,
  eventCount: 0,
  absorbed: new Set(), // calls whose failure went to a `||` alternative
  decided: new Set(), // calls approved, rejected or edited from this page (a refresh already under way may not know)
  filter: null, // call id whose events alone are shown
};

document.title = `agentq · ${jobId}`;
$("#job-id").textContent = jobId;
$("#compare-a").value = jobId; // the "compare with…" form opens /diff?a=<this job>&b=<the id typed>

// ------------------------------------------------------------------------------------------------ live state

function setLive(state, text) {
  const live = $("#live");
  live.dataset.state = state;
  live.textContent = text || { connecting: "connecting…", live: "● live", reconnecting: "reconnecting…",
    ended: "stream ended", offline: "disconnected" }[state] || state;
}

let toastTimer = null;
function toast(text) {
  let el = $("#toast");
  if (!el) {
    el = h("div", { id: "toast", class: "toast", role: "status" });
    document.body.append(el);
  }
  el.textContent = text;
  el.hidden = false;
  clearTimeout(toastTimer);
  toastTimer = setTimeout(() => { el.hidden = true; }, 4000);
}

// ------------------------------------------------------------------------------------------------ record

function fact(label, ...value) {
  return h("div", { class: "fact" }, h("dt", {}, label), h("dd", {}, ...value));
}

// a resumed job's runs (docs/resume.md): one line each, its status, start, end and error
function runsView(runs) {
  return h("ol", { class: "runs" }, ...runs.map((run) => h("li", {},
    statusBadge(run.status), " ", timeView(run.started_at), run.finished_at ? " → " : "",
    run.finished_at ? timeView(run.finished_at) : "",
    run.error ? h("span", { class: "row-error" }, ` ${run.error.type}: ${run.error.message}`) : "")));
}

/** A continued job's conversation and the job it continued; a fork's source job and tick; an agent job's
 * conversation (its thread, once continued). */
function lineageFacts(record) {
  const link = (path, text) => h("a", { href: path, class: "mono" }, text);
  const facts = [];
  if (record.thread || view.kind === "agent") {
    const thread = record.thread || record.id;
    facts.push(fact("Conversation", link(`/threads/${encodeURIComponent(thread)}`, "thread " + thread)));
  }
  if (record.continued_from) facts.push(fact("Continues", link(`/jobs/${encodeURIComponent(record.continued_from)}`, record.continued_from)));
  if (record.forked_from) {
    facts.push(fact("Forked from", link(`/jobs/${encodeURIComponent(record.forked_from)}`, record.forked_from),
      ` at tick ${record.fork.at_tick} (ticks 1–${record.fork.at_tick} replayed at no cost)`));
  }
  return facts;
}

function renderRecord(record) {
  view.record = record;
  $("#job-status").replaceChildren(statusBadge(record.status, "big"));
  const created = parseTime(record.created_at);
  const finished = parseTime(record.finished_at);
  const active = !FINAL_JOB.has(record.status);
  const duration = created && (finished || (active ? new Date() : null));
  const usage = usageText(record.usage);
  $("#job-facts").replaceChildren(
    fact("Kind", view.kind || "—"),
    fact("Created", timeView(record.created_at)),
    fact("Finished", timeView(record.finished_at)),
    fact("Duration", duration ? formatDuration(duration - created) + (finished ? "" : " so far") : "—"),
    fact("Calls", callsSummary() || "—"),
    usage ? fact("Usage", usage) : "",
    record.runs ? fact("Runs", runsView(record.runs)) : "",
    ...lineageFacts(record));
  $("#job-error").replaceChildren(record.error
    ? h("div", { class: "error-box", role: "alert" }, h("strong", {}, record.error.type || "Error"), ": ",
      String(record.error.message ?? ""))
    : "");
  $("#cancel").hidden = !active || !$("#cancel-confirm").hidden;
  if (!active) $("#cancel-confirm").hidden = true;

  const result = record.result;
  $("#result").replaceChildren(result !== null && result !== undefined ? jsonView(result)
    : h("p", { class: "muted" }, active ? "No result yet." : "This job has no result (its state is below)."));
  const state = record.state;
  $("#state").replaceChildren(state !== null && state !== undefined && !(typeof state === "object"
    && !Object.keys(state).length) ? jsonView(state) : h("p", { class: "muted" }, "Empty."));
  const instances = record.instances || {};
  $("#instances-panel").hidden = !Object.keys(instances).length;
  $("#instances").replaceChildren(Object.keys(instances).length ? jsonView(instances) : "");
}

function callsSummary() {
  if (!view.calls.length) return "";
  const counts = new Map();
  for (const call of view.calls) counts.set(call.status || "unknown", (counts.get(call.status || "unknown") || 0) + 1);
  return `${view.calls.length} · ` + [...counts].map(([status, n]) => `${n} ${status.replace(/_/g, " ")}`).join(", ");
}

// ------------------------------------------------------------------------------------------------ calls

function callLabel(callId) {
  const call = view.callIndex.get(callId);
  if (!call) return callId;
  return `#${call.n} ${call.tool}${call.instance ? ` (${call.instance})` : ""}`;
}

function callAnchor(callId) {
  return `call-${classOf(callId)}`;
}

function callRef(callId) {
  return h("a", { class: "call-ref", href: `#${callAnchor(callId)}`, dataset: { callId } }, callLabel(callId));
}

/** The window the timeline spans: from the job's creation (or first start) to its end (or now). */
function timelineWindow(calls) {
  const starts = calls.map((c) => parseTime(c.started_at)).filter(Boolean).map(Number);
  const ends = calls.map((c) => parseTime(c.finished_at)).filter(Boolean).map(Number);
  const created = parseTime(view.record?.created_at);
  const finished = parseTime(view.record?.finished_at);
  const t0 = Math.min(...starts, created ? Number(created) : Infinity);
  const running = calls.some((c) => c.started_at && !c.finished_at) || (view.record && !FINAL_JOB.has(view.record.status));
  const t1 = Math.max(...ends, finished ? Number(finished) : -Infinity, running ? Date.now() : -Infinity);
  if (!Number.isFinite(t0) || !Number.isFinite(t1)) return null;
  return { t0, t1: Math.max(t1, t0 + 1) };
}

function timelineCell(call, span) {
  const cell = h("td", { class: "timeline" });
  const started = parseTime(call.started_at);
  if (!span || !started) {
    cell.append(h("span", { class: "muted small" }, {
      pending: "waiting for its inputs", ready: "queued", awaiting_approval: "waiting for a reviewer",
      skipped: "skipped", canceled: "canceled", failed: "never ran",
    }[call.status] || ""));
    return cell;
  }
  const finished = parseTime(call.finished_at);
  const end = finished ? Number(finished) : Date.now();
  const total = span.t1 - span.t0;
  const left = ((Number(started) - span.t0) / total) * 100;
  const width = Math.max(((end - Number(started)) / total) * 100, 0.6);
  const bar = h("span", { class: ["bar", `status-${classOf(call.status)}`],
    title: `${callLabel(call.id)}: started ${started.toISOString()}` +
      (finished ? `, finished ${finished.toISOString()}` : call.status === "waiting" ? ", waiting (holds nothing)" : ", still running") });
  bar.style.left = `${Math.min(Math.max(left, 0), 99.4)}%`;
  bar.style.width = `${Math.min(width, 100 - Math.min(Math.max(left, 0), 99.4))}%`;
  cell.append(h("span", { class: "track" }, bar));
  return cell;
}

function callDuration(call) {
  const started = parseTime(call.started_at);
  if (!started) return "—";
  if (call.status === "running" && !call.finished_at) return `${formatDuration(Date.now() - started)} so far`;
  return formatDuration(call.duration_ms ?? NaN);
}

function callRow(call, span) {
  const filtered = view.filter === call.id;
  const status = [statusBadge(call.status)];
  if (call.status === "failed" && view.absorbed.has(call.id)) {
    status.push(h("span", { class: "note small", title: "the failure was written to the output path's || alternative; the job went on" }, "taken by ||"));
  }
  const waits = call.depends_on && call.depends_on.length
    ? h("ul", { class: "waits" }, call.depends_on.map((id) => {
      const done = FINAL_CALL.has(view.callIndex.get(id)?.status);
      return h("li", { class: done ? "dep-done" : "dep-open", title: done ? "finished" : "not finished yet" },
        h("span", { class: "dep-mark", "aria-hidden": "true" }, done ? "✓ " : "◌ "), callRef(id));
    }))
    : h("span", { class: "muted" }, "—");
  const error = call.error ? h("div", { class: "row-error" }, `${call.error.type}: ${call.error.message}`) : null;
  return h("tr", { id: callAnchor(call.id), class: ["call-row", `status-row-${classOf(call.status)}`, filtered && "is-filtered"],
                   dataset: { callId: call.id, status: call.status || "" } },
    h("th", { scope: "row", class: "call-cell" },
      h("span", { class: "call-n" }, `#${call.n}`), " ",
      h("span", { class: "tool-name" }, call.tool),
      call.instance ? h("span", { class: "chip instance", title: "instance" }, call.instance) : null,
      call.mode && call.mode !== "explicit" ? h("span", { class: "chip" }, call.mode) : null,
      h("div", { class: "call-id muted small mono" }, call.id,
        call.output_path ? h("span", { class: "output-path", title: "output path" }, ` → ${call.output_path}`) : null),
      error),
    h("td", {}, ...status),
    h("td", { class: "num" }, String(call.attempts ?? 0)),
    h("td", { class: "num" }, callDuration(call)),
    h("td", {}, waits),
    timelineCell(call, span),
    h("td", { class: "row-actions" }, h("button", {
      type: "button", class: "small link", "aria-pressed": filtered ? "true" : "false",
      "aria-label": `Show only the events of ${callLabel(call.id)}`,
      onclick: () => setFilter(filtered ? null : call.id),
    }, filtered ? "all events" : "events")));
}

function renderCalls(calls) {
  view.calls = calls.map((call, i) => ({ ...call, n: i + 1 }));
  view.callIndex = new Map(view.calls.map((call) => [call.id, call]));
  const span = timelineWindow(view.calls);
  $("#timeline-span").textContent = span ? `(${formatDuration(span.t1 - span.t0)})` : "";
  $("#calls tbody").replaceChildren(...view.calls.map((call) => callRow(call, span)));
  $("#calls-empty").hidden = view.calls.length > 0;
  $("#calls-summary").textContent = callsSummary();
  for (const ref of document.querySelectorAll(".call-ref[data-call-id]")) ref.textContent = callLabel(ref.dataset.callId);
  // once the job has ended nothing can be approved any more (a fire-and-forget call may still show as waiting)
  const ended = view.record && FINAL_JOB.has(view.record.status);
  renderApprovals(ended ? [] : view.calls.filter((call) => call.status === "awaiting_approval" && !view.decided.has(call.id)));
}

// ------------------------------------------------------------------------------------------------ approvals

function renderApprovals(waiting) {
  const list = $("#approval-list");
  const ids = new Set(waiting.map((call) => call.id));
  for (const card of [...list.children]) {
    if (!ids.has(card.dataset.callId)) card.remove(); // decided (here or elsewhere): gone
  }
  for (const call of waiting) {
    if (!list.querySelector(`[data-call-id="${CSS.escape(call.id)}"]`)) list.append(approvalCard(call));
  }
  $("#approvals").hidden = waiting.length === 0;
}

function approvalCard(call) {
  const label = callLabel(call.id);
  const titleId = `approval-title-${classOf(call.id)}`;
  const problem = h("div", { class: "card-error" });
  const params = call.params && typeof call.params === "object" ? call.params : null;
  const buttons = [];
  const card = h("article", { class: "approval-card", dataset: { callId: call.id }, "aria-labelledby": titleId });

  const decide = async (action, body, done) => {
    problem.replaceChildren();
    for (const b of buttons) b.disabled = true;
    try {
      await api("POST", `${jobPath}/calls/${encodeURIComponent(call.id)}/${action}`, { body });
      view.decided.add(call.id);
      card.remove();
      if (!$("#approval-list").children.length) $("#approvals").hidden = true;
      toast(done);
      refresh();
    } catch (error) {
      problem.replaceChildren(errorView(error, {
        title: `Cannot ${action} ${label}`,
        onPointer: action === "edit" ? (pointer) => editEditor.showPointer(pointer.replace(/^\/params/, "")) : null,
      }));
      for (const b of buttons) b.disabled = false;
      if (error.status === 409 || error.status === 404) refresh();
    }
  };

  // reject: an optional reason
  const reasonId = `reason-${classOf(call.id)}`;
  const reason = h("input", { id: reasonId, type: "text", maxlength: "2000", placeholder: "why not (optional)" });
  const rejectForm = h("form", { class: "inline-form", hidden: true },
    h("label", { for: reasonId }, "Reason"), reason,
    h("button", { type: "submit", class: "danger" }, "Reject call"),
    h("button", { type: "button", onclick: () => { rejectForm.hidden = true; } }, "Back"));
  rejectForm.addEventListener("submit", (event) => {
    event.preventDefault();
    const text = reason.value.trim();
    decide("reject", text ? { reason: text } : {}, `${label} rejected`);
  });

  // edit: the call's parameters in a JSON editor
  const editEditor = jsonEditor({
    id: `params-${classOf(call.id)}`, label: "Parameters (JSON object; meta fields such as _tool stay as they are)",
    rows: 10, value: JSON.stringify(params || {}, null, 2),
    describe: (value) => (value && typeof value === "object" && !Array.isArray(value)
      ? { ok: `valid JSON · ${Object.keys(value).length} parameter(s)` } : { error: "params must be a JSON object" }),
  });
  const editForm = h("form", { class: "edit-form", hidden: true }, editEditor.element,
    h("div", { class: "form-actions" },
      h("button", { type: "submit", class: "primary" }, "Run with these parameters"),
      h("button", { type: "button", onclick: () => { editForm.hidden = true; } }, "Back")));
  editForm.addEventListener("submit", (event) => {
    event.preventDefault();
    if (!editEditor.validate()) return;
    decide("edit", { params: editEditor.parsed }, `${label} edited and approved`);
  });

  const approve = h("button", { type: "button", class: "primary", "aria-label": `Approve ${label}`,
    onclick: () => decide("approve", undefined, `${label} approved`) }, "Approve");
  const reject = h("button", { type: "button", class: "danger", "aria-label": `Reject ${label}…`,
    onclick: () => { rejectForm.hidden = false; editForm.hidden = true; reason.focus(); } }, "Reject…");
  const edit = h("button", { type: "button", "aria-label": `Edit the parameters of ${label}…`,
    onclick: () => { editForm.hidden = false; rejectForm.hidden = true; editEditor.textarea.focus(); } }, "Edit…");
  buttons.push(approve, reject, edit, ...rejectForm.querySelectorAll("button"), ...editForm.querySelectorAll("button"));

  append(card, [
    h("header", {},
      h("h3", { id: titleId }, h("span", { class: "call-n" }, `#${call.n}`), " ", call.tool,
        call.instance ? h("span", { class: "chip instance" }, call.instance) : null),
      h("span", { class: "muted small mono" }, call.id)),
    call.output_path ? h("p", { class: "small" }, "Writes to ", h("code", {}, call.output_path)) : null,
    params ? h("div", { class: "params" }, h("p", { class: "small muted" }, "Parameters as planned (references resolve when it runs)"), jsonView(params)) : null,
    h("div", { class: "card-actions" }, approve, reject, edit),
    rejectForm, editForm, problem,
  ]);
  return card;
}

function append(el, children) {
  for (const child of children) if (child) el.append(child);
}

// ------------------------------------------------------------------------------------------------ events

function blockIcon(part) {
  return part.display_info?.icon || DEFAULT_ICONS[part.activity_type] || "⚙️";
}

function blockName(part, icon) {
  let name = part.display_info?.friendly_name || part.activity_type || "activity";
  if (icon && name.startsWith(icon)) name = name.slice(icon.length).trim(); // "🔧 Tool call" beside its icon
  return name || part.activity_type;
}

function kindChip(part) {
  const kinds = { tool_request: "request", tool_result: "result", tool_call: "call" };
  const kind = kinds[part.activity_type];
  if (!kind) return null;
  const failed = (part.results || []).some((r) => r.is_error);
  return h("span", { class: ["chip", "kind", failed && "is-error"] }, failed ? "error" : kind);
}

function toolsView(tools) {
  return (tools || []).map((tool) => h("div", { class: "tool-call" },
    h("div", { class: "sub-head" }, h("span", { class: "label" }, "Arguments of "), h("code", {}, String(tool.name ?? "")),
      tool.id ? h("span", { class: "muted small mono" }, ` ${tool.id}`) : null),
    jsonView(tool.arguments ?? {})));
}

function resultsView(results) {
  return (results || []).map((result) => h("div", { class: ["tool-result", result.is_error && "is-error"] },
    h("div", { class: "sub-head" }, h("span", { class: "label" }, result.is_error ? "Error of " : "Result of "),
      h("code", {}, String(result.name ?? ""))),
    contentView(result.content ?? "")));
}

/** The first line of an activity's text (or of a failed result) shown in its summary, shortened. */
function preview(part, failed) {
  let text = typeof part.content === "string" ? part.content : "";
  if (!text && failed) text = (part.results || []).find((r) => r.is_error)?.content || "";
  if (!text || (part.tools && part.tools.length && !failed)) return null;
  const line = String(text).split("\n").find((l) => l.trim()) || "";
  return h("span", { class: "activity-preview" }, line.length > 90 ? `${line.slice(0, 89)}…` : line);
}

function activityBlock(id, part, envelope) {
  const type = String(part.activity_type || "activity");
  const icon = blockIcon(part);
  const failed = type === "error" || (part.results || []).some((r) => r.is_error);
  const block = h("details", {
    class: ["activity-block", classOf(type), `type-${classOf(type)}`, failed && "is-error"],
    dataset: { eventId: id, event: envelope.event || "", callId: envelope.call_id || "", activityType: type },
    open: failed,
  });
  const color = part.display_info?.color;
  if (typeof color === "string" && CSS.supports("color", color)) block.style.setProperty("--block-color", color);
  const chips = [kindChip(part)];
  if (envelope.instance) chips.push(h("span", { class: "chip instance" }, envelope.instance));
  if (envelope.attempt > 1) chips.push(h("span", { class: "chip" }, `attempt ${envelope.attempt}`));
  if (part.source && part.source !== "agentq") chips.push(h("span", { class: "chip source", title: "source" }, part.source));
  block.append(h("summary", {},
    h("span", { class: "activity-icon", "aria-hidden": "true" }, icon),
    h("span", { class: "activity-name" }, blockName(part, icon)),
    ...chips.filter(Boolean),
    preview(part, failed),
    envelope.call_id ? callRef(envelope.call_id) : null,
    h("span", { class: "activity-time" }, timeView(part.timestamp, { ms: true }))));

  const details = h("div", { class: "activity-details" });
  if (part.display_info?.description) details.append(h("p", { class: "muted small description" }, part.display_info.description));
  if (part.content !== null && part.content !== undefined && part.content !== "") {
    details.append(h("div", { class: ["activity-content", failed && "is-error"] }, String(part.content)));
  }
  details.append(...toolsView(part.tools), ...resultsView(part.results));
  if (envelope.event === "call.finished" && envelope.absorbed) {
    details.append(h("p", { class: "note" }, "The failure was written to the output path's || alternative; the job goes on."));
  }
  if (envelope.event === "call.finished" && typeof envelope.duration_ms === "number" && envelope.duration_ms > 0) {
    details.append(h("p", { class: "muted small" }, `Ran ${formatDuration(envelope.duration_ms)}.`));
  }
  if (!details.childNodes.length) details.append(h("p", { class: "muted small" }, "No details."));
  block.append(details);
  return block;
}

/** A text part (the agent's answer): its text, or pretty JSON when the text is JSON. */
function textBlock(id, part, envelope) {
  const block = h("div", { class: "text-part", dataset: { eventId: id, event: envelope.event || "", callId: envelope.call_id || "" } },
    h("div", { class: "text-head" }, h("span", { "aria-hidden": "true" }, "💬 "), "Answer"),
    h("div", { class: "text-body" }));
  setText(block, String(part.text ?? ""));
  return block;
}

function setText(block, text) {
  block.rawText = text;
  block.querySelector(".text-body").replaceChildren(/^\s*[[{]/.test(text) ? contentView(text) : text);
}

/** A short line for an envelope that carries no part (a retry, a later attempt, a tick...). */
function eventLine(id, envelope) {
  const e = envelope;
  const call = e.call_id ? (view.callIndex.has(e.call_id) ? callLabel(e.call_id) : e.tool || e.call_id) : "";
  let text;
  let kind = "info";
  switch (e.event) {
    case "call.started":
      text = `${call}: attempt ${e.attempt} started`;
      break;
    case "call.awaiting_approval":
      kind = "warn";
      text = `${call}: awaiting a reviewer's approval`;
      break;
    case "call.waiting":
      text = `${call}: waiting for ${waitedFor(e.awaits)}` + (e.until ? ` until ${e.until}` : " (no timeout)");
      break;
    case "call.retrying":
      kind = "warn";
      text = `${call}: attempt ${e.attempt} failed (${e.error?.type}: ${e.error?.message}); retrying in ${formatDuration((e.retry_in_s ?? 0) * 1000)}`;
      break;
    case "call.finished":
      kind = e.status === "failed" ? "error" : "info";
      text = `${call}: ${e.status}` + (e.error ? ` (${e.error.type}: ${e.error.message})` : "");
      break;
    case "tick.started":
      text = `Tick ${e.tick}: asking the model` + (e.attempt > 1 ? ` (attempt ${e.attempt})` : "") + (e.corrective ? ", with the problems of its last answer" : "");
      break;
    case "tick.finished":
      kind = e.problems && e.problems.length ? "warn" : "info";
      text = `Tick ${e.tick}: ${e.calls} call(s)` + (e.problems && e.problems.length ? `, ${e.problems.length} problem(s)` : "") + (e.output ? ", with the final output" : "");
      break;
    case "job.queued":
      text = `Job queued (${e.kind}, ${e.calls} calls)`;
      break;
    case "job.finished":
      kind = e.status === "succeeded" ? "ok" : "error";
      text = `Job ${e.status}` + (e.error ? `: ${e.error.type}: ${e.error.message}` : "");
      break;
    default:
      text = e.event || "event";
  }
  return h("div", { class: ["event-line", `line-${kind}`], dataset: { eventId: id, event: e.event || "", callId: e.call_id || "" } },
    h("span", { class: "event-name mono" }, e.event || ""), " ", text);
}

/** What a `call.waiting` event says its call waits for. */
function waitedFor(awaits) {
  if (!awaits) return "something";
  if (awaits.kind === "event") {
    const match = Object.entries(awaits.match || {}).map(([k, v]) => `${k} = ${JSON.stringify(v)}`).join(", ");
    return `event ${awaits.event}` + (match ? ` where ${match}` : "");
  }
  if (awaits.kind === "signal") return `signal ${awaits.signal}`;
  return "its time";
}

function renderEnvelope(id, envelope) {
  if (id && view.seen.has(id)) return; // a reconnect never shows an event twice
  if (id) view.seen.add(id);
  view.eventCount++;
  $("#event-count").textContent = `${view.eventCount} event${view.eventCount === 1 ? "" : "s"}`;
  if (envelope.event === "job.queued" && envelope.kind) view.kind = envelope.kind;
  if (envelope.event === "call.finished" && envelope.absorbed) view.absorbed.add(envelope.call_id);

  const box = $("#events");
  const atBottom = box.scrollHeight - box.scrollTop - box.clientHeight < 40;
  const part = envelope.part;
  let node;
  if (part && part.type === "activity") {
    node = activityBlock(id, part, envelope);
  } else if (part && typeof part.text === "string") {
    const last = box.lastElementChild;
    if (part.type === "text_output_stream" && last && last.classList.contains("text-part")) {
      setText(last, (last.rawText || "") + part.text); // stream chunks grow one text
      return;
    }
    node = textBlock(id, part, envelope);
  } else {
    node = eventLine(id, envelope);
  }
  if (view.filter && node.dataset.callId !== view.filter) node.hidden = true;
  box.append(node);
  if (atBottom) box.scrollTop = box.scrollHeight;
}

function setFilter(callId) {
  view.filter = callId;
  for (const node of $("#events").children) node.hidden = Boolean(callId) && node.dataset.callId !== callId;
  $("#events-title").textContent = callId ? `Activity of ${callLabel(callId)}` : "Activity";
  renderCalls(view.calls.map(({ n, ...call }) => call));
}

$("#expand-all").addEventListener("click", () => {
  for (const block of document.querySelectorAll("#events details")) block.open = true;
});
$("#collapse-all").addEventListener("click", () => {
  for (const block of document.querySelectorAll("#events details")) block.open = false;
});

// ------------------------------------------------------------------------------------------------ the stream

let source = null;
let failures = 0;

function connect() {
  const query = view.lastEventId ? `?after=${encodeURIComponent(view.lastEventId)}` : "";
  source = new EventSource(`${jobPath}/events${query}`);
  source.addEventListener("open", () => {
    failures = 0;
    setLive("live");
  });
  for (const name of EVENT_NAMES) source.addEventListener(name, onEvent);
  source.addEventListener("error", onStreamError);
}

function onEvent(event) {
  let envelope;
  try {
    envelope = JSON.parse(event.data);
  } catch {
    return;
  }
  if (event.lastEventId) view.lastEventId = event.lastEventId;
  renderEnvelope(event.lastEventId, envelope);
  if (/^(call|job)\./.test(envelope.event || "")) scheduleRefresh();
  if (envelope.event === "job.finished") {
    // the server ends the stream after the job's last end; one a `job.resumed` follows ended a run only
    view.finished = true;
    setLive("ended");
    refresh();
  } else if (envelope.event === "job.resumed") {
    view.finished = false;
    setLive("live");
  }
}

async function onStreamError() {
  if (view.finished) {
    source.close();
    return;
  }
  if (source.readyState === EventSource.CONNECTING) { // the browser reconnects with Last-Event-ID itself
    setLive("reconnecting");
    return;
  }
  // closed: the server answered without a stream (it was restarting; a 204 after the job's last event)
  failures++;
  setLive("reconnecting");
  const record = await refresh();
  if (record && FINAL_JOB.has(record.status) && failures > 1) {
    setLive("ended");
    return;
  }
  if (failures > 12) {
    setLive("offline", "disconnected: reload the page to retry");
    return;
  }
  setTimeout(connect, Math.min(10000, 250 * 2 ** failures));
}

// ------------------------------------------------------------------------------------------------ refresh

let refreshing = null;
let refreshAgain = false;
let refreshTimer = null;
let lastRefresh = 0;

function scheduleRefresh(delay = 120) {
  if (refreshTimer) return;
  refreshTimer = setTimeout(() => {
    refreshTimer = null;
    refresh();
  }, delay);
}

/** Re-fetch the record and the calls view (one at a time; a request made meanwhile runs once after). */
async function refresh() {
  if (refreshing) {
    refreshAgain = true;
    return refreshing;
  }
  refreshing = (async () => {
    try {
      const [record, calls] = await Promise.all([api("GET", jobPath), api("GET", `${jobPath}/calls`)]);
      view.record = record;
      renderCalls(calls);
      renderRecord(record);
      $("#job-error").dataset.stale = "";
      return record;
    } catch (error) {
      if (error.status === 404) {
        notFound(error);
      } else {
        $("#job-error").replaceChildren(errorView(error, { title: "Cannot read the job" }));
      }
      return null;
    } finally {
      lastRefresh = Date.now();
    }
  })();
  try {
    return await refreshing;
  } finally {
    refreshing = null;
    if (refreshAgain) {
      refreshAgain = false;
      scheduleRefresh(50);
    }
  }
}

let missing = false;
function notFound(error) {
  missing = true;
  if (source) source.close();
  setLive("ended", "no such job");
  $("#job-error").replaceChildren(errorView(error, { title: "No such job" }));
}

// ------------------------------------------------------------------------------------------------ cancel

$("#cancel").addEventListener("click", () => {
  $("#cancel").hidden = true;
  $("#cancel-confirm").hidden = false;
  $("#cancel-no").focus();
});
$("#cancel-no").addEventListener("click", () => {
  $("#cancel-confirm").hidden = true;
  $("#cancel").hidden = false;
});
$("#cancel-yes").addEventListener("click", async () => {
  $("#cancel-yes").disabled = true;
  try {
    renderRecord(await api("POST", `${jobPath}/cancel`));
    $("#cancel-confirm").hidden = true;
    toast("Job canceled");
    refresh();
  } catch (error) {
    $("#job-error").replaceChildren(errorView(error, { title: "Cannot cancel the job" }));
  } finally {
    $("#cancel-yes").disabled = false;
  }
});

// ------------------------------------------------------------------------------------------------ start

(async () => {
  showTenant();
  const record = await refresh();
  if (missing || record === null && !view.record) {
    if (!missing) setLive("offline", "cannot read the job");
    return;
  }
  connect();
  setInterval(() => { // approvals and running bars change without an event: a slow poll while the job runs
    if (missing || document.hidden || Date.now() - lastRefresh < POLL_MS * 0.9) return;
    if (view.record && FINAL_JOB.has(view.record.status) && view.finished) return;
    refresh();
  }, POLL_MS);
})();


// The job's usage as one line: its counters, then its cost (null when a model had no price; by_model left out).
function usageText(usage) {
  const counts = Object.entries(usage || {}).filter(([k, v]) => typeof v === "number" && k !== "cost_usd");
  if (!counts.some(([, n]) => n)) return null;
  const cost = usage.cost_usd == null ? "cost unknown" : `$${usage.cost_usd.toFixed(usage.cost_usd >= 0.01 ? 4 : 6)}`;
  return [...counts.map(([k, v]) => `${k.replace(/_/g, " ")} ${v}`), cost].join(" · ");
}
