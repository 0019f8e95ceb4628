// The client against a real `agentq api --embedded` (test/server.mjs): submit and wait, stream and resume after a
// dropped connection, approvals, cancel, and the errors a service meets (422, 429, 404, 401).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import {
  AgentqClient, JobValidationError, InvalidRequest, NotFound, RateLimited, Unauthorized, Conflict, AgentqError,
  JobTimeoutError,
} from "../dist/index.js";
import { startDroppingProxy } from "./proxy.mjs";
import { ADMIN_TOKEN, LIMITED_TOKEN, collect, startFixture } from "./server.mjs";

let api;
let client;
let examples;

before(async () => {
  ({ api, client, examples } = await startFixture());
});

after(async () => {
  await api?.stop();
});

test("a plan job is submitted and its result read", async () => {
  const handle = await client.submit(examples.demo_order);
  assert.match(handle.id, /^job_/);
  assert.ok(["queued", "running", "succeeded"].includes(handle.record.status));
  const record = await handle.result({ timeoutMs: 60_000 });
  assert.equal(record.status, "succeeded", JSON.stringify(record.error));
  assert.equal(record.state.order.id, "ord_2024_0042");
  assert.ok(record.state.audit.length >= 2);
  const calls = await handle.calls();
  assert.ok(calls.length >= 9 && calls.every((call) => call.status !== null));
});

test("the same idempotency key returns the same job", async () => {
  const first = await client.submit(examples.demo_order, { idempotencyKey: "ts-order-42" });
  const again = await client.submit(examples.demo_order, { idempotencyKey: "ts-order-42" });
  assert.equal(again.id, first.id);
  await first.result({ timeoutMs: 60_000 });
});

test("an agent job's events stream, resumed after a dropped connection with none lost or repeated", async () => {
  const proxy = await startDroppingProxy(api.baseUrl, { afterEvents: 4 });
  try {
    const through = new AgentqClient({ baseUrl: proxy.url, token: ADMIN_TOKEN });
    const handle = await through.submit(examples.demo_agent);
    const streamed = await collect(handle.events({ reconnectDelayMs: 50 }));
    assert.equal(proxy.state.drops, 1, "the proxy cut the first stream");
    assert.equal(proxy.state.lastEventIds.length, 1, "one reconnect, with Last-Event-ID");
    assert.equal(proxy.state.lastEventIds[0], streamed[3].id, "it resumed after the 4th event");
    const ids = streamed.map((e) => e.id);
    assert.equal(new Set(ids).size, ids.length, "no event repeated");
    assert.equal(streamed.at(-1).event, "job.finished");
    assert.equal(streamed.at(-1).data.status, "succeeded");
    assert.ok(streamed.some((e) => e.event === "tick.started") && streamed.some((e) => e.event === "call.finished"));
    // the whole stream read again in one go, after the job ended: exactly the same events
    const whole = await collect(client.job(handle.id).events());
    assert.deepEqual(streamed.map((e) => [e.id, e.event, e.data]), whole.map((e) => [e.id, e.event, e.data]));
    // resuming after the final event: nothing follows
    assert.deepEqual(await collect(client.job(handle.id).events({ after: whole.at(-1).id })), []);
    const record = await client.job(handle.id).result();
    assert.equal(record.status, "succeeded");
    assert.ok(record.result !== null && typeof record.result === "object");
  } finally {
    await proxy.close();
  }
});

test("a call held for approval is approved, and the job ends", async () => {
  const job = { ...examples.demo_order, options: { ...examples.demo_order.options, approval: ["sendConfirmation"] } };
  const handle = await client.submit(job);
  const approved = [];
  for await (const event of handle.events()) {
    if (event.event === "call.awaiting_approval") {
      const held = (await handle.calls()).find((call) => call.id === event.data.call_id);
      assert.equal(held.tool, "sendConfirmation");
      assert.equal(held.status, "awaiting_approval");
      const call = await handle.approve(event.data.call_id);
      assert.equal(call.id, event.data.call_id);
      approved.push(call.id);
      await assert.rejects(handle.approve(call.id), Conflict); // it is no longer held
    }
  }
  assert.equal(approved.length, 1);
  assert.equal((await handle.result()).status, "succeeded");
});

test("held calls are edited and rejected", async () => {
  const job = { ...examples.demo_order, options: { ...examples.demo_order.options, approval: ["recordAudit"] } };
  const handle = await client.submit(job);
  const decided = {};
  for await (const event of handle.events()) {
    if (event.event !== "call.awaiting_approval") continue;
    const held = (await handle.calls()).find((call) => call.id === event.data.call_id);
    if (held.params.event === "order.validated") {
      const edited = await handle.edit(held.id, { ...held.params, event: "order.checked" });
      decided.edited = edited.id;
      assert.equal(edited.params.event, "order.checked");
    } else {
      decided.rejected = (await handle.reject(held.id, "no audit for payments today")).id;
    }
  }
  const record = await handle.result();
  const calls = Object.fromEntries((await handle.calls()).map((call) => [call.id, call]));
  assert.equal(calls[decided.edited].status, "done");
  assert.equal(calls[decided.rejected].status, "failed");
  assert.match(calls[decided.rejected].error.message, /no audit for payments today/);
  assert.ok(record.state.audit.some((entry) => JSON.stringify(entry).includes("order.checked")), JSON.stringify(record.state.audit));
});

test("a held job is canceled", async () => {
  const job = { ...examples.demo_order, options: { ...examples.demo_order.options, approval: ["validateOrder"] } };
  const handle = await client.submit(job);
  for await (const event of handle.events()) if (event.event === "call.awaiting_approval") break;
  await assert.rejects(handle.result({ timeoutMs: 200 }), JobTimeoutError);
  const record = await handle.cancel();
  assert.equal(record.status, "canceled");
  assert.equal((await handle.result()).status, "canceled");
});

test("a job waiting for a signal and one waiting for an event are woken by the client", async () => {
  const signalJob = {
    context: [{ type: "data", kind: "state", data: { order: { id: "o-17" } } }],
    tools: ["waitForSignal"],
    calls: [{ _tool: "waitForSignal", name: "reviewed", timeout_s: 120, _outputPath: "†state.review" }],
  };
  const waiting = await client.submit(signalJob);
  for await (const event of waiting.events()) if (event.event === "call.waiting") break;
  const sent = await waiting.signal("reviewed", { by: "ada", ok: true });
  assert.equal(sent.signal.name, "reviewed");
  assert.deepEqual(sent.signal.data, { by: "ada", ok: true });
  const signaled = await waiting.result({ timeoutMs: 60_000 });
  assert.equal(signaled.status, "succeeded");
  assert.deepEqual(signaled.state.review.data, { by: "ada", ok: true });

  const eventJob = {
    context: [{ type: "data", kind: "state", data: { order: { id: "o-18" } } }],
    tools: ["waitForEvent"],
    calls: [{ _tool: "waitForEvent", event: "payment.captured", match: { "/order/id": "†state.order.id" },
      timeout_s: 120, _outputPath: "†state.payment" }],
  };
  const paying = await client.submit(eventJob);
  for await (const event of paying.events()) if (event.event === "call.waiting") break;
  assert.equal((await client.sendEvent("payment.captured", { order: { id: "o-other" } })).woken, 0);
  const delivered = await client.sendEvent("payment.captured", { order: { id: "o-18" }, amount_cents: 4990 }, { id: "evt-ts-1" });
  assert.deepEqual([delivered.id, delivered.woken], ["evt-ts-1", 1]);
  const paid = await paying.result({ timeoutMs: 60_000 });
  assert.equal(paid.status, "succeeded");
  assert.equal(paid.state.payment.data.amount_cents, 4990);
});

test("an invalid job is a JobValidationError naming each problem by JSON pointer", async () => {
  const bad = { ...examples.demo_order, calls: [{ _tool: "noSuchTool" }, { _tool: "validateOrder", _outputPath: 5 }] };
  const error = await client.submit(bad).then(() => assert.fail("accepted"), (e) => e);
  assert.ok(error instanceof JobValidationError && error instanceof InvalidRequest && error instanceof AgentqError);
  assert.equal(error.status, 422);
  assert.equal(error.type, "JobValidationError");
  const pointers = error.problems.map((p) => p.pointer);
  assert.ok(pointers.includes("/calls/0/_tool"), JSON.stringify(error.problems));
  assert.ok(pointers.some((p) => p.startsWith("/calls/1")), JSON.stringify(error.problems));
});

test("a tenant over its limit gets RateLimited with retryAfter", async () => {
  const limited = new AgentqClient({ baseUrl: api.baseUrl, token: LIMITED_TOKEN });
  assert.deepEqual(await limited.me(), { tenant: "limited", role: "submit" });
  const first = await limited.submit(examples.demo_order);
  const error = await limited.submit(examples.demo_order).then(() => assert.fail("accepted"), (e) => e);
  assert.ok(error instanceof RateLimited, String(error));
  assert.equal(error.status, 429);
  assert.ok(error.retryAfter >= 1 && error.retryAfter <= 60, String(error.retryAfter));
  assert.match(error.message, /limited/);
  await first.result({ timeoutMs: 60_000 });
});

test("an unknown job is NotFound; a wrong token Unauthorized", async () => {
  await assert.rejects(client.job("job_does_not_exist").status(), NotFound);
  await assert.rejects(collect(client.job("job_does_not_exist").events()), NotFound);
  const stranger = new AgentqClient({ baseUrl: api.baseUrl, token: "not-a-token" });
  await assert.rejects(stranger.listJobs(), Unauthorized);
});

test("the packed tarball installs into an empty folder and submits a job from there", async () => {
  const { execFile } = await import("node:child_process");
  const { mkdirSync, mkdtempSync, writeFileSync } = await import("node:fs");
  const { tmpdir } = await import("node:os");
  const { join } = await import("node:path");
  const { fileURLToPath } = await import("node:url");
  const run = (file, args, options) => new Promise((done, fail) => {
    execFile(file, args, { ...options, maxBuffer: 16 << 20 }, (error, stdout, stderr) =>
      error ? fail(new Error(`${file} ${args.join(" ")}: ${error.message}\n${stderr}`)) : done(stdout));
  });
  const npm = process.platform === "win32" ? "npm.cmd" : "npm";
  const folder = mkdtempSync(join(tmpdir(), "agentq-ts-pack-"));
  const [packed] = JSON.parse(await run(npm, ["pack", "--json", "--ignore-scripts", "--pack-destination", folder], // dist: built by pretest
    { cwd: fileURLToPath(new URL("..", import.meta.url)) }));
  const files = packed.files.map((f) => f.path);
  assert.ok(files.includes("dist/index.js") && files.includes("dist/index.d.ts"), files.join(" "));
  assert.ok(!files.some((f) => f.startsWith("test/") || f.startsWith("node_modules/")), files.join(" "));
  const app = join(folder, "app");
  mkdirSync(app);
  writeFileSync(join(app, "package.json"), JSON.stringify({ name: "uses-agentq", private: true, type: "module" }));
  await run(npm, ["install", "--no-audit", "--no-fund", "--prefer-offline", join(folder, packed.filename)], { cwd: app });
  writeFileSync(join(app, "submit.mjs"), `
    import { AgentqClient } from "@agentq/client";
    const client = new AgentqClient({ baseUrl: process.env.AGENTQ_URL, token: process.env.AGENTQ_TOKEN });
    const job = (await (await fetch(process.env.AGENTQ_URL + "/v1/examples",
      { headers: { Authorization: "Bearer " + process.env.AGENTQ_TOKEN } })).json()).demo_order;
    const handle = await client.submit(job);
    const record = await handle.result({ timeoutMs: 60000 });
    console.log(JSON.stringify({ id: handle.id, status: record.status }));
  `);
  const out = JSON.parse(await run(process.execPath, ["submit.mjs"],
    { cwd: app, env: { ...process.env, AGENTQ_URL: api.baseUrl, AGENTQ_TOKEN: ADMIN_TOKEN } }));
  assert.equal(out.status, "succeeded");
  assert.equal((await client.job(out.id).status()).status, "succeeded"); // the job is the API's own
});
