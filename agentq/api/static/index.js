// agentq web page: the job list and the submit form (`/`).
import {
  $, FINAL_JOB, api, errorView, formatAgo, formatDuration, h, jsonEditor, parseTime, statusBadge,
  timeView,
  showTenant,
} from "/static/common.js";

const REFRESH_MS = 3000;

// ------------------------------------------------------------------------------------------------ editor

/** What the editor says about a valid JSON document: the kind of job, or what is wrong with its shape. */
function describeJob(job) {
  if (job === null || typeof job !== "object" || Array.isArray(job)) return { error: "a job is a JSON object" };
  if (Array.isArray(job.calls)) {
    const n = job.calls.length;
    return { ok: `valid JSON · a plan job with ${n} call${n === 1 ? "" : "s"}` };
  }
  if (job.calls !== undefined) return { error: "calls must be an array of calls" };
  const tools = Array.isArray(job.tools) ? job.tools.length : 0;
  return { ok: `valid JSON · an agent job with ${tools} tool${tools === 1 ? "" : "s"}` };
}

const submitButton = $("#submit");
const submitError = $("#submit-error");
const editor = jsonEditor({
  id: "job-editor",
  label: "Job (JSON)",
  rows: 20,
  describe: describeJob,
  onChange: (e) => { submitButton.disabled = !e.valid; },
});
$("#editor-slot").append(editor.element);

async function submit(event) {
  event.preventDefault();
  submitError.replaceChildren();
  if (!editor.validate()) {
    editor.textarea.focus();
    return;
  }
  submitButton.disabled = true; // until the API answers: one click, one job
  submitButton.textContent = "Submitting…";
  try {
    const record = await api("POST", "/v1/jobs", { body: editor.textarea.value });
    location.assign(`/jobs/${encodeURIComponent(record.id)}`);
  } catch (error) {
    submitError.replaceChildren(errorView(error, {
      title: "The job was not accepted",
      onPointer: (pointer) => editor.showPointer(pointer),
    }));
    submitButton.disabled = !editor.valid;
    submitButton.textContent = "Run job";
  }
}

$("#submit-form").addEventListener("submit", submit);
editor.textarea.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && (event.ctrlKey || event.metaKey)) $("#submit-form").requestSubmit();
});

// ------------------------------------------------------------------------------------------------ examples

function exampleSummary(job) {
  if (!job || typeof job !== "object") return "";
  const kind = Array.isArray(job.calls) ? `plan · ${job.calls.length} calls` : "agent";
  const tools = Array.isArray(job.tools) ? ` · ${job.tools.length} tools` : "";
  return kind + tools;
}

function exampleDescription(job) {
  const system = Array.isArray(job?.context) ? job.context.find((m) => m && m.role === "system") : null;
  return system && typeof system.text === "string" ? system.text : "";
}

async function loadExamples() {
  const list = $("#examples");
  try {
    const examples = await api("GET", "/v1/examples");
    const names = Object.keys(examples || {});
    if (!names.length) {
      list.replaceChildren(h("li", { class: "muted" }, "No example jobs are installed."));
      return;
    }
    list.replaceChildren(...names.map((name) => {
      const job = examples[name];
      const description = exampleDescription(job);
      return h("li", {},
        h("button", {
          type: "button", class: "example", dataset: { example: name },
          title: description || null,
          "aria-label": `Load the example ${name} into the editor`,
          onclick: () => {
            editor.setValue(JSON.stringify(job, null, 2));
            submitError.replaceChildren();
            editor.textarea.focus();
            editor.textarea.setSelectionRange(0, 0);
            editor.textarea.scrollTop = 0;
          },
        }, h("span", { class: "example-name" }, name), h("span", { class: "example-kind" }, exampleSummary(job))));
    }));
  } catch (error) {
    list.replaceChildren(h("li", {}, errorView(error, { title: "Cannot load the examples" })));
  }
}

// ------------------------------------------------------------------------------------------------ job list

let shown = "";

function jobRow(record) {
  const created = parseTime(record.created_at);
  const finished = parseTime(record.finished_at);
  const duration = created && finished ? finished - created : created && !FINAL_JOB.has(record.status)
    ? Date.now() - created : null;
  const link = h("a", { href: `/jobs/${encodeURIComponent(record.id)}`, class: "job-link" }, record.id);
  const error = record.error ? h("div", { class: "row-error" }, `${record.error.type}: ${record.error.message}`) : null;
  return h("tr", { dataset: { jobId: record.id, status: record.status } },
    h("td", {}, link, error),
    h("td", {}, statusBadge(record.status)),
    h("td", {}, timeView(record.created_at), h("span", { class: "muted small ago" }, " ", formatAgo(created))),
    h("td", {}, timeView(record.finished_at)),
    h("td", { class: "num" }, duration === null ? "—" : formatDuration(duration)));
}

async function refreshJobs() {
  const status = $("#status-filter").value;
  const query = new URLSearchParams({ limit: "50" });
  if (status) query.set("status", status);
  try {
    const records = await api("GET", `/v1/jobs?${query}`);
    const key = JSON.stringify([status, records]);
    if (key !== shown) { // rebuilt only when something changed (keeps focus and selection otherwise)
      shown = key;
      $("#jobs tbody").replaceChildren(...records.map(jobRow));
      $("#jobs-empty").hidden = records.length > 0;
    }
    $("#jobs-error").replaceChildren();
    $("#jobs-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    $("#jobs-error").replaceChildren(errorView(error, { title: "Cannot list the jobs" }));
  }
}

async function refreshFleet() {
  try {
    const activities = await api("GET", "/v1/activities");
    const names = Object.keys(activities || {});
    const live = names.filter((name) => activities[name].live).length;
    $("#fleet").textContent = `${live} of ${names.length} activit${names.length === 1 ? "y" : "ies"} live`;
    $("#fleet").title = names.map((n) => `${n}: ${activities[n].live ? "live" : "not live"}`).join("\n");
  } catch {
    $("#fleet").textContent = "";
  }
}

$("#status-filter").addEventListener("change", refreshJobs);
showTenant();
loadExamples();
refreshJobs();
refreshFleet();
setInterval(() => {
  if (!document.hidden) refreshJobs();
}, REFRESH_MS);
setInterval(() => {
  if (!document.hidden) refreshFleet();
}, REFRESH_MS * 5);
