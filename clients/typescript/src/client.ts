/**
 * The client: `new AgentqClient({baseUrl, token})`, `client.submit(job)` → a `JobHandle` with `result()`,
 * `events()`, `calls()`, `approve/reject/edit`, `cancel()`. Every route of the API is also reachable, typed, through
 * `client.api` (an openapi-fetch client over the generated `paths`). Uses `fetch` only: Node 20+ and browsers.
 */
import createClient, { type Client } from "openapi-fetch";
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
   * follows the job's event stream to `job.finished` (resuming over dropped connections), holding no timer.
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
      for await (const event of this.events({ signal: stop.signal })) {
        if (event.event === "job.finished") break;
      }
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

  /** Cancel the job: no call starts after this. Returns its record. */
  async cancel(): Promise<JobRecord> {
    this.record = await unwrap(await this.client.api.POST("/v1/jobs/{job_id}/cancel", { params: this.path }));
    return this.record;
  }
}
