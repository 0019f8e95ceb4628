// Resume, continue, fork, threads and compare against a real `agentq api --embedded` (test/server.mjs): a failed
// plan job resumed where it stopped, the packaged agent example continued and forked, two jobs compared, and the
// errors these meet (409, 404, 410, 422).
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { Conflict, InvalidRequest, JobExpired, NotFound } from "../dist/index.js";
import { collect, startFixture } from "./server.mjs";

let api;
let client;
let examples;

before(async () => {
  ({ api, client, examples } = await startFixture());
});

after(async () => {
  await api?.stop();
});

test("a failed plan job is resumed where it stopped; resuming it while it runs or once it succeeded is a Conflict", async () => {
  // the last call is held for a reviewer nobody is: the job runs past its deadline and fails
  const options = { ...examples.demo_order.options, approval: ["sendConfirmation"], deadline_s: 1 };
  const handle = await client.submit({ ...examples.demo_order, options });
  const events = await collect(handle.events());
  const end = events.at(-1);
  assert.equal(end.event, "job.finished");
  assert.ok(events.some((event) => event.event === "call.awaiting_approval"));
  const failed = await handle.result();
  assert.equal(failed.status, "failed", JSON.stringify(failed));
  assert.equal(failed.error.type, "DeadlineExceeded", JSON.stringify(failed.error));
  const firstRun = await handle.calls();
  const committed = firstRun.filter((call) => call.status === "done").map((call) => call.id);
  const notDone = firstRun.filter((call) => call.status !== "done").map((call) => call.id);
  const held = firstRun.find((call) => call.tool === "sendConfirmation");
  assert.equal(held.status, "canceled", "the deadline stopped the held call");
  assert.ok(committed.length >= 5, JSON.stringify(firstRun.map((call) => [call.tool, call.status])));

  const resumed = await handle.resume({ deadline_s: 120 });
  // active again at once (its held call may already be held again)
  assert.ok(["running", "awaiting_approval"].includes(resumed.status), resumed.status);
  assert.equal(handle.record, resumed);
  assert.deepEqual(resumed.runs.map((run) => run.run), [1, 2]);
  assert.equal(resumed.runs[0].status, "failed");
  const twice = await handle.resume().then(() => assert.fail("resumed twice"), (e) => e);
  assert.ok(twice instanceof Conflict && twice.status === 409, String(twice));

  const started = [];
  const second = [];
  for await (const event of handle.events({ after: end.id })) {
    second.push(event.event);
    if (event.event === "call.started") started.push(event.data.call_id);
    if (event.event === "call.awaiting_approval") await handle.approve(event.data.call_id);
  }
  assert.equal(second[0], "job.resumed");
  assert.equal(second.at(-1), "job.finished");
  assert.deepEqual([...new Set(started)].sort(), [...notDone].sort(), "only the calls that had not committed ran again");
  const record = await handle.result({ timeoutMs: 60_000 });
  assert.equal(record.status, "succeeded", JSON.stringify(record.error));
  assert.deepEqual(record.runs.map((run) => run.status), ["failed", "succeeded"]);

  // the whole stream, read from the start, goes on past the first run's end to the resumed run's
  const whole = (await collect(client.job(handle.id).events())).map((e) => e.event);
  assert.deepEqual(whole.filter((name) => name === "job.finished" || name === "job.resumed"),
    ["job.finished", "job.resumed", "job.finished"]);
  assert.equal(whole.at(-1), "job.finished");

  const done = await client.resume(handle.id).then(() => assert.fail("resumed a succeeded job"), (e) => e);
  assert.ok(done instanceof Conflict && done.status === 409, String(done));
  assert.equal((await handle.status()).runs.length, 2, "a refused resume writes nothing");
});

test("an ended agent job is continued and forked; its thread, its forks and a comparison list them", async () => {
  const original = await client.submit(examples.demo_agent);
  const ended = await original.result({ timeoutMs: 60_000 });
  assert.equal(ended.status, "succeeded", JSON.stringify(ended.error));

  const message = { type: "text", text: "Can it come by express instead?" };
  const next = await original.continue([message], { max_ticks: 4 });
  assert.match(next.id, /^job_/);
  assert.notEqual(next.id, original.id);
  assert.equal(next.record.continued_from, original.id);
  assert.equal(next.record.thread, original.id);
  const thread = await client.thread(original.id);
  assert.equal(thread.thread, original.id);
  assert.deepEqual(thread.jobs.map((job) => job.id), [original.id, next.id]);
  assert.deepEqual(thread.jobs[1].messages, [message]);
  assert.equal(thread.jobs[1].record.continued_from, original.id);
  const continued = await next.result({ timeoutMs: 60_000 });
  // its request went to the model with the new message after the old conversation; the packaged replay has no
  // answer recorded for it (only the example's own requests), so the continuation fails with ReplayUnmatched
  assert.equal(continued.status, "failed");
  assert.equal(continued.error.type, "ReplayUnmatched", JSON.stringify(continued.error));
  assert.match(continued.error.message, /Can it come by express instead\?/);
  assert.equal((await original.status()).status, "succeeded", "the old job is never changed");

  const fork = await original.fork(1);
  assert.equal(fork.record.forked_from, original.id);
  const forked = await fork.result({ timeoutMs: 60_000 });
  assert.equal(forked.status, "succeeded", JSON.stringify(forked.error));
  assert.equal(forked.fork.at_tick, 1);
  assert.equal(forked.fork.replayed.length, 1);
  assert.deepEqual(forked.result, ended.result, "the same answers from tick 2 on: the same output");
  const forks = await original.forks();
  assert.equal(forks.job, original.id);
  assert.deepEqual(forks.forks.map((f) => f.id), [fork.id]);

  const diff = await client.diff(original.id, fork.id);
  assert.deepEqual([diff.a.id, diff.b.id], [original.id, fork.id]);
  assert.equal(diff.b.forked_from, original.id);
  assert.equal(diff.status_changed, false);
  assert.equal(diff.result.same, true, JSON.stringify(diff.result));
  assert.equal(diff.state.same, true, JSON.stringify(diff.state));
  // the replayed tick's calls did not run again in the fork: counted apart, not paired; the live ones are the same
  assert.deepEqual([diff.call_counts.changed, diff.call_counts.only_a, diff.call_counts.only_b], [0, 0, 0],
    JSON.stringify(diff.call_counts));
  assert.equal(diff.replayed_calls, forked.fork.replayed.reduce((n, tick) => n + tick.tools.length, 0));
  assert.equal(diff.same, true, "a fork that did the same from its tick on is the same");
  assert.ok(diff.usage.requests.delta < 0, "the replayed tick made no request");
  const other = await original.diff(next);
  assert.deepEqual([other.a.id, other.b.id], [original.id, next.id]);
  assert.equal(other.same, false);
});

test("a plan job cannot be continued (Conflict) or forked (InvalidRequest); an unknown job is NotFound", async () => {
  const plan = await client.submit(examples.demo_order);
  await plan.result({ timeoutMs: 60_000 });
  const conflict = await plan.continue([{ type: "text", text: "again" }]).then(() => assert.fail("continued"), (e) => e);
  assert.ok(conflict instanceof Conflict && conflict.status === 409, String(conflict));
  const fork = await plan.fork(0).then(() => assert.fail("forked"), (e) => e);
  assert.ok(fork instanceof InvalidRequest && fork.status === 422, String(fork));
  assert.equal((await plan.forks()).forks.length, 0);

  const missing = client.job("job_does_not_exist");
  await assert.rejects(missing.continue([{ type: "text", text: "hello" }]), NotFound);
  await assert.rejects(missing.resume(), NotFound);
  await assert.rejects(client.thread("job_does_not_exist"), NotFound);
  const unknown = await client.diff(plan.id, "job_does_not_exist").then(() => assert.fail("compared"), (e) => e);
  assert.ok(unknown instanceof NotFound, String(unknown));
  assert.deepEqual(unknown.problems.map((p) => p.pointer), ["/b"]);
  const same = await plan.diff(plan);
  assert.equal(same.same, true);
});

test("a job whose data expired with its ttl_s is JobExpired (410) to resume, continue and compare", async () => {
  const job = { ...examples.demo_order, options: { ...examples.demo_order.options, ttl_s: 1 } };
  const handle = await client.submit(job);
  assert.equal((await handle.result({ timeoutMs: 60_000 })).status, "succeeded");
  const deadline = Date.now() + 15_000;
  for (;;) { // its record is gone once its ttl_s passed (the store expires it: there is no event to await)
    const read = await handle.status().then(() => undefined, (e) => e);
    if (read !== undefined) break;
    assert.ok(Date.now() < deadline, "the job's data did not expire within 15 s");
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
  const resumed = await handle.resume().then(() => assert.fail("resumed"), (e) => e);
  assert.ok(resumed instanceof JobExpired && resumed instanceof NotFound, String(resumed));
  assert.deepEqual([resumed.status, resumed.type], [410, "JobExpired"]);
  await assert.rejects(handle.continue([{ type: "text", text: "still there?" }]), JobExpired);
  const compared = await client.diff("job_does_not_exist", handle.id).then(() => assert.fail("compared"), (e) => e);
  assert.ok(compared instanceof NotFound && compared.status === 404, String(compared)); // one side is unknown
  const gone = await handle.diff(handle).then(() => assert.fail("compared"), (e) => e);
  assert.ok(gone instanceof JobExpired && gone.status === 410, String(gone));
});
