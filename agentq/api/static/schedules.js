// agentq web page: the schedules (`/schedules`, docs/schedules.md): next runs, last job, paused.
import { $, api, errorView, h, showTenant, statusBadge, timeView } from "/static/common.js";

const REFRESH_MS = 3000;

/** `cron "0 8 * * 1-5" in Europe/Berlin` or `every 30 s`, and the overlap policy, as `agentq schedules` says. */
const timing = (s) => `${s.cron != null ? `cron "${s.cron}" in ${s.timezone}` : `every ${s.every_s} s`}, overlap ${s.overlap}`;

function lastJob(last) {
  if (!last) return h("span", { class: "muted" }, "—");
  return [h("a", { href: `/jobs/${encodeURIComponent(last.id)}`, class: "mono" }, last.id), " ", statusBadge(last.status)];
}

function row(s) {
  const next = s.paused ? h("span", { class: "chip" }, "paused")
    : h("ul", { class: "next-runs" }, s.next_runs.map((t) => h("li", {}, timeView(t))));
  const { fired, skipped, missed } = s.counts;
  return h("tr", { dataset: { schedule: s.name, paused: String(s.paused) } },
    h("th", { scope: "row", class: "mono" }, s.name),
    h("td", {}, s.tenant),
    h("td", { class: "when" }, timing(s)),
    h("td", { class: "next" }, next),
    h("td", { class: "last" }, lastJob(s.last_job)),
    h("td", { class: "num counts", title: s.error || "" }, `${fired} / ${skipped} / ${missed}`));
}

let shown = null;
let busy = false;

function show(schedules) {
  const key = JSON.stringify(schedules);
  if (key === shown) return; // rebuilt only when something changed
  shown = key;
  $("#schedules").replaceChildren(...schedules.map(row));
  $("#schedules-table").hidden = schedules.length === 0;
  $("#schedules-empty").hidden = schedules.length > 0;
}

async function refresh() {
  if (busy) return;
  busy = true;
  try {
    show((await api("GET", "/v1/schedules")).schedules || []);
    $("#schedules-error").replaceChildren();
    $("#schedules-updated").textContent = `updated ${new Date().toLocaleTimeString()}`;
  } catch (error) {
    $("#schedules-error").replaceChildren(errorView(error, { title: "Cannot read the schedules" }));
  } finally {
    busy = false;
  }
}

showTenant();
setInterval(() => {
  if (!document.hidden) refresh();
}, REFRESH_MS);
refresh();
