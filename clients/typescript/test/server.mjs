// A real `agentq api --embedded` for the tests: a private Redis, in-process workers serving the example
// activities, the packaged replays answering the model. Started from the repository's .venv (AGENTQ_PYTHON
// overrides it) on a free port, with an admin token and a tenant token limited to one job a minute.
import { spawn } from "node:child_process";
import { mkdtempSync, writeFileSync, existsSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { AgentqClient } from "../dist/index.js";

export const ROOT = resolve(dirname(fileURLToPath(import.meta.url)), "../../..");
export const ADMIN_TOKEN = "ts-admin-token-0123456789abcdef";
export const LIMITED_TOKEN = "ts-limited-token-0123456789abcdef";

export function freePort() {
  return new Promise((resolvePort, reject) => {
    const server = createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolvePort(port));
    });
  });
}

export function python() {
  const chosen = process.env.AGENTQ_PYTHON ?? join(ROOT, ".venv", "bin", "python");
  if (!existsSync(chosen)) {
    throw new Error(`no Python with agentq at ${chosen}: run \`python3 dev.py test\` (or lint) first, or set AGENTQ_PYTHON`);
  }
  return chosen;
}

export async function startApi() {
  const port = await freePort();
  const folder = mkdtempSync(join(tmpdir(), "agentq-ts-"));
  const tokens = join(folder, "tokens.json");
  writeFileSync(tokens, JSON.stringify({ [LIMITED_TOKEN]: { tenant: "limited", role: "submit" } }));
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("AGENTQ_")));
  Object.assign(env, {
    AGENTQ_API_TOKENS: `${ADMIN_TOKEN},@${tokens}`,
    AGENTQ_TENANTS: JSON.stringify({ limited: { jobs_per_minute: 1 } }),
    AGENTQ_API_SSE_RETRY_MS: "100",
    PYTHONUNBUFFERED: "1",
  });
  const child = spawn(python(), ["-m", "agentq.cli", "api", "--embedded", "--port", String(port)], {
    cwd: folder, env, stdio: ["ignore", "pipe", "pipe"],
  });
  let output = "";
  child.stdout.on("data", (chunk) => { output += chunk; });
  child.stderr.on("data", (chunk) => { output += chunk; });
  const exited = new Promise((resolveExit) => child.once("exit", (code, signal) => resolveExit(code ?? signal)));
  const baseUrl = `http://127.0.0.1:${port}`;
  const deadline = Date.now() + 60_000;
  for (;;) {
    const early = await Promise.race([exited, new Promise((r) => setTimeout(() => r(undefined), 100))]);
    if (early !== undefined) throw new Error(`agentq api exited (${early}) before answering:\n${output}`);
    try {
      if ((await fetch(`${baseUrl}/v1/ready`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } })).ok) break;
    } catch { /* not listening yet */ }
    if (Date.now() > deadline) {
      child.kill("SIGINT");
      throw new Error(`agentq api did not answer within 60 s:\n${output}`);
    }
  }
  return {
    baseUrl,
    output: () => output,
    async stop() {
      if (child.exitCode === null && child.signalCode === null) child.kill("SIGINT");
      const timer = setTimeout(() => child.kill("SIGKILL"), 20_000);
      await exited;
      clearTimeout(timer);
    },
  };
}

/** What a test file starts once: the server, a client with the admin token, and the example jobs it ships. */
export async function startFixture() {
  const api = await startApi();
  const client = new AgentqClient({ baseUrl: api.baseUrl, token: ADMIN_TOKEN });
  const examples = await (await fetch(`${api.baseUrl}/v1/examples`, { headers: { Authorization: `Bearer ${ADMIN_TOKEN}` } })).json();
  return { api, client, examples };
}

/** Every item an async iterable yields, in order. */
export async function collect(iterable) {
  const out = [];
  for await (const item of iterable) out.push(item);
  return out;
}
