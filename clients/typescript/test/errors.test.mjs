// How answers become error classes, without a server: statuses, types, Retry-After, bodies that are not JSON.
import assert from "node:assert/strict";
import { test } from "node:test";
import {
  errorFromResponse, parseRetryAfter, AgentqError, JobValidationError, InvalidRequest, NotFound, JobExpired,
  RateLimited, StoreUnavailable, ServerError, Conflict,
} from "../dist/index.js";

const answer = (status, body, headers = {}) =>
  new Response(typeof body === "string" ? body : JSON.stringify(body), { status, headers });
const body = (type, problems = []) => ({ error: { type, message: `${type}!`, problems } });

test("each status and 422 type maps to its class, keeping type, message and problems", async () => {
  const problems = [{ pointer: "/calls/0/_tool", message: "unknown tool" }];
  const invalid = await errorFromResponse(answer(422, body("JobValidationError", problems)));
  assert.ok(invalid instanceof JobValidationError);
  assert.deepEqual([invalid.status, invalid.type, invalid.message, invalid.problems], [422, "JobValidationError", "JobValidationError!", problems]);
  const other = await errorFromResponse(answer(422, body("InvalidRequest")));
  assert.ok(other instanceof InvalidRequest && !(other instanceof JobValidationError));
  assert.ok((await errorFromResponse(answer(404, body("JobNotFound")))) instanceof NotFound);
  const expired = await errorFromResponse(answer(410, body("JobExpired")));
  assert.ok(expired instanceof JobExpired && expired instanceof NotFound);
  assert.ok((await errorFromResponse(answer(409, body("Conflict")))) instanceof Conflict);
});

test("429 and 503 carry Retry-After as seconds", async () => {
  const limited = await errorFromResponse(answer(429, body("RateLimited"), { "Retry-After": "13" }));
  assert.ok(limited instanceof RateLimited);
  assert.equal(limited.retryAfter, 13);
  const down = await errorFromResponse(answer(503, body("StoreUnavailable"), { "Retry-After": "5" }));
  assert.ok(down instanceof StoreUnavailable && down.retryAfter === 5);
  assert.equal(parseRetryAfter(null), undefined);
  const inTen = parseRetryAfter(new Date(Date.now() + 10_000).toUTCString());
  assert.ok(inTen > 8 && inTen <= 10, String(inTen));
});

test("an answer that is not agentq's error body still becomes an error with its status", async () => {
  const proxyError = await errorFromResponse(answer(502, "<html>Bad Gateway</html>"));
  assert.ok(proxyError instanceof ServerError && proxyError instanceof AgentqError);
  assert.equal(proxyError.status, 502);
  assert.equal(proxyError.type, "HTTP502");
  assert.deepEqual(proxyError.problems, []);
});

test("the built package uses no Node-only module or global (it runs in browsers)", async () => {
  const { readdirSync, readFileSync } = await import("node:fs");
  const dist = new URL("../dist/", import.meta.url);
  const sources = readdirSync(dist).filter((name) => name.endsWith(".js"));
  assert.ok(sources.includes("index.js"), sources.join(" "));
  for (const name of sources) {
    const text = readFileSync(new URL(name, dist), "utf8");
    const imports = [...text.matchAll(/\bfrom\s+["']([^"']+)["']|\bimport\(\s*["']([^"']+)["']/g)].map((m) => m[1] ?? m[2]);
    for (const specifier of imports) {
      assert.ok(specifier.startsWith("./") || ["openapi-fetch", "eventsource-parser"].includes(specifier), `${name}: ${specifier}`);
    }
    assert.doesNotMatch(text, /\b(process|Buffer|require|__dirname)\b[.(]/, name);
  }
});
