/**
 * The client: `new AgentqClient({baseUrl, token})`, `client.submit(job)` → a `JobHandle` with `result()`,
 * `events()`, `calls()`, `approve/reject/edit`, `cancel()`, `resume()`, `continue()`, `fork()`. Every route of the API is also reachable, typed, through
 * `client.api` (an openapi-fetch client over the generated `paths`). Uses `fetch` only: Node 20+ and browsers.
 */
import createClient, { type Client } from "openapi-fetch";
import {
  bodyOf, type ForkChanges, type Forks, type JobDiff, type JobOptions, type Message, type Thread,
} from "./continuation.js";
import { errorFromResponse, JobTimeoutError } from "./errors.js";
import { followEvents, type EventsOptions, type JobEvent } from "./events.js";
import type { components, operations, paths } from "./schema.js";

type Schemas = components["schemas"];
export type Job = Schemas["Job"];
export type JobRecord = Schemas["JobRecord"];
export type JobStatus = JobRecord["status"];
export type Call = Schemas["Call"];
export type History = Schemas["History"];
export type Tenant = Schemas["Tenant"];
export type SignalSent = Schemas["SignalSent"];
export type EventSent = Schemas["EventSent"];
export type ListJobsQuery = NonNullable<operations["listJobs"]["parameters"]["query"]>;

/** The statuses a job ends in. */
export const FINAL_STATUSES: readonly JobStatus[] = ["succeeded", "failed", "canceled"];

export interface ClientOptions {
  /** The API's address, e.g. `http://127.0.0.1:8000`. */
  baseUrl: string;
  /** A bearer token of the API (`AGENTQ_API_TOKENS`). */
  token?: string;
  /** Headers sent with every request. */
  headers?: Record<string, string>;
  /** A `fetch` of your own (default: the global one). */
  fetch?: typeof globalThis.fetch;
}

export interface SubmitOptions {
  /** The same key returns the same job (while it is kept), so a retried submit never makes a second job. */
  idempotencyKey?: string;
  /** W3C Trace Context: the job's trace continues this one. */
  traceparent?: string;
  signal?: AbortSignal;
}

export interface ResultOptions {
  /** Give up (throwing `JobTimeoutError`) after this long; the job goes on. Default: wait as long as it takes. */
  timeoutMs?: number;
  signal?: AbortSignal;
}

interface Answer<T> {
  data?: T;
  error?: unknown;
  response: Response;
}

/** `data` of a success, or the error class its answer stands for. */
async function unwrap<T>(answer: Answer<T>): Promise<T> {
  if (!answer.response.ok) throw await errorFromResponse(answer.response, answer.error);
  return answer.data as T;
}

export class AgentqClient {
  /** Every route, typed from the API's OpenAPI document: `client.api.GET("/v1/tools")`. */
  readonly api: Client<paths>;
  readonly baseUrl: string;
  private readonly fetchImpl: typeof globalThis.fetch;
  private readonly headers: Record<string, string>;

  constructor(options: ClientOptions) {
    this.baseUrl = options.baseUrl.replace(/\/+$/, "");
    this.fetchImpl = options.fetch ?? ((input, init) => globalThis.fetch(input, init));
    this.headers = { ...options.headers, ...(options.token ? { Authorization: `Bearer ${options.token}` } : {}) };
    this.api = createClient<paths>({ baseUrl: this.baseUrl, headers: this.headers, fetch: this.fetchImpl });
  }

  /** Submit a job (it is checked whole first: a bad job throws `JobValidationError` and nothing is written). */
  async submit(job: Job, options: SubmitOptions = {}): Promise<JobHandle> {
    const header: Record<string, string> = {};
    if (options.idempotencyKey !== undefined) header["idempotency-key"] = options.idempotencyKey;
    if (options.traceparent !== undefined) header["traceparent"] = options.traceparent;
    const record = await unwrap(await this.api.POST("/v1/jobs", {
      body: job, params: { header }, ...(options.signal ? { signal: options.signal } : {}),
    }));
    return new JobHandle(this, record.id, record);
  }

  /** A handle on a job submitted earlier (nothing is read until you ask). */
  job(jobId: string): JobHandle {
    return new JobHandle(this, jobId);
  }

  /** The newest jobs this token sees, newest first. */
  async listJobs(query: ListJobsQuery = {}): Promise<JobRecord[]> {
    return unwrap(await this.api.GET("/v1/jobs", { params: { query } }));
  }

  /**
   * Send an event to the open `waitForEvent` calls of your tenant whose `event` and `match` fit; an `id` sent
   * again within a day is not delivered again. Answers how many waits it woke.
   */
  async sendEvent(name: string, data?: unknown, options: { id?: string } = {}): Promise<EventSent> {
    const body = { name, data: data ?? null, ...(options.id === undefined ? {} : { id: options.id }) };
    return unwrap(await this.api.POST("/v1/events", { body }));
  }

  /** The tenant and role of the token in use. */
  async me(): Promise<Tenant> {
    return unwrap(await this.api.GET("/v1/me"));
  }

  /** Resume a failed or canceled job where it stopped (`options` over its own); the handle follows the new run. */
  async resume(jobId: string, options?: JobOptions): Promise<JobHandle> {
    const handle = new JobHandle(this, jobId);
    await handle.resume(options);
    return handle;
  }

  /** A new agent job continuing the ended agent job `jobId`: its conversation, state and tools, then `messages`. */
  async continueJob(jobId: string, messages: Message[], options?: JobOptions): Promise<JobHandle> {
    return this.created(await this.send("POST", `/v1/jobs/${encodeURIComponent(jobId)}/continue`,
      bodyOf({ context: messages, options })));
  }

  /** A new agent job replaying the first `atTick` ticks of `jobId` (no request, no cost), then running live. */
  async fork(jobId: string, atTick: number, changes: ForkChanges = {}): Promise<JobHandle> {
    return this.created(await this.send("POST", `/v1/jobs/${encodeURIComponent(jobId)}/fork`,
      bodyOf({ at_tick: atTick, ...changes })));
  }

  /** A thread's jobs in order: its first job, then each continuation, with the messages each added. */
  async thread(thread: string): Promise<Thread> {
    return (await this.send("GET", `/v1/threads/${encodeURIComponent(thread)}`)) as Thread;
  }

  /** A job's forks, oldest first, each with its record. */
  async forks(jobId: string): Promise<Forks> {
    return (await this.send("GET", `/v1/jobs/${encodeURIComponent(jobId)}/forks`)) as Forks;
  }

  /** Two jobs compared side by side: status, error, final output, state, calls, models, usage, duration. */
  async diff(a: string, b: string): Promise<JobDiff> {
    return unwrap(await this.api.GET("/v1/jobs/{a}/diff/{b}", { params: { path: { a, b } } }));
  }

  /** @internal a request whose body the OpenAPI document leaves untyped; its JSON answer, or its error. */
  async send(method: "GET" | "POST", path: string, body?: unknown): Promise<unknown> {
    const headers: Record<string, string> = { ...this.headers, Accept: "application/json" };
    if (body !== undefined) headers["Content-Type"] = "application/json";
    const response = await this.fetchImpl(`${this.baseUrl}${path}`, {
      method, headers, ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    if (!response.ok) throw await errorFromResponse(response);
    return response.json();
  }

  private created(record: unknown): JobHandle {
    const job = record as JobRecord;
    return new JobHandle(this, job.id, job);
  }

  /** @internal the event stream of a job, from `lastEventId` on. */
  openEvents(jobId: string, lastEventId: string | undefined, signal: AbortSignal | undefined): Promise<Response> {
    const headers: Record<string, string> = { ...this.headers, Accept: "text/event-stream" };
    if (lastEventId !== undefined) headers["Last-Event-ID"] = lastEventId;
    return this.fetchImpl(`${this.baseUrl}/v1/jobs/${encodeURIComponent(jobId)}/events`, {
      headers, cache: "no-store", ...(signal ? { signal } : {}),
    });
  }
}

export class JobHandle {
  readonly client: AgentqClient;
  readonly id: string;
  /** The record as last read (the one `submit` answered with, until `status()` or `result()` reads it again). */
  record: JobRecord | undefined;

  constructor(client: AgentqClient, id: string, record?: JobRecord) {
    this.client = client;
    this.id = id;
    this.record = record;
  }

  private get path() {
    return { path: { job_id: this.id } };
  }

  /** The job's record now. */
  async status(): Promise<JobRecord> {
    this.record = await unwrap(await this.client.api.GET("/v1/jobs/{job_id}", { params: this.path }));
    return this.record;
  }

  /**
   * Wait until the job ends and return its final record (`status`, `result`, `state`, `error`, `usage`). It
   * follows the job's event stream to its last `job.finished` (resuming over dropped connections), holding no
   * timer; after `resume()` it waits for the resumed run's end.
   */
  async result(options: ResultOptions = {}): Promise<JobRecord> {
    const record = await this.status();
    if (FINAL_STATUSES.includes(record.status)) return record;
    const stop = new AbortController();
    const timer = options.timeoutMs === undefined ? undefined
      : setTimeout(() => stop.abort(new JobTimeoutError(this.id, options.timeoutMs ?? 0)), options.timeoutMs);
    const forward = () => stop.abort(options.signal?.reason);
    options.signal?.addEventListener("abort", forward, { once: true });
    try {
      // to the stream's end: the job's last `job.finished` (a resumed job's earlier runs ended too)
      for await (const event of this.events({ signal: stop.signal })) void event;
      for (;;) { // the job's end is written with its final event; a moment's lag at most
        const ended = await this.status();
        if (FINAL_STATUSES.includes(ended.status)) return ended;
        await new Promise((resolve) => setTimeout(resolve, 20));
        stop.signal.throwIfAborted();
      }
    } catch (error) {
      throw stop.signal.aborted ? stop.signal.reason : error;
    } finally {
      clearTimeout(timer);
      options.signal?.removeEventListener("abort", forward);
    }
  }

  /** The job's events in order, until `job.finished`; resumes after a dropped connection with `Last-Event-ID`. */
  events(options: EventsOptions = {}): AsyncGenerator<JobEvent> {
    return followEvents((lastId, signal) => this.client.openEvents(this.id, lastId, signal), options);
  }

  /** The job's calls: status, attempts, duration, parameters (what a call awaiting approval would do). */
  async calls(): Promise<Call[]> {
    return unwrap(await this.client.api.GET("/v1/jobs/{job_id}/calls", { params: this.path }));
  }

  /** The job's history message (its parts in order). */
  async history(): Promise<History> {
    return unwrap(await this.client.api.GET("/v1/jobs/{job_id}/history", { params: this.path }));
  }

  /** Let a call awaiting approval run. */
  async approve(callId: string): Promise<Call> {
    return unwrap(await this.client.api.POST("/v1/jobs/{job_id}/calls/{call_id}/approve", {
      params: { path: { job_id: this.id, call_id: callId } },
    }));
  }

  /** Fail a call awaiting approval ("rejected by reviewer", with your reason). */
  async reject(callId: string, reason?: string): Promise<Call> {
    return unwrap(await this.client.api.POST("/v1/jobs/{job_id}/calls/{call_id}/reject", {
      params: { path: { job_id: this.id, call_id: callId } }, body: reason === undefined ? {} : { reason },
    }));
  }

  /** Replace a call's parameters (meta fields stay) and let it run. */
  async edit(callId: string, params: Record<string, unknown>): Promise<Call> {
    return unwrap(await this.client.api.POST("/v1/jobs/{job_id}/calls/{call_id}/edit", {
      params: { path: { job_id: this.id, call_id: callId } }, body: { params },
    }));
  }

  /** Send a signal to the job: kept with it until a `waitForSignal` of that name takes it (`taken`: one did now). */
  async signal(name: string, data?: unknown): Promise<SignalSent> {
    return unwrap(await this.client.api.POST("/v1/jobs/{job_id}/signals/{name}", {
      params: { path: { job_id: this.id, name } }, body: { data: data ?? null },
    }));
  }

  /**
   * Resume the failed or canceled job where it stopped: committed calls keep their outputs, the others run
   * afresh; `options` over its own (a larger `budget`, ...). Returns its record (status `running`); `result()`
   * then waits for the new end. A succeeded or running job is `Conflict` (409), an expired one `JobExpired` (410).
   */
  async resume(options?: JobOptions): Promise<JobRecord> {
    const body = options === undefined ? {} : { options };
    this.record = (await this.client.send("POST", `/v1/jobs/${encodeURIComponent(this.id)}/resume`, body)) as JobRecord;
    return this.record;
  }

  /**
   * Continue this ended agent job with `messages`: a new job with its conversation, state and tools (its first
   * request reads the old conversation from the prompt cache). A plan job or a running one is `Conflict` (409).
   */
  continue(messages: Message[], options?: JobOptions): Promise<JobHandle> {
    return this.client.continueJob(this.id, messages, options);
  }

  /** Fork this agent job at tick `atTick` with the changes given: a new job that replays ticks 1..atTick. */
  fork(atTick: number, changes: ForkChanges = {}): Promise<JobHandle> {
    return this.client.fork(this.id, atTick, changes);
  }

  /** This job's forks, oldest first. */
  forks(): Promise<Forks> {
    return this.client.forks(this.id);
  }

  /** This job (A) compared with `other` (B), as `client.diff`. */
  diff(other: string | JobHandle): Promise<JobDiff> {
    return this.client.diff(this.id, typeof other === "string" ? other : other.id);
  }

  /** Cancel the job: no call starts after this. Returns its record. */
  async cancel(): Promise<JobRecord> {
    this.record = await unwrap(await this.client.api.POST("/v1/jobs/{job_id}/cancel", { params: this.path }));
    return this.record;
  }
}
