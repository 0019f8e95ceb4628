// agentq web page: a thread as one conversation (`/threads/{id}`, docs/continue-and-fork.md): each job's new
// messages, then its answer, in order; each job linked to its own page.
import { $, api, contentView, errorView, FINAL_JOB, h, showTenant, statusBadge } from "/static/common.js";

const REFRESH_MS = 3000;
const threadId = decodeURIComponent(location.pathname.split("/").pop() || "");

/** One message a job added: a text as it reads, data as JSON. */
function message(m) {
  const text = m && m.type === "text" ? m.text : m;
  const who = m && m.role === "system" ? "system" : "user";
  return h("li", { class: ["turn", who] }, h("span", { class: "turn-who muted small" }, who), contentView(text));
}

function answer(record) {
  if (record.result !== null && record.result !== undefined) {
    return h("li", { class: ["turn", "assistant"] }, h("span", { class: "turn-who muted small" }, "assistant"),
      contentView(record.result));
  }
  const note = record.error ? `${record.error.type}: ${record.error.message}`
    : FINAL_JOB.has(record.status) ? "No answer." : "Working…";
  return h("li", { class: ["turn", "assistant", "pending"] }, h("span", { class: "turn-who muted small" }, "assistant"),
    h("p", { class: "muted" }, note));
}

function jobEntry(entry) {
  const record = entry.record;
  const cost = record.usage && record.usage.cost_usd;
  return h("li", { class: "thread-job", dataset: { job: entry.id } },
    h("div", { class: "thread-job-head" },
      h("a", { href: `/jobs/${encodeURIComponent(entry.id)}`, class: "mono" }, entry.id), " ", statusBadge(record.status),
      cost !== null && cost !== undefined ? h("span", { class: "muted small" }, ` $${cost.toFixed(4)}`) : ""),
    h("ol", { class: "turns" }, ...(entry.messages || []).map(message), answer(record)));
}

let shown = null;

async function refresh() {
  try {
    const thread = await api("GET", `/v1/threads/${encodeURIComponent(threadId)}`);
    const key = JSON.stringify(thread);
    if (key !== shown) {
      shown = key;
      $("#thread").replaceChildren(...thread.jobs.map(jobEntry));
    }
    $("#thread-error").replaceChildren();
    $("#thread-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
    return thread.jobs.some((j) => !FINAL_JOB.has(j.record.status));
  } catch (error) {
    $("#thread-error").replaceChildren(errorView(error, { title: "Cannot read this conversation" }));
    return false;
  }
}

$("#thread-id").textContent = threadId;
showTenant();
const timer = setInterval(async () => {
  if (!document.hidden && !(await refresh())) clearInterval(timer);
}, REFRESH_MS);
refresh();
